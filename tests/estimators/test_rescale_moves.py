"""``rescale_moves``: the estimators' switch for the exact rescaling moves of a ReLU MLP."""

import joblib
import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from sklearn_bnn import HMCClassifier, HMCRegressor, SplitHMCRegressor
from sklearn_bnn._persistence import load, save
from sklearn_bnn.priors import HierarchicalPrior
from sklearn_bnn.samplers import HMC, NUTS

# tiny budgets: the chains have not converged, and say so
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

FAST = dict(
    hidden_layer_sizes=(8,), n_draws=20, n_warmup=20, sampler=HMC(n_steps=5), random_state=0
)
# a split estimator's sampler by name integrates with the symmetric split leapfrog
SPLIT_HMC = HMC(n_steps=5, integrator="symmetric")


def _regression(n=40):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (n, 2))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize(
    "make",
    [
        lambda on: HMCClassifier(rescale_moves=on, n_chains=2, **FAST),
        lambda on: HMCRegressor(rescale_moves=on, prior_precision=HierarchicalPrior(), **FAST),
        lambda on: HMCRegressor(
            rescale_moves=on, n_chains=2, **{**FAST, "sampler": NUTS(max_tree_depth=4)}
        ),
        lambda on: SplitHMCRegressor(
            rescale_moves=on,
            n_splits=2,
            prior_precision=HierarchicalPrior(),
            **{**FAST, "sampler": SPLIT_HMC},
        ),
    ],
    ids=["hmc-classifier", "hmc-hierarchical", "nuts-2-chains", "split-hierarchical"],
)
def test_fit_predict_and_persistence_with_and_without_the_moves(make, tmp_path):
    X, y = _regression()
    if isinstance(make(False), HMCClassifier):
        y = (y > 0).astype(int)
    fitted = {on: make(on).fit(X, y) for on in (False, True)}
    for on, est in fitted.items():
        assert np.isfinite(est.samples_.draws).all()
        pred = est.predict_proba(X) if hasattr(est, "predict_proba") else est.predict(X)
        save(est, tmp_path / f"{on}.pt")
        back = load(tmp_path / f"{on}.pt")
        assert back.rescale_moves is on
        joblib.dump(est, tmp_path / f"{on}.joblib")
        again = joblib.load(tmp_path / f"{on}.joblib")
        for other in (back, again):
            out = other.predict_proba(X) if hasattr(other, "predict_proba") else other.predict(X)
            np.testing.assert_allclose(out, pred, rtol=1e-6, atol=1e-7)
    # the moves change the chain (the same seed otherwise)
    assert not np.array_equal(fitted[True].samples_.draws, fitted[False].samples_.draws)


def test_the_moves_are_ignored_where_the_network_is_not_homogeneous():
    X, y = _regression()
    draws = [
        HMCRegressor(activation="tanh", rescale_moves=on, **FAST).fit(X, y).samples_.draws
        for on in (False, True)
    ]
    np.testing.assert_array_equal(draws[0], draws[1])


def test_one_gradient_per_transition_for_the_reevaluation():
    X, y = _regression()
    grads = [
        np.sum(
            HMCRegressor(noise_precision=100.0, rescale_moves=on, **FAST)
            .fit(X, y)
            .diagnostics_["n_grad_evals"]
        )
        for on in (False, True)
    ]
    assert grads[1] - grads[0] == pytest.approx(FAST["n_draws"] + FAST["n_warmup"], abs=2)


def test_rescale_moves_is_validated():
    X, y = _regression()
    with pytest.raises(InvalidParameterError, match="rescale_moves"):
        HMCRegressor(rescale_moves="yes", **FAST).fit(X, y)
