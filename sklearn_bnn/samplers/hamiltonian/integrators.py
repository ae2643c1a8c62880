"""Integrators of Hamiltonian dynamics.

An integrator is called as ``integrator(target, state, momentum, step_size, n_steps, inv_mass,
generator)`` and returns ``(state, momentum, n_grad)``: the end point with its cached log density
and gradient, the end momentum, and the gradient evaluations spent (in full-data gradients: one
subset gradient of a split target counts 1/M). ``step_size`` is (C,); ``inv_mass`` is a
metric object of :mod:`.geometry.euclidean` or a tensor (D,) or (C, D), the diagonal of M^-1
(see :func:`~sklearn_bnn.samplers.as_metric`). Log densities are maximised, so the force is
+grad log p = -grad U.

Every scheme is composed of the two shared steps, :func:`kick` (momentum, by a force) and
:func:`drift` (position, by the metric's velocity M^-1 p); NUTS's leaves and constrained HMC's
reflecting leapfrog use the same two.

The split integrators (Cobb & Jalaian 2021, §3.2, §4) take a
:class:`~sklearn_bnn._split.SplitTarget` and move the momentum with one subset's force -grad U_m at
a time, U_m = -log p(w)/M - l_m(w). Their end state carries the full-data log density and gradient
(summed over subsets), so the Metropolis-Hastings test uses the exact full-data energy. A subset's
gradient is computed once per position: kicks by the same subset at the same position (the two U_M
half kicks in the middle of a symmetric step, the U_1 kicks that end one step and start the next)
share it. Subset gradients per step for M subsets: naive M, randomised 2M, symmetric 2(M - 1) (M >=
2); per trajectory of L steps: LM, 2LM + M - 1 and 2L(M - 1) + M.
"""

from __future__ import annotations

import math

import torch

from ..._utils import host_reads_are_free
from .._base import State
from ..geometry.euclidean import as_metric

__all__ = [
    "INTEGRATORS",
    "drift",
    "kick",
    "leapfrog",
    "naive_split",
    "randomised_split",
    "resolve_integrator",
    "symmetric_split",
]


def kick(momentum: torch.Tensor, grad: torch.Tensor, eps: torch.Tensor, *, fused=False, out=None):
    """The momentum step p + eps grad, per chain.

    Parameters
    ----------
    momentum, grad : tensor (C, D)
        The momentum and the force (the gradient of the log density, or of a part of it).
    eps : tensor (C,) or (C, 1)
        The (signed, possibly fractional) step of each chain; a loop that reuses one step may
        pass it as (C, 1) once and for all.
    fused : bool, default=False
        One multiply-add (:func:`torch.addcmul`, rounded once, no temporary) instead of a
        product then a sum. Both are the same step; they round differently, and each sampler
        keeps the form its draws have always been computed with.
    out : tensor (C, D), optional
        Where to write the result (``momentum`` itself for an update in place).

    Returns
    -------
    tensor (C, D)
    """
    if eps.ndim == 1:
        eps = eps[:, None]
    if fused:
        return torch.addcmul(momentum, eps, grad, out=out)
    return torch.add(momentum, eps * grad, out=out)


def drift(
    position: torch.Tensor,
    momentum: torch.Tensor,
    eps: torch.Tensor,
    metric,
    *,
    fused=False,
    out=None,
):
    """The position step w + eps M^-1 p, per chain, with M^-1 p the ``metric``'s velocity.

    Parameters
    ----------
    position, momentum : tensor (C, D)
    eps : tensor (C,) or (C, 1)
    metric : EuclideanMetric
        See :mod:`.geometry.euclidean` (a tensor must first go through ``as_metric``).
    fused : bool, default=False
        As in :func:`kick`; with a diagonal metric, w + (eps M^-1) * p.
    out : tensor (C, D), optional
        Where to write the result (``position`` itself for an update in place).

    Returns
    -------
    tensor (C, D)
    """
    if eps.ndim == 1:
        eps = eps[:, None]
    if fused:
        factor = metric.step_factor(eps)  # a diagonal metric folds eps M^-1 into one factor
        if factor is not None:
            return torch.addcmul(position, factor, momentum, out=out)
        return torch.addcmul(position, eps, metric.velocity(momentum), out=out)
    return torch.add(position, eps * metric.velocity(momentum), out=out)


