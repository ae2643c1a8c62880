import math

import pytest
import torch
from conftest import GaussianTarget, correlated_gaussian

from sklearn_bnn import set_config
from sklearn_bnn.samplers import State, leapfrog
from sklearn_bnn.samplers._base import kinetic_energy


def _state(target, q):
    lp, g = target.value_and_grad(q)
    return State(q, lp, g)


def test_leapfrog_is_reversible_in_float64():
    target = correlated_gaussian(10)
    g = torch.Generator().manual_seed(1)
    q0 = torch.randn(3, 10, generator=g, dtype=torch.float64)
    p0 = torch.randn(3, 10, generator=g, dtype=torch.float64)
    inv_mass = torch.rand(10, generator=g, dtype=torch.float64) + 0.5
    eps = torch.full((3,), 0.05, dtype=torch.float64)
    end, p1, n_grad = leapfrog(target, _state(target, q0), p0, eps, 50, inv_mass)
    back, p2, _ = leapfrog(target, end, -p1, eps, 50, inv_mass)
    assert n_grad == 50
    assert torch.allclose(back.position, q0, atol=1e-10, rtol=0)
    assert torch.allclose(-p2, p0, atol=1e-10, rtol=0)


def test_leapfrog_costs_one_gradient_per_step():
    target = correlated_gaussian(4)
    q = torch.zeros(1, 4, dtype=torch.float64)
    state = _state(target, q)
    target.n_evals = 0
    leapfrog(
        target,
        state,
        torch.ones(1, 4, dtype=torch.float64),
        torch.tensor([0.1], dtype=torch.float64),
        17,
        torch.ones(4, dtype=torch.float64),
    )
    assert target.n_evals == 17


def test_energy_error_is_second_order_on_harmonic_oscillator():
    # H = q^2/2 + p^2/2, unit frequency: integrate to a fixed time T with shrinking steps.
    target = GaussianTarget(torch.zeros(1), torch.eye(1))
    q0 = torch.tensor([[1.0]], dtype=torch.float64)
    p0 = torch.tensor([[0.3]], dtype=torch.float64)
    inv_mass = torch.ones(1, dtype=torch.float64)
    errors = []
    for n in (20, 40, 80, 160):
        eps = torch.tensor([2.0 / n], dtype=torch.float64)
        start = _state(target, q0)
        end, p1, _ = leapfrog(target, start, p0, eps, n, inv_mass)
        h0 = -start.log_prob + kinetic_energy(p0, inv_mass)
        h1 = -end.log_prob + kinetic_energy(p1, inv_mass)
        errors.append(abs(float(h1 - h0)))
    ratios = [errors[i] / errors[i + 1] for i in range(3)]
    for r in ratios:  # halving eps divides the error by ~4
        assert 3.5 < r < 4.5, ratios
    assert math.isclose(errors[-1], errors[0] / 64, rel_tol=0.2)


