"""HMC with an integration time (trajectory_length) and the BNN-minded mass adaptation."""

import math

import numpy as np
import pytest
import torch
from conftest import GaussianTarget, correlated_gaussian
from test_hmc_kernel import _moments_within_mc_error

from sklearn_bnn.samplers import HMC, run_chains
from sklearn_bnn.samplers.adaptation.step_size_and_mass import SettlingVariance, WelfordVariance
from sklearn_bnn.samplers.adaptation.warmup import prior_variance as _prior_variance


def test_steps_follow_the_integration_time_jittered():
    target = GaussianTarget(torch.zeros(2), torch.eye(2))
    kernel = HMC(trajectory_length=1.0, step_jitter=0.0).build(target)
    g = torch.Generator().manual_seed(0)
    eps = torch.full((3,), 0.1, dtype=torch.float64)
    steps = np.array([kernel.trajectory_steps(eps, g) for _ in range(2000)])
    assert steps.min() >= 5 and steps.max() <= 15  # ceil(u / 0.1), u in [0.5, 1.5]
    assert abs(steps.mean() - 10.5) < 0.2  # E ceil(10 U(0.5, 1.5)) = 10.5
    assert len(set(steps)) >= 10
    capped = HMC(trajectory_length=1.0, max_steps=7, step_jitter=0.0).build(target)
    assert max(capped.trajectory_steps(eps, g) for _ in range(50)) == 7


def test_trajectory_length_samples_the_right_distribution_and_records_steps():
    target = correlated_gaussian(6, seed=1)
    kernel = HMC(trajectory_length=2.0).build(target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(4, 6, dtype=torch.float64))
    run = run_chains(kernel, state, g, n_warmup=300, n_draws=800, step_size="auto")
    _moments_within_mc_error(run.draws, target)
    n_steps = run.draw_stats["n_steps"].double()
    eps = float(run.step_size.mean())
    assert abs(n_steps.mean().item() - 2.0 / eps) < 0.15 * 2.0 / eps + 1


def test_n_steps_path_draws_no_extra_random_numbers():
    target = correlated_gaussian(3, seed=0)
    kernel = HMC(n_steps=7, step_jitter=0.0, step_size=0.1).build(target)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        kernel.step(kernel.init(torch.zeros(2, 3, dtype=torch.float64)), g)
    # each transition draws its momenta and acceptance uniforms, nothing for the step count
    expected = torch.Generator().manual_seed(5)
    for _ in range(3):
        torch.randn(2, 3, generator=expected, dtype=torch.float64)
        torch.rand(2, generator=expected, dtype=torch.float64)
    assert torch.equal(g.get_state(), expected.get_state())


@pytest.mark.parametrize("bad", [0.0, -1.0, "long"])
def test_bad_trajectory_length(bad):
    with pytest.raises(ValueError, match="trajectory_length"):
        HMC(trajectory_length=bad).build(correlated_gaussian(2))


def test_settling_variance_drops_an_unsettled_first_half():
    g = torch.Generator().manual_seed(0)
    n, D = 100, 3
    acc = SettlingVariance((2, D), "cpu", n)
    for i in range(n):
        x = torch.randn(2, D, generator=g, dtype=torch.float64)
        # chain 0 descends in log density during the first half (far off, then settles);
        # chain 1 is stationary from the start
        drift = torch.tensor([20.0 * max(0, n // 2 - i) / n, 0.0], dtype=torch.float64)
        x = x + drift[:, None]
        lp = -0.5 * (x**2).sum(-1)
        acc.update(x, lp)
    var = acc.regularized_variance()
    second = acc.second.regularized_variance()
    full = acc.full.regularized_variance()
    assert torch.equal(var[0], second[0]) and torch.equal(var[1], full[1])
    assert torch.all(var[0] < 2) and torch.all(full[0] > 4)


def test_window_variance_shrinks_toward_the_prior_variance():
    w = WelfordVariance((1, 2), "cpu")
    for v in (0.0, 0.0, 0.0, 0.0, 0.0):
        w.update(torch.full((1, 2), v))
    toward = torch.tensor([4.0, 0.25])
    np.testing.assert_allclose(w.regularized_variance(toward)[0].numpy(), [2.0, 0.125])
    np.testing.assert_allclose(w.regularized_variance()[0].numpy(), [5e-4, 5e-4])


def test_prior_variance_of_a_network_target_is_temperature_over_precision():
    from torch import nn

    from sklearn_bnn.likelihoods import Gaussian
    from sklearn_bnn.priors import GaussianPrior
    from sklearn_bnn.targets import FunctionalNetwork, Target

    net = FunctionalNetwork(nn.Linear(2, 1))
    t = Target(net, torch.zeros(4, 2), torch.zeros(4, 1), Gaussian(1.0), GaussianPrior(4.0))
    t.temperature = 0.5
    np.testing.assert_allclose(_prior_variance(t).numpy(), [0.125] * 3)
    assert _prior_variance(correlated_gaussian(2)) == 1e-3
    assert math.isclose(float(_prior_variance(t)[0]), 0.5 / 4.0)