def leapfrog(
    target,
    state: State,
    momentum: torch.Tensor,
    step_size: torch.Tensor,
    n_steps: int,
    inv_mass,
    generator: torch.Generator | None = None,
):
    """Störmer-Verlet leapfrog, ``n_steps`` steps (Neal 2011, §2.3; Cobb & Jalaian 2021, eq. 4).

    p <- p + (eps/2) grad log p(w); w <- w + eps M^-1 p; p <- p + (eps/2) grad log p(w).
    Consecutive half momentum steps are fused, so each step costs exactly one gradient, and the
    gradient at the start comes from the cached ``state``.

    No step reads a value on the host, so the ``n_steps`` steps queue on a GPU without waiting.
    A chain that leaves the finite region (a divergence) carries on to a non-finite end point,
    which the caller's Metropolis test rejects and counts (:func:`~.hmc.metropolis_hastings`);
    the steps past it are computed, and counted, all the same. A device flag that froze the
    trajectory there cost 7 of the 41 kernels of a replayed step on a GPU for an end point that
    is rejected either way. On the CPU, where reading a value costs nothing,
    :func:`_leapfrog_on_host` takes the same steps with fewer operations and stops a trajectory
    once every chain has diverged (:func:`~sklearn_bnn._utils.host_reads_are_free`).
    """
    metric = as_metric(inv_mass)
    if host_reads_are_free(state.position):
        return _leapfrog_on_host(target, state, momentum, step_size, n_steps, metric)
    step = step_size[:, None]
    half = 0.5 * step
    q = state.position
    p = kick(momentum, state.grad, half)
    log_prob, grad = state.log_prob, state.grad
    gradient = gradient_only(target)
    for i in range(n_steps):
        q = drift(q, p, step, metric)
        if i < n_steps - 1:
            grad = gradient(q)
            p = kick(p, grad, step)
        else:
            log_prob, grad = target.value_and_grad(q)
            p = kick(p, grad, half)
    return State(q, log_prob, grad), p, n_steps


def gradient_only(target):
    """The function ``theta -> grad log p(theta)`` of ``target``: its ``log_prob_grad``
    where it has one (the value is not computed: :meth:`~sklearn_bnn.targets.Target.log_prob_grad`),
    else the gradient of its ``value_and_grad``. The inner steps of a trajectory on a GPU use
    it: only the last step's log density is read."""
    own = getattr(target, "log_prob_grad", None)
    if own is not None:
        return own
    return lambda theta: target.value_and_grad(theta)[1]


def _leapfrog_on_host(target, state, momentum, step_size, n_steps: int, metric):
    """:func:`leapfrog` on the CPU, with as few operations per step as it allows.

    There a small network's transition costs its per-step operations. The drift is one fused
    multiply-add by the step times the inverse mass, computed once per trajectory; the kick one
    multiply-add in place; a trajectory in which every chain's log density is non-finite stops at
    that step (a host read, free on the CPU), where :func:`leapfrog` runs on to a non-finite end:
    both are rejected. The fused operations round once where :func:`leapfrog` rounds twice. As
    there, an inner step of a target with ``log_prob_grad`` takes the gradient alone; its log
    density is computed only where the gradient is not finite, to decide the stop."""
    step = step_size[:, None]
    half = 0.5 * step
    factor = metric.step_factor(step)  # eps M^-1, once (None for a dense metric)
    q, log_prob, grad = state.position, state.log_prob, state.grad
    p = torch.addcmul(momentum, half, grad)
    gradient = getattr(target, "log_prob_grad", None)
    for i in range(n_steps):
        if factor is not None:
            q = torch.addcmul(q, factor, p)
        else:
            q = torch.addcmul(q, step, metric.velocity(p))
        last = i == n_steps - 1
        if gradient is None or last:
            log_prob, grad = target.value_and_grad(q)
            diverged = not _any_finite(log_prob)
        else:
            # the gradient alone (the value is 10 % of a one-chain gradient on digits); a
            # non-finite one is where the log density may be too: it is computed to tell
            grad = gradient(q)
            diverged = not _any_finite(grad.sum(-1))
            if diverged:
                log_prob = target.value_and_grad(q)[0]
                diverged = not _any_finite(log_prob)
        p.addcmul_(half if last else step, grad)
        if diverged:
            break
    return State(q, log_prob, grad), p, n_steps


def _any_finite(log_prob: torch.Tensor) -> bool:
    """Whether any chain's log density (C,) is finite: one chain reads its value (a tenth of
    the four operations of ``isfinite().any()`` on a CPU), several test on the device."""
    if log_prob.numel() == 1:
        return math.isfinite(log_prob.item())
    return bool(torch.isfinite(log_prob).any())


def naive_split(
    target,
    state: State,
    momentum: torch.Tensor,
    step_size: torch.Tensor,
    n_steps: int,
    inv_mass,
    generator: torch.Generator | None = None,
):
    """Naive split leapfrog (nested leapfrog, Cobb & Jalaian 2021, eq. 8).

    Half kicks by U_1, ..., U_M, a full position step, half kicks by U_M, ..., U_1. The half kicks
    of one sequence all act at the same position and add up to the full-data force, so the scheme
    is :func:`leapfrog` with the gradient accumulated subset by subset (M subset gradients a step):
    its trajectory is full leapfrog's up to floating-point rounding.
    """
    return leapfrog(target, state, momentum, step_size, n_steps, inv_mass, generator)


