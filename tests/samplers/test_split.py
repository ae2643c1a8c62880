"""Split targets and the split integrators (seeds/000 §3.2, §4; REFERENCE §2)."""

import numpy as np
import pytest
import torch
from test_hmc_kernel import _moments_within_mc_error
from torch import nn

from sklearn_bnn.likelihoods import Categorical, Gaussian
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import (
    HMC,
    State,
    leapfrog,
    naive_split,
    randomised_split,
    run_chains,
    symmetric_split,
)
from sklearn_bnn.samplers._base import kinetic_energy
from sklearn_bnn.targets import FunctionalNetwork, SplitTarget, Target, split_bounds

F64 = torch.float64
SPLIT_INTEGRATORS = [naive_split, randomised_split, symmetric_split]


def _mlp_targets(n_splits, n=53, seed=0):
    """A small tanh MLP regression posterior in float64: (split target, full target)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 3, generator=g, dtype=F64)
    y = torch.sin(X.sum(1, keepdim=True)) + 0.1 * torch.randn(n, 1, generator=g, dtype=F64)
    torch.manual_seed(seed)
    net = FunctionalNetwork(nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1)), dtype=F64)
    args = (net, X, y, Gaussian(25.0), GaussianPrior([1.0, 2.0, 0.5, 3.0]))
    return SplitTarget(*args, n_splits=n_splits), Target(*args)


def _blr(n_splits):
    """Bayesian linear regression: the split target and the closed-form posterior (mean, cov)."""
    rng = np.random.default_rng(0)
    n, d, alpha, beta = 40, 3, 2.0, 4.0
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 + rng.normal(scale=0.5, size=n)
    net = FunctionalNetwork(nn.Linear(d, 1), dtype=F64)
    target = SplitTarget(
        net, X, torch.as_tensor(y)[:, None], Gaussian(beta), GaussianPrior(alpha), n_splits=n_splits
    )
    X1 = np.hstack([X, np.ones((n, 1))])  # parameters: weight (d), then bias
    cov = np.linalg.inv(alpha * np.eye(d + 1) + beta * X1.T @ X1)
    return target, beta * cov @ X1.T @ y, cov


def _start(target, C=2, seed=1, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    q = scale * torch.randn(C, target.dim, generator=g, dtype=F64)
    p = torch.randn(C, target.dim, generator=g, dtype=F64)
    value, grad = target.value_and_grad(q)
    return State(q, value, grad), p


def _energy(state, p):
    return -state.log_prob + kinetic_energy(p, 1.0)


# -- the split target ---------------------------------------------------------------------------


def test_split_bounds():
    assert split_bounds(10, n_splits=3) == [(0, 3), (3, 6), (6, 10)]
    assert split_bounds(400, n_splits=4) == [(0, 100), (100, 200), (200, 300), (300, 400)]
    sizes = [b - a for a, b in split_bounds(450, split_size=100)]
    assert sizes == [90] * 5
    assert split_bounds(3, n_splits=8) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError):
        split_bounds(10)


@pytest.mark.parametrize("n_splits", [1, 2, 3, 5])
@pytest.mark.parametrize("n_chains", [1, 3])
def test_split_target_equals_full_target(n_splits, n_chains):
    split, full = _mlp_targets(n_splits)
    assert split.n_splits == n_splits
    theta = 0.5 * torch.randn(n_chains, full.dim, generator=torch.Generator().manual_seed(2))
    theta = theta.to(F64)
    v_split, g_split = split.value_and_grad(theta)
    v_full, g_full = full.value_and_grad(theta)
    torch.testing.assert_close(v_split, v_full, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(g_split, g_full, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(split.log_prob(theta), full.log_prob(theta), rtol=1e-12, atol=1e-10)
    # each subset: its likelihood plus 1/M of the prior (seeds/000 eq. 6)
    w = 1.0 / n_splits
    for m in range(n_splits):
        X, y = split.subset(m)
        v, g = split.subset_value_and_grad(theta, m)
        prior = -0.5 * (full.prior_precision * theta * theta).sum(-1)  # log N(0, 1/tau), no const
        lik = torch.stack([full.likelihood.log_prob(full.network.forward(t, X), y) for t in theta])
        torch.testing.assert_close(v, lik + w * prior, rtol=1e-12, atol=1e-10)
        v_ref, g_ref = full.value_and_grad(theta, X, y, prior_weight=w)
        torch.testing.assert_close(g, g_ref, rtol=1e-12, atol=1e-10)


def test_subset_gradient_matches_autograd_and_follows_a_changed_prior():
    split, full = _mlp_targets(3)
    theta = 0.5 * torch.randn(2, full.dim, generator=torch.Generator().manual_seed(3), dtype=F64)

    def reference(m):
        X, y = split.subset(m)
        leaf = theta.clone().requires_grad_(True)
        lik = torch.stack([full.likelihood.log_prob(full.network.forward(t, X), y) for t in leaf])
        value = lik - 0.5 / 3 * (split.prior_precision * leaf * leaf).sum(-1)
        (grad,) = torch.autograd.grad(value.sum(), leaf)
        return value.detach(), grad

    for m in range(3):
        for got, want in zip(split.subset_value_and_grad(theta, m), reference(m), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-10)
        # the kick's call: the subset's log-likelihood alone, the same gradient of -U_m
        log_lik, grad = split.subset_log_likelihood_and_grad(theta, m)
        value, grad_ref = reference(m)
        log_prior = -0.5 / 3 * (split.prior_precision * theta * theta).sum(-1)
        torch.testing.assert_close(log_lik, value - log_prior, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(grad, grad_ref, rtol=1e-12, atol=1e-10)
    # The 1/M-weighted precision is cached; changing the prior (in place or replaced) is seen.
    split.prior_precision.mul_(4.0)
    for got, want in zip(split.subset_value_and_grad(theta, 1), reference(1), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-10)
    split.prior_precision = torch.full_like(split.prior_precision, 0.25)
    for got, want in zip(split.subset_value_and_grad(theta, 2), reference(2), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-10)


def test_split_target_classification_float32():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(90, 4, generator=g)
    y = torch.randint(0, 3, (90,), generator=g)
    torch.manual_seed(0)
    net = FunctionalNetwork(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
    args = (net, X, y, Categorical(), GaussianPrior(1.0))
    split, full = SplitTarget(*args, split_size=25), Target(*args)
    assert split.n_splits == 4
    theta = net.initial_position()[None]
    for a, b in zip(split.value_and_grad(theta), full.value_and_grad(theta), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


def test_full_gradient_never_builds_a_full_data_graph():
    seen = []

    class Recording(nn.Linear):
        def forward(self, x):
            seen.append(x.shape[0])
            return super().forward(x)

    net = FunctionalNetwork(Recording(2, 1), dtype=F64)
    X, y = torch.randn(100, 2, dtype=F64), torch.randn(100, 1, dtype=F64)
    split = SplitTarget(net, X, y, Gaussian(1.0), GaussianPrior(1.0), n_splits=4)
    for C in (1, 3):
        split.value_and_grad(torch.zeros(C, 3, dtype=F64))
        split.log_prob(torch.zeros(C, 3, dtype=F64))
    assert seen and max(seen) == 25


# -- the integrators -----------------------------------------------------------------------------


@pytest.mark.parametrize("n_splits", [1, 2, 3, 4, 5])
def test_symmetric_split_is_reversible_in_float64(n_splits):
    split, _ = _mlp_targets(n_splits)
    start, p0 = _start(split)
    eps = torch.full((2,), 0.02, dtype=F64)
    inv_mass = torch.rand(split.dim, generator=torch.Generator().manual_seed(3), dtype=F64) + 0.5
    end, p1, _ = symmetric_split(split, start, p0, eps, 25, inv_mass)
    assert (end.position - start.position).abs().max() > 0.05  # it went somewhere
    back, p2, _ = symmetric_split(split, end, -p1, eps, 25, inv_mass)
    torch.testing.assert_close(back.position, start.position, rtol=0, atol=1e-10)
    torch.testing.assert_close(-p2, p0, rtol=0, atol=1e-10)


def test_symmetric_split_with_one_subset_is_leapfrog():
    split, full = _mlp_targets(1)
    start, p0 = _start(full)
    eps, inv_mass = torch.full((2,), 0.02, dtype=F64), torch.ones(full.dim, dtype=F64)
    a, pa, na = symmetric_split(split, start, p0, eps, 20, inv_mass)
    b, pb, nb = leapfrog(full, start, p0, eps, 20, inv_mass)
    for x, ref in zip((*a, pa), (*b, pb), strict=True):
        torch.testing.assert_close(x, ref, rtol=1e-12, atol=1e-12)
    assert na == nb == 20


def test_naive_split_trajectory_equals_full_leapfrog():
    split, full = _mlp_targets(4)
    start, p0 = _start(full)
    eps, inv_mass = torch.full((2,), 0.02, dtype=F64), torch.ones(full.dim, dtype=F64)
    a, pa, _ = naive_split(split, start, p0, eps, 30, inv_mass)
    b, pb, _ = leapfrog(full, start, p0, eps, 30, inv_mass)
    for x, ref in zip((*a, pa), (*b, pb), strict=True):
        torch.testing.assert_close(x, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("integrator", SPLIT_INTEGRATORS)
def test_end_state_carries_the_full_data_energy(integrator):
    split, full = _mlp_targets(3)
    start, p0 = _start(split)
    eps, inv_mass = torch.full((2,), 0.01, dtype=F64), torch.ones(full.dim, dtype=F64)
    end, _, _ = integrator(split, start, p0, eps, 7, inv_mass, torch.Generator().manual_seed(0))
    value, grad = full.value_and_grad(end.position)
    torch.testing.assert_close(end.log_prob, value, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(end.grad, grad, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize(
    ("integrator", "per_trajectory"),
    [
        (naive_split, lambda L, M: L * M),
        (randomised_split, lambda L, M: 2 * L * M + M - 1),
        (symmetric_split, lambda L, M: 2 * L * (M - 1) + M),
    ],
)
@pytest.mark.parametrize("n_splits", [2, 3, 5])
def test_subset_gradient_counts(integrator, per_trajectory, n_splits):
    # fused kicks: one gradient per subset and position (REFERENCE §2 cost accounting)
    split, _ = _mlp_targets(n_splits)
    start, p0 = _start(split)
    split.n_subset_grads = 0
    eps, inv_mass = torch.full((2,), 0.01, dtype=F64), torch.ones(split.dim, dtype=F64)
    _, _, n_grad = integrator(split, start, p0, eps, 6, inv_mass, torch.Generator().manual_seed(0))
    assert split.n_subset_grads == per_trajectory(6, n_splits)
    assert n_grad == pytest.approx(per_trajectory(6, n_splits) / n_splits)


def test_randomised_order_is_drawn_per_trajectory_from_the_generator():
    split, _ = _mlp_targets(3)
    start, p0 = _start(split)
    eps, inv_mass = torch.full((2,), 0.01, dtype=F64), torch.ones(split.dim, dtype=F64)

    def run(seed):
        return randomised_split(
            split, start, p0, eps, 4, inv_mass, torch.Generator().manual_seed(seed)
        )

    a, b = run(5), run(5)
    assert torch.equal(a[0].position, b[0].position) and torch.equal(a[1], b[1])
    # the first subset of each trajectory is the first of a fresh uniform permutation
    firsts = []
    original = split.subset_log_likelihood_and_grad

    def recording(theta, m):
        firsts.append(m)
        return original(theta, m)

    split.subset_log_likelihood_and_grad = recording
    g = torch.Generator().manual_seed(0)
    counts = np.zeros(3)
    for _ in range(240):
        firsts.clear()
        randomised_split(split, start, p0, eps, 1, inv_mass, g)
        counts[firsts[0]] += 1
    assert counts.min() >= 55, counts  # each subset leads 80 +- 7 times in 240
    with pytest.raises(ValueError, match="generator"):
        randomised_split(split, start, p0, eps, 1, inv_mass, None)


@pytest.mark.parametrize("n_splits", [2, 3, 4])
def test_symmetric_split_energy_error_is_second_order(n_splits):
    target, _, _ = _blr(n_splits)
    start, p0 = _start(target, C=1, scale=0.0)
    p0 = 10 * p0
    errors = []
    for n in (10, 20, 40, 80):
        eps = torch.tensor([0.5 / n], dtype=F64)
        end, p1, _ = symmetric_split(target, start, p0, eps, n, torch.ones(4, dtype=F64))
        errors.append(abs(float(_energy(end, p1) - _energy(start, p0))))
    ratios = [errors[i] / errors[i + 1] for i in range(1, 3)]
    for r in ratios:  # halving eps divides the energy error by ~4
        assert 3.5 < r < 4.5, (errors, ratios)


@pytest.mark.parametrize("integrator", SPLIT_INTEGRATORS)
def test_split_hmc_samples_the_bayesian_linear_regression_posterior(integrator):
    target, mean, cov = _blr(n_splits=3)
    kernel = HMC(n_steps=5, integrator=integrator, step_jitter=0.0).build(target)
    state = kernel.init(torch.zeros(1, 4, dtype=F64))
    # L eps = 0.15, about a third of the posterior's shortest period: no resonance
    run = run_chains(
        kernel, state, torch.Generator().manual_seed(0), n_warmup=50, n_draws=1000, step_size=0.03
    )
    assert run.accepted.double().mean() > 0.75
    _moments_within_mc_error(run.draws, _Gaussian(mean, cov))


class _Gaussian:
    def __init__(self, mean, cov):
        self.mean, self.cov = torch.as_tensor(mean), torch.as_tensor(cov)


@pytest.mark.parametrize("integrator", SPLIT_INTEGRATORS)
def test_far_too_large_step_is_a_counted_divergence_and_leaves_the_state_intact(integrator):
    target, _ = _mlp_targets(n_splits=3)
    state, _ = _start(target, C=3)
    before = state.position.clone()
    kernel = HMC(
        step_size=50.0, n_steps=20, integrator=integrator, step_jitter=0.0
    ).build(target)
    new, info = kernel.step(state, torch.Generator().manual_seed(0))
    assert info.divergent.all() and not info.accepted.any()
    torch.testing.assert_close(new.position, before, rtol=0, atol=0)
    torch.testing.assert_close(state.position, before, rtol=0, atol=0)  # the input is not updated
    assert torch.isfinite(new.log_prob).all() and torch.isfinite(new.grad).all()


def test_trajectory_does_not_update_the_starting_state_in_place():
    target, _ = _mlp_targets(n_splits=4)
    state, p = _start(target, C=2)
    q0, p0 = state.position.clone(), p.clone()
    eps, inv_mass = torch.full((2,), 0.01, dtype=F64), torch.ones(target.dim, dtype=F64)
    for integrator in SPLIT_INTEGRATORS:
        generator = torch.Generator().manual_seed(0)
        end, p_end, _ = integrator(target, state, p, eps, 5, inv_mass, generator)
        assert not torch.equal(end.position, q0) and not torch.equal(p_end, p0)
        assert torch.equal(state.position, q0) and torch.equal(p, p0)
