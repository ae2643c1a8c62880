import math

import torch
from conftest import GaussianTarget, correlated_gaussian

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
