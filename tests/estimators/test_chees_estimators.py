"""Estimators with ChEES's adapted integration time (``trajectory_length="auto"``)."""

import joblib
import numpy as np
import pytest
import torch

from sklearn_bnn import HMCClassifier, HMCRegressor, SplitHMCRegressor
from sklearn_bnn.samplers import HMC

SMALL = dict(hidden_layer_sizes=(8,), n_chains=3, random_state=0)


def chees(**settings):
    """HMC with ChEES's adapted integration time, from 5 steps of the first step size."""
    return HMC(n_steps=5, trajectory_length="auto", **settings)


pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
    return X, y


def test_regressor_adapts_the_time_and_keeps_it_beside_each_draw(data, tmp_path):
    X, y = data
    reg = HMCRegressor(sampler=chees(), n_warmup=60, n_draws=30, **SMALL).fit(X, y)
    times = reg.samples_.stats["trajectory_time"]
    assert times.shape == (3, 30)
    assert torch.all(times == times[0, 0]) and times[0, 0] > 0  # fixed after warmup
    steps = reg.samples_.stats["n_steps"].double()
    assert steps.min() >= 1 and len(torch.unique(steps)) > 1  # jittered per transition
    assert np.isfinite(reg.predict(X)).all()
    path = tmp_path / "reg.joblib"
    joblib.dump(reg, path)
    loaded = joblib.load(path)
    assert np.allclose(loaded.predict(X), reg.predict(X))
    assert torch.equal(loaded.samples_.stats["trajectory_time"], times)


def test_a_warm_start_continues_with_the_adapted_time(data):
    X, y = data
    y = y > 0
    params = dict(sampler=chees(), n_warmup=40, calibration=None, **SMALL)
    once = HMCClassifier(n_draws=40, **params).fit(X, y)
    twice = HMCClassifier(n_draws=20, warm_start=True, **params).fit(X, y)
    twice.fit(X, y)
    # the same chains: the second fit has no warmup and keeps the first's time exactly
    assert torch.equal(twice.samples_.draws, once.samples_.draws)
    assert torch.equal(
        twice.samples_.stats["trajectory_time"], once.samples_.stats["trajectory_time"]
    )


@pytest.mark.parametrize("chains", [dict(n_chains=1), dict(n_chains=2, n_jobs=1)])
def test_chees_needs_chains_run_together(data, chains):
    X, y = data
    params = {**SMALL, **chains}
    reg = HMCRegressor(sampler=chees(), n_warmup=10, n_draws=10, **params)
    with pytest.raises(ValueError, match="n_chains >= 2, run as one batched computation"):
        reg.fit(X, y)


def test_a_bad_value_is_named(data):
    X, y = data
    with pytest.raises(ValueError, match="trajectory_length"):
        HMCRegressor(sampler=HMC(n_steps=5, trajectory_length="longest"), **SMALL).fit(X, y)


def test_split_and_classifier_estimators_take_it(data):
    X, y = data
    split = SplitHMCRegressor(  # a split estimator's "hmc" has the symmetric split leapfrog
        sampler=chees(integrator="symmetric"), n_splits=2, n_warmup=20, n_draws=10, **SMALL
    ).fit(X, y)
    assert "trajectory_time" in split.samples_.stats
    clf = HMCClassifier(
        sampler=chees(), calibration=None, n_warmup=20, n_draws=10, **SMALL
    ).fit(X, y > 0)
    assert clf.predict_proba(X).shape == (60, 2)
