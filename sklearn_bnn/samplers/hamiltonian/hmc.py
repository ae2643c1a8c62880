"""Hamiltonian Monte Carlo with a fixed number of integration steps.

Cobb & Jalaian (2021), §3.1, and Cobb (2019), §5.2: sample p ~ N(0, M), integrate L steps, accept
with probability min(1, exp(H_start - H_end)); on rejection the chain stays where it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from sklearn.base import clone

from ..._utils import check_scalar_param
from ...targets import TargetCapabilities, capabilities
from .._base import (
    Info,
    Kernel,
    State,
    chain_step_size,
    default_step_size,
    kinetic_energy,
    sample_momentum,
    sampler_setting,
)
from .._by_name import register_sampler
from .._graphs import GraphedLeapfrog
from ..adaptation.chees import ChEESTrajectory
from ..geometry.euclidean import DiagonalMetric, EuclideanMetric, as_metric, check_n_chains
from ._settings import EuclideanSampler
from .integrators import resolve_integrator

__all__ = ["HMC", "HMCKernel", "check_metric", "metropolis_hastings"]


def metropolis_hastings(
    state: State,
    proposal: State,
    energy_start: torch.Tensor,
    energy_end: torch.Tensor,
    generator: torch.Generator,
    divergence_threshold: float,
):
    """Accept or reject ``proposal`` per chain on the energy error.

    A proposal whose energy is not finite, or whose energy error exceeds
    ``divergence_threshold``, is a divergence: rejected and flagged, never propagated.

    Returns
    -------
    new_state, accept_prob, accepted, energy_error, divergent
    """
    energy_error = energy_end - energy_start
    finite = torch.isfinite(energy_error) & torch.isfinite(proposal.position).all(-1)
    energy_error = torch.where(finite, energy_error, torch.full_like(energy_error, float("inf")))
    divergent = energy_error > divergence_threshold
    accept_prob = torch.exp(torch.clamp(-energy_error, max=0.0))
    u = torch.rand(
        accept_prob.shape, generator=generator, dtype=accept_prob.dtype, device=accept_prob.device
    )
    accepted = (u < accept_prob) & ~divergent
    keep = accepted[:, None]
    new_state = State(
        torch.where(keep, proposal.position, state.position),
        torch.where(accepted, proposal.log_prob, state.log_prob),
        torch.where(keep, proposal.grad, state.grad),
    )
    return new_state, accept_prob, accepted, energy_error, divergent


@register_sampler("hmc")
@dataclass(kw_only=True, eq=False, repr=False)
class HMC(EuclideanSampler):
    """Hamiltonian Monte Carlo with a fixed number of integration steps (a sampler object).

    Cobb & Jalaian (2021), §3.1, eq. 2-4: momentum p ~ N(0, M), ``n_steps`` steps of the integrator,
    one Metropolis-Hastings test on the energy error.

    Parameters
    ----------
    n_steps : int, default=25
        Integration steps per trajectory L (when ``trajectory_length`` is None).
    trajectory_length : float or "auto", default=None
        Integration time tau of a trajectory instead of a step count: each transition takes
        L = ceil(u tau / eps) steps of the current step size eps (the adapted one, the mean
        over chains, which share L), u uniform in [0.5, 1.5] drawn from the sampler's
        generator: jittering the integration time avoids the near-periodic trajectories of a
        fixed one (Neal 2011, "MCMC using Hamiltonian dynamics", §5.4.2.2). At most
        ``max_steps`` steps. ``"auto"``: tau is adapted during warmup across the vectorized
        chains by ChEES (Hoffman, Radul & Sountsov 2021; :mod:`.chees`), starting from
        ``n_steps`` steps of the first step size, and each transition integrates for h tau, h
        uniform in (0, 1) from the generator; needs at least 2 chains run together.
        The adapted tau is kept beside each draw (``trajectory_time``).
    max_steps : int, default=1024
        Cap on the steps of one trajectory set by ``trajectory_length`` (early warmup may try
        tiny step sizes).
    integrator : {"leapfrog", "naive", "randomised", "symmetric"}, callable or None, \
