"""Chains: vectorized, sequential and parallel (joblib, Dask) runs of the same sampler."""

import joblib
import numpy as np
import pytest
import torch
from conftest import assert_draws_match_gaussian, blr_posterior
from torch import nn

from sklearn_bnn import ConvergenceWarning, HMCClassifier, HMCRegressor
from sklearn_bnn.samplers import HMC, chain_seeds

SMALL = dict(
    hidden_layer_sizes=(8,), n_draws=30, n_warmup=30, sampler=HMC(n_steps=5), random_state=0
)


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    return X, y


def test_chain_seeds_are_distinct_and_reproducible():
    a, b = chain_seeds(0, 4), chain_seeds(0, 4)
    assert a == b and len(set(a)) == 4
    assert chain_seeds(1, 4) != a


def test_parallel_and_sequential_give_identical_draws(blobs):
    X, y = blobs
    seq = HMCClassifier(**SMALL, n_chains=3, n_jobs=1).fit(X, y)
    par = HMCClassifier(**SMALL, n_chains=3, n_jobs=2).fit(X, y)
    assert seq.samples_.draws.shape == (3, 30, seq.samples_.dim)
    assert torch.equal(seq.samples_.draws, par.samples_.draws)
    np.testing.assert_array_equal(seq.predict_proba(X), par.predict_proba(X))


def test_parallel_under_dask_gives_the_same_draws(blobs):
    distributed = pytest.importorskip("dask.distributed")
    X, y = blobs
    seq = HMCClassifier(**SMALL, n_chains=2, n_jobs=1).fit(X, y)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        with distributed.Client(cluster), joblib.parallel_config(backend="dask"):
            par = HMCClassifier(**SMALL, n_chains=2, n_jobs=2).fit(X, y)
    assert torch.equal(seq.samples_.draws, par.samples_.draws)


def test_warm_start_continues_per_chain_streams(blobs):
    X, y = blobs
    once = HMCClassifier(**{**SMALL, "n_draws": 40}, n_chains=2, n_jobs=1)
    once.fit(X, y)
    twice = HMCClassifier(
        **{**SMALL, "n_draws": 20}, n_chains=2, n_jobs=1, warm_start=True
    )
    twice.fit(X, y).fit(X, y)
    assert torch.equal(once.samples_.draws, twice.samples_.draws)


def _linear(n_in, n_out):
    return nn.Linear(n_in, n_out)


@pytest.mark.parametrize("n_jobs", [None, 1, 2])
def test_every_way_of_running_chains_samples_the_linear_regression_posterior(n_jobs):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 2))
    y = X @ np.array([0.7, -1.2]) + rng.normal(scale=0.5, size=30)
    alpha, beta = 1.0, 4.0
    reg = HMCRegressor(
        module=_linear,
        prior_precision=alpha,
        noise_precision=beta,
        n_draws=500,
        n_warmup=200,
        sampler=HMC(n_steps=8),
        n_chains=3,
        dtype="float64",
        n_jobs=n_jobs,
        random_state=0,
    ).fit(X, y)
    assert_draws_match_gaussian(reg.samples_.draws.numpy(), *blr_posterior(X, y, alpha, beta))


def test_a_diverging_chain_does_not_spoil_the_others(blobs):
    X, y = blobs
    clf = HMCClassifier(**SMALL, n_chains=2)
    clf.fit(X, y)
    # Give chain 1 an absurd step size and continue: chain 0 keeps moving, chain 1's function
    # stays put (every HMC proposal rejected; only the rescaling moves, which leave the
    # network's function unchanged, move its weights).
    clf._step_size_per_chain = torch.tensor([float(clf._step_size_per_chain[0]), 1e3])
    clf.set_params(warm_start=True)
    with pytest.warns(ConvergenceWarning, match="diverged"):
        clf.fit(X, y)
    new = clf.samples_.draws[:, 30:]
    assert torch.isfinite(new).all()
    outputs = [clf.network_.forward_batched(chain, X) for chain in new]
    torch.testing.assert_close(outputs[1], outputs[1][:1].expand_as(outputs[1]))
    assert not torch.allclose(outputs[0], outputs[0][:1].expand_as(outputs[0]))


