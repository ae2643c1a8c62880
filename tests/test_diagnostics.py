"""ESS and R-hat against ArviZ on the same draws, and on chains with known behaviour."""

import warnings

import numpy as np
import pytest

from sklearn_bnn.diagnostics import (
    ess,
    ess_bulk,
    ess_tail,
    mcse_mean,
    rhat,
    rhat_per_chain,
    rhat_within,
)


def ar1_chains(phi, n_chains=4, n_draws=2000, seed=0, offsets=0.0):
    rng = np.random.default_rng(seed)
    x = np.zeros((n_chains, n_draws))
    e = rng.normal(size=(n_chains, n_draws))
    for t in range(1, n_draws):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x + offsets


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_agrees_with_arviz(phi):
    az = pytest.importorskip("arviz")
    x = ar1_chains(phi)
    assert ess_bulk(x) == pytest.approx(float(az.ess(x, method="bulk")), rel=0.05)
    assert ess_tail(x) == pytest.approx(float(az.ess(x, method="tail")), rel=0.05)
    assert rhat(x) == pytest.approx(float(az.rhat(x)), rel=0.05)
    # ArviZ's "mean" ESS is ours on split chains
    half = x.shape[1] // 2
    split = np.concatenate([x[:, :half], x[:, half:]])
    assert ess(split) == pytest.approx(float(az.ess(x, method="mean")), rel=0.05)


def test_ess_of_an_ar1_process_matches_theory():
    # ESS / N = (1 - phi) / (1 + phi) for AR(1)
    phi = 0.6
    x = ar1_chains(phi, n_chains=4, n_draws=20_000)
    assert ess(x) / x.size == pytest.approx((1 - phi) / (1 + phi), rel=0.1)
    assert mcse_mean(x) == pytest.approx(x.std(ddof=1) / np.sqrt(ess(x)))


def test_rhat_flags_chains_that_disagree():
    mixed = ar1_chains(0.5)
    stuck = ar1_chains(0.5, offsets=np.array([[0.0], [0.0], [3.0], [3.0]]))
    assert rhat(mixed) < 1.01
    assert rhat(stuck) > 1.2


@pytest.mark.parametrize("seed", range(5))
def test_each_chain_alone_and_within_chains(seed):
    """Known cases: stationary chains score ~1 alone and within; a chain drifting by 3 of its
    standard deviations over its run scores far above 1.1 both ways; two stationary chains
    3 sd apart (two modes) score ~1 alone and within, while the chains together (``rhat``)
    flag them. Margins held over seeds 0-4 with 2000 draws a chain."""
    iid = ar1_chains(0.0, n_chains=4, seed=seed)
    assert rhat_per_chain(iid).shape == (4,)
    assert (rhat_per_chain(iid) < 1.01).all() and rhat_within(iid) < 1.01

    sd = 1 / np.sqrt(1 - 0.5**2)  # of the AR(1) below
    drifting = ar1_chains(0.5, n_chains=2, seed=seed) + np.linspace(0, 3 * sd, 2000)
    assert (rhat_per_chain(drifting) > 1.1).all() and rhat_within(drifting) > 1.1

    modes = ar1_chains(0.5, n_chains=2, seed=seed, offsets=np.array([[0.0], [3.0 * sd]]))
    assert (rhat_per_chain(modes) < 1.02).all() and rhat_within(modes) < 1.02
    assert rhat(modes) > 1.2


def test_for_one_chain_alone_and_within_are_the_split_rhat():
    x = ar1_chains(0.9, n_chains=1, n_draws=300) + np.linspace(0, 1, 300)
    assert rhat_per_chain(x)[0] == rhat(x) == rhat_within(x)
    assert rhat_per_chain(x[0]).shape == (1,)  # (n_draws,): one chain


@pytest.mark.parametrize("shape", [(1, 1), (2, 1), (1, 2), (3, 3)])
def test_too_few_draws_give_nan_not_an_error(shape):
    """One draw per chain (an SG-MCMC fit with n_draws=1) used to raise IndexError in
    ess_tail (empty split chains) and ZeroDivisionError in rhat: NaN is the honest answer."""
    x = np.random.default_rng(0).normal(size=shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        values = [ess_bulk(x), ess_tail(x), rhat(x), rhat_within(x), *rhat_per_chain(x)]
    assert all(np.isnan(v) for v in values)


def test_constant_draws_give_nan():
    x = np.ones((2, 20))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isnan(ess_tail(x)) and np.isnan(ess_bulk(x)) and np.isnan(rhat(x))


@pytest.mark.parametrize("n_chains", [1, 3])
def test_the_check_of_many_quantities_is_each_quantitys_own(n_chains):
    """convergence_check computes the R-hats of all quantities at once; each must be what
    rhat / rhat_within / rhat_per_chain give for that quantity alone, ties, constant columns
    and NaNs included."""
    from sklearn_bnn.diagnostics import convergence_check

    rng = np.random.default_rng(n_chains)
    lp = rng.normal(size=(n_chains, 120)).cumsum(1)
    ref = rng.normal(size=(n_chains, 120, 6))
    ref[..., 1] = np.round(ref[..., 1])  # ties
    ref[..., 2] = 0.5  # constant: NaN, left out of the worst
    ref[..., 3] += np.linspace(0, 6, 120)  # drift
    ref[0, 5, 4] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        columns = [ref[..., j] for j in range(6)]
        pooled = np.nanmax([rhat(c) for c in columns])
        within = np.nanmax([rhat_within(c) for c in columns])
        per_chain = np.fmax.reduce([rhat_per_chain(c) for c in columns])
    check = convergence_check(lp, ref)
    assert check["rhat_log_prob"] == pytest.approx(rhat(lp), rel=1e-12)
    assert check["rhat_predictions_max"] == pytest.approx(pooled, rel=1e-12)
    assert check["rhat_within_predictions_max"] == pytest.approx(within, rel=1e-12)
    assert check["rhat_per_chain"] == pytest.approx(np.fmax(rhat_per_chain(lp), per_chain))
    assert pooled > 1.1  # the drifting column is caught
    assert not check["converged"]
