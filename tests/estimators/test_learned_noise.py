"""Learned observation noise of the HMC regressors: a Gibbs step on the noise precision.

The Gibbs step draws tau from Gamma(a + n/2, b + S/2) (its conjugate conditional), tempered as
Gamma((a - 1 + n/2)/T + 1, (b + S/2)/T). In a linear model with a Gaussian prior on the
weights, the marginal posterior of tau is one-dimensional and computed here on a grid, so the
sampled noise precision is checked against an exact answer within Monte Carlo error.
"""

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from torch import nn

from sklearn_bnn import HMCRegressor
from sklearn_bnn.diagnostics import ess
from sklearn_bnn.estimators.split import SplitHMCRegressor
from sklearn_bnn.likelihoods import Gaussian, sample_gamma
from sklearn_bnn.samplers import HMC


def linear_module(n_in, n_out):
    return nn.Linear(n_in, n_out)


@pytest.mark.parametrize("shape", [0.3, 1.0, 4.5, 300.0])
def test_sample_gamma_moments(shape):
    g = torch.Generator().manual_seed(0)
    x = sample_gamma(torch.full((20000,), shape), g).numpy()
    se_mean = np.sqrt(shape / x.size)
    assert abs(x.mean() - shape) < 4 * se_mean
    # variance shape; its standard error sqrt((m4 - var^2) / n), m4 = 3 k^2 + 6 k for Gamma(k)
    se_var = np.sqrt((3 * shape**2 + 6 * shape - shape**2) / x.size)
    assert abs(x.var() - shape) < 4 * se_var


def test_sample_gamma_uses_only_the_generator():
    torch.manual_seed(1)
    a = sample_gamma(torch.full((5,), 2.0), torch.Generator().manual_seed(3))
    torch.manual_seed(2)
    b = sample_gamma(torch.full((5,), 2.0), torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_conditional_is_the_conjugate_gamma_and_tempers():
    lik = Gaussian(1.0, prior=(2.0, 0.5))
    g = torch.Generator().manual_seed(0)
    sum_sq = torch.tensor([[3.0], [30.0]], dtype=torch.float64).repeat(4000, 1)
    n = 20
    for T in (1.0, 0.25):
        tau = lik.sample_precision(sum_sq, n, g, temperature=T).numpy().reshape(-1, 2)
        for j, s in enumerate((3.0, 30.0)):
            shape, rate = (2.0 - 1 + n / 2) / T + 1, (0.5 + s / 2) / T
            se = np.sqrt(shape) / rate / np.sqrt(tau.shape[0])
            assert abs(tau[:, j].mean() - shape / rate) < 4 * se, (T, s)


def _exact_tau_moments(X, y_fit, alpha, a, b):
    """E[tau] and E[1/tau] under p(tau | y) for y = [X, 1] theta + noise, theta ~ N(0, I/alpha),
    tau ~ Gamma(a, b), by quadrature over log tau."""
    n = len(y_fit)
    Phi = np.hstack([X, np.ones((n, 1))])
    K = Phi @ Phi.T / alpha
    eig, vec = np.linalg.eigh(K)
    r2 = (vec.T @ y_fit) ** 2
    log_tau = np.linspace(-8, 12, 8001)
    tau = np.exp(log_tau)
    var = eig[None, :] + 1 / tau[:, None]
    log_marg = -0.5 * (np.log(var).sum(1) + (r2[None, :] / var).sum(1))
    log_post = log_marg + (a - 1) * log_tau - b * tau + log_tau  # d tau = tau d log tau
    w = np.exp(log_post - logsumexp(log_post))
    return (w * tau).sum(), (w / tau).sum()


@pytest.mark.slow
@pytest.mark.parametrize("normalize_y", [False, True])
def test_learned_noise_matches_exact_marginal_posterior_in_y_units(normalize_y):
    rng = np.random.default_rng(0)
    n, d, sigma = 60, 2, 0.4
    X = rng.normal(size=(n, d))
    y = 3.0 * (X @ np.array([1.0, -0.5]) + 0.2 + rng.normal(scale=sigma, size=n))
    alpha, (a, b) = 1.0, (2.0, 0.05)
    reg = HMCRegressor(
        module=linear_module,
        prior_precision=alpha,
        noise_prior=(a, b),
        normalize_y=normalize_y,
        # 500 draws a chain: random_state 0-2, |z| at most 2.4 (both cases), noise_std_ within
        # 0.9 % of the exact value; without normalize_y, a prior precision 4, not 1, puts the
        # mean 12-15 MCSE off
        n_draws=500,
        n_warmup=200,
        sampler=HMC(n_steps=8),
        n_chains=2,
        dtype="float64",
        random_state=0,
    ).fit(X, y)
    # the fitted units: y standardised with normalize_y, as is; the prior's rate b Var(y) there
    scale = y.std() if normalize_y else 1.0
    y_fit = (y - (y.mean() if normalize_y else 0.0)) / scale
    e_tau, e_inv = _exact_tau_moments(X, y_fit, alpha, a, b * y.var() / scale**2)
    tau = reg.samples_.stats["noise_precision"].numpy()  # y units
    assert tau.shape == (2, 500)
    expected = e_tau / scale**2
    se = tau.std() / np.sqrt(ess(tau))
    assert abs(tau.mean() - expected) < 4 * se, (tau.mean(), expected, se)
    assert reg.noise_precision_ == pytest.approx(tau.mean())
    assert reg.noise_std_ == pytest.approx(np.sqrt(e_inv) * scale, rel=0.05)
    # the known noise level, in y units: sd 3 * 0.4 = 1.2
    assert reg.noise_std_ == pytest.approx(3 * sigma, rel=0.2)


def test_noise_units_are_those_of_y_with_and_without_normalize_y():
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, size=(120, 1))
    y = 50.0 * (X[:, 0] + 0.1 * rng.normal(size=120)) + 1000.0  # noise sd 5 in y units
    kw = dict(
        module=linear_module, n_draws=150, n_warmup=100, sampler=HMC(n_steps=8), random_state=0
    )
    stds = []
    for normalize_y in (False, True):
        reg = HMCRegressor(normalize_y=normalize_y, prior_precision=1e-6, **kw).fit(X, y)
        assert reg.noise_std_ == pytest.approx(5.0, rel=0.2), normalize_y
        _, std = reg.predict(X[:3], return_std=True)
        assert np.all(std >= reg.noise_std_ * 0.999)
        stds.append(reg.noise_std_)
    # a fixed noise_precision is in y units too: the predictive std includes 1/sqrt(it)
    for normalize_y in (False, True):
        reg = HMCRegressor(normalize_y=normalize_y, noise_precision=0.04, **kw).fit(X, y)
        assert reg.noise_std_ == pytest.approx(5.0) and reg.noise_precision_ == 0.04
        assert "noise_precision" not in reg.samples_.stats


