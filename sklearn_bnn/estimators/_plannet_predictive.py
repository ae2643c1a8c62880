"""plan-net's predictive distribution: Monte Carlo dropout passes of trained networks, each
network's Gaussian (Cobb 2019, eq. 7.4-7.6), the ensemble's mixture (eq. 7.7-7.8) and draws from
it. All in standardised units; :class:`~sklearn_bnn.estimators.PlanNetRegressor` converts."""

from __future__ import annotations

import torch

from .._utils import draw_seed
from ..losses import cholesky_factor

__all__ = [
    "NOT_FINITE",
    "combine_gaussians",
    "ensemble_gaussian_draws",
    "member_moments",
    "pass_draws",
]

ROWS_PER_FORWARD = 16384  # rows x passes evaluated in one forward call at prediction

NOT_FINITE = (
    "the networks' predicted precision is not finite and positive definite for some inputs; "
    "X may lie far outside the range of the training data (e.g. scaled by a huge factor), or "
    "training diverged (lower learning_rate_init)."
)


def combine_gaussians(means, covs):
    """Moments of an equally weighted mixture of Gaussians (law of total variance).

    Cobb (2019), eq. 7.7-7.8: ``mu = mean_k mu_k`` and
    ``Sigma = mean_k (mu_k - mu)(mu_k - mu)^T + mean_k Sigma_k``.

    Parameters
    ----------
    means : Tensor or ndarray of shape (K, ..., D)
    covs : Tensor or ndarray of shape (K, ..., D, D)

    Returns
    -------
    mean : shape (..., D)
    cov : shape (..., D, D)

    Examples
    --------
    >>> import numpy as np
    >>> m, c = combine_gaussians(np.array([[0.0], [2.0]]), np.array([[[1.0]], [[3.0]]]))
    >>> m, c
    (array([1.]), array([[3.]]))
    """
    mean = means.mean(0)
    dev = means - mean
    spread = (dev[..., :, None] * dev[..., None, :]).mean(0)
    return mean, spread + covs.mean(0)


def _precision_inverse(precision: torch.Tensor) -> torch.Tensor:
    """``precision^-1`` through its Cholesky factor (symmetric to rounding)."""
    factor, info = torch.linalg.cholesky_ex(precision)
    if bool((info != 0).any()):
        raise ValueError(NOT_FINITE)
    return torch.cholesky_inverse(factor)


@torch.no_grad()
def _passes(net, Xs, n_passes: int, seed: int):
    """Yield ``(rows, mean, L)`` of ``n_passes`` MC passes over row chunks of ``Xs``.

    One dropout mask per pass, shared by all rows (seeded by ``seed``, so every chunk sees
    the same masks and a row's prediction does not depend on the other rows).
    """
    rows = max(1, ROWS_PER_FORWARD // n_passes)
    for start in range(0, len(Xs), rows):
        gen = torch.Generator(device=Xs.device).manual_seed(seed)
        xb = Xs[start : start + rows]
        mean, log_diag, off = net(xb.expand(n_passes, *xb.shape), gen, share_mask=True)
        mean, log_diag, off = mean.double(), log_diag.double(), off.double()
        if not all(bool(t.isfinite().all()) for t in (mean, log_diag, off)):
            raise ValueError(NOT_FINITE)
        L = cholesky_factor(log_diag, off)
        if not bool(L.isfinite().all()):  # exp(log_diag) overflowed: far outside the data
            raise ValueError(NOT_FINITE)
        yield slice(start, start + len(xb)), mean, L


def member_moments(
    nets, seeds, Xs, n_outputs: int, n_passes: int, prediction: str, parts: bool = False
):
    """Per-network predictive mean and covariance from ``n_passes`` passes seeded by ``seeds``.

    ``prediction="expectation"``: ``N(E[mu], E[L L^T]^-1)`` over the passes (eq. 7.4-7.5);
    ``"sampling"``: the mixture of the pass Gaussians (eq. 7.6). Returns tensors of shape
    (n_networks, n, D) and (n_networks, n, D, D); with ``parts``, the covariance in two: the
    noise's (``E[L L^T]^-1``, or the mean of the passes' ``(L L^T)^-1``) and the spread of the
    passes' means (zero under ``"expectation"``, whose Gaussian leaves it out), three tensors.
    """
    n, d = len(Xs), n_outputs
    means = torch.empty(len(nets), n, d, dtype=torch.float64, device=Xs.device)
    covs = torch.empty(len(nets), n, d, d, dtype=torch.float64, device=Xs.device)
    spreads = torch.zeros(len(nets), n, d, d, dtype=torch.float64, device=Xs.device)
    for m, (net, seed) in enumerate(zip(nets, seeds, strict=True)):
        for rows, mu, L in _passes(net, Xs, n_passes, seed):
            precision = L @ L.transpose(-1, -2)
            if prediction == "expectation":  # eq. 7.4-7.5
                means[m, rows], covs[m, rows] = mu.mean(0), _precision_inverse(precision.mean(0))
                continue
            # eq. 7.6: the mixture of the T pass Gaussians (combine_gaussians, in its two terms)
            mean = mu.mean(0)
            dev = mu - mean
            spread = (dev[..., :, None] * dev[..., None, :]).mean(0)
            noise = _precision_inverse(precision).mean(0)
            means[m, rows] = mean
            if parts:
                covs[m, rows], spreads[m, rows] = noise, spread
            else:
                covs[m, rows] = spread + noise
    return (means, covs, spreads) if parts else (means, covs)


def ensemble_gaussian_draws(mean, cov, n_draws: int, noise_gen) -> torch.Tensor:
    """``n_draws`` draws of ``N(mean, cov)`` per row (eq. 7.5, 7.7-7.8), on the CPU."""
    eps = torch.randn(n_draws, *mean.shape, generator=noise_gen, dtype=torch.float64)
    chol, info = torch.linalg.cholesky_ex(cov)
    if bool((info != 0).any()):
        raise ValueError(NOT_FINITE)
    chol = chol.cpu()
    return mean.cpu() + (chol @ eps[..., None])[..., 0]


def pass_draws(nets, Xs, n_outputs: int, n_draws: int, rng, noise_gen) -> torch.Tensor:
    """Eq. 7.6: draw k comes from one dropout pass of network k mod M."""
    draws = torch.empty(n_draws, len(Xs), n_outputs, dtype=torch.float64)
    for m, net in enumerate(nets):
        which = range(m, n_draws, len(nets))
        if not len(which):
            continue
        seed = draw_seed(rng)
        for rows, mu, L in _passes(net, Xs, len(which), seed):
            eps = torch.randn(*mu.shape, 1, generator=noise_gen, dtype=torch.float64)
            # L^T a = eps gives a with covariance (L L^T)^-1
            a = torch.linalg.solve_triangular(L.transpose(-1, -2).cpu(), eps, upper=True)
            draws[list(which), rows] = mu.cpu() + a[..., 0]
    return draws
