"""Integrators of Hamiltonian dynamics.

An integrator is called as ``integrator(target, state, momentum, step_size, n_steps, inv_mass,
generator)`` and returns ``(state, momentum, n_grad)``: the end point with its cached log density
and gradient, the end momentum, and the gradient evaluations spent. ``step_size`` is (C,),
``inv_mass`` (D,) or (C, D). Log densities are maximised, so the force is +grad log p = -grad U.
"""

from __future__ import annotations

import torch

from ._base import State

__all__ = ["leapfrog"]


def leapfrog(
    target,
    state: State,
    momentum: torch.Tensor,
    step_size: torch.Tensor,
    n_steps: int,
    inv_mass: torch.Tensor,
    generator: torch.Generator | None = None,
):
    """Störmer-Verlet leapfrog, ``n_steps`` steps (seeds/000 eq. 4; REFERENCE §1).

    p <- p + (eps/2) grad log p(w); w <- w + eps M^-1 p; p <- p + (eps/2) grad log p(w).
    Consecutive half momentum steps are fused, so each step costs exactly one gradient, and the
    gradient at the start comes from the cached ``state``. Stops early when every chain has left
    the finite region (a divergence; the caller rejects it).
    """
    eps = step_size[:, None]
    q = state.position
    p = momentum + 0.5 * eps * state.grad
    log_prob, grad = state.log_prob, state.grad
    n_grad = 0
    for i in range(n_steps):
        q = q + eps * (inv_mass * p)
        log_prob, grad = target.value_and_grad(q)
        n_grad += 1
        p = p + (eps if i < n_steps - 1 else 0.5 * eps) * grad
        if not torch.isfinite(log_prob).any():
            break
    return State(q, log_prob, grad), p, n_grad
