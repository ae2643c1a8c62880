"""Starting points for the chains.

A chain started at the network's random initialisation spends much of its warmup climbing to
the typical set. Starting it at a mode of the posterior (found by full-batch Adam on the log
posterior density, each chain from its own random initialisation) leaves warmup to adapt the
step size and the chains to explore around distinct modes.
"""

from __future__ import annotations

import torch

__all__ = ["find_mode"]


def find_mode(target, position: torch.Tensor, n_steps: int = 500, lr: float = 1e-2) -> torch.Tensor:
    """Maximise ``target``'s log density from ``position`` (C, D) with full-batch Adam.

    The learning rate decays along a half cosine to zero; chains are optimised together as one
    batched computation. Non-finite steps are undone for the chains they affect.

    Returns
    -------
    tensor (C, D)
        The end points (detached).
    """
    theta = position.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, n_steps))
    for _ in range(n_steps):
        before = theta.detach().clone()
        _, grad = target.value_and_grad(theta.detach())
        opt.zero_grad(set_to_none=True)
        theta.grad = -grad
        opt.step()
        sched.step()
        with torch.no_grad():
            bad = ~torch.isfinite(theta).all(-1)
            if bad.any():
                theta[bad] = before[bad]
    return theta.detach()
