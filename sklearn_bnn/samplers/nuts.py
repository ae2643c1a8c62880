"""The No-U-Turn sampler: multinomial NUTS with the generalized no-U-turn criterion.

Hoffman & Gelman (2014) grow a trajectory by repeated doubling until it starts to turn back on
itself; Betancourt (2017, "A Conceptual Introduction to Hamiltonian Monte Carlo", §4.2 and
Appendix A) replaces the slice variable by multinomial sampling of the trajectory's states with
weights exp(-H), and the original criterion by the generalized one: a (sub)trajectory with summed
momentum rho and end velocities M^-1 p_- and M^-1 p_+ keeps growing while both
rho . M^-1 p_- > 0 and rho . M^-1 p_+ > 0 (REFERENCE §1).

The transition follows the structure Stan uses:

- each doubling builds a new subtree of 2^j leapfrog steps in a random direction, from the end
  of the trajectory on that side;
- inside a subtree the proposal is drawn multinomially, with probability proportional to
  exp(-H) over its states; a subtree that diverges (energy error above the threshold, or not
  finite) or that turns back inside any of its sub-subtrees is rejected as a whole and ends the
  transition;
- a valid subtree's proposal replaces the current sample with the biased progressive probability
  min(1, w_new / w_old), w the summed weights (Betancourt 2017, Appendix A.3.2);
- the merged trajectory, and every merged pair of subtrees, is checked with the generalized
  criterion, plus the two extra checks across the pair that Stan adds (each half extended by the
  nearest state of the other half), which catch U-turns the end-to-end check misses;
- the trajectory stops after ``max_tree_depth`` doublings (at most 2^depth - 1 leapfrog steps).

Chains run in lockstep: all chains double together, each in its own random direction, and one
batched gradient evaluation per leapfrog step serves every chain still growing; a chain that has
finished is masked out and left out of the gradient evaluation. A subtree is built without
recursion: leaves are visited in order, and the checks of every subtree that a leaf completes are
made at that leaf, keeping per level only the momentum and velocity of the first and last leaves
and a running sum of momenta. The multinomial draw within a subtree is the leaf maximising
log w + Gumbel noise (the Gumbel-max trick), followed as a running maximum, so that a leaf's state
is copied only when it becomes the new maximum.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._utils import check_scalar_param
from ._base import Info, Sampler, State, kinetic_energy, sample_momentum
from ._registry import register_sampler
from .geometry.euclidean import IdentityMetric
from .hmc import HMC, HMCKernel, check_metric
from .integrators import drift, kick, resolve_integrator

__all__ = ["NUTS", "NUTSKernel"]


class _Point(NamedTuple):
    """A point of phase space with its cached log density and gradient, per chain."""

    position: torch.Tensor  # (C, D)
    momentum: torch.Tensor  # (C, D)
    log_prob: torch.Tensor  # (C,)
    grad: torch.Tensor  # (C, D)


class _Sample(NamedTuple):
    """A candidate for the next state, with its log weight H0 - H."""

    position: torch.Tensor  # (C, D)
    log_prob: torch.Tensor  # (C,)
    grad: torch.Tensor  # (C, D)
    log_weight: torch.Tensor  # (C,)


class _Subtree(NamedTuple):
    """One doubling's new subtree, per chain (meaningful where ``valid``)."""

    valid: torch.Tensor  # (C,) built to the end: no divergence, no U-turn inside
    last: _Point  # its far end, where the next doubling on this side starts
    last_sharp: torch.Tensor  # (C, D) M^-1 p at the far end
    first_momentum: torch.Tensor  # (C, D) p at the leaf next to the old trajectory
    first_sharp: torch.Tensor  # (C, D) M^-1 p there
    rho: torch.Tensor  # (C, D) summed momenta of its leaves
    log_weight: torch.Tensor  # (C,) log of the summed exp(H0 - H) over its leaves
    proposal: _Sample  # its multinomial draw
    sum_accept: torch.Tensor  # (C,) summed min(1, exp(H0 - H)) over the leaves computed
    n_steps: torch.Tensor  # (C,) leapfrog steps taken by each chain
    divergent: torch.Tensor  # (C,)
    n_grad: int  # gradient evaluations (batched calls)