def test_split_regressor_learns_noise_and_multi_output_keeps_one_per_output():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(80, 2))
    Y = np.stack([X[:, 0] + 0.1 * rng.normal(size=80), X[:, 1] + 1.0 * rng.normal(size=80)], 1)
    reg = SplitHMCRegressor(
        module=linear_module,
        n_splits=3,
        n_draws=60,
        n_warmup=60,
        sampler=HMC(n_steps=8, integrator="symmetric"),  # a split estimator's "hmc"
        random_state=0,
    ).fit(X, Y)
    assert reg.samples_.stats["noise_precision"].shape == (1, 60, 2)
    np.testing.assert_allclose(reg.noise_std_, [0.1, 1.0], rtol=0.3)


def test_warm_start_continues_with_learned_noise():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 1))
    y = X[:, 0] + 0.2 * rng.normal(size=40)
    reg = HMCRegressor(
        module=linear_module,
        n_draws=20,
        n_warmup=20,
        sampler=HMC(n_steps=5),
        warm_start=True,
        normalize_y=True,
        random_state=0,
    )
    reg.fit(X, y).fit(X, y)
    tau = reg.samples_.stats["noise_precision"]
    assert tau.shape == (reg.n_chains, 40)
    assert 0.1 < reg.noise_std_ < 0.4
    assert torch.all(tau[:, :20] / tau[:, 20:].mean() < 10)  # both halves in y units


@pytest.mark.parametrize("bad", [(1.0,), (0.0, 1.0), (1.0, -1.0), (1.0, 0.0), "x"])
def test_bad_noise_prior(bad):
    with pytest.raises(ValueError, match="noise_prior"):
        HMCRegressor(noise_prior=bad).fit(np.zeros((5, 1)), np.zeros(5))
