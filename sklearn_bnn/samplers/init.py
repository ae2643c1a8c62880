"""Starting points for the chains.

A chain started at the network's random initialisation spends much of its warmup climbing to
the typical set. Starting it at a mode of the posterior (each chain from its own random
initialisation) leaves warmup to adapt the step size and the chains to explore around distinct
modes. Two searches:

* :func:`find_mode`, full-batch Adam, for the full-data samplers (HMC and its relatives), whose
  every gradient is over the whole data anyway;
* :func:`find_mode_minibatch`, minibatch Adam with scikit-learn's ``MLPClassifier`` stopping
  rule, for the stochastic-gradient samplers: on large data a full-batch step costs a pass over
  the data, and a few epochs of minibatch steps reach a better mode than hundreds of full-batch
  steps (docs/sgmcmc.md, "Defaults").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .._utils import flush_subnormals

__all__ = ["MinibatchModeSearch", "find_mode", "find_mode_minibatch"]


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


@dataclass
class MinibatchModeSearch:
    """What :func:`find_mode_minibatch` did.

    Attributes
    ----------
    n_steps : int
        Minibatch Adam steps taken (all chains together).
    n_epochs : int
        Epochs begun (the last one may be cut by the step budget).
    loss_curve : numpy.ndarray of shape (n_epochs, C)
        Per chain, the epoch's mean training loss: the per-datum negative log posterior
        density -((N/|B|) l_B + log p) / N averaged over the epoch's batches (weighted by their
        rows) at the weights each batch saw, as scikit-learn's ``loss_curve_``.
    converged : numpy.ndarray of shape (C,)
        Per chain, whether the stopping rule ended its search (False: the budget did).
    steps_per_chain : numpy.ndarray of shape (C,)
        The Adam steps each chain took before it stopped.
    """

    n_steps: int
    n_epochs: int
    loss_curve: np.ndarray
    converged: np.ndarray
    steps_per_chain: np.ndarray


@flush_subnormals
def find_mode_minibatch(
    target,
    position: torch.Tensor,
    max_steps: int,
    *,
    lr: float = 1e-3,
    tol: float = 1e-4,
    n_iter_no_change: int = 10,
    seed=0,
    progress=None,
) -> tuple[torch.Tensor, MinibatchModeSearch]:
    """Maximise ``target``'s log density from ``position`` (C, D) with minibatch Adam.

    scikit-learn's ``MLPClassifier(solver="adam")`` applied to the log posterior: each epoch
    visits the rows in a fresh permutation, cut into ceil(N / |B|) batches of nearly equal size
    (|B| = ``target.batch_size`` at most; scikit-learn leaves a smaller last batch, whose
    N/|B|-scaled gradient is the noisiest on small data), and takes one Adam step (Kingma & Ba
    2015: beta1 = 0.9, beta2 = 0.999, a constant learning rate ``lr``) per batch on the
    per-datum loss -((N/|B|) l_B + log p) / N. A chain
    stops when its epoch's mean training loss has not fallen below its best by ``tol`` for more
    than ``n_iter_no_change`` epochs in a row (scikit-learn's rule and defaults), or when
    ``max_steps`` steps have been taken. A stopped chain keeps its weights while the others go
    on, so a chain ends where it would alone. A step that makes a chain non-finite is undone for
    that chain. The batches come from ``seed`` and are shared by the chains.

    Parameters
    ----------
    target : MinibatchTarget
        With ``batch_value_and_grad(theta, rows)``, ``n_data`` and ``batch_size``.
    position : tensor (C, D)
    max_steps : int
        The budget: at most this many minibatch steps.
    lr, tol, n_iter_no_change : float, float, int
        Adam's learning rate and the stopping rule (scikit-learn's ``learning_rate_init``,
        ``tol`` and ``n_iter_no_change``).
    seed : int or numpy.random.SeedSequence, default=0
        Seeds the permutations of the rows.
    progress : callable, optional
        Called once per step (e.g. a progress bar's ``update``).

    Returns
    -------
    theta : tensor (C, D)
        The end points.
    search : MinibatchModeSearch
    """
    beta1, beta2, tiny = 0.9, 0.999, 1e-8
    n, size = int(target.n_data), int(target.batch_size)
    n_batches = -(-n // size)  # ceil(N / |B|) batches of nearly equal size, none above |B|
    rng = np.random.default_rng(seed)
    theta = position.detach().clone()
    C = theta.shape[0]
    m, v = torch.zeros_like(theta), torch.zeros_like(theta)
    active = torch.ones(C, dtype=torch.bool, device=theta.device)
    best = np.full(C, np.inf)
    stale = np.zeros(C, dtype=np.int64)
    steps = np.zeros(C, dtype=np.int64)
    curve, t = [], 0
    while t < max_steps and bool(active.any()):
        perm = rng.permutation(n)
        total = torch.zeros(C, dtype=torch.float64, device=theta.device)
        seen = 0
        for rows in np.array_split(perm, n_batches):
            if t >= max_steps:
                break
            rows = np.sort(rows)
            value, grad = target.batch_value_and_grad(theta, rows)
            total += value.detach().double() * (-len(rows) / n)
            seen += len(rows)
            t += 1
            grad = grad.mul_(-1.0 / n)  # the per-datum potential's gradient
            m.mul_(beta1).add_(grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = lr * math.sqrt(1 - beta2**t) / (1 - beta1**t)
            proposal = theta - step * m / (v.sqrt() + tiny)
            ok = torch.isfinite(proposal).all(-1) & active
            theta = torch.where(ok[:, None], proposal, theta)
            steps += active.cpu().numpy()
            if progress is not None:
                progress()
        loss = (total / max(seen, 1)).cpu().numpy()
        curve.append(loss)
        if seen < n:  # an epoch cut by the budget says nothing about convergence
            break
        now = active.cpu().numpy()
        stale = np.where(now, np.where(loss > best - tol, stale + 1, 0), stale)
        best = np.where(now, np.minimum(best, loss), best)
        active &= torch.as_tensor(stale <= n_iter_no_change, device=theta.device)
    search = MinibatchModeSearch(
        n_steps=t,
        n_epochs=len(curve),
        loss_curve=np.array(curve).reshape(len(curve), C),
        converged=~active.cpu().numpy(),
        steps_per_chain=steps,
    )
    return theta, search