class _Trajectory:
    """A transition's growing trajectory, per chain: its two ends with their velocities, the
    summed momentum, the current sample and its total log weight, and the statistics so far."""

    def __init__(self, state: State, p0: torch.Tensor, metric):
        q = state.position
        C = q.shape[0]
        start = _Point(q, p0, state.log_prob, state.grad)
        self.energy0 = -state.log_prob + kinetic_energy(p0, metric)
        self.left = self.right = start  # the trajectory's backward and forward ends
        self.left_sharp = self.right_sharp = metric.velocity(p0)
        self.rho = p0
        self.log_weight = torch.zeros_like(self.energy0)  # the start's weight exp(H0 - H0) = 1
        self.sample = _Sample(q, state.log_prob, state.grad, self.log_weight)
        self.moved = torch.zeros(C, dtype=torch.bool, device=q.device)
        self.divergent = torch.zeros_like(self.moved)
        self.active = torch.ones_like(self.moved)
        self.depth = torch.zeros(C, dtype=torch.long, device=q.device)
        self.n_steps = torch.zeros_like(self.depth)
        self.sum_accept = torch.zeros_like(self.energy0)
        self.n_grad = 0


def _select(mask: torch.Tensor, new, old):
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


def _select_chains(target, idx: torch.Tensor):
    """The density of the chains ``idx`` only: ``target.select_chains(idx)`` for a target that
    holds per-chain values (the conditional of a Gibbs block), else ``target`` itself."""
    select = getattr(target, "select_chains", None)
    return target if select is None else select(idx)