@pytest.mark.parametrize("metric", ["diagonal", "dense"])
def test_the_cpu_leapfrog_takes_the_device_leapfrogs_steps(monkeypatch, metric):
    """The CPU's leapfrog (fused multiply-adds, a host read to stop a trajectory whose every
    chain diverged) against the device path's (one rounding apart), float64; and both stop at
    the same point when every chain leaves the finite region."""
    from sklearn_bnn.samplers import DenseMetric
    from sklearn_bnn.samplers.geometry.euclidean import as_metric
    from sklearn_bnn.samplers.hamiltonian import integrators

    g = torch.Generator().manual_seed(0)
    cov = torch.tensor([[1.0, 0.3, 0.0], [0.3, 2.0, 0.1], [0.0, 0.1, 0.5]], dtype=torch.float64)
    prec = torch.linalg.inv(cov)

    class Gauss:
        def value_and_grad(self, theta):
            return -0.5 * ((theta @ prec) * theta).sum(-1), -(theta @ prec)

    m = (
        as_metric(torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64))
        if metric == "diagonal"
        else DenseMetric(cov)
    )
    q = torch.randn(4, 3, generator=g, dtype=torch.float64)
    lp, grad = Gauss().value_and_grad(q)
    state = State(q, lp, grad)
    p0 = torch.randn(4, 3, generator=g, dtype=torch.float64)
    p0_before = p0.clone()
    eps = torch.tensor([0.1, 0.2, 0.05, 0.15], dtype=torch.float64)
    host = integrators.leapfrog(Gauss(), state, p0, eps, 17, m)
    set_config(host_reads_on_cpu=False)
    device = integrators.leapfrog(Gauss(), state, p0, eps, 17, m)
    torch.testing.assert_close(host[0].position, device[0].position, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(host[1], device[1], rtol=1e-12, atol=1e-12)
    assert host[2] == device[2] == 17
    assert torch.equal(p0, p0_before)  # the momentum given is not written to
    # every chain diverges: the host path stops there, the device path runs on; both end
    # non-finite, which the Metropolis test rejects
    big = torch.full((4,), 1e4, dtype=torch.float64)
    run_on = integrators.leapfrog(Gauss(), state, p0 * 1e3, big, 40, m)
    set_config(host_reads_on_cpu=True)
    stopped = integrators.leapfrog(Gauss(), state, p0 * 1e3, big, 40, m)
    assert not torch.isfinite(stopped[0].log_prob).any()
    assert not torch.isfinite(run_on[0].log_prob).any()


def test_the_device_leapfrog_takes_the_gradient_alone_inside_a_trajectory(monkeypatch):
    """Only the last step's log density is read, so the inner steps ask the target for its
    gradient alone (``log_prob_grad``), on a device as on the CPU: the same trajectory; on the
    CPU a trajectory that diverges still stops early, its end non-finite."""
    from sklearn_bnn.likelihoods import Categorical
    from sklearn_bnn.nets import MLP
    from sklearn_bnn.priors import GaussianPrior
    from sklearn_bnn.samplers.geometry.euclidean import IdentityMetric
    from sklearn_bnn.samplers.hamiltonian import integrators
    from sklearn_bnn.targets import FunctionalNetwork, Target

    g = torch.Generator().manual_seed(0)
    X = torch.randn(50, 3, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0.5).long()
    torch.manual_seed(0)
    net = FunctionalNetwork(MLP(3, (8,), 3), dtype=torch.float64)
    target = Target(net, X, y, Categorical(), GaussianPrior(1.0))
    q = 0.3 * torch.randn(2, target.dim, generator=g, dtype=torch.float64)
    state = State(q, *target.value_and_grad(q))
    p0 = torch.randn(2, target.dim, generator=g, dtype=torch.float64)
    eps = torch.tensor([0.05, 0.02], dtype=torch.float64)
    calls = []
    for name in ("value_and_grad", "log_prob_grad"):
        method = getattr(target, name)
        monkeypatch.setattr(target, name, lambda *a, _m=method, _n=name: calls.append(_n) or _m(*a))
    host = integrators.leapfrog(target, state, p0, eps, 9, IdentityMetric())
    assert calls == ["log_prob_grad"] * 8 + ["value_and_grad"]
    set_config(host_reads_on_cpu=False)
    calls.clear()
    device = integrators.leapfrog(target, state, p0, eps, 9, IdentityMetric())
    assert calls == ["log_prob_grad"] * 8 + ["value_and_grad"]
    for a, b in zip((*host[0], host[1]), (*device[0], device[1]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)  # fused and unfused steps
    # a divergence: the CPU stops at the first step whose gradient and log density are not
    # finite (the density computed there to tell); the end is rejected by the caller
    set_config(host_reads_on_cpu=True)
    calls.clear()
    big = torch.full((2,), 1e3, dtype=torch.float64)
    stopped = integrators.leapfrog(target, state, p0 * 1e300, big, 40, IdentityMetric())
    assert not torch.isfinite(stopped[0].log_prob).any()
    assert calls[-1] == "value_and_grad" and len(calls) < 10, calls


def test_a_gradient_that_only_sums_past_the_float_range_does_not_stop_the_trajectory():
    """The CPU's leapfrog reads the sum of the gradient to spot a divergence; a sum that
    overflows while every element and the log density are finite is not one."""
    from sklearn_bnn.samplers.geometry.euclidean import IdentityMetric
    from sklearn_bnn.samplers.hamiltonian import integrators

    class Huge:
        calls = 0

        def value_and_grad(self, theta):
            return -0.5 * (theta * theta).sum(-1), -theta

        def log_prob_grad(self, theta):
            Huge.calls += 1
            return torch.full_like(theta, 3e38) if Huge.calls == 2 else -theta

    target = Huge()
    q = torch.ones(1, 2)
    state = State(q, *target.value_and_grad(q))
    eps = torch.full((1,), 1e-30)
    end, p, n = integrators.leapfrog(target, state, torch.zeros(1, 2), eps, 6, IdentityMetric())
    assert Huge.calls == 5  # every inner step ran
    assert torch.isfinite(end.log_prob).all() and torch.isfinite(p).all()