default=None
        The integrator (see :mod:`sklearn_bnn.samplers.hamiltonian.integrators`). The three
        split schemes
        (Cobb & Jalaian 2021, §3.2 and §4) need a target evaluated over data subsets, as the split
        estimators make. None: the target's ``default_integrator`` where it has one (a split
        target's is the symmetric split leapfrog), else the leapfrog.
    divergence_threshold : float, default=1000
        Energy error above which a trajectory counts as divergent (as Stan).
    metric : DiagonalMetric or DenseMetric, default=None
        A fixed Euclidean metric (see :mod:`sklearn_bnn.samplers.geometry.euclidean`), e.g.
        ``DenseMetric(cov)`` with ``cov`` a covariance estimate of the posterior. None uses the
        diagonal inverse mass the sampling loop gives (adapted with ``adapt_mass=True``,
        identity otherwise). A given metric wins: the loop does not adapt the mass of this
        sampler, and an ``inv_mass`` passed to the kernel's ``step`` is ignored.

    step_jitter : float in [0, 1), default=0.5
        Each transition scales every chain's step size by its own factor uniform in
        ``[1 - step_jitter, 1 + step_jitter]``, drawn from the generator (Stan's
        ``stepsize_jitter``; Neal 2011, §5.4.2.3): a fixed ``n_steps`` then covers a different
        integration time at every transition, so trajectories cannot stay near a period of
        the posterior: a fixed one resonates with a Gaussian (docs/hmc.md, "Trajectory length and
        jitter", measures the ESS with and without). The factor is drawn independently of the
        state, so each transition is a mixture of valid HMC kernels and leaves the posterior
        invariant. Dual averaging adapts the mean step. 0 turns it off. Ignored with
        ``trajectory_length="auto"``, whose jitter of the time replaces it: a per-chain step
        jitter on top flattens ChEES's criterion (docs/hmc.md, "ChEES: the integration time
        adapted across chains").
    n_steps_jitter : float in [0, 1), default=0
        Each transition takes ``max(1, round(u * n_steps))`` steps, u uniform in
        ``[1 - n_steps_jitter, 1 + n_steps_jitter]`` (one u for all chains, which integrate
        together; Neal 2011, §5.4.2.2). Ignored with ``trajectory_length``, which jitters
        already.
    initial_time : float, default=None
        With ``trajectory_length="auto"``: the integration time ChEES starts from, instead of
        ``n_steps`` steps of the first step size (a warm-started estimator passes the time its
        previous fit adapted, which a run without warmup then keeps).
    step_size : float or "auto", default="auto"
        The leapfrog step size: "auto" adapts it by dual averaging during warmup (Hoffman &
        Gelman 2014, Alg. 5), a number fixes it (and is the built kernel's default step).
    target_accept : float in (0, 1), default=0.8
        The mean acceptance probability the step-size adaptation aims for.
    adapt_mass : bool, default=False
        Adapt a diagonal mass matrix per chain during warmup (Stan's windowed schedule);
        ignored when ``metric`` is given, which wins.

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import HMC, sample
    >>> result = sample(lambda x: -0.5 * (x**2).sum(), torch.zeros(2), HMC(n_steps=10),
    ...                 n_warmup=100, n_draws=100, n_chains=2, random_state=0)
    >>> result.draws.shape
    torch.Size([2, 100, 2])
    """

    n_steps: int = 25
    integrator: object = None
    trajectory_length: object = None
    max_steps: int = 1024
    metric: object = None
    step_jitter: float = 0.5
    n_steps_jitter: float = 0.0
    initial_time: float | None = None

    def _check_params(self) -> None:
        self._check_shared()  # step_size, target_accept, adapt_mass, divergence_threshold
        check_scalar_param(self.n_steps, "n_steps", kind="int", low=1)
        check_scalar_param(self.max_steps, "max_steps", kind="int", low=1)
        if self.trajectory_length is not None and not _is_auto(self.trajectory_length):
            check_scalar_param(
                self.trajectory_length, "trajectory_length", low=0, low_inclusive=False
            )
        check_jitter(self.step_jitter, "step_jitter")
        check_jitter(self.n_steps_jitter, "n_steps_jitter")
        if self.initial_time is not None:
            check_scalar_param(self.initial_time, "initial_time", low=0, low_inclusive=False)
        if self.integrator is not None:
            resolve_integrator(self.integrator)
        check_metric(self.metric)

    def resume(self, stats: dict):
        """With ``trajectory_length="auto"``: a copy whose ChEES starts from the integration
        time the run ended with (``stats["trajectory_time"]``), which a run without warmup
        keeps."""
        times = stats.get("trajectory_time")
        if times is None or not _is_auto(self.trajectory_length):
            return self
        return clone(self).set_params(initial_time=float(times[0, -1]))

    def check_target(self, target) -> None:
        self._check_params()
        found = capabilities(target)
        integrator = integrator_for(self.integrator, found)
        if integrator in ("randomised", "symmetric") and found.n_splits is None:
            raise ValueError(
                f"integrator={integrator!r} integrates over data subsets: it needs a split "
                "target (use SplitHMCClassifier / SplitHMCRegressor), got "
                f"{type(target).__name__}."
            )

    def replays_on_cuda(self, default_integrator: str = "leapfrog") -> bool:
        """Whether this sampler's trajectories are recorded once as CUDA graphs and replayed
        on a GPU (:mod:`~sklearn_bnn.samplers._graphs`): the leapfrog (or the naive split
        scheme, the same steps), with a diagonal metric or none. ``default_integrator`` is the
        target's, taken when ``integrator`` is None."""
        integrator = default_integrator if self.integrator is None else self.integrator
        if integrator not in ("leapfrog", "naive"):
            return False
        return self.metric is None or isinstance(self.metric, DiagonalMetric)

    def build(self, target) -> HMCKernel:
        """The HMC kernel of this configuration on ``target``, once the settings are checked."""
        self.check_target(target)
        return HMCKernel(self, target)


def integrator_for(integrator, found: TargetCapabilities, fallback=None):
    """``integrator`` when given, else the target's ``default_integrator`` (a split target's
    symmetric split leapfrog; ``found`` are the target's capabilities), else ``fallback``."""
    if integrator is not None:
        return integrator
    return fallback if found.default_integrator is None else found.default_integrator


def _is_auto(value) -> bool:
    return isinstance(value, str) and value == "auto"


def check_jitter(value, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a number in [0, 1)."""
    check_scalar_param(value, name, low=0, high=1, high_inclusive=False)


def check_metric(metric) -> None:
    """Raise ``ValueError`` unless ``metric`` is None or a Euclidean metric object."""
    if metric is not None and not isinstance(metric, EuclideanMetric):
        raise ValueError(
            "metric must be None, a DiagonalMetric or a DenseMetric (sklearn_bnn.samplers), "
            f"got {type(metric).__name__}."
        )


class HMCKernel(Kernel):
    """The HMC transition kernel: an :class:`HMC` sampler bound to a target.

    Built by the sampler, ``HMC(...).build(target)``, which checks the settings. Every setting
    (``n_steps``, ``trajectory_length``, ``step_jitter``, ...) is read from the sampler object,
    with the sampler's default and meaning; the kernel holds only what it derives from them or
    what a run changes: the default step size and inverse mass of a ``step``, the integrator
    resolved against the target, the fixed metric on the positions' device. With
    ``trajectory_length="auto"`` the integration time is not the kernel's: the warmup adapts it
    (:class:`~.warmup.WindowAdaptation`, by ChEES) and passes its schedule to every
    :meth:`step`, to which the kernel reports each trajectory's ends (``Info.trajectory``).

    Parameters
    ----------
    sampler : HMC
        The configuration. :class:`~sklearn_bnn.samplers.NUTS` and
        :class:`~sklearn_bnn.samplers.ConstrainedHMC` build subclasses of this kernel; a
        setting their sampler does not have is off (no integration time, no jitter).
    target : Target
        Provides ``value_and_grad(theta (C, D)) -> ((C,), (C, D))``.
    step_size : float or tensor (C,), optional
        The step size of a ``step`` given none (the sampling loop gives one to every step): by
        default the sampler's ``step_size`` when it is a number. With ``step_size="auto"`` the
        kernel has none, and ``step`` must be given one.
    inv_mass : tensor (D,) or (C, D), or metric, optional
        Default inverse mass of a ``step``: a diagonal of M^-1, or a metric of
        :mod:`.geometry.euclidean` (identity by default). Ignored when the sampler has a fixed
        ``metric``.

    Attributes
    ----------
    integrator : callable
        The sampler's ``integrator`` resolved on the target (None: the target's
        ``default_integrator``, else :func:`~sklearn_bnn.samplers.leapfrog`).
    metric : EuclideanMetric or None
        The sampler's fixed ``metric``, used by every step: the ``inv_mass`` arguments (here
        and of ``step``) are then ignored, and the sampling loop adapts no mass for this
        kernel.
    adapts_trajectory : bool
        Whether the sampler's ``trajectory_length`` is ``"auto"``.

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import HMC
    >>> class Normal:
    ...     def value_and_grad(self, theta):
    ...         return -0.5 * (theta**2).sum(-1), -theta
    >>> kernel = HMC(n_steps=10, step_size=0.1).build(Normal())
    >>> state = kernel.init(torch.zeros(3, 2))
    >>> state, info = kernel.step(state, torch.Generator().manual_seed(0))
    >>> state.position.shape, info.step_size.shape
    (torch.Size([3, 2]), torch.Size([3]))
    """

    n_steps = sampler_setting("n_steps")
    divergence_threshold = sampler_setting("divergence_threshold")
    trajectory_length = sampler_setting("trajectory_length")
    max_steps = sampler_setting("max_steps")
    step_jitter = sampler_setting("step_jitter", absent=0.0)
    n_steps_jitter = sampler_setting("n_steps_jitter", absent=0.0)
    initial_time = sampler_setting("initial_time")

    def __init__(self, sampler, target, *, step_size=None, inv_mass=None):
        self.sampler = sampler
        self.target = target
        self.step_size = default_step_size(sampler, step_size)
        self.inv_mass = inv_mass
        self.metric = getattr(sampler, "metric", None)
        self.integrator = self._integrator()
        self.graphed = GraphedLeapfrog()

    @property
    def adapts_trajectory(self) -> bool:
        return _is_auto(self.trajectory_length)

    def _integrator(self):
        """The integrator of a trajectory: the sampler's, else the target's default one, else
        the leapfrog."""
        integrator = integrator_for(self.sampler.integrator, self.capabilities, "leapfrog")
        return resolve_integrator(integrator)

    def init(self, position, generator=None, *, n_warmup: int = 0) -> State:
        """The state at ``position``; with ``trajectory_length="auto"``, after checking that
        there are chains to adapt the time across."""
        state = super().init(position, generator, n_warmup=n_warmup)
        if self.adapts_trajectory:
            if state.position.shape[0] < 2:
                raise ValueError(
                    "trajectory_length='auto' adapts the integration time across chains "
                    "(ChEES) and needs at least 2 chains run together: set n_chains >= 2, "
                    "run as one batched computation (n_jobs=None)."
                )
        return state

    def trajectory_schedule(self, n_warmup: int, step_size: torch.Tensor) -> ChEESTrajectory:
        """The adaptation of this kernel's integration time over ``n_warmup`` transitions
        (the warmup's to update), starting from ``initial_time``, else ``n_steps`` times the
        mean of the first ``step_size`` (C,)."""
        schedule = ChEESTrajectory(n_warmup, self.initial_time, self.max_steps)
        if schedule.log_time is None:
            schedule.start(self.n_steps * float(step_size.double().mean()))
        return schedule

    def _metric(self, state: State, inv_mass):
        """The metric of this step: the fixed ``metric`` (on the state's device and dtype,
        converted once), else ``inv_mass``, else the kernel's ``inv_mass``, else identity."""
        if self.metric is not None:
            q = state.position
            metric = self.metric.to(q.device, q.dtype)
            if metric is not self.metric:
                self.metric = metric
            check_n_chains(metric, q.shape[0])
            return metric
        inv_mass = self.inv_mass if inv_mass is None else inv_mass
        if inv_mass is None:
            return as_metric(
                torch.ones(
                    state.position.shape[-1],
                    dtype=state.position.dtype,
                    device=state.position.device,
                )
            )
        return as_metric(inv_mass)

    def progress(self, info: Info) -> str:
        """With an adapted integration time: the time and this trajectory's steps."""
        extra = info.extra or {}
        if "trajectory_time" not in extra:
            return ""
        return f"T={float(extra['trajectory_time'][0]):.3g} L={int(extra['n_steps'][0])}"

    def trajectory_steps(self, eps: torch.Tensor, generator: torch.Generator) -> int:
        """Leapfrog steps of the next trajectory: ``n_steps`` (jittered by
        ``n_steps_jitter``), or the jittered ``trajectory_length`` over the mean step size (one
        uniform from ``generator`` either way; none for a fixed ``n_steps``). An adapted time
        takes its steps from its schedule instead (:meth:`step`).

        The count is a Python int, so a jittered one reads the host once per transition,
        before the trajectory is queued: the uniform and whatever device value it needs (the
        mean step size, the adapted time) in one transfer. A fixed ``n_steps`` reads nothing.
        """
        if self.trajectory_length is None:
            if not self.n_steps_jitter:
                return self.n_steps
            u = torch.rand((), generator=generator, dtype=torch.float64, device=eps.device).item()
            return max(1, round(self.n_steps * (1 + self.n_steps_jitter * (2 * u - 1))))
        u = torch.rand((), generator=generator, dtype=torch.float64, device=eps.device)
        u, mean_eps = torch.stack([u, eps.double().mean()]).tolist()
        n = math.ceil((0.5 + u) * self.trajectory_length / mean_eps)
        return int(min(max(n, 1), self.max_steps))

    def _step_size(self, state: State, step_size):
        return chain_step_size(step_size, self.step_size, state.position)

    def _jittered(self, eps: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``eps`` (C,) times one factor per chain uniform in [1 - j, 1 + j], j the
        ``step_jitter`` (Stan's step-size jitter); ``eps`` itself when j is 0."""
        if not self.step_jitter:
            return eps
        u = torch.rand(eps.shape, generator=generator, dtype=eps.dtype, device=eps.device)
        return eps * (1 + self.step_jitter * (2 * u - 1))

    def step(
        self,
        state: State,
        generator: torch.Generator,
        step_size=None,
        inv_mass=None,
        trajectory=None,
    ):
        """One HMC transition for every chain.

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
        trajectory : ChEESTrajectory, optional
            With ``trajectory_length="auto"`` (required then): the schedule of the integration
            time, which the warmup adapts (:meth:`trajectory_schedule`).

        Returns
        -------
        state : State
        info : Info
        """
        eps = self._step_size(state, step_size)
        metric = self._metric(state, inv_mass)
        q = state.position
        time = None
        if self.adapts_trajectory:  # the schedule jitters the time itself (see step_jitter)
            if trajectory is None:
                raise ValueError(
                    "trajectory_length='auto': the integration time is adapted by the warmup; "
                    "run the kernel through run_chains or sample(), or pass the schedule of "
                    "kernel.trajectory_schedule(n_warmup, step_size) as trajectory=."
                )
            n_steps, time = trajectory.steps_and_time(eps.double().mean(), generator)
        else:
            n_steps = self.trajectory_steps(eps, generator)
            eps = self._jittered(eps, generator)
        p0 = sample_momentum(q.shape, metric, generator, dtype=q.dtype, device=q.device)
        proposal, p1, n_grad = self.graphed(  # recorded and replayed on a GPU (_graphs.py)
            self.integrator, self.target, state, p0, eps, n_steps, metric, generator
        )
        h0 = -state.log_prob + kinetic_energy(p0, metric)
        h1 = -proposal.log_prob + kinetic_energy(p1, metric)
        new_state, accept_prob, accepted, energy_error, divergent = metropolis_hastings(
            state, proposal, h0, h1, generator, self.divergence_threshold
        )
        extra, ends = None, None
        if self.trajectory_length is not None or self.n_steps_jitter:  # the steps taken
            extra = {"n_steps": torch.full_like(accept_prob, n_steps, dtype=torch.long)}
        if time is not None:
            extra["trajectory_time"] = torch.full(accept_prob.shape, time, dtype=torch.float64)
            ends = (q, proposal.position, metric.velocity(p1), n_steps * eps)
        info = Info(accept_prob, accepted, energy_error, divergent, eps, n_grad, extra, ends)
        return new_state, info
