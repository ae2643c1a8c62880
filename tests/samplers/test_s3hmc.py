"""S3HMC (seeds/002, seeds/003 ch. 6): weights and precisions on a conjugate linear model."""

import numpy as np
import pytest
import torch

from sklearn_bnn.diagnostics import ess
from sklearn_bnn.samplers import sample
from sklearn_bnn.samplers.hamiltonian.s3hmc import S3HMC, HierarchicalTarget

f64 = torch.float64


def _linear_problem(n=30, d=3, noise_precision=4.0, alpha=3.0, beta=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=f64)
    w = torch.tensor([1.0, -0.5, 0.3], dtype=f64)[:d]
    y = X @ w + torch.randn(n, generator=g, dtype=f64) / noise_precision**0.5

    def log_likelihood(W):  # (C, d): y ~ N(X w, 1/lambda0), lambda0 known
        r = y - W @ X.T
        return -0.5 * noise_precision * (r * r).sum(-1), noise_precision * r @ X

    target = HierarchicalTarget(
        log_likelihood,
        torch.zeros(d, dtype=torch.long),
        torch.tensor([alpha]),
        torch.tensor([beta]),
    )
    return target, X.numpy(), y.numpy(), noise_precision, alpha, beta


def _quadrature(X, y, lam0, alpha, beta):
    """p(tau | y) on a grid of log tau; moments of tau and of w (law of total variance)."""
    n, d = X.shape
    eta = np.linspace(-8, 6, 4001)
    tau = np.exp(eta)
    logp = np.empty_like(tau)
    means, covs = [], []
    for i, t in enumerate(tau):
        S = np.eye(n) / lam0 + X @ X.T / t
        _, logdet = np.linalg.slogdet(S)
        logp[i] = (
            (alpha - 1) * np.log(t) - beta * t - 0.5 * logdet - 0.5 * y @ np.linalg.solve(S, y)
        )
        A = t * np.eye(d) + lam0 * X.T @ X
        cov = np.linalg.inv(A)
        means.append(cov @ (lam0 * X.T @ y))
        covs.append(cov)
    wts = np.exp(logp + eta - (logp + eta).max())  # d tau = tau d eta
    wts /= wts.sum()
    m_tau = (wts * tau).sum()
    sd_tau = np.sqrt((wts * (tau - m_tau) ** 2).sum())
    means = np.array(means)
    m_w = (wts[:, None] * means).sum(0)
    var_w = (wts[:, None] * (np.array([np.diag(c) for c in covs]) + (means - m_w) ** 2)).sum(0)
    return m_tau, sd_tau, m_w, var_w


def _within(x, truth, n_se=4.0):
    se = x.std() / np.sqrt(ess(x))
    assert abs(x.mean() - truth) < n_se * se, (x.mean(), truth, se)


@pytest.mark.slow
def test_s3hmc_recovers_the_conjugate_precision_posterior_and_weight_moments():
    target, X, y, lam0, alpha, beta = _linear_problem()
    m_tau, sd_tau, m_w, var_w = _quadrature(X, y, lam0, alpha, beta)
    res = sample(
        target,
        torch.zeros(4, dtype=f64),
        S3HMC(n_steps=10),
        n_warmup=200,
        # 400 draws a chain: random_state 0, 1, 3 max |z| 2.1 of 4; a Gamma rate 1.5 times
        # beta moves the quadrature 12-22 MCSE away. (random_state 2 has a chain stuck in the
        # funnel, 8-9 % divergent, at 400 and at 800 draws alike.)
        n_draws=400,
        n_chains=4,
        random_state=0,
    )
    draws = res.draws.numpy()
    tau = np.exp(draws[..., -1])
    assert res.stats["divergent"].double().mean() < 0.02  # counted, rejected, rare
    _within(tau, m_tau)
    _within((tau - m_tau) ** 2, sd_tau**2)
    for k in range(3):
        _within(draws[..., k], m_w[k])
        _within((draws[..., k] - m_w[k]) ** 2, var_w[k])


