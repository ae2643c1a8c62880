"""Constrained HMC: Hamiltonian Monte Carlo inside a box, reflecting at its walls.

The bridged-HMC thesis, §3.1.1, Algorithm 2 (after Neal 2011, §5.5.1): the box is
``{theta : lower_i <= theta_i <= upper_i}`` (bounds may be infinite). After each position update
of the leapfrog, a coordinate that has crossed a wall is mirrored back across it and its momentum
component is negated; this repeats while the coordinate is outside (a long drift across a narrow
box bounces several times). The reflected leapfrog stays reversible and volume preserving, so
the Metropolis-Hastings test on the usual energy needs no correction, and the target's log density
is only ever evaluated inside the box.

Only the fixed-length leapfrog trajectory is supported (no NUTS trees).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..._utils import check_scalar_param
from ...targets import capabilities
from .._base import State
from .._by_name import register_sampler
from ..geometry.euclidean import DenseMetric, as_metric
from ._settings import EuclideanSampler
from .hmc import HMCKernel
from .integrators import drift, kick

__all__ = ["ConstrainedHMC", "ConstrainedHMCKernel", "ReflectingLeapfrog", "reflect", "to_box"]

_MAX_BOUNCES = 10_000


def reflect(position: torch.Tensor, momentum: torch.Tensor, lower, upper):
    """Mirror the coordinates outside ``[lower, upper]`` back in, negating their momenta.

    As in the bridged-HMC thesis, Algorithm 2, lines 7-13: ``q > u -> q = u - (q - u)``, ``q < l ->
    q = l + (l - q)``, ``p -> -p``, repeated while a coordinate is still outside.

    Parameters
    ----------
    position, momentum : tensor (C, D)
    lower, upper : tensor (D,) or (C, D)
        The walls; ``-inf`` / ``inf`` where a coordinate is free.

    Returns
    -------
    position, momentum : tensor (C, D)
    """
    q, p = position, momentum
    for _ in range(_MAX_BOUNCES):
        above, below = q > upper, q < lower
        out = above | below
        if not bool(out.any()):
            return q, p
        q = torch.where(above, 2 * upper - q, torch.where(below, 2 * lower - q, q))
        p = torch.where(out, -p, p)
    # only a non-finite position gets here: leave it for the MH test to reject as a divergence
    return q, p


class ReflectingLeapfrog:
    """The leapfrog integrator with reflecting walls (an integrator object, see
    :mod:`.integrators`): the bridged-HMC thesis, Algorithm 2.

    Parameters
    ----------
    lower, upper : tensor (D,) or (C, D)
        The box.

    Notes
    -----
    The position moves by the shared :func:`~.integrators.drift` and the momentum by
    :func:`~.integrators.kick`; the walls then mirror coordinates and negate momentum
    components, which retraces the path backwards only for a diagonal metric (a
    :class:`~.geometry.euclidean.DenseMetric` is refused).
    """

    def __init__(self, lower: torch.Tensor, upper: torch.Tensor):
        self.lower = lower
        self.upper = upper

    def __call__(
        self, target, state: State, momentum, step_size, n_steps, inv_mass, generator=None
    ):
        metric = as_metric(inv_mass)
        if isinstance(metric, DenseMetric):
            # negating one momentum component reverses one velocity component only when the
            # metric is diagonal: with a dense one the walls would break reversibility
            raise ValueError("ReflectingLeapfrog needs a diagonal metric, got a DenseMetric.")
        step = step_size[:, None]
        half = 0.5 * step
        lower = self.lower.to(state.position)
        upper = self.upper.to(state.position)
        q = state.position
        p = kick(momentum, state.grad, half)
        log_prob, grad = state.log_prob, state.grad
        n_grad = 0
        for i in range(n_steps):
            # the free drift by the metric's velocity, then the walls (coordinate-wise mirror)
            q, p = reflect(drift(q, p, step, metric), p, lower, upper)
            log_prob, grad = target.value_and_grad(q)
            n_grad += 1
            p = kick(p, grad, step if i < n_steps - 1 else half)
            if not torch.isfinite(log_prob).any():
                break
        return State(q, log_prob, grad), p, n_grad


def _bounds(lower, upper, dim: int, dtype, device):
    lo = torch.full((dim,), -np.inf) if lower is None else torch.as_tensor(lower, dtype=dtype)
    hi = torch.full((dim,), np.inf) if upper is None else torch.as_tensor(upper, dtype=dtype)
    lo, hi = lo.to(device, dtype), hi.to(device, dtype)
    for name, b in (("lower", lo), ("upper", hi)):
        if b.shape[-1:] != (dim,) or b.ndim > 2 or torch.isnan(b).any():
            raise ValueError(
                f"{name} must have {dim} (non-NaN) bounds, got shape {tuple(b.shape)}."
            )
    if not bool((lo < hi).all()):
        raise ValueError("every lower bound must be below its upper bound (lower < upper).")
    return lo, hi


def dtype_and_device(target):
    """The target's dtype and device (float64 on the CPU when it does not say)."""
    found = capabilities(target)
    dtype = torch.float64 if found.dtype is None else found.dtype
    return dtype, "cpu" if found.device is None else found.device


