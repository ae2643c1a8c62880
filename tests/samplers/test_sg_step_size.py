"""The default step size of the SG samplers (gradient-noise rule) and the cyclical schedule."""

import math

import numpy as np
import pytest
import torch
from _sg_synthetic import NoisyGaussianTarget
from conftest import assert_draws_match_gaussian

from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import AMAGOLD, SGHMC, sample
from sklearn_bnn.samplers.stochastic_gradient.sg_step_size import (
    CyclicalSchedule,
    gradient_noise_step_size,
    gradient_noise_variance,
    training_step_size,
)
from sklearn_bnn.targets import FunctionalNetwork, MinibatchTarget


def test_noise_rule_makes_the_gradient_noise_a_fixed_share_of_the_injected_noise():
    v, n = 500.0, 10_000
    eps = float(gradient_noise_step_size(v, n, momentum=0.9, noise_ratio=0.1, max_learning_rate=1))
    assert eps**2 * v == pytest.approx(0.1 * 2 * (1 - 0.9))  # SGHMC: momentum noise
    v = 1e4
    eps = float(gradient_noise_step_size(v, n, langevin=True, noise_ratio=0.1, max_learning_rate=1))
    assert eps**2 * v == pytest.approx(0.1 * 2 * eps)  # SGLD: position noise 2 eps
    # small noise (one batch of all rows: none): the per-datum learning rate cap
    for v in (0.0, 1e-12):
        assert float(gradient_noise_step_size(v, n, max_learning_rate=1e-3)) == pytest.approx(
            math.sqrt(1e-3 / n)
        )
        eps = float(gradient_noise_step_size(v, n, langevin=True, max_learning_rate=1e-3))
        assert eps == pytest.approx(1e-3 / n)
    assert training_step_size(100) == pytest.approx(math.sqrt(0.05 / 100))
    # per chain
    eps = gradient_noise_step_size(torch.tensor([1e6, 4e6]), n, max_learning_rate=1)
    assert float(eps[0] / eps[1]) == pytest.approx(2.0)


def _linear_target(n=200, batch_size=20):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.5, n)
    net = FunctionalNetwork(torch.nn.Linear(3, 1), dtype=torch.float64)
    target = MinibatchTarget(
        net, X, y[:, None], Gaussian(4.0), GaussianPrior(2.0), batch_size=batch_size
    )
    return target, X, y


def test_gradient_noise_variance_is_the_variance_of_the_scaled_batch_gradients():
    """Against the closed-form gradient of a linear-Gaussian model on the same batches:
    (N/|B|) tau X_B^T (y_B - X_B w - b) - alpha (w, b)."""
    target, X, y = _linear_target()
    theta = torch.tensor([[0.3, -1.0, 0.2, 0.1]], dtype=torch.float64)  # weight (1x3), bias
    got = gradient_noise_variance(target, theta, n_batches=8, seed=3)
    perm = np.random.default_rng(3).permutation(200)
    w, b = theta[0, :3].numpy(), float(theta[0, 3])
    grads = []
    for k in range(8):
        rows = perm[k * 20 : (k + 1) * 20]
        r = y[rows] - X[rows] @ w - b
        g = (200 / 20) * 4.0 * np.append(X[rows].T @ r, r.sum()) - 2.0 * theta[0].numpy()
        grads.append(g)
    assert float(got[0]) == pytest.approx(np.var(grads, axis=0, ddof=1).mean(), rel=1e-10)
    # fewer rows than two disjoint batches: the first rows of independent permutations, as
    # the sampler draws one batch a permutation then (not "no noise")
    wide, _, _ = _linear_target(batch_size=128)
    got = gradient_noise_variance(wide, theta, n_batches=8, seed=3)
    rng, grads = np.random.default_rng(3), []
    for _ in range(8):
        rows = rng.permutation(200)[:128]
        r = y[rows] - X[rows] @ w - b
        grads.append((200 / 128) * 4.0 * np.append(X[rows].T @ r, r.sum()) - 2.0 * theta[0].numpy())
    assert float(got[0]) > 0
    assert float(got[0]) == pytest.approx(np.var(grads, axis=0, ddof=1).mean(), rel=1e-10)
    # one batch holding every row: no gradient noise
    full, _, _ = _linear_target(batch_size=200)
    assert float(gradient_noise_variance(full, theta)[0]) == 0.0


def test_cyclical_schedule_runs_cosine_cycles_from_the_peak_to_the_step():
    schedule = CyclicalSchedule(n_cycles=2, n_transitions=8, peak=0.1)
    eps = torch.tensor([[0.01]])
    steps = [float(schedule(eps, t)) for t in range(8)]
    expected = [0.01 + 0.09 * 0.5 * (1 + math.cos(math.pi * (t % 4) / 4)) for t in range(8)]
    assert steps == pytest.approx(expected)
    assert steps[0] == pytest.approx(0.1) and steps[:4] == pytest.approx(steps[4:])
    # never below the sampling step, even with a peak under it
    assert float(CyclicalSchedule(1, 4, peak=1e-4)(eps, 2)) == pytest.approx(0.01)


def test_schedule_applies_in_sampling_only_and_is_fixed_within_a_transition():
    target = NoisyGaussianTarget(np.zeros(2), np.ones(2))
    sampler = SGHMC(step_size=0.01, warmup_step_size=0.1, n_steps=4)
    sampler.schedule = CyclicalSchedule(2, 4, peak=0.05)
    kernel = sampler.build(target)
    kernel.init(torch.zeros(1, 2, dtype=torch.float64), n_warmup=2)  # the loop tells the length
    eps = torch.tensor([0.01], dtype=torch.float64)
    assert float(kernel._eps(eps, 0)) == pytest.approx(0.1)  # the cosine warmup
    kernel._transition = 2  # first sampling transition: the peak, at every step
    assert [float(kernel._eps(eps, i)) for i in range(4)] == pytest.approx([0.05] * 4)
    kernel._transition = 3
    assert float(kernel._eps(eps, 0)) == pytest.approx(0.03)


def test_amagold_with_a_cyclical_schedule_samples_the_gaussian():
    """The schedule is fixed in advance and constant within a trajectory, so AMAGOLD's test stays
    exact at every transition: N(mu, S) within 4 MC errors, steps cycling 0.05-0.2."""
    mean, var = np.linspace(-1.0, 2.0, 10), np.linspace(0.5, 2.0, 10)
    sampler = AMAGOLD(step_size=0.05, n_steps=5)
    sampler.schedule = CyclicalSchedule(n_cycles=20, n_transitions=1200, peak=0.2)
    start = torch.as_tensor(mean, dtype=torch.float64)
    result = sample(
        NoisyGaussianTarget(mean, var, grad_noise=1.0),
        start,
        sampler,
        n_warmup=100,
        n_draws=1200,
        n_chains=4,
        random_state=0,
    )
    assert_draws_match_gaussian(result.draws.numpy(), mean, np.diag(var))


def test_the_map_start_budget_is_200_epochs_or_10000_steps():
    from sklearn_bnn.samplers.starts import init_step_budget

    assert init_step_budget("auto", 160_000, 128) == 200 * 1250  # large data: epochs
    assert init_step_budget("auto", 133, 128) == 10_000  # wine: 2 batches an epoch
    assert init_step_budget("auto", 50, 128) == 10_000  # one batch holds the data
    assert init_step_budget(37, 160_000, 128) == 37 and init_step_budget(0, 10, 4) == 0