def randomised_split(
    target,
    state: State,
    momentum: torch.Tensor,
    step_size: torch.Tensor,
    n_steps: int,
    inv_mass,
    generator: torch.Generator | None = None,
):
    """Randomised split leapfrog (Neal 2011, §5.1; Cobb & Jalaian 2021, eq. 7).

    For each subset m in a random order: p += (eps/2) grad(-U_m); w += (eps/M) M^-1 p;
    p += (eps/2) grad(-U_m). The order is drawn once per trajectory from ``generator`` (shared by
    the chains); a reversed order is as likely as the order itself, which makes the transition
    reversible in distribution. 2M subset gradients a step.
    """
    if generator is None:
        raise ValueError("randomised_split draws the order of the subsets: pass a generator.")
    n_splits = target.n_splits
    order = torch.randperm(n_splits, generator=generator, device=generator.device).tolist()
    half = 0.5 * step_size[:, None]
    path = _SplitPath(target, state.position, momentum, as_metric(inv_mass))
    sub_step = step_size[:, None] / n_splits
    for _ in range(n_steps):
        for m in order:
            path.kick(m, half)
            path.drift(sub_step)
            path.kick(m, half)
    return path.end_state(), path.momentum, path.n_evals / n_splits


def symmetric_split(
    target,
    state: State,
    momentum: torch.Tensor,
    step_size: torch.Tensor,
    n_steps: int,
    inv_mass,
    generator: torch.Generator | None = None,
):
    """Novel symmetric split leapfrog (Cobb & Jalaian 2021, §4, Algorithm 1, eq. 9-10).

    With D = 2 (M - 1), each step runs forward over m = 1..M: p += (eps/2) grad(-U_m), then for
    m < M, w += (eps/D) M^-1 p; and backward over m = M..1: p += (eps/2) grad(-U_m), then for
    m > 1, w += (eps/D) M^-1 p. The composition is symmetric, hence reversible (negating the
    momentum retraces the trajectory) and second order. The two U_M kicks in the middle share one
    gradient and so do the U_1 kicks between steps: 2 (M - 1) subset gradients a step. With one
    subset (D = 0, no position step in Algorithm 1) the only symmetric splitting is the plain
    leapfrog U/2, K, U/2 (Cobb & Jalaian 2021, eq. 3), which is used.
    """
    n_splits = target.n_splits
    if n_splits == 1:
        return leapfrog(target, state, momentum, step_size, n_steps, inv_mass, generator)
    half = 0.5 * step_size[:, None]
    sub_step = step_size[:, None] / (2 * (n_splits - 1))
    path = _SplitPath(target, state.position, momentum, as_metric(inv_mass))
    for _ in range(n_steps):
        for m in range(n_splits):
            path.kick(m, half)
            if m < n_splits - 1:
                path.drift(sub_step)
        for m in reversed(range(n_splits)):
            path.kick(m, half)
            if m > 0:
                path.drift(sub_step)
    return path.end_state(), path.momentum, path.n_evals / n_splits


class _SplitPath:
    """Position and momentum along a split trajectory, with the subset gradients known there.

    Each subset's gradient is computed at most once per position, so kicks by the same subset
    at the same position share it. Subsets report their log-likelihood beside the gradient; the
    prior's value enters once, in :meth:`end_state`.
    """

    def __init__(self, target, position: torch.Tensor, momentum: torch.Tensor, metric):
        self.target = target
        self.metric = metric
        # Private copies, updated in place: no allocation per kick.
        self.position = position.clone()
        self.momentum = momentum.clone()
        self.n_evals = 0
        self._known: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _log_lik_and_grad(self, m: int):
        known = self._known.get(m)
        if known is None:
            known = self._known[m] = self.target.subset_log_likelihood_and_grad(self.position, m)
            self.n_evals += 1
        return known

    def kick(self, m: int, half_step: torch.Tensor) -> None:
        """p <- p + half_step * grad(-U_m)(w), ``half_step`` (C, 1)."""
        grad = self._log_lik_and_grad(m)[1]
        kick(self.momentum, grad, half_step, fused=True, out=self.momentum)

    def drift(self, step: torch.Tensor) -> None:
        """w <- w + step * M^-1 p, ``step`` (C, 1)."""
        drift(self.position, self.momentum, step, self.metric, fused=True, out=self.position)
        self._known.clear()

    def end_state(self) -> State:
        """The current position with the full-data log density and gradient (all subsets)."""
        parts = [self._log_lik_and_grad(m) for m in range(self.target.n_splits)]
        value, grad = self.target.log_density_from_subsets(self.position, *zip(*parts, strict=True))
        return State(self.position, value, grad)


INTEGRATORS = {
    "leapfrog": leapfrog,
    "naive": naive_split,
    "randomised": randomised_split,
    "symmetric": symmetric_split,
}


def resolve_integrator(integrator):
    """The integrator function named by ``integrator`` (a key of :data:`INTEGRATORS`), or
    ``integrator`` itself when it is a callable with the integrator interface."""
    if callable(integrator):
        return integrator
    if integrator not in INTEGRATORS:
        raise ValueError(
            f"integrator must be one of {sorted(INTEGRATORS)} or a callable, got {integrator!r}."
        )
    return INTEGRATORS[integrator]
