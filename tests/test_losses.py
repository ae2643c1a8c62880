"""The plan-net loss (seeds/003 eq. 7.1): the factor's layout, the value against a Gaussian
with precision L L^T, and gradients against autograd of the hand-written density."""

import math

import pytest
import torch

from sklearn_bnn.losses import cholesky_factor, cholesky_gaussian_loss, n_offdiag


def _parts(n=6, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    kw = dict(generator=g, dtype=torch.float64)
    return (
        torch.randn(n, d, **kw),
        torch.randn(n, d, **kw),
        0.3 * torch.randn(n, d, **kw),
        torch.randn(n, n_offdiag(d), **kw),
    )


def test_n_offdiag():
    assert [n_offdiag(d) for d in (1, 2, 3, 5)] == [0, 1, 3, 10]


def test_factor_puts_the_entries_row_by_row_below_the_diagonal():
    L = cholesky_factor(torch.tensor([0.0, math.log(2.0), 0.0]), torch.tensor([1.0, 2.0, 3.0]))
    expected = torch.tensor([[1.0, 0.0, 0.0], [1.0, 2.0, 0.0], [2.0, 3.0, 1.0]])
    torch.testing.assert_close(L, expected)


def _hand_written(y, mean, log_diag, off):
    """-2 log N(y; mean, (L L^T)^-1) - D log 2 pi, with the precision matrix formed."""
    L = cholesky_factor(log_diag, off)
    precision = L @ L.transpose(-1, -2)
    mvn = torch.distributions.MultivariateNormal(mean, precision_matrix=precision)
    return -2 * mvn.log_prob(y) - y.shape[-1] * math.log(2 * math.pi)


def test_loss_is_twice_the_negative_log_density_and_reduces_as_asked():
    y, mean, log_diag, off = _parts()
    expected = _hand_written(y, mean, log_diag, off)
    torch.testing.assert_close(cholesky_gaussian_loss(y, mean, log_diag, off, "none"), expected)
    torch.testing.assert_close(cholesky_gaussian_loss(y, mean, log_diag, off), expected.mean())
    torch.testing.assert_close(
        cholesky_gaussian_loss(y, mean, log_diag, off, "sum"), expected.sum()
    )
    with pytest.raises(ValueError, match="reduction"):
        cholesky_gaussian_loss(y, mean, log_diag, off, "max")


def test_gradients_match_autograd_of_the_hand_written_density():
    parts = [p.requires_grad_(True) for p in _parts(seed=1)]
    got = torch.autograd.grad(cholesky_gaussian_loss(*parts, reduction="sum"), parts[1:])
    ref = torch.autograd.grad(_hand_written(*parts).sum(), parts[1:])
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r)


def test_diagonal_loss_is_independent_normals():
    y, mean, log_diag, _ = _parts(d=4, seed=2)
    sd = torch.exp(-log_diag)  # precision exp(2 s): sd exp(-s)
    log_density = torch.distributions.Normal(mean, sd).log_prob(y).sum(-1)
    expected = -2 * log_density - 4 * math.log(2 * math.pi)
    torch.testing.assert_close(cholesky_gaussian_loss(y, mean, log_diag, None, "none"), expected)
    empty = torch.zeros(len(y), 0, dtype=torch.float64)
    torch.testing.assert_close(cholesky_gaussian_loss(y, mean, log_diag, empty, "none"), expected)
