"""Likelihoods: summed log-probabilities against direct formulas and torch.distributions, and
the Gibbs draw of a Gaussian noise precision against its Gamma conditional."""

import math

import numpy as np
import pytest
import torch

from sklearn_bnn.likelihoods import Bernoulli, Categorical, Gaussian, sample_gamma


def _outputs(n=7, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g, dtype=torch.float64), g


def test_categorical_is_the_summed_log_softmax_of_the_labels():
    f, g = _outputs()
    y = torch.randint(0, 3, (7,), generator=g)
    direct = sum(f[i, y[i]] - torch.logsumexp(f[i], 0) for i in range(7))
    torch.testing.assert_close(Categorical().log_prob(f, y), direct)
    p = Categorical().predictive(f)
    torch.testing.assert_close(p.sum(-1), torch.ones(7, dtype=torch.float64))


def test_bernoulli_is_the_summed_log_sigmoid():
    f, g = _outputs(k=1)
    y = torch.randint(0, 2, (7, 1), generator=g).double()
    p = torch.sigmoid(f)
    direct = (y * torch.log(p) + (1 - y) * torch.log1p(-p)).sum()
    torch.testing.assert_close(Bernoulli().log_prob(f, y), direct)
    both = Bernoulli().predictive(f)
    torch.testing.assert_close(both[:, 1:], p)
    torch.testing.assert_close(both.sum(-1), torch.ones(7, dtype=torch.float64))


@pytest.mark.parametrize("precision", [2.5, torch.tensor([0.5, 2.0, 8.0])])
def test_gaussian_matches_torch_normal(precision):
    f, g = _outputs()
    y = f + torch.randn(f.shape, generator=g, dtype=torch.float64)
    tau = torch.as_tensor(precision, dtype=torch.float64)
    reference = torch.distributions.Normal(f, tau.rsqrt()).log_prob(y).sum()
    torch.testing.assert_close(Gaussian(precision).log_prob(f, y), reference)
    # an explicit precision overrides the stored one (the per-chain value inside vmap)
    other = torch.tensor([1.0, 3.0, 0.25], dtype=torch.float64)
    expected = torch.distributions.Normal(f, other.rsqrt()).log_prob(y).sum()
    torch.testing.assert_close(Gaussian(precision).log_prob(f, y, other), expected)


def test_gaussian_uses_the_chain_precision_once_drawn():
    f, g = _outputs(k=1)
    y = torch.zeros_like(f)
    lik = Gaussian(1.0, prior=(2.0, 1.0))
    assert lik.learns_precision and not Gaussian(1.0).learns_precision
    lik.chain_precision = torch.tensor([[4.0]], dtype=torch.float64)
    expected = torch.distributions.Normal(f, 0.5).log_prob(y).sum()
    torch.testing.assert_close(lik.log_prob(f, y), expected)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_precision_draws_follow_the_gamma_conditional(temperature):
    """Gamma((a - 1 + n/2)/T + 1, (b + S/2)/T): mean and variance within 4 standard errors
    (over generator seeds 0-9, here and in the next test, at most 2.8)."""
    a, b, n, S = 2.0, 0.5, 30, 12.0
    C = 20000
    lik = Gaussian(1.0, prior=(a, b))
    sum_sq = torch.full((C, 1), S, dtype=torch.float64)
    tau = lik.sample_precision(sum_sq, n, torch.Generator().manual_seed(0), temperature)
    assert tau.shape == (C, 1) and lik.chain_precision is None  # a draw, the likelihood unchanged
    shape = (a - 1 + n / 2) / temperature + 1
    rate = (b + S / 2) / temperature
    mean, var = shape / rate, shape / rate**2
    draws = tau[:, 0].numpy()
    assert abs(draws.mean() - mean) < 4 * math.sqrt(var / C)
    # the sample variance of a Gamma has variance ~ (mu4 - var^2) / C; 6 / shape is its excess
    kurtosis_term = var**2 * (2 + 6 / shape)
    assert abs(draws.var() - var) < 4 * math.sqrt(kurtosis_term / C)


@pytest.mark.parametrize("shape", [0.3, 1.0, 4.5])
def test_sample_gamma_moments_and_reproducibility(shape):
    C = 40000
    draws = sample_gamma(torch.full((C,), shape), torch.Generator().manual_seed(1)).numpy()
    assert np.all(draws > 0)
    assert abs(draws.mean() - shape) < 4 * math.sqrt(shape / C)
    again = sample_gamma(torch.full((C,), shape), torch.Generator().manual_seed(1)).numpy()
    np.testing.assert_array_equal(draws, again)  # same process, same generator: same draws
