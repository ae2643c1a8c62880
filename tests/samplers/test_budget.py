"""Adaptive budgets: the within-chain R-hat, the warmup and draws rules, in the loop."""

import numpy as np
import pytest
import torch
from conftest import correlated_gaussian

from sklearn_bnn.samplers import HMC, sample
from sklearn_bnn.samplers.driver.budget import DrawRule, WarmupRule

F64 = torch.float64


def test_draw_rule_stops_on_stationary_draws_and_drops_the_start_of_drifting_ones():
    rng = np.random.default_rng(0)
    rule = DrawRule(min_draws=100, min_ess=50)
    draws = torch.zeros(2, 200, 1)
    stationary = torch.as_tensor(rng.normal(size=(2, 200)))
    assert rule.check(draws, stationary) == (True, 0)
    drifting = stationary + torch.linspace(0, 3, 200)
    assert rule.check(draws, drifting) == (False, 100)  # a window of 2 * min_draws: halved
    assert rule.check(draws[:, :150], drifting[:, :150]) == (False, 0)  # too short to halve
    # an ESS target the draws cannot reach
    assert DrawRule(min_ess=1e6).check(draws, stationary) == (False, 0)


def test_draw_rule_checks_the_monitored_quantities_too():
    rng = np.random.default_rng(1)
    lp = torch.as_tensor(rng.normal(size=(1, 200)))
    draws = torch.zeros(1, 200, 1)

    def drifting(d):
        return np.linspace(0.0, 3.0, d.shape[1])[None, :, None] + rng.normal(size=(1, 200, 1))

    assert DrawRule(monitor=drifting).check(draws, lp)[0] is False


def test_warmup_rule_waits_for_a_settled_step_size():
    rule = WarmupRule(min_warmup=50, block=25, tolerance=0.1)
    settled = [torch.tensor([0.1])] * 100
    assert not rule.settled(24, settled[:25])  # before min_warmup
    assert rule.settled(49, settled[:50])
    assert not rule.settled(50, settled[:51])  # not at a block's end
    moving = [torch.tensor([0.1 * 1.01**i]) for i in range(100)]  # 28 % per 25 transitions
    assert not rule.settled(74, moving[:75])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sample_with_auto_budgets_stops_early_and_its_draws_match_the_gaussian(seed):
    truth = correlated_gaussian(4, seed=seed)
    result = sample(
        truth,
        torch.zeros(4, dtype=F64),
        HMC(n_steps=10),
        n_warmup="auto",
        n_draws="auto",
        n_chains=2,
        random_state=seed,
    )
    info = result.info
    assert 150 <= info["n_warmup"] < 500  # the step size settled before the cap
    assert 100 <= result.n_draws < 500  # stationary and ESS 50 reached before the cap
    draws = result.draws.reshape(-1, 4).double()
    cov = truth.cov
    # Monte Carlo error of the mean with at least 50 effective draws: sd / sqrt(50)
    err = (draws.mean(0) - truth.mean).abs() / cov.diagonal().sqrt()
    assert float(err.max()) < 4.0 / np.sqrt(50)
    ratio = draws.var(0) / cov.diagonal()
    assert float(ratio.min()) > 0.5 and float(ratio.max()) < 1.6


def test_auto_budgets_give_the_same_draws_for_the_same_seed():
    truth = correlated_gaussian(3, seed=0)
    kwargs = dict(n_warmup="auto", n_draws="auto", n_chains=2, random_state=4)
    a = sample(truth, torch.zeros(3, dtype=F64), HMC(n_steps=5), **kwargs)
    b = sample(truth, torch.zeros(3, dtype=F64), HMC(n_steps=5), **kwargs)
    torch.testing.assert_close(a.draws, b.draws, rtol=0, atol=0)


def test_a_chain_that_cannot_mix_runs_to_the_cap():
    # a step far too small for the target: each draw barely moves, the ESS never reaches 50
    truth = correlated_gaussian(3, seed=0)
    result = sample(
        truth,
        torch.zeros(3, dtype=F64),
        HMC(n_steps=2, step_size=1e-3, step_jitter=0.0),
        n_warmup=10,
        n_draws="auto",
        n_chains=1,
        init_jitter=0.0,
        random_state=0,
    )
    # the cap is 1,000 draws, some of which may have become warmup
    assert result.n_draws + result.info["n_warmup"] - 10 == 1000
