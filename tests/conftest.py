"""Shared fixtures. The portability rules every test follows are in tests/README.md."""

import os

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
# The test problems are tiny: one intra-op thread is fastest and never oversubscribes.
torch.set_num_threads(1)


@pytest.fixture
def generator():
    g = torch.Generator()
    g.manual_seed(0)
    return g


class GaussianTarget:
    """Analytic N(mean, cov) target with the Target interface (value_and_grad on (C, D))."""

    def __init__(self, mean, cov, dtype=torch.float64):
        self.mean = torch.as_tensor(mean, dtype=dtype)
        self.cov = torch.as_tensor(cov, dtype=dtype)
        self.precision = torch.linalg.inv(self.cov)
        self.dim = self.mean.shape[0]
        self.n_evals = 0

    def log_prob(self, theta):
        d = theta - self.mean
        return -0.5 * ((d @ self.precision) * d).sum(-1)

    def value_and_grad(self, theta):
        self.n_evals += 1
        d = theta - self.mean
        g = -(d @ self.precision)
        return 0.5 * (g * d).sum(-1), g


def correlated_gaussian(dim=10, seed=0):
    """A dim-D Gaussian with strong correlations and scales between ~0.3 and ~3."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(dim, dim, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(a)
    scales = torch.logspace(-0.5, 0.5, dim, dtype=torch.float64)
    cov = q @ torch.diag(scales**2) @ q.T
    mean = torch.randn(dim, generator=g, dtype=torch.float64)
    return GaussianTarget(mean, cov)


class Funnel:
    """Neal's funnel (REFERENCE §4): v ~ N(0, 3^2), x_i | v ~ N(0, e^v); theta = [v, x_1..x_n]."""

    def __init__(self, n=10):
        self.dim = n + 1

    def value_and_grad(self, theta):
        v, x = theta[:, 0], theta[:, 1:]
        n = x.shape[1]
        sq = (x * x).sum(-1) * torch.exp(-v)
        log_prob = -(v**2) / 18 - 0.5 * sq - 0.5 * n * v
        grad_v = -v / 9 + 0.5 * sq - 0.5 * n
        grad_x = -x * torch.exp(-v)[:, None]
        return log_prob, torch.cat([grad_v[:, None], grad_x], 1)


def blr_posterior(X, y, alpha, beta):
    """Closed-form posterior of y = [X, 1] theta + N(0, 1/beta), theta ~ N(0, I / alpha)."""
    import numpy as np

    X1 = np.hstack([X, np.ones((len(X), 1))])
    cov = np.linalg.inv(alpha * np.eye(X1.shape[1]) + beta * X1.T @ X1)
    return beta * cov @ X1.T @ y, cov


def assert_draws_match_gaussian(draws, mean, cov, n_se=4.0):
    """Each coordinate of draws (C, N, D): mean within n_se Monte Carlo standard errors, variance
    within n_se standard deviations of its estimate (relative sd sqrt(2 / ESS)).

    The variance's ESS is the smaller of the ESS of x and of its centred squares: HMC near half a
    period draws antithetic x (ESS of x above the number of draws) whose squares are correlated,
    and the variance estimate is only as good as the squares' ESS."""
    import numpy as np

    from sklearn_bnn.diagnostics import ess

    for k in range(draws.shape[-1]):
        x = draws[..., k]
        n_eff = ess(x)
        assert abs(x.mean() - mean[k]) < n_se * np.sqrt(cov[k, k] / n_eff), (k, x.mean(), mean[k])
        n_eff_var = min(n_eff, ess((x - mean[k]) ** 2))
        rel_err = abs(x.var() / cov[k, k] - 1)
        assert rel_err < n_se * np.sqrt(2 / n_eff_var), (k, rel_err, n_eff_var)


@pytest.fixture(autouse=True)
def _restore_configuration():
    """Every test starts from the package's default switches and leaves them as it found
    them (tests turn the CUDA-graph and host-read switches off with ``set_config``)."""
    from sklearn_bnn import get_config, set_config

    before = get_config()
    yield
    set_config(**before)
