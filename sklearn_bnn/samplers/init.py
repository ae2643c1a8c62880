"""Starting points for the chains.

A chain started at the network's random initialisation spends much of its warmup climbing to
the typical set. Starting it at a mode of the posterior (found by full-batch Adam on the log
posterior density, each chain from its own random initialisation) leaves warmup to adapt the
step size and the chains to explore around distinct modes.
"""

from __future__ import annotations

import math

import torch

from .._utils import flush_subnormals

__all__ = ["find_mode"]


@flush_subnormals
def find_mode(
    target, position: torch.Tensor, n_steps: int = 500, lr: float = 1e-2, progress=None
) -> torch.Tensor:
    """Maximise ``target``'s log density from ``position`` (C, D) with full-batch Adam.

    Adam (Kingma & Ba 2015, beta1 = 0.9, beta2 = 0.999) with a learning rate decaying along a
    half cosine to zero; chains are optimised together as one batched computation, one gradient
    per step. A step that makes a chain non-finite is undone for that chain.

    Parameters
    ----------
    progress : callable, optional
        Called once per step (e.g. a progress bar's ``update``).

    Returns
    -------
    tensor (C, D)
        The end points.
    """
    beta1, beta2, tiny = 0.9, 0.999, 1e-8
    theta = position.detach().clone()
    m = torch.zeros_like(theta)
    v = torch.zeros_like(theta)
    for t in range(1, n_steps + 1):
        _, grad = target.value_and_grad(theta)
        grad = -grad  # minimise the potential
        m.mul_(beta1).add_(grad, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step_lr = 0.5 * lr * (1 + math.cos(math.pi * (t - 1) / n_steps))
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        proposal = theta - step_lr * m_hat / (v_hat.sqrt() + tiny)
        ok = torch.isfinite(proposal).all(-1, keepdim=True)
        theta = torch.where(ok, proposal, theta)
        if progress is not None:
            progress()
    return theta