def _merged_keeps_going(
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


@register_sampler("nuts")
class NUTS(Sampler):
    """The No-U-Turn sampler (multinomial, generalized criterion), as a sampler object.

    Parameters
    ----------
    max_tree_depth : int, default=10
        Most doublings per transition (at most ``2**max_tree_depth - 1`` leapfrog steps).
    divergence_threshold : float, default=1000
        Energy error above which a leaf counts as divergent (as Stan).
    integrator : None, str or callable, default=None
        The one-step integrator of each leaf: None for the fused leapfrog, or a name of
        :data:`~sklearn_bnn.samplers.INTEGRATORS` (a split scheme on a split target).
    metric : DiagonalMetric or DenseMetric, default=None
        A fixed Euclidean metric (see :class:`~sklearn_bnn.samplers.HMC`): it wins over the
        loop's mass adaptation, which is skipped for this sampler. None uses the loop's
        diagonal inverse mass (adapted, or identity).

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import NUTS, sample
    >>> result = sample(lambda x: -0.5 * (x**2).sum(), torch.zeros(3), NUTS(max_tree_depth=6),
    ...                 n_warmup=100, n_draws=100, n_chains=2, random_state=0)
    >>> sorted(result.stats)
    ['accept_prob', 'diverging', 'energy_error', 'tree_depth']
    """

    def __init__(
        self, max_tree_depth=10, divergence_threshold=1000.0, integrator=None, metric=None
    ):
        self.max_tree_depth = max_tree_depth
        self.divergence_threshold = divergence_threshold
        self.integrator = integrator
        self.metric = metric

    def check_target(self, target) -> None:
        check_scalar_param(self.max_tree_depth, "max_tree_depth", kind="int", low=1, high=30)
        check_scalar_param(self.divergence_threshold, "divergence_threshold", low=0)
        check_metric(self.metric)
        if self.integrator is not None:
            HMC(integrator=self.integrator).check_target(target)

    def build(self, target) -> NUTSKernel:
        self.check_target(target)
        return NUTSKernel(
            target,
            max_tree_depth=self.max_tree_depth,
            divergence_threshold=self.divergence_threshold,
            integrator=None if self.integrator is None else resolve_integrator(self.integrator),
            metric=self.metric,
        )


class NUTSKernel(HMCKernel):
    """The No-U-Turn transition kernel, bound to a target (built by :class:`NUTS`).

    Same protocol as :class:`~sklearn_bnn.samplers.HMCKernel` (``init``, ``step``, ``target``); the
    number of leapfrog steps is chosen on the fly by tree doubling instead of being fixed.

    Parameters
    ----------
    target : Target
        Provides ``value_and_grad(theta (C, D)) -> ((C,), (C, D))``.
    step_size : float
        Integration step size (overridable per call, e.g. during adaptation).
    max_tree_depth : int
        Most doublings per transition (at most ``2**max_tree_depth - 1`` leapfrog steps).
    inv_mass : tensor (D,) or (C, D), or metric, optional
        Default inverse mass (a diagonal of M^-1, or a metric); identity by default.
    integrator : callable, optional
        A reversible, volume-preserving integrator with the interface of :mod:`.integrators`,
        called for one step at a time. By default the leapfrog step is done here, fused
        (the same arithmetic as :func:`~sklearn_bnn.samplers.leapfrog`, fewer tensor operations).
    divergence_threshold : float
        Energy error above which a leaf counts as divergent (1000, as Stan).
    metric : EuclideanMetric, optional
        A fixed metric; the ``inv_mass`` arguments are then ignored (see
        :class:`~sklearn_bnn.samplers.HMCKernel`).

    Notes
    -----
    ``step`` returns an :class:`Info` with, per chain: ``accept_prob`` the mean of
    min(1, exp(H0 - H)) over every leaf computed in the transition (the statistic dual averaging
    targets); ``accepted`` whether the chain moved; ``energy_error`` H at the new state minus H at
    the start; ``divergent``; ``step_size``; ``tree_depth`` the number of doublings kept (Stan's
    ``treedepth__``). Its ``n_grad`` is the number of batched gradient evaluations, i.e. the
    largest number of leapfrog steps any chain took; a chain's own count is at most that.

    Each leapfrog step costs exactly one gradient: value and gradient are cached at every point.

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import NUTSKernel
    >>> class Normal:
    ...     def value_and_grad(self, theta):
    ...         return -0.5 * (theta**2).sum(-1), -theta
    >>> kernel = NUTSKernel(Normal(), step_size=0.5)
    >>> state = kernel.init(torch.zeros(3, 2))
    >>> state, info = kernel.step(state, torch.Generator().manual_seed(0))
    >>> state.position.shape, info.extra["tree_depth"].shape
    (torch.Size([3, 2]), torch.Size([3]))
    """

    def __init__(
        self,
        target,
        step_size: float = 0.01,
        max_tree_depth: int = 10,
        inv_mass=None,
        integrator=None,
        divergence_threshold: float = 1000.0,
        metric=None,
    ):
        check_scalar_param(max_tree_depth, "max_tree_depth", kind="int", low=1, high=30)
        super().__init__(
            target,
            step_size=step_size,
            n_steps=None,
            inv_mass=inv_mass,
            integrator=integrator,
            divergence_threshold=divergence_threshold,
            metric=metric,
        )
        self.max_tree_depth = max_tree_depth

    def describe(self, stats: dict) -> dict:
        """Mean tree depth per chain, and the fraction of draws at ``max_tree_depth``."""
        if "tree_depth" not in stats:
            return {}
        depth = stats["tree_depth"].double()
        return {
            "mean_tree_depth": depth.mean(1).numpy(),
            "fraction_at_max_tree_depth": float((depth >= self.max_tree_depth).double().mean()),
        }

    def acceptance(self, info: Info) -> torch.Tensor:
        """The tree's mean Metropolis acceptance statistic: NUTS almost always moves."""
        return info.accept_prob.double()

    def step(self, state: State, generator: torch.Generator, step_size=None, inv_mass=None):
        """One NUTS transition for every chain.

        Parameters
        ----------
        state : State
        generator : torch.Generator
            The only source of randomness.
        step_size : float or tensor (C,), optional
            Overrides the kernel's step size for this transition.
        inv_mass : tensor (D,) or (C, D), or metric, optional
            Overrides the kernel's inverse mass for this transition (ignored when the kernel
            has a fixed ``metric``).

        Returns
        -------
        state : State
        info : Info
        """
        eps = self._step_size(state, step_size)
        metric = self._metric(state, inv_mass)
        if metric.is_unit:  # velocities are the momenta: skip the products
            metric = IdentityMetric()
        q = state.position
        p0 = sample_momentum(q.shape, metric, generator, dtype=q.dtype, device=q.device)
        tree = _Trajectory(state, p0, metric)
        for j in range(self.max_tree_depth):
            self._double(tree, j, eps, metric, generator)
            if not tree.active.any():
                break
        info = Info(
            accept_prob=tree.sum_accept / tree.n_steps.clamp(min=1).to(tree.sum_accept.dtype),
            accepted=tree.moved,
            energy_error=-tree.sample.log_weight,
            divergent=tree.divergent,
            step_size=eps,
            n_grad=tree.n_grad,
            extra={"tree_depth": tree.depth},
        )
        sample = tree.sample
        return State(sample.position, sample.log_prob, sample.grad), info

    def _double(self, tree: _Trajectory, j: int, eps, metric, generator) -> None:
        """Doubling ``j``: a subtree of 2**j leaves on a random side of every active chain,
        taken by biased progressive sampling, and the no-U-turn check of the merged tree."""
        q = tree.sample.position
        C = q.shape[0]
        # one row for the direction, one for the top-level choice, one per leaf
        u = torch.rand((2 + (1 << j), C), generator=generator, dtype=q.dtype, device=q.device)
        forward = u[0] > 0.5
        near = _select(forward, tree.right, tree.left)
        fw = forward[:, None]
        near_sharp = torch.where(fw, tree.right_sharp, tree.left_sharp)
        far_sharp = torch.where(fw, tree.left_sharp, tree.right_sharp)
        direction = torch.where(forward, 1.0, -1.0).to(q.dtype)
        sub = self._build_subtree(
            j, near, eps * direction, metric, tree.energy0, tree.active, u[2:], generator
        )
        tree.n_grad += sub.n_grad
        tree.n_steps += sub.n_steps
        tree.sum_accept += sub.sum_accept
        tree.divergent |= sub.divergent
        valid = sub.valid
        tree.depth += valid.long()

        # biased progressive sampling between the old trajectory and the new subtree
        log_weight = tree.log_weight
        take = valid & (
            (sub.log_weight > log_weight) | (u[1] < torch.exp(sub.log_weight - log_weight))
        )
        tree.sample = _select(take, sub.proposal, tree.sample)
        tree.moved |= take
        tree.log_weight = torch.where(
            valid, torch.logaddexp(log_weight, sub.log_weight), log_weight
        )

        keeps_going = _merged_keeps_going(
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
        tree.right = _select(grow_right, sub.last, tree.right)
        tree.left = _select(grow_left, sub.last, tree.left)
        tree.right_sharp = torch.where(grow_right[:, None], sub.last_sharp, tree.right_sharp)
        tree.left_sharp = torch.where(grow_left[:, None], sub.last_sharp, tree.left_sharp)
        tree.active = valid & keeps_going

    def _build_subtree(
        self, depth, start, signed_eps, metric, energy0, alive, u, generator
    ) -> _Subtree:
        """Build 2**depth leaves from ``start`` for the ``alive`` chains, leaf by leaf.

        Leaf n completes the subtrees of size 2^k for k up to the number of trailing ones of n;
        their criteria are checked there. Per level k the first leaf of the open subtree and the
        last leaf of the previous completed one are kept (momentum and velocity), and the running
        momentum sum ``csum`` before the open subtree began, so any subtree's rho is a
        difference of running sums. A chain that diverges or turns back stops at once: its
        subtree is invalid, so nothing else about it matters except the per-leaf statistics,
        kept with the mask of the chains alive at each leaf.
        """
        n_leaves = 1 << depth
        step = signed_eps[:, None]  # (C, 1) once, for the kicks and drifts of every leaf
        half = 0.5 * step
        gumbel = (-torch.log(-torch.log1p(-u))).unbind(0)  # Gumbel noise per leaf and chain
        point = start
        csum = torch.zeros_like(start.momentum)
        csum_before = [csum] * (depth + 1)
        first = [None] * (depth + 1)  # (p, M^-1 p) of the open level-k subtree's first leaf
        last = [None] * depth  # (p, M^-1 p) of the last completed level-k subtree's last leaf
        best = torch.full_like(energy0, -math.inf)
        proposal = _Sample(start.position, start.log_prob, start.grad, best)
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
            point, cost = self._advance(point, half, step, signed_eps, metric, idx, generator)
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
            proposal = _select(
                take, _Sample(point.position, point.log_prob, point.grad, log_w), proposal
            )

            k = 0
            while k <= depth and n % (1 << k) == 0:  # subtrees starting at this leaf
                first[k], csum_before[k] = (p, sharp), csum
                k += 1
            csum = csum + p
            alive = alive & (log_w >= -self.divergence_threshold)
            k = 1
            while (n + 1) % (1 << k) == 0:  # subtrees of size 2^k ending at this leaf
                alive &= _merged_keeps_going(
                    first[k][1],
                    *last[k - 1],
                    *first[k - 1],
                    sharp,
                    csum_before[k - 1] - csum_before[k],
                    csum - csum_before[k - 1],
                )
                k += 1
            for level in range(min(k, depth)):
                last[level] = (p, sharp)

        leaf_log_w, leaf_alive = leaf_log_w[:n_built], leaf_alive[:n_built]
        return _Subtree(
            valid=alive,
            last=point,
            last_sharp=sharp,
            first_momentum=first[depth][0],
            first_sharp=first[depth][1],
            rho=csum,
            log_weight=torch.logsumexp(leaf_log_w, 0),
            proposal=proposal,
            sum_accept=(leaf_log_w.clamp(max=0.0).exp() * leaf_alive).sum(0),
            n_steps=leaf_alive.sum(0),
            divergent=(leaf_alive & (leaf_log_w < -self.divergence_threshold)).any(0),
            n_grad=n_grad,
        )

    def _advance(self, point: _Point, half, step, signed_eps, metric, idx, generator):
        """One integration step for the chains ``idx`` (all when None; the others keep their
        point). Returns the new point and the gradient evaluations spent."""
        target = self.target
        if idx is not None:
            point, full = _Point(*(x[idx] for x in point)), point
            half, step, signed_eps = half[idx], step[idx], signed_eps[idx]
            metric = metric.select(idx)
            target = _select_chains(target, idx)
        if self.integrator is None:  # leapfrog (seeds/000 eq. 4), one gradient, fused steps
            p = kick(point.momentum, point.grad, half, fused=True)
            q = drift(point.position, p, step, metric, fused=True)
            log_prob, grad = target.value_and_grad(q)
            new, cost = _Point(q, kick(p, grad, half, fused=True), log_prob, grad), 1
        else:
            end, momentum, cost = self.integrator(
                target,
                State(point.position, point.log_prob, point.grad),
                point.momentum,
                signed_eps,
                1,
                metric,
                generator,
            )
            new = _Point(end.position, momentum, end.log_prob, end.grad)
        if idx is None:
            return new, cost
        return _Point(*(x.index_copy(0, idx, y) for x, y in zip(full, new, strict=True))), cost
