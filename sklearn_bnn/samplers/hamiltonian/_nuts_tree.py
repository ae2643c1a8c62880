"""NUTS's trajectory: tree doubling, subtree building and the no-U-turn checks.

:class:`~sklearn_bnn.samplers.NUTSKernel` owns the integration of one leaf (its integrator, its
target); this module organises the leaves into a trajectory (see :mod:`.nuts` for the
algorithm). Chains run in lockstep: all chains double together, each in its own random
direction, and one batched gradient evaluation per leapfrog step serves every chain still
growing; a chain that has finished is masked out and left out of the gradient evaluation. A
subtree is built without recursion: leaves are visited in order, and the checks of every subtree
that a leaf completes are made at that leaf, keeping per level only the momentum and velocity of
the first and last leaves and a running sum of momenta. The multinomial draw within a subtree is
the leaf maximising log w + Gumbel noise (the Gumbel-max trick), followed as a running maximum,
so that a leaf's state is copied only when it becomes the new maximum.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._base import State, kinetic_energy

__all__ = ["Point", "Trajectory", "build_subtree", "double"]


class Point(NamedTuple):
    """A point of phase space with its cached log density and gradient, per chain."""

    position: torch.Tensor  # (C, D)
    momentum: torch.Tensor  # (C, D)
    log_prob: torch.Tensor  # (C,)
    grad: torch.Tensor  # (C, D)


class Sample(NamedTuple):
    """A candidate for the next state, with its log weight H0 - H."""

    position: torch.Tensor  # (C, D)
    log_prob: torch.Tensor  # (C,)
    grad: torch.Tensor  # (C, D)
    log_weight: torch.Tensor  # (C,)


class Subtree(NamedTuple):
    """One doubling's new subtree, per chain (meaningful where ``valid``)."""

    valid: torch.Tensor  # (C,) built to the end: no divergence, no U-turn inside
    last: Point  # its far end, where the next doubling on this side starts
    last_sharp: torch.Tensor  # (C, D) M^-1 p at the far end
    first_momentum: torch.Tensor  # (C, D) p at the leaf next to the old trajectory
    first_sharp: torch.Tensor  # (C, D) M^-1 p there
    rho: torch.Tensor  # (C, D) summed momenta of its leaves
    log_weight: torch.Tensor  # (C,) log of the summed exp(H0 - H) over its leaves
    proposal: Sample  # its multinomial draw
    sum_accept: torch.Tensor  # (C,) summed min(1, exp(H0 - H)) over the leaves computed
    n_steps: torch.Tensor  # (C,) leapfrog steps taken by each chain
    divergent: torch.Tensor  # (C,)
    n_grad: int  # gradient evaluations (batched calls)


class Trajectory:
    """A transition's growing trajectory, per chain: its two ends with their velocities, the
    summed momentum, the current sample and its total log weight, and the statistics so far."""

    def __init__(self, state: State, p0: torch.Tensor, metric):
        q = state.position
        C = q.shape[0]
        start = Point(q, p0, state.log_prob, state.grad)
        self.energy0 = -state.log_prob + kinetic_energy(p0, metric)
        self.left = self.right = start  # the trajectory's backward and forward ends
        self.left_sharp = self.right_sharp = metric.velocity(p0)
        self.rho = p0
        self.log_weight = torch.zeros_like(self.energy0)  # the start's weight exp(H0 - H0) = 1
        self.sample = Sample(q, state.log_prob, state.grad, self.log_weight)
        self.moved = torch.zeros(C, dtype=torch.bool, device=q.device)
        self.divergent = torch.zeros_like(self.moved)
        self.active = torch.ones_like(self.moved)
        self.depth = torch.zeros(C, dtype=torch.long, device=q.device)
        self.n_steps = torch.zeros_like(self.depth)
        self.sum_accept = torch.zeros_like(self.energy0)
        self.n_grad = 0


def select(mask: torch.Tensor, new, old):
    """Per chain, ``new`` where ``mask`` else ``old`` (NamedTuples of per-chain tensors).

    No copy is made when all chains, or none, take the new value.
    """
    if mask.all():
        return new
    if not mask.any():
        return old
    return type(new)(
        *(
            torch.where(mask.view(-1, *([1] * (a.ndim - 1))), a, b)
            for a, b in zip(new, old, strict=True)
        )
    )


