"""ChEES: HMC's integration time adapted across chains (trajectory_length="auto")."""

import math

import numpy as np
import pytest
import torch
from conftest import GaussianTarget, correlated_gaussian
from test_hmc_kernel import _moments_within_mc_error

from sklearn_bnn.samplers import HMC, run_chains
from sklearn_bnn.samplers.adaptation.chees import ChEESTrajectory, chees_gradient
from sklearn_bnn.samplers.adaptation.warmup import WindowAdaptation


def _adapted_time(target, sigma, seed, n_chains=32, n_warmup=500):
    # HMC's default step_jitter=0.5 is not applied: ChEES jitters the time itself
    kernel = HMC(n_steps=1, trajectory_length="auto").build(target)
    g = torch.Generator().manual_seed(seed)
    start = sigma * torch.randn(n_chains, target.dim, generator=g, dtype=torch.float64)
    state = kernel.init(start, g, n_warmup=n_warmup)
    adaptation = WindowAdaptation(n_warmup)  # the time adapts beside the step size
    run = run_chains(kernel, state, g, n_warmup=n_warmup, n_draws=20, adaptation=adaptation)
    return adaptation.trajectory.time, run


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chees_finds_the_criterion_maximum_of_an_isotropic_gaussian(seed):
    # For N(0, sigma^2 I) and exact dynamics, Var(|q'|^2 - |q|^2) is proportional to
    # sin^2(t / sigma), so with t = h T, h ~ U(0, 1), ChEES(T) is proportional to
    # 1/2 - sin(2x) / (4x), x = T / sigma: maximal where tan(2x) = 2x, x = 2.2467.
    sigma = 2.0
    target = GaussianTarget(torch.zeros(20), sigma**2 * torch.eye(20))
    time, run = _adapted_time(target, sigma, seed)
    assert 1.8 < time / sigma < 2.9, time / sigma
    # after warmup the time is fixed: every draw records the same one
    recorded = run.draw_stats["trajectory_time"]
    assert torch.allclose(recorded, torch.full_like(recorded, time))


class _RecordingTrajectory(ChEESTrajectory):
    """T held fixed; each transition's gradient estimate recorded."""

    def update(self, start, end, velocity, times, accept_prob, divergent):
        self.gradients.append(chees_gradient(start, end, velocity, times, accept_prob, divergent))
        self.count += 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_gradient_estimate_points_to_the_maximum(seed):
    # the expected d ChEES / d log T is positive below x = T / sigma = 2.25, negative above
    # (up to the next stationary point, x = 3.86)
    sigma, dim = 2.0, 20
    target = GaussianTarget(torch.zeros(dim), sigma**2 * torch.eye(dim))
    for x, sign in ((1.2, 1), (3.0, -1)):
        sampler = HMC(step_size=0.2, n_steps=1, trajectory_length="auto", step_jitter=0.0)
        kernel = sampler.build(target)
        g = torch.Generator().manual_seed(seed)
        state = kernel.init(sigma * torch.randn(64, dim, generator=g, dtype=torch.float64), g)
        schedule = _RecordingTrajectory(10**6, x * sigma, max_steps=1000)
        schedule.gradients = []
        for _ in range(300):  # |z| 6.3-9.4 and 24-28 over seeds 0-7
            state, info = kernel.step(state, g, trajectory=schedule)
            schedule.update(*info.trajectory, info.accept_prob, info.divergent)
        grads = np.array(schedule.gradients)
        z = grads.mean() / (grads.std() / np.sqrt(len(grads)))
        assert sign * z > 3, (x, z)


