"""fit and predict of every estimator leave the caller's global random state untouched.

torch's global generator (which skorch and ``nn.Dropout`` draw from during training) and numpy's
global state must be the same after ``fit`` / ``predict`` as before; and, with the global state
set differently, two fits with the same ``random_state`` must still agree.
"""

import numpy as np
import pytest
import torch
from sklearn.base import is_classifier

from sklearn_bnn import (
    HMCClassifier,
    HMCRegressor,
    LossCalibratedBNN,
    MCDropoutClassifier,
    MCDropoutRegressor,
    PlanNetRegressor,
    SplitHMCClassifier,
    SplitHMCRegressor,
)
from sklearn_bnn.samplers import HMC
from sklearn_bnn.samplers.starts import MAPStart


def _split_hmc():
    return HMC(n_steps=3, integrator="symmetric")


MCMC = dict(hidden_layer_sizes=(4,), n_draws=5, n_warmup=5, random_state=0)
DROPOUT = dict(hidden_layer_sizes=(4,), max_iter=3, n_predict_draws=3, random_state=0)

ESTIMATORS = [
    HMCClassifier(sampler=HMC(n_steps=3), **MCMC),
    HMCRegressor(sampler=HMC(n_steps=3), **MCMC),
    # a split estimator's sampler by name integrates with the symmetric split leapfrog
    SplitHMCClassifier(n_splits=2, init=MAPStart(n_steps=5), sampler=_split_hmc(), **MCMC),
    SplitHMCRegressor(n_splits=2, init=MAPStart(n_steps=5), sampler=_split_hmc(), **MCMC),
    MCDropoutClassifier(**DROPOUT),
    MCDropoutRegressor(**DROPOUT),
    MCDropoutClassifier(early_stopping=True, **DROPOUT),
    LossCalibratedBNN(n_train_draws=2, warmup_fraction=0.3, **DROPOUT),
    PlanNetRegressor(
        hidden_layer_sizes=(4,), n_estimators=2, n_predict_draws=3, max_iter=3, random_state=0
    ),
]


def _data(est):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    if is_classifier(est):
        return X, (X[:, 0] > 0).astype(int)
    return X, X[:, 0] + 0.1 * rng.normal(size=40)


def _global_state():
    return torch.random.get_rng_state().clone(), np.random.get_state()  # noqa: NPY002


def _assert_same(before, after):
    assert torch.equal(before[0], after[0]), "torch's global generator changed"
    for a, b in zip(before[1], after[1], strict=True):
        np.testing.assert_array_equal(a, b, err_msg="numpy's global state changed")


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_fit_and_predict_leave_global_rng_alone(est):
    X, y = _data(est)
    torch.manual_seed(1234)
    np.random.seed(1234)  # noqa: NPY002 (the global state is the point)
    before = _global_state()
    est.fit(X, y)
    _assert_same(before, _global_state())
    est.predict(X)
    if hasattr(est, "predict_proba"):
        est.predict_proba(X)
    _assert_same(before, _global_state())


@pytest.mark.parametrize(
    "est", [e for e in ESTIMATORS if "HMC" not in type(e).__name__], ids=lambda e: type(e).__name__
)
def test_same_seed_same_fit_whatever_the_global_state(est):
    X, y = _data(est)
    torch.manual_seed(1)
    a = est.fit(X, y).predict(X)
    torch.manual_seed(2)
    torch.rand(10)
    b = est.fit(X, y).predict(X)
    np.testing.assert_array_equal(a, b)