def to_box(position: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, margin=0.1):
    """A start strictly inside the box: a coordinate outside (or on a wall) of a half-open
    interval is mirrored across the wall, at least ``margin`` from it; one outside a bounded
    interval goes to its midpoint."""
    inside = (position > lower) & (position < upper)
    mirrored_up = lower + torch.clamp(lower - position, min=margin)
    mirrored_down = upper - torch.clamp(position - upper, min=margin)
    both = torch.isfinite(lower) & torch.isfinite(upper)
    moved = torch.where(
        both, (lower + upper) / 2, torch.where(position <= lower, mirrored_up, mirrored_down)
    )
    return torch.where(inside, position, moved)


class ConstrainedHMCKernel(HMCKernel):
    """HMC whose trajectories reflect at the walls of a box: a :class:`ConstrainedHMC` sampler
    bound to a target (``ConstrainedHMC(...).build(target)``).

    The walls, ``n_steps``, ``step_jitter`` (one factor per chain, as
    :class:`~.hmc.HMCKernel`'s) and ``divergence_threshold`` are the sampler's; the integrator
    is the :class:`ReflectingLeapfrog` of its box.

    Parameters
    ----------
    sampler : ConstrainedHMC
        The configuration.
    target : target object
    step_size : float or tensor (C,), optional
        The step size of a ``step`` given none: by default the sampler's ``step_size`` when it
        is a number (see :class:`~.hmc.HMCKernel`).
    inv_mass : tensor (D,) or (C, D), optional
        Default inverse mass (a diagonal: the walls need one); identity by default.

    Attributes
    ----------
    lower, upper : tensor (D,) or (C, D)
        The box on the target's device and dtype (infinite where free); (C, D) gives each chain
        its own box.
    """

    #: Positions stay in the box: Gibbs blocks that move the position are not composed with it.
    confined = True

    def __init__(self, sampler, target, *, step_size=None, inv_mass=None):
        self.lower, self.upper = _bounds(
            sampler.lower, sampler.upper, target.dim, *dtype_and_device(target)
        )
        super().__init__(sampler, target, step_size=step_size, inv_mass=inv_mass)

    def _integrator(self):
        return ReflectingLeapfrog(self.lower, self.upper)

    def init(self, position: torch.Tensor, generator=None, *, n_warmup: int = 0) -> State:
        if position.ndim == 1:
            position = position[None]
        lo, hi = self.lower.to(position), self.upper.to(position)
        if not bool(((position >= lo) & (position <= hi)).all()):
            raise ValueError("the initial position is outside the box (see to_box).")
        return super().init(position, generator, n_warmup=n_warmup)


@register_sampler("constrained_hmc")
@dataclass(kw_only=True, eq=False, repr=False)
class ConstrainedHMC(EuclideanSampler):
    """HMC restricted to a box by reflecting walls (a sampler object).

    The bridged-HMC thesis, Algorithm 2.

    Parameters
    ----------
    lower, upper : array-like of shape (D,), optional
        The walls; ``None`` or ``-inf`` / ``inf`` entries leave a coordinate free.
    n_steps : int, default=20
        Leapfrog steps per trajectory.
    divergence_threshold : float, default=1000
        Energy error above which a trajectory counts as divergent.
    step_jitter : float in [0, 1), default=0
        Scale each chain's step size by its own factor uniform in ``[1 - step_jitter,
        1 + step_jitter]`` at each transition (drawn from the generator), which breaks the
        near-periodic trajectories a fixed length can make between walls.

    step_size, target_accept, adapt_mass
        The warmup's settings, as for :class:`~sklearn_bnn.samplers.HMC` (defaults "auto",
        0.8, False); a numeric ``step_size`` is also the built kernel's default step.

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import sample
    >>> result = sample(lambda x: -0.5 * (x**2).sum(), torch.ones(2, dtype=torch.float64),
    ...                 ConstrainedHMC(lower=[0.0, 0.0]), n_warmup=50, n_draws=50,
    ...                 n_chains=1, init_jitter=0.0, random_state=0)
    >>> bool((result.draws >= 0).all())
    True
    """

    lower: object = None
    upper: object = None
    n_steps: int = 20
    step_jitter: float = 0.0

    def check_target(self, target) -> None:
        self._check_shared()
        check_scalar_param(self.n_steps, "n_steps", kind="int", low=1)
        check_scalar_param(self.step_jitter, "step_jitter", low=0, high=1, high_inclusive=False)
        _bounds(self.lower, self.upper, target.dim, *dtype_and_device(target))

    def build(self, target) -> ConstrainedHMCKernel:
        """The constrained kernel of this configuration on ``target``, once the settings and
        the box are checked."""
        self.check_target(target)
        return ConstrainedHMCKernel(self, target)
