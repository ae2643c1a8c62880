"""Constrained HMC with reflecting walls (seeds/001 Algorithm 2)."""

import numpy as np
import pytest
import torch
from conftest import GaussianTarget
from scipy import stats

from sklearn_bnn.diagnostics import ess
from sklearn_bnn.samplers import ConstrainedHMC, run_chains, sample
from sklearn_bnn.samplers.hamiltonian.constrained import ReflectingLeapfrog, reflect, to_box
from sklearn_bnn.samplers.hamiltonian.integrators import leapfrog

INF = float("inf")


class RecordingTarget(GaussianTarget):
    """Remembers every position at which the density was evaluated."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def value_and_grad(self, theta):
        self.seen.append(theta.clone())
        return super().value_and_grad(theta)


def test_reflect_mirrors_and_negates_repeatedly():
    lo, hi = torch.tensor([0.0]), torch.tensor([1.0])
    q = torch.tensor([[1.3], [-0.2], [2.6], [0.5]])
    p = torch.ones(4, 1)
    q2, p2 = reflect(q, p, lo, hi)
    np.testing.assert_allclose(q2[:, 0].numpy(), [0.7, 0.2, 0.6, 0.5], atol=1e-6)
    # 2.6 bounces off the upper wall (-> -0.6) then the lower one (-> 0.6): momentum back to +
    np.testing.assert_array_equal(p2[:, 0].numpy(), [-1.0, -1.0, 1.0, 1.0])


def test_trajectory_never_leaves_its_box():
    lower = torch.tensor([-0.3, 0.0, -INF], dtype=torch.float64)
    upper = torch.tensor([0.4, INF, 0.2], dtype=torch.float64)
    target = RecordingTarget(torch.tensor([2.0, -3.0, 1.0]), torch.eye(3))
    kernel = ConstrainedHMC(lower=lower, upper=upper, n_steps=15).build(target)
    state = kernel.init(torch.tensor([[0.0, 0.5, 0.0]] * 8, dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    for eps in (0.05, 0.5, 3.0):  # from small steps to steps far wider than the box
        for _ in range(20):
            state, _ = kernel.step(state, g, step_size=eps)
    seen = torch.cat(target.seen)
    assert bool(((seen >= lower) & (seen <= upper)).all())
    assert seen[:, 0].max() > 0.3 and seen[:, 1].min() < 0.1  # it did press against the walls


def test_reflecting_leapfrog_is_reversible():
    target = GaussianTarget(torch.tensor([1.5, -1.0]), torch.tensor([[1.0, 0.6], [0.6, 1.0]]))
    lower = torch.tensor([0.0, -1.2], dtype=torch.float64)
    upper = torch.tensor([1.0, INF], dtype=torch.float64)
    integrator = ReflectingLeapfrog(lower, upper)
    kernel = ConstrainedHMC(lower=lower, upper=upper).build(target)
    g = torch.Generator().manual_seed(1)
    q0 = torch.tensor([[0.5, 0.0]] * 16, dtype=torch.float64)
    state = kernel.init(q0)
    p0 = 2.0 * torch.randn(q0.shape, generator=g, dtype=torch.float64)
    eps = torch.full((16,), 0.17, dtype=torch.float64)
    ones = torch.ones(2, dtype=torch.float64)
    end, p1, _ = integrator(target, state, p0, eps, 25, ones)
    free, _, _ = leapfrog(target, state, p0, eps, 25, ones)
    assert (end.position - free.position).abs().max() > 0.5  # walls were hit
    back, p2, _ = integrator(target, end, -p1, eps, 25, ones)
    torch.testing.assert_close(back.position, q0, atol=1e-10, rtol=0)
    torch.testing.assert_close(-p2, p0, atol=1e-10, rtol=0)


def _check_moments(x, mean, var, n_se=4.0):
    """Mean and variance of draws x (C, N) within n_se Monte Carlo standard errors."""
    n_eff = ess(x)
    se_mean = np.sqrt(var / n_eff)
    assert abs(x.mean() - mean) < n_se * se_mean, (x.mean(), mean, se_mean)
    sq = (x - mean) ** 2
    se_var = sq.std() / np.sqrt(ess(sq))
    assert abs(sq.mean() - var) < n_se * se_var, (sq.mean(), var, se_var)


def test_truncated_gaussian_1d_moments():
    target = GaussianTarget(torch.tensor([0.3]), torch.tensor([[1.0]]))
    a, b = -0.5, 1.5
    kernel = ConstrainedHMC(lower=[a], upper=[b], n_steps=8).build(target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(4, 1, dtype=torch.float64))
    run = run_chains(kernel, state, g, n_warmup=200, n_draws=1500)
    truth = stats.truncnorm(a - 0.3, b - 0.3, loc=0.3)
    x = run.draws[..., 0].numpy()
    assert x.min() >= a and x.max() <= b
    _check_moments(x, truth.mean(), truth.var())


def test_truncated_gaussian_2d_moments_by_quadrature():
    mean = torch.tensor([0.5, -0.5])
    cov = torch.tensor([[1.0, 0.7], [0.7, 1.5]])
    target = GaussianTarget(mean, cov)
    lower, upper = [0.0, -1.0], [INF, 1.0]
    kernel = ConstrainedHMC(lower=lower, upper=upper, n_steps=10).build(target)
    g = torch.Generator().manual_seed(2)
    state = kernel.init(torch.tensor([[0.5, 0.0]] * 4, dtype=torch.float64))
    run = run_chains(kernel, state, g, n_warmup=200, n_draws=1500)
    # the truncated moments on a fine grid over the box
    xs = np.linspace(0.0, 8.0, 1601)
    ys = np.linspace(-1.0, 1.0, 801)
    grid = np.stack(np.meshgrid(xs, ys, indexing="ij"), -1)
    dens = stats.multivariate_normal(mean.numpy(), cov.numpy()).pdf(grid)
    dens /= dens.sum()
    m = [(dens * grid[..., k]).sum() for k in range(2)]
    v = [(dens * (grid[..., k] - m[k]) ** 2).sum() for k in range(2)]
    draws = run.draws.numpy()
    assert (draws[..., 0] >= 0).all() and (np.abs(draws[..., 1]) <= 1).all()
    for k in range(2):
        _check_moments(draws[..., k], m[k], v[k])


def test_to_box_starts_inside():
    lower = torch.tensor([0.0, -INF, -1.0], dtype=torch.float64)
    upper = torch.tensor([INF, 0.0, 1.0], dtype=torch.float64)
    q = to_box(torch.tensor([[-0.7, 0.0, 5.0], [0.0, 0.3, 0.2]], dtype=torch.float64), lower, upper)
    assert bool(((q > lower) & (q < upper)).all())
    np.testing.assert_allclose(q[0].numpy(), [0.7, -0.1, 0.0])
    np.testing.assert_allclose(q[1].numpy(), [0.1, -0.3, 0.2])


def test_sampler_object_in_the_driver_and_errors():
    result = sample(
        lambda x: -0.5 * (x**2).sum(),
        torch.ones(2, dtype=torch.float64),
        "constrained_hmc",
        n_warmup=30,
        n_draws=30,
        n_chains=2,
        random_state=0,
    )
    assert result.draws.shape == (2, 30, 2)  # free walls: plain HMC
    with pytest.raises(ValueError, match="lower"):
        ConstrainedHMC(lower=[1.0, 0.0], upper=[0.0, 1.0]).build(GaussianTarget([0, 0], np.eye(2)))
    with pytest.raises(ValueError, match="n_steps"):
        ConstrainedHMC(n_steps=0).build(GaussianTarget([0, 0], np.eye(2)))
    with pytest.raises(ValueError, match="step_jitter"):
        ConstrainedHMC(step_jitter=1.0).build(GaussianTarget([0, 0], np.eye(2)))
    kernel = ConstrainedHMC(lower=[0.0, 0.0]).build(GaussianTarget([0, 0], np.eye(2)))
    with pytest.raises(ValueError, match="outside the box"):
        kernel.init(torch.tensor([-1.0, 1.0], dtype=torch.float64))
