"""Training losses for full-covariance Gaussian regression (Cobb 2019, ch. 7).

A network outputs, for every input, a mean ``mu`` (D values) and a lower-triangular factor ``L``
of the precision ``Lambda = L L^T``: the D log-diagonal entries ``s`` (``l_dd = exp(s_d)``) and
the ``D (D - 1) / 2`` strictly-lower entries, in the row-major order of
``torch.tril_indices(D, D, offset=-1)``.
"""

from __future__ import annotations

import torch

__all__ = ["n_offdiag", "cholesky_factor", "cholesky_gaussian_loss"]


def n_offdiag(n_targets: int) -> int:
    """Number of strictly-lower entries of a ``n_targets x n_targets`` triangle."""
    return n_targets * (n_targets - 1) // 2


def _offdiag_index(n_targets: int, device) -> torch.Tensor:
    return torch.tril_indices(n_targets, n_targets, offset=-1, device=device)


def cholesky_factor(log_diag: torch.Tensor, off_diag: torch.Tensor) -> torch.Tensor:
    """Assemble ``L`` (lower-triangular, ``exp`` on the diagonal) from its parts.

    Parameters
    ----------
    log_diag : Tensor of shape (..., D)
        ``log l_dd``.
    off_diag : Tensor of shape (..., D (D - 1) / 2)
        Strictly-lower entries in ``torch.tril_indices(D, D, -1)`` order (empty for a diagonal
        precision).

    Returns
    -------
    Tensor of shape (..., D, D)

    Examples
    --------
    >>> L = cholesky_factor(torch.zeros(2), torch.tensor([3.0]))
    >>> L
    tensor([[1., 0.],
            [3., 1.]])
    """
    d = log_diag.shape[-1]
    L = torch.diag_embed(log_diag.exp())
    if off_diag.shape[-1]:
        rows, cols = _offdiag_index(d, log_diag.device)
        L[..., rows, cols] = off_diag
    return L


def cholesky_gaussian_loss(
    y: torch.Tensor,
    mean: torch.Tensor,
    log_diag: torch.Tensor,
    off_diag: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """The plan-net loss: Cobb 2019, eq. 7.1.

    ``-2 sum_d log l_dd + (y - mu)^T L L^T (y - mu)``, i.e. twice the negative log density of
    ``N(mu, (L L^T)^-1)`` less the constant ``D log(2 pi)``.

    The log-diagonal enters as it is (never ``log(exp(.))``), and the quadratic form is
    ``||L^T (y - mu)||^2`` computed from the triangle's entries, so neither ``L L^T`` nor a
    ``D x D`` matrix is formed: no overflow where the precision's entries are huge but the
    whitened residual is not, and O(D^2) work per point for any D.

    Parameters
    ----------
    y, mean, log_diag : Tensor of shape (..., D)
    off_diag : Tensor of shape (..., D (D - 1) / 2), optional
        Strictly-lower entries of ``L``; ``None`` or empty gives the diagonal (heteroscedastic)
        loss.
    reduction : {"mean", "sum", "none"}
        Over the points (all leading axes).

    Examples
    --------
    >>> y = torch.tensor([[1.0, 2.0]])
    >>> cholesky_gaussian_loss(y, torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 1))
    tensor(5.)
    """
    r = y - mean
    z = log_diag.exp() * r  # the diagonal part of L^T r
    if off_diag is not None and off_diag.shape[-1]:
        rows, cols = _offdiag_index(r.shape[-1], r.device)
        # (L^T r)_j += sum_{i > j} L_ij r_i
        z = z.index_add(-1, cols, off_diag * r[..., rows])
    loss = z.square().sum(-1) - 2.0 * log_diag.sum(-1)
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}.")