@pytest.mark.parametrize("n_jobs", [None, 1])
def test_warm_start_keeps_the_adapted_mass_matrix(blobs, n_jobs):
    X, y = blobs
    params = {
        **SMALL,
        "n_warmup": 60,
        "sampler": HMC(n_steps=5, adapt_mass=True),
        "n_chains": 2,
        "n_jobs": n_jobs,
    }
    once = HMCClassifier(**{**params, "n_draws": 40}).fit(X, y)
    twice = HMCClassifier(**{**params, "n_draws": 20}, warm_start=True).fit(X, y)
    inv_mass = twice.diagnostics_["inv_mass"]
    assert inv_mass.shape == (2, twice.samples_.dim) and not np.allclose(inv_mass, 1.0)
    twice.fit(X, y)
    np.testing.assert_array_equal(twice.diagnostics_["inv_mass"], inv_mass)
    assert torch.equal(once.samples_.draws, twice.samples_.draws)  # one long run


def test_nuts_estimator_samples_the_linear_regression_posterior():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 2))
    y = X @ np.array([-0.4, 1.5]) + rng.normal(scale=0.5, size=30)
    alpha, beta = 1.0, 4.0
    reg = HMCRegressor(
        module=_linear,
        prior_precision=alpha,
        noise_precision=beta,
        sampler="nuts",
        n_draws=400,
        n_warmup=200,
        n_chains=3,
        dtype="float64",
        random_state=0,
    ).fit(X, y)
    assert_draws_match_gaussian(reg.samples_.draws.numpy(), *blr_posterior(X, y, alpha, beta))
    d = reg.diagnostics_
    assert d["mean_tree_depth"].shape == (3,) and np.all(d["mean_tree_depth"] >= 1)
    assert 0.6 < reg.acceptance_rate_ < 1.0
    assert "depth" in reg.summary()


@pytest.mark.parametrize("first, then", [(None, 2), (1, None)])
def test_warm_start_across_a_change_of_n_jobs(blobs, first, then):
    X, y = blobs
    clf = HMCClassifier(**{**SMALL, "n_draws": 10}, n_chains=2, n_jobs=first)
    clf.set_params(warm_start=True).fit(X, y)
    clf.set_params(n_jobs=then).fit(X, y)
    assert clf.samples_.draws.shape[:2] == (2, 20)
    assert torch.isfinite(clf.samples_.draws).all()
    again = HMCClassifier(**{**SMALL, "n_draws": 10}, n_chains=2, n_jobs=first)
    again.set_params(warm_start=True).fit(X, y)
    again.set_params(n_jobs=then).fit(X, y)
    assert torch.equal(clf.samples_.draws, again.samples_.draws)  # still reproducible


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(n_chains=3), "n_chains"),
        (dict(hidden_layer_sizes=(5,)), "hidden_layer_sizes"),
    ],
)
def test_warm_start_refuses_a_change_it_would_ignore(blobs, change, match):
    X, y = blobs
    clf = HMCClassifier(**{**SMALL, "n_draws": 5}, n_chains=2, warm_start=True).fit(X, y)
    draws = clf.samples_.draws.clone()
    with pytest.raises(ValueError, match=match):
        clf.set_params(**change).fit(X, y)
    assert torch.equal(clf.samples_.draws, draws)  # the previous fit is intact


def _learned_noise_regressor(**kw):
    return HMCRegressor(**SMALL, n_chains=3, **kw)  # noise_precision=None: a Gibbs block


def test_learned_noise_draws_do_not_depend_on_the_number_of_jobs(blobs):
    """The Gibbs step of the noise precision draws from each chain's own generator and keeps
    its values in the chain's state (issue 25 item 1): sequential, parallel and Dask runs give
    the same draws, noise precisions and predictions."""
    X, y = blobs
    y = X[:, 0] + 0.3 * X[:, 1] ** 2
    seq = _learned_noise_regressor(n_jobs=1).fit(X, y)
    par = _learned_noise_regressor(n_jobs=2).fit(X, y)
    fits = [par]
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        with distributed.Client(cluster), joblib.parallel_config(backend="dask"):
            fits.append(_learned_noise_regressor(n_jobs=2).fit(X, y))
    for other in fits:
        assert torch.equal(seq.samples_.draws, other.samples_.draws)
        assert torch.equal(
            seq.samples_.stats["noise_precision"], other.samples_.stats["noise_precision"]
        )
        np.testing.assert_array_equal(seq.predict(X[:6]), other.predict(X[:6]))
