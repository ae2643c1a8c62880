"""RMHMC on a plain torch function: autograd derivatives against the funnel's closed forms."""

import copy

import pytest
import torch
from _rm_targets import AnalyticGaussian, Funnel, LogisticRegression2D

from sklearn_bnn.samplers import RMHMC, sample
from sklearn_bnn.samplers.geometry.riemannian import AutodiffDerivatives, SoftAbsMetric
from sklearn_bnn.samplers.hamiltonian.rmhmc import implicit_step
from sklearn_bnn.targets import FunctionTarget

f64 = torch.float64


def _points(n, seed):
    """Positions spread over the funnel's body and neck, v in about [-4, 4]."""
    g = torch.Generator().manual_seed(seed)
    v = 1.5 * torch.randn(n, 1, generator=g, dtype=f64)
    x = torch.exp(v / 2) * torch.randn(n, 10, generator=g, dtype=f64)
    return torch.cat([v, x], 1), g


def _close(a, b, tol=1e-8):
    return torch.allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_autodiff_derivatives_match_the_closed_form_funnel(seed):
    th, g = _points(4, seed)
    A = torch.randn(4, 11, 11, generator=g, dtype=f64)
    ad, cf = AutodiffDerivatives(Funnel.scalar_log_prob), Funnel()
    for a, b in zip(ad.log_prob_grad_hessian(th), cf.log_prob_grad_hessian(th), strict=True):
        assert _close(a, b, 1e-12)
    # a non-symmetric A too: the contraction is linear in A and H is symmetric
    for M in (A + A.transpose(1, 2), A):
        assert _close(ad.hessian_contraction(th, M), cf.hessian_contraction(th, M), 1e-10)


@pytest.mark.parametrize("alpha", [1e6, 1.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_hamiltonian_and_its_gradient_match_the_closed_form(alpha, seed):
    """H(theta, p) and dH/dtheta at fixed p (seeds/003 eq. 5.1, SoftAbs eq. 5.9) to 1e-8."""
    th, g = _points(5, seed)
    metric = SoftAbsMetric(alpha=alpha)
    geo_ad = metric.evaluate(AutodiffDerivatives(Funnel.scalar_log_prob), th)
    geo_cf = metric.evaluate(Funnel(), th)
    for _ in range(3):  # several momenta at one position: the cached graph is reused
        p = geo_cf.sqrt_mul(torch.randn(5, 11, generator=g, dtype=f64))
        assert _close(geo_ad.energy(p), geo_cf.energy(p))
        assert _close(geo_ad.dH_dtheta(p), geo_cf.dH_dtheta(p))


def test_the_cached_graph_follows_the_position():
    ad, cf = AutodiffDerivatives(Funnel.scalar_log_prob), Funnel()
    th, g = _points(3, 3)
    A = torch.randn(3, 11, 11, generator=g, dtype=f64)
    ad.hessian_contraction(th, A)
    th.add_(0.1)  # changed in place: the same tensor, a new version
    assert _close(ad.hessian_contraction(th, A), cf.hessian_contraction(th, A), 1e-10)
    other = th.clone() - 0.2  # a new tensor
    assert _close(ad.hessian_contraction(other, A), cf.hessian_contraction(other, A), 1e-10)
    clone = copy.deepcopy(ad)  # an autograd graph cannot be copied: it is dropped
    assert clone._graph is None
    assert _close(clone.hessian_contraction(th, A), cf.hessian_contraction(th, A), 1e-10)


def test_a_function_vmap_cannot_batch_is_evaluated_row_by_row():
    def funnel_with_item(th):
        out = Funnel.scalar_log_prob(th)
        return out if th[0].item() < 100 else out * 0  # .item(): no vmap batching rule

    ad, cf = AutodiffDerivatives(funnel_with_item), Funnel()
    th, g = _points(2, 4)
    A = torch.randn(2, 11, 11, generator=g, dtype=f64)
    for a, b in zip(ad.log_prob_grad_hessian(th), cf.log_prob_grad_hessian(th), strict=True):
        assert _close(a, b, 1e-12)
    assert ad._batched is False
    assert _close(ad.hessian_contraction(th, A), cf.hessian_contraction(th, A), 1e-10)


def test_zero_third_derivatives_give_a_zero_contraction():
    t = AnalyticGaussian(torch.zeros(3), torch.diag(torch.tensor([0.5, 1.0, 2.0])))
    ad = AutodiffDerivatives(t.scalar_log_prob)
    th = torch.randn(2, 3, dtype=f64)
    _, _, h = ad.log_prob_grad_hessian(th)
    assert _close(h, -t.precision.expand(2, 3, 3), 1e-12)
    assert torch.equal(ad.hessian_contraction(th, torch.ones(2, 3, 3, dtype=f64)), th * 0)


def _implicit_map(kernel, q, p, eps, n):
    geo = kernel.evaluate(q)
    for _ in range(n):
        geo, p, ok, _ = implicit_step(kernel.evaluate, geo, p, eps, 1e-13, 200)
        assert ok.all()
    return geo, p


def test_plain_function_trajectory_is_the_closed_form_one_reversible_and_conserves_energy():
    sampler = RMHMC(integrator="explicit")
    plain = sampler.build(FunctionTarget(Funnel.scalar_log_prob, 11, dtype=f64))
    closed = sampler.build(Funnel())
    q0, g = _points(2, 5)
    eps = torch.full((2, 1), 0.1, dtype=f64)
    geo0 = plain.evaluate(q0)
    p0 = geo0.sqrt_mul(torch.randn(2, 11, generator=g, dtype=f64))
    geo1, p1 = _implicit_map(plain, q0, p0, eps, 10)
    ref1, ref_p1 = _implicit_map(closed, q0, p0, eps, 10)
    assert _close(geo1.theta, ref1.theta) and _close(p1, ref_p1)
    assert (geo1.theta - q0).abs().max() > 0.1  # it moved
    # |dH| at eps 0.1 over 10 steps: 0.004-0.09 for seeds 5-9 (the trajectory moves 1.3-4.6)
    assert (geo1.energy(p1) - geo0.energy(p0)).abs().max() < 0.25
    geo2, p2 = _implicit_map(plain, geo1.theta, -p1, eps, 10)
    assert _close(geo2.theta, q0) and _close(-p2, p0)


def test_sampling_a_plain_function_gives_the_closed_form_draws():
    """End to end through ``sample``, on a target whose Hessian has distinct eigenvalues (the
    funnel's are degenerate, so its momentum draws G^(1/2) z depend on the eigenbasis chosen)."""
    t = LogisticRegression2D()
    start = torch.tensor([1.0, 0.5], dtype=f64)
    kw = dict(n_warmup=0, n_draws=5, n_chains=2, random_state=7)
    sampler = RMHMC(n_steps=5, step_size=0.3)
    a = sample(t.scalar_log_prob, start, sampler, **kw)
    b = sample(t, start, sampler, **kw)
    assert _close(a.draws, b.draws)
    assert a.stats["accept_prob"].min() > 0.5
