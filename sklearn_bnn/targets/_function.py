"""A plain torch function ``theta -> log p(theta)`` as a target.

The adapter behind :func:`sklearn_bnn.samplers.sample`: it gives the value and gradient of a
user's log density on a (C, D) batch of positions, through :mod:`torch.func` (``vmap`` of
``grad_and_value``, one batched call for all chains) where the function allows it, and one
autograd call per chain where it does not (data-dependent control flow, in-place updates, ops
without a batching rule).
"""

from __future__ import annotations

import torch
from torch.func import grad_and_value, vmap

from .._warnings import warn

__all__ = ["FunctionTarget"]


class FunctionTarget:
    """Log density given by a function of one flat parameter vector.

    Parameters
    ----------
    log_prob_fn : callable
        ``log_prob_fn(theta)`` with ``theta`` a tensor of shape (D,) returns the log density (up
        to a constant) as a scalar tensor, differentiable by autograd.
    dim : int
        D, the number of parameters.
    device, dtype
        Where and in which precision positions live.
    vectorize : {"auto", True, False}, default="auto"
        ``"auto"`` tries ``vmap`` at the first call and falls back to a loop over chains (with a
        warning naming the error) when the function cannot be batched; ``True`` insists on
        ``vmap``; ``False`` always loops.

    Examples
    --------
    >>> t = FunctionTarget(lambda th: -0.5 * (th**2).sum(), dim=3)
    >>> value, grad = t.value_and_grad(torch.ones(2, 3))
    >>> value.tolist(), grad[0].tolist()
    ([-1.5, -1.5], [-1.0, -1.0, -1.0])
    """

    def __init__(
        self, log_prob_fn, dim: int, *, device="cpu", dtype=torch.float32, vectorize="auto"
    ):
        if not callable(log_prob_fn):
            raise ValueError(f"log_prob_fn must be callable, got {type(log_prob_fn).__name__}.")
        if vectorize not in ("auto", True, False):
            raise ValueError(f"vectorize must be 'auto', True or False, got {vectorize!r}.")
        self.log_prob_fn = log_prob_fn
        self.dim = int(dim)
        self.device = torch.device(device)
        self.dtype = dtype
        self.vectorize = vectorize
        self._batched = None if vectorize == "auto" else bool(vectorize)

    def _scalar(self, theta):
        value = self.log_prob_fn(theta)
        if not isinstance(value, torch.Tensor):
            value = torch.as_tensor(value, dtype=theta.dtype, device=theta.device)
        return value.reshape(()).to(theta.dtype)

    def _looped(self, theta):
        values, grads = [], []
        for row in theta:
            with torch.enable_grad():
                leaf = row.detach().requires_grad_(True)
                value = self._scalar(leaf)
                (grad,) = torch.autograd.grad(value, leaf, allow_unused=True)
            values.append(value.detach())
            grads.append(torch.zeros_like(row) if grad is None else grad)
        return torch.stack(values), torch.stack(grads)

    def value_and_grad(self, theta: torch.Tensor):
        """Log density (C,) and its gradient (C, D) at ``theta`` (C, D)."""
        theta = theta.detach()
        if self._batched is False or theta.shape[0] == 1:
            # one chain: plain autograd, whose per-call cost on a small function is a fraction
            # of vmap's (docs/sampling.md, "The log density")
            return self._looped(theta)
        if self._batched is None:
            try:
                grads, values = vmap(grad_and_value(self._scalar))(theta)
            except Exception as exc:  # any failure to batch: fall back, once, loudly
                warn(
                    f"the log density could not be batched with torch.func.vmap ({exc}); "
                    "evaluating the chains one at a time.",
                    RuntimeWarning,
                )
                self._batched = False
                return self._looped(theta)
            self._batched = True
            return values.detach(), grads.detach()
        grads, values = vmap(grad_and_value(self._scalar))(theta)
        return values.detach(), grads.detach()

    def log_prob(self, theta: torch.Tensor) -> torch.Tensor:
        """Log density at ``theta`` (C, D) or (D,)."""
        with torch.no_grad():
            if theta.ndim == 1:
                return self._scalar(theta)
            if self._batched is not False:
                try:
                    return vmap(self._scalar)(theta)
                except Exception:
                    pass
            return torch.stack([self._scalar(row) for row in theta])
