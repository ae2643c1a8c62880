"""States and step information shared by the samplers.

Every kernel works on a leading chain axis: positions are (C, D), per-chain scalars (C,).
A kernel is used as ``state = kernel.init(position)`` then ``state, info = kernel.step(state,
generator)``; it never prints, never touches global RNG state and knows nothing of scikit-learn.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class State(NamedTuple):
    """A position with its cached log density and gradient (so a step costs one gradient)."""

    position: torch.Tensor  # (C, D)
    log_prob: torch.Tensor  # (C,)
    grad: torch.Tensor  # (C, D)


class Info(NamedTuple):
    """What one transition did, per chain."""

    accept_prob: torch.Tensor  # (C,) Metropolis-Hastings acceptance probability
    accepted: torch.Tensor  # (C,) bool
    energy_error: torch.Tensor  # (C,) H(end) - H(start); inf when the trajectory diverged
    divergent: torch.Tensor  # (C,) bool: non-finite or above the divergence threshold
    step_size: torch.Tensor  # (C,)
    n_grad: float  # full-data gradient evaluations spent (per chain; a subset counts 1/M)
    tree_depth: torch.Tensor | None = None  # (C,) for NUTS


def kinetic_energy(momentum: torch.Tensor, inv_mass: torch.Tensor) -> torch.Tensor:
    """K(p) = p^T M^-1 p / 2 for a diagonal inverse mass, over the last axis."""
    return 0.5 * (momentum * momentum * inv_mass).sum(-1)


def sample_momentum(
    shape, inv_mass: torch.Tensor, generator: torch.Generator, *, dtype, device
) -> torch.Tensor:
    """p ~ N(0, M) for the diagonal mass M = 1 / inv_mass."""
    z = torch.randn(shape, generator=generator, dtype=dtype, device=device)
    return z / inv_mass.sqrt()