def test_alba_is_reversible_and_energy_error_shrinks_with_the_step():
    target, *_ = _linear_problem()
    kernel = S3HMC(n_steps=5).build(target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.tensor([[0.5, -0.2, 0.1, 0.3]], dtype=f64))
    errors = []
    for eps in (0.04, 0.02, 0.01):
        _, info = kernel.step(state, torch.Generator().manual_seed(1), step_size=eps)
        errors.append(abs(info.energy_error.item()))
    assert errors[0] > errors[1] > errors[2]
    assert errors[1] / errors[2] > 2.5  # second order: about 4
    _, info = kernel.step(state, g, step_size=0.01)
    assert info.accept_prob.item() > 0.9


def test_float32_precision_step_converges_at_the_default_tolerance():
    """The default tol (1e-8) is below float32's resolution: the (tau, p_tau) fixed points must
    still count as converged, or a float32 network (the estimators' default) gets spurious
    divergences (15 % of the transitions on digits before the tolerance was floored)."""
    sizes = [6400, 100, 500, 5]  # a 64-100-5 MLP's tensors
    groups = torch.cat([torch.full((n,), k) for k, n in enumerate(sizes)])
    target = HierarchicalTarget(
        lambda w: (-0.5 * (w**2).sum(-1), -w), groups, torch.full((4,), 2.0), torch.ones(4)
    )
    kernel = S3HMC().build(target)
    g = torch.Generator().manual_seed(0)
    f32, C = torch.float32, 400
    tau = torch.tensor([24.0, 4.0, 2.7, 1.5]).expand(C, 4)
    c = target.metric_constants(f32, "cpu")
    for eps in (0.005, 0.05):
        w = torch.randn(C, groups.numel(), generator=g) / tau[:, groups].sqrt()
        pw = torch.randn(C, groups.numel(), generator=g) * tau[:, groups].sqrt()
        pt = torch.randn(C, 4, generator=g) * c.sqrt() / tau
        x, p, ok = kernel._tau_step(w, pw, tau, pt, None, torch.full((C, 1), eps), c)
        assert ok.all()
        assert x.dtype == f32 and torch.isfinite(p).all()


@pytest.mark.parametrize(
    "alpha, noise, match",
    [([0.5], False, "alpha > 1/2"), ([2.0, 1.0], True, "alpha > 1")],
)
def test_hyperpriors_that_make_g_tau_indefinite_are_refused(alpha, noise, match):
    with pytest.raises(ValueError, match=match):
        HierarchicalTarget(
            lambda w: (w.sum(-1), torch.ones_like(w)),
            torch.zeros(2, dtype=torch.long),
            torch.tensor(alpha),
            torch.ones(len(alpha)),
            noise=noise,
            n_obs=5,
        )


def test_s3hmc_refuses_a_target_without_hyperparameters():
    with pytest.raises(ValueError, match="HierarchicalTarget"):
        sample(lambda x: -(x**2).sum(), torch.zeros(2), S3HMC(), n_warmup=1, n_draws=1)


def test_learned_noise_precision_recovers_the_true_noise():
    """Linear model with the output precision sampled too (alpha > 1): near 1/sigma^2."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(200, 2, generator=g, dtype=f64)
    y = X @ torch.tensor([1.0, -1.0], dtype=f64) + 0.5 * torch.randn(200, generator=g, dtype=f64)

    def sse_half(W):
        r = y - W @ X.T
        return -0.5 * (r * r).sum(-1), r @ X

    target = HierarchicalTarget(
        sse_half,
        torch.zeros(2, dtype=torch.long),
        torch.tensor([2.0, 2.0]),
        torch.tensor([1.0, 1.0]),
        noise=True,
        n_obs=200,
    )
    res = sample(
        target,
        torch.zeros(4, dtype=f64),
        S3HMC(n_steps=8),
        n_warmup=150,
        n_draws=200,
        n_chains=2,
        random_state=0,
    )
    lam = np.exp(res.draws[..., -1].numpy())
    assert 3.0 < lam.mean() < 5.5  # truth 4; posterior sd about 0.4