def merged_keeps_going(
    first_sharp,
    init_last,
    init_last_sharp,
    final_first,
    final_first_sharp,
    last_sharp,
    rho_init,
    rho_final,
):
    """The generalized no-U-turn criterion on a tree made of an initial subtree then a final one.

    A (sub)trajectory with summed momentum rho keeps growing while rho has a positive projection
    on the velocities M^-1 p at both its ends (Betancourt 2017, Appendix A.4.2). The ends of the
    merged tree are ``first`` (of the initial subtree) and ``last`` (of the final one);
    ``init_last`` and ``final_first`` are the two adjacent states where the subtrees meet.
    Besides the check over the whole tree, each subtree extended by the neighbouring state of the
    other is checked too (as Stan does), catching U-turns that the end-to-end check misses.
    Arguments named ``*_sharp`` are velocities M^-1 p, the others momenta or momentum sums.
    """
    rho = rho_init + rho_final
    extended_init, extended_final = rho_init + final_first, rho_final + init_last
    # the six projections of the three checks, as one batched product
    sharps = torch.stack(
        [first_sharp, last_sharp, first_sharp, final_first_sharp, init_last_sharp, last_sharp], -2
    )
    rhos = torch.stack([rho, rho, extended_init, extended_init, extended_final, extended_final], -2)
    return (torch.linalg.vecdot(sharps, rhos) > 0).all(-1)


def double(tree: Trajectory, j: int, eps, metric, generator, advance, divergence_threshold) -> None:
    """Doubling ``j``: a subtree of 2**j leaves on a random side of every active chain,
    taken by biased progressive sampling, and the no-U-turn check of the merged tree.

    ``advance(point, half, step, signed_eps, metric, idx)`` integrates one leaf for the chains
    ``idx`` (all when None) and returns the new point and the gradient evaluations spent.
    """
    q = tree.sample.position
    C = q.shape[0]
    # one row for the direction, one for the top-level choice, one per leaf
    u = torch.rand((2 + (1 << j), C), generator=generator, dtype=q.dtype, device=q.device)
    forward = u[0] > 0.5
    near = select(forward, tree.right, tree.left)
    fw = forward[:, None]
    near_sharp = torch.where(fw, tree.right_sharp, tree.left_sharp)
    far_sharp = torch.where(fw, tree.left_sharp, tree.right_sharp)
    direction = torch.where(forward, 1.0, -1.0).to(q.dtype)
    sub = build_subtree(
        j,
        near,
        eps * direction,
        metric,
        tree.energy0,
        tree.active,
        u[2:],
        advance,
        divergence_threshold,
    )
    tree.n_grad += sub.n_grad
    tree.n_steps += sub.n_steps
    tree.sum_accept += sub.sum_accept
    tree.divergent |= sub.divergent
    valid = sub.valid
    tree.depth += valid.long()

    # biased progressive sampling between the old trajectory and the new subtree
    log_weight = tree.log_weight
    take = valid & ((sub.log_weight > log_weight) | (u[1] < torch.exp(sub.log_weight - log_weight)))
    tree.sample = select(take, sub.proposal, tree.sample)
    tree.moved |= take
    tree.log_weight = torch.where(valid, torch.logaddexp(log_weight, sub.log_weight), log_weight)

    keeps_going = merged_keeps_going(
        far_sharp,
        near.momentum,
        near_sharp,
        sub.first_momentum,
        sub.first_sharp,
        sub.last_sharp,
        tree.rho,
        sub.rho,
    )
    tree.rho = tree.rho + sub.rho
    grow_right, grow_left = valid & forward, valid & ~forward
    tree.right = select(grow_right, sub.last, tree.right)
    tree.left = select(grow_left, sub.last, tree.left)
    tree.right_sharp = torch.where(grow_right[:, None], sub.last_sharp, tree.right_sharp)
    tree.left_sharp = torch.where(grow_left[:, None], sub.last_sharp, tree.left_sharp)
    tree.active = valid & keeps_going