def test_chees_gradient_weights_chains_by_acceptance_and_ignores_divergences():
    start = torch.tensor([[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    end = torch.tensor([[0.0, 2.0], [1.5, 0.0], [float("nan"), 0.0]], dtype=torch.float64)
    velocity = torch.ones(3, 2, dtype=torch.float64)
    times = torch.ones(3, dtype=torch.float64)
    accept = torch.tensor([1.0, 0.5, 1.0], dtype=torch.float64)
    divergent = torch.tensor([False, False, True])
    got = chees_gradient(start, end, velocity, times, accept, divergent)
    w = torch.tensor([1.0, 0.5])
    e = end[:2]
    e_c = e - (w[:, None] * e).sum(0) / w.sum()
    s_c = start - start.mean(0)
    change = e_c.square().sum(-1) - s_c[:2].square().sum(-1)
    expected = (w * change * e_c.sum(-1)).sum() / w.sum()
    assert got == pytest.approx(float(expected))
    none = torch.zeros(3, dtype=torch.float64)
    assert math.isnan(chees_gradient(start, end, velocity, times, none, divergent))


def test_a_non_finite_gradient_leaves_the_time_unchanged():
    adaptation = ChEESTrajectory(10, 1.5, max_steps=100)
    x = torch.zeros(2, 3, dtype=torch.float64)
    adaptation.update(x, x, x, torch.ones(2), torch.zeros(2), torch.zeros(2, dtype=torch.bool))
    assert adaptation.time == pytest.approx(1.5)
    assert adaptation.count == 1


def test_steps_follow_the_jittered_time_and_respect_the_cap():
    adaptation = ChEESTrajectory(0, 10.0, max_steps=64)
    g = torch.Generator().manual_seed(0)
    steps = np.array([adaptation.n_steps(0.2, g) for _ in range(4000)])  # T / eps = 50
    assert steps.min() >= 1 and steps.max() <= 50
    assert abs(steps.mean() - 25.5) < 0.7  # ceil(h * 50), h uniform in (0, 1)
    assert len(set(steps.tolist())) == 50
    assert adaptation.time == 10.0  # no warmup: the given time, exactly
    assert adaptation.n_steps(0.01, g) <= 64


@pytest.mark.parametrize("seed", [0, 1])
def test_chees_hmc_leaves_a_correlated_gaussian_invariant(seed):
    target = correlated_gaussian(6, seed=2)
    kernel = HMC(n_steps=5, trajectory_length="auto").build(target)
    g = torch.Generator().manual_seed(seed)
    state = kernel.init(torch.zeros(4, 6, dtype=torch.float64), g, n_warmup=300)
    run = run_chains(kernel, state, g, n_warmup=300, n_draws=1000, step_size="auto")
    assert 0.5 < run.accepted.double().mean() < 0.99
    _moments_within_mc_error(run.draws, target)


def test_the_step_size_is_not_jittered_per_chain():
    target = correlated_gaussian(3)
    kernel = HMC(trajectory_length="auto", step_jitter=0.5).build(target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(4, 3, dtype=torch.float64), g, n_warmup=5)
    schedule = kernel.trajectory_schedule(5, torch.full((4,), 0.1, dtype=torch.float64))
    for _ in range(5):
        state, info = kernel.step(state, g, step_size=0.1, trajectory=schedule)
        assert torch.all(info.step_size == 0.1)
    assert kernel.progress(info).startswith("T=")  # the progress bar shows the time


def test_an_adapted_time_is_the_warmups_and_a_kernel_stepped_alone_is_told_so():
    target = correlated_gaussian(3)
    kernel = HMC(trajectory_length="auto").build(target)
    assert kernel.adapts_trajectory and not HMC(n_steps=5).build(target).adapts_trajectory
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(4, 3, dtype=torch.float64), g, n_warmup=5)
    with pytest.raises(ValueError, match="adapted by the warmup"):
        kernel.step(state, g, step_size=0.1)
    # through the loop, the warmup's schedule moves during warmup and stays fixed after it
    adaptation = WindowAdaptation(30)
    run = run_chains(kernel, state, g, n_warmup=30, n_draws=10, adaptation=adaptation)
    assert adaptation.trajectory.count == 30 and not adaptation.trajectory.adapting
    times = run.draw_stats["trajectory_time"]
    assert torch.allclose(times, torch.full_like(times, adaptation.trajectory.time))


def test_one_chain_is_refused_with_a_message_naming_the_remedy():
    target = correlated_gaussian(3)
    kernel = HMC(trajectory_length="auto").build(target)
    with pytest.raises(ValueError, match="n_chains >= 2"):
        kernel.init(torch.zeros(1, 3, dtype=torch.float64), n_warmup=10)


def test_bad_trajectory_settings_name_the_parameter():
    target = correlated_gaussian(3)
    with pytest.raises(ValueError, match="trajectory_length"):
        HMC(trajectory_length="fixed").build(target)
    with pytest.raises(ValueError, match="initial_time"):
        HMC(trajectory_length="auto", initial_time=-1.0).build(target)
