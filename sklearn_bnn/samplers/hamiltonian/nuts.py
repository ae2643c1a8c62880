"""The No-U-Turn sampler: multinomial NUTS with the generalized no-U-turn criterion.

Hoffman & Gelman (2014) grow a trajectory by repeated doubling until it starts to turn back on
itself; Betancourt (2017, "A Conceptual Introduction to Hamiltonian Monte Carlo", §4.2 and
Appendix A) replaces the slice variable by multinomial sampling of the trajectory's states with
weights exp(-H), and the original criterion by the generalized one: a (sub)trajectory with summed
momentum rho and end velocities M^-1 p_- and M^-1 p_+ keeps growing while both
rho . M^-1 p_- > 0 and rho . M^-1 p_+ > 0.

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

The trajectory itself (doubling, the leaf-by-leaf building of a subtree with chains in
lockstep, the U-turn checks) is in :mod:`._nuts_tree`; the kernel here integrates the leaves.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from ..._utils import check_scalar_param
from ...targets import capabilities
from .._base import Info, State, sample_momentum, sampler_setting
from .._by_name import register_sampler
from ..geometry.euclidean import IdentityMetric
from ._nuts_tree import Point, Trajectory, double
from ._settings import EuclideanSampler
from .hmc import HMC, HMCKernel, check_metric, integrator_for
from .integrators import drift, kick, resolve_integrator

__all__ = ["NUTS", "NUTSKernel"]


def _select_chains(target, select, idx: torch.Tensor):
    """The density of the chains ``idx`` only: ``select(idx)``, the target's ``select_chains``,
    for a target that holds per-chain values (the conditional of a Gibbs block), else
    ``target`` itself (``select`` None)."""
    return target if select is None else select(idx)


@register_sampler("nuts")
@dataclass(kw_only=True, eq=False, repr=False)
class NUTS(EuclideanSampler):
    """The No-U-Turn sampler (multinomial, generalized criterion), as a sampler object.

    Parameters
    ----------
    max_tree_depth : int, default=10
        Most doublings per transition (at most ``2**max_tree_depth - 1`` leapfrog steps).
    divergence_threshold : float, default=1000
        Energy error above which a leaf counts as divergent (as Stan).
    integrator : None, str or callable, default=None
        The one-step integrator of each leaf: a name of
        :data:`~sklearn_bnn.samplers.INTEGRATORS` (a split scheme on a split target), or None:
        the target's ``default_integrator`` where it has one (a split target's symmetric
        split leapfrog), else the fused leapfrog.
    metric : DiagonalMetric or DenseMetric, default=None
        A fixed Euclidean metric (see :class:`~sklearn_bnn.samplers.HMC`): it wins over the
        loop's mass adaptation, which is skipped for this sampler. None uses the loop's
        diagonal inverse mass (adapted, or identity).
    step_size, target_accept, adapt_mass
        The warmup's settings, as for :class:`~sklearn_bnn.samplers.HMC` (defaults "auto",
        0.8, False); a numeric ``step_size`` is also the built kernel's default step.

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import NUTS, sample
    >>> result = sample(lambda x: -0.5 * (x**2).sum(), torch.zeros(3), NUTS(max_tree_depth=6),
    ...                 n_warmup=100, n_draws=100, n_chains=2, random_state=0)
    >>> sorted(result.stats)
    ['accept_prob', 'divergent', 'energy_error', 'tree_depth']
    """

    max_tree_depth: int = 10
    integrator: object = None
    metric: object = None

    def check_target(self, target) -> None:
        self._check_shared()
        check_scalar_param(self.max_tree_depth, "max_tree_depth", kind="int", low=1, high=30)
        check_metric(self.metric)
        integrator = integrator_for(self.integrator, capabilities(target))
        if integrator is not None:
            HMC(integrator=integrator).check_target(target)

    def build(self, target) -> NUTSKernel:
        """The NUTS kernel of this configuration on ``target``, once the settings are
        checked."""
        self.check_target(target)
        return NUTSKernel(self, target)


def _leaf_integrator(name):
    """The one-step integrator of a leaf: None for the fused leapfrog."""
    return None if name is None else resolve_integrator(name)


class NUTSKernel(HMCKernel):
    """The No-U-Turn transition kernel: a :class:`NUTS` sampler bound to a target.

    Same protocol as :class:`~sklearn_bnn.samplers.HMCKernel` (``init``, ``step``, ``target``),
    and built the same way, ``NUTS(...).build(target)``: ``max_tree_depth``,
    ``divergence_threshold``, ``integrator`` and ``metric`` are the sampler's. The number of
    leapfrog steps is chosen on the fly by tree doubling instead of being fixed.

    Parameters
    ----------
    sampler : NUTS
        The configuration.
    target : Target
        Provides ``value_and_grad(theta (C, D)) -> ((C,), (C, D))``.
    step_size : float or tensor (C,), optional
        The step size of a ``step`` given none: by default the sampler's ``step_size`` when it
        is a number (see :class:`~sklearn_bnn.samplers.HMCKernel`).
    inv_mass : tensor (D,) or (C, D), or metric, optional
        Default inverse mass (a diagonal of M^-1, or a metric); identity by default, ignored
        when the sampler has a fixed ``metric``.

    Attributes
    ----------
    integrator : callable or None
        The one-step integrator of a leaf: the sampler's ``integrator`` (or the target's
        ``default_integrator``) resolved, called for one step at a time; None for the
        leapfrog, done here fused (the same arithmetic as
        :func:`~sklearn_bnn.samplers.leapfrog`, fewer tensor operations).

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
    >>> from sklearn_bnn.samplers import NUTS
    >>> class Normal:
    ...     def value_and_grad(self, theta):
    ...         return -0.5 * (theta**2).sum(-1), -theta
    >>> kernel = NUTS(step_size=0.5).build(Normal())
    >>> state = kernel.init(torch.zeros(3, 2))
    >>> state, info = kernel.step(state, torch.Generator().manual_seed(0))
    >>> state.position.shape, info.extra["tree_depth"].shape
    (torch.Size([3, 2]), torch.Size([3]))
    """

    max_tree_depth = sampler_setting("max_tree_depth")

    def _integrator(self):
        return _leaf_integrator(integrator_for(self.sampler.integrator, self.capabilities))

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
        tree = Trajectory(state, p0, metric)
        advance = partial(self._advance, generator=generator)
        for j in range(self.max_tree_depth):
            double(tree, j, eps, metric, generator, advance, self.divergence_threshold)
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

    def _advance(self, point: Point, half, step, signed_eps, metric, idx, generator):
        """One integration step for the chains ``idx`` (all when None; the others keep their
        point). Returns the new point and the gradient evaluations spent."""
        target = self.target
        if idx is not None:
            point, full = Point(*(x[idx] for x in point)), point
            half, step, signed_eps = half[idx], step[idx], signed_eps[idx]
            metric = metric.select(idx)
            target = _select_chains(target, self.capabilities.select_chains, idx)
        if self.integrator is None:  # leapfrog, one gradient, fused steps
            p = kick(point.momentum, point.grad, half, fused=True)
            q = drift(point.position, p, step, metric, fused=True)
            log_prob, grad = target.value_and_grad(q)
            new, cost = Point(q, kick(p, grad, half, fused=True), log_prob, grad), 1
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
            new = Point(end.position, momentum, end.log_prob, end.grad)
        if idx is None:
            return new, cost
        return Point(*(x.index_copy(0, idx, y) for x, y in zip(full, new, strict=True))), cost