class _Levels:
    """The no-U-turn bookkeeping of a subtree built leaf by leaf.

    Leaf n completes the subtrees of size 2^k for k up to the number of trailing ones of n;
    their criteria are checked there. Per level k the first leaf of the open subtree and the
    last leaf of the previous completed one are kept (momentum and velocity), and the running
    momentum sum ``csum`` before the open subtree began, so any subtree's rho is a difference of
    running sums.
    """

    def __init__(self, depth: int, momentum: torch.Tensor):
        self.depth = depth
        self.csum = torch.zeros_like(momentum)
        self.csum_before = [self.csum] * (depth + 1)
        self.first = [None] * (depth + 1)  # (p, M^-1 p) of the open level-k subtree's first leaf
        self.last = [None] * depth  # (p, M^-1 p) of the last completed level-k subtree's last leaf

    def open(self, n: int, p, sharp) -> None:
        """Leaf ``n`` (momentum ``p``, velocity ``sharp``) starts the subtrees it starts, and
        joins the running momentum sum."""
        first, csum_before, csum = self.first, self.csum_before, self.csum
        k = 0
        while k <= self.depth and n % (1 << k) == 0:  # subtrees starting at this leaf
            first[k], csum_before[k] = (p, sharp), csum
            k += 1
        self.csum = csum + p

    def close(self, n: int, p, sharp, alive: torch.Tensor) -> torch.Tensor:
        """``alive`` (updated in place) and-ed with the criterion of every subtree that leaf
        ``n`` completes; the leaf becomes the last leaf of the levels below."""
        first, last, csum_before, csum = self.first, self.last, self.csum_before, self.csum
        k = 1
        while (n + 1) % (1 << k) == 0:  # subtrees of size 2^k ending at this leaf
            alive &= merged_keeps_going(
                first[k][1],
                *last[k - 1],
                *first[k - 1],
                sharp,
                csum_before[k - 1] - csum_before[k],
                csum - csum_before[k - 1],
            )
            k += 1
        for level in range(min(k, self.depth)):
            last[level] = (p, sharp)
        return alive


def build_subtree(
    depth, start, signed_eps, metric, energy0, alive, u, advance, divergence_threshold
) -> Subtree:
    """Build 2**depth leaves from ``start`` for the ``alive`` chains, leaf by leaf.

    A chain that diverges or turns back (see :class:`_Levels`) stops at once: its subtree is
    invalid, so nothing else about it matters except the per-leaf statistics, kept with the
    mask of the chains alive at each leaf. ``advance`` integrates one leaf (see :func:`double`).
    """
    n_leaves = 1 << depth
    step = signed_eps[:, None]  # (C, 1) once, for the kicks and drifts of every leaf
    half = 0.5 * step
    gumbel = (-torch.log(-torch.log1p(-u))).unbind(0)  # Gumbel noise per leaf and chain
    point = start
    levels = _Levels(depth, start.momentum)
    best = torch.full_like(energy0, -math.inf)
    proposal = Sample(start.position, start.log_prob, start.grad, best)
    leaf_log_w = torch.empty((n_leaves,) + energy0.shape, dtype=energy0.dtype, device=u.device)
    leaf_alive = torch.ones(leaf_log_w.shape, dtype=torch.bool, device=u.device)
    n_grad = n_built = 0
    sharp = None
    for n in range(n_leaves):
        all_alive = bool(alive.all())
        if not all_alive:
            if not alive.any():
                break
            leaf_alive[n] = alive
        idx = None if all_alive else alive.nonzero().squeeze(1)
        point, cost = advance(point, half, step, signed_eps, metric, idx)
        n_grad += cost
        n_built += 1
        p = point.momentum
        sharp = metric.velocity(p)
        # log weight H0 - H of the leaf; a non-finite energy counts as a divergence
        log_w = torch.add(energy0, torch.linalg.vecdot(p, sharp), alpha=-0.5)
        log_w = torch.nan_to_num_(log_w.add_(point.log_prob), nan=-math.inf, posinf=-math.inf)
        leaf_log_w[n] = log_w

        # multinomial draw within the subtree: the running argmax of log w + Gumbel
        key = log_w + gumbel[n]
        take = key > best
        best = torch.fmax(best, key)
        proposal = select(take, Sample(point.position, point.log_prob, point.grad, log_w), proposal)

        levels.open(n, p, sharp)
        alive = alive & (log_w >= -divergence_threshold)
        alive = levels.close(n, p, sharp, alive)

    leaf_log_w, leaf_alive = leaf_log_w[:n_built], leaf_alive[:n_built]
    return Subtree(
        valid=alive,
        last=point,
        last_sharp=sharp,
        first_momentum=levels.first[depth][0],
        first_sharp=levels.first[depth][1],
        rho=levels.csum,
        log_weight=torch.logsumexp(leaf_log_w, 0),
        proposal=proposal,
        sum_accept=(leaf_log_w.clamp(max=0.0).exp() * leaf_alive).sum(0),
        n_steps=leaf_alive.sum(0),
        divergent=(leaf_alive & (leaf_log_w < -divergence_threshold)).any(0),
        n_grad=n_grad,
    )
