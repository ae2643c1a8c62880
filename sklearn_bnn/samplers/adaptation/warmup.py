"""Warmup as an object the sampling loop calls: ``init``, ``update`` per transition, ``final``.

The loop knows nothing of dual averaging, mass windows or trajectory lengths; it asks its
adaptation for the state to go on from and the step size and inverse mass of the next transition
(BlackJAX's ``window_adaptation`` has the same three-part shape), and, for a kernel whose
integration time is adapted (``kernel.adapts_trajectory``), the adaptation's ``trajectory``
schedule. :class:`WindowAdaptation` is Stan's scheme, the default: the starting step size of
Hoffman & Gelman (2014, Algorithm 4), dual averaging toward ``target_accept`` (Algorithm 5) with
the rescue of chains whose step size collapses, and, with ``adapt_mass``, a diagonal inverse
mass per chain estimated over Stan's slow windows, dual averaging restarting at the end of each
(the pieces are in :mod:`.adaptation`); beside the step size, the integration time of HMC with
``trajectory_length="auto"`` climbs ChEES (:mod:`.chees`). Another scheme is any object with the
same three methods (and ``trajectory``, for such kernels), passed to
:func:`~sklearn_bnn.samplers.run_chains` as ``adaptation``.
"""

from __future__ import annotations

import torch

from ..._warnings import warn
from ...exceptions import ConvergenceWarning
from ...targets import capabilities
from ..defaults import TARGET_ACCEPT
from .step_size_and_mass import (
    DualAveraging,
    SettlingVariance,
    find_reasonable_step_size,
    rescue_collapsed_chains,
    stalled_chains,
    warmup_windows,
)

__all__ = ["WindowAdaptation", "prior_variance"]


class WindowAdaptation:
    """Stan's warmup: step size by dual averaging, optionally a windowed diagonal mass.

    Parameters
    ----------
    n_warmup : int
        Warmup transitions.
    step_size : "auto", float or tensor (C,), default="auto"
        ``"auto"`` finds a starting value and adapts it; a number (or one per chain) is used as
        it is. A kernel with ``adapts_step_size = False`` keeps its own (``kernel.step_size``).
    target_accept : float, default=0.8
    adapt_mass : bool or "auto", default=False
        Estimate a diagonal inverse mass per chain over the slow windows, shrunk toward the
        prior variance of a network target (:func:`prior_variance`), Stan's 1e-3 otherwise.
        A kernel with its own ``metric`` keeps it: nothing is adapted (with a warning for a
        user's Euclidean metric; RMHMC's position-dependent one replaces the mass anyway), and
        the step size is searched under that metric. ``"auto"`` (what
        :func:`~sklearn_bnn.samplers.sample` passes for its default ``True``): the same, except
        for kernels with a step-size schedule of their own (``adapts_step_size = False``, the
        stochastic-gradient kernels), which keep the identity.
    inv_mass : tensor (D,) or (C, D), optional
        The starting inverse mass (identity by default).

    Attributes
    ----------
    trajectory : ChEESTrajectory or None
        For a kernel with ``adapts_trajectory`` (HMC with ``trajectory_length="auto"``), once
        :meth:`init` has run: the integration time, adapted across chains by ChEES over the
        ``n_warmup`` transitions and fixed after them; None for other kernels.
    """

    def __init__(
        self,
        n_warmup: int,
        *,
        step_size="auto",
        target_accept=TARGET_ACCEPT,
        adapt_mass=False,
        inv_mass=None,
    ):
        self.n_warmup = n_warmup
        self.step_size = step_size
        self.target_accept = target_accept
        self.adapt_mass = adapt_mass
        self.inv_mass = inv_mass
        self.trajectory = None

    def init(self, kernel, state, generator: torch.Generator):
        """The step size (C,) and inverse mass of the first transition from ``state``."""
        C, D = state.position.shape
        dtype, device = state.position.dtype, state.position.device
        self._kernel_adapts = kernel.adapts_step_size
        self._kernel = kernel
        self._adapt = isinstance(self.step_size, str) and self._kernel_adapts
        if self._adapt and self.n_warmup == 0:
            raise ValueError(
                "step_size='auto' is adapted during warmup, but n_warmup=0: give n_warmup >= 1 "
                "or a numeric step_size."
            )
        inv_mass = self.inv_mass
        if inv_mass is None:
            inv_mass = torch.ones(D, dtype=dtype, device=device)
        self._inv_mass = inv_mass.to(device, dtype)
        search_metric = self._kernel_metric(kernel, C, device, dtype)
        if self._adapt:
            eps0 = find_reasonable_step_size(
                kernel.local_target(state), state, search_metric, generator
            )
            self._averager = DualAveraging(eps0, self.target_accept)
            self._eps = self._averager.step_size
        else:
            step_size = self.step_size
            if isinstance(step_size, str):
                step_size = getattr(kernel, "step_size", 1.0)
            self._eps = torch.as_tensor(step_size).to(device, dtype).expand(C).clone()
        self._prepare_windows(kernel.target, device)
        self._rescued, self._n_chains = [], C
        self.trajectory = None
        if getattr(kernel, "adapts_trajectory", False):
            self.trajectory = kernel.trajectory_schedule(self.n_warmup, self._eps)
        return self._eps, self._inv_mass

    @property
    def step_size_origin(self) -> str:
        """Where the step size of the draws comes from, once :meth:`init` has run:
        ``"adapted"`` (dual averaging), ``"kernel"`` (a kernel that chooses its own step or
        schedule, ``adapts_step_size = False``: the stochastic-gradient ones) or ``"given"``
        (a number for a kernel that could have adapted it)."""
        if self._adapt:
            return "adapted"
        return "given" if self._kernel_adapts else "kernel"

    def _kernel_metric(self, kernel, n_chains: int, device, dtype):
        """The metric the step-size search uses: the kernel's constant one when it has one
        (which also turns mass adaptation off), else the loop's diagonal inverse mass."""
        self._mass = bool(self.adapt_mass)
        if self.adapt_mass == "auto":  # not for a kernel with a step-size schedule of its own
            self._mass = kernel.adapts_step_size
        metric = kernel.metric
        if metric is None:
            return self._inv_mass
        metric = metric.to(device, dtype)
        metric.check_n_chains(n_chains)
        if self._mass and not metric.position_dependent:  # a user's metric: say it wins
            warn(
                "adapt_mass=True is ignored: the sampler has a fixed metric, which wins over "
                "mass adaptation.",
                UserWarning,
            )
        self._mass = False
        diagonal = metric.diagonal()
        if diagonal is not None:
            self._inv_mass = diagonal.to(device, dtype)
        return self._inv_mass if metric.position_dependent else metric

    def _prepare_windows(self, target, device) -> None:
        windows = warmup_windows(self.n_warmup)
        self._window_ends = {end - 1 for _, end in windows} if self._mass else set()
        self._window_starts = {start: end - start for start, end in windows}
        self._toward = prior_variance(target) if self._mass else None
        self._variance = None
        self._device = device

    def update(self, i: int, state, info):
        """Take warmup transition ``i`` (from 0) into account. Returns the state to go on from
        (a chain whose step size collapsed restarts from a healthy chain's state and
        adaptation, :func:`~.adaptation.rescue_collapsed_chains`), and the step size and
        inverse mass of the next transition; the trajectory's ends move the adapted
        integration time (:attr:`trajectory`)."""
        if self.trajectory is not None:
            self.trajectory.update(*info.trajectory, info.accept_prob, info.divergent)
        if self._adapt:
            self._averager.update(info.accept_prob)
            state, restarts = rescue_collapsed_chains(self._averager, state)
            self._rescued += restarts
            self._eps = self._averager.step_size
        if self._mass and i in self._window_starts:
            shape = state.position.shape
            self._variance = SettlingVariance(shape, self._device, self._window_starts[i])
        if self._mass and self._variance is not None:
            self._variance.update(state.position, state.log_prob)
        if i in self._window_ends:
            self._inv_mass = self._variance.regularized_variance(self._toward)
            self._inv_mass = self._inv_mass.to(state.position.dtype)
            self._variance = None
            if self._adapt:  # a new metric: restart dual averaging from the current step size
                self._averager = DualAveraging(self._averager.final_step_size, self.target_accept)
                self._eps = self._averager.step_size
        return state, self._eps, self._inv_mass

    def averaged_step_size(self) -> torch.Tensor:
        """(C,) the step size the warmup would end with now: dual averaging's averaged iterate
        (the current step when it is not adapted)."""
        if self._adapt:
            return self._averager.final_step_size
        return self._eps

    def final(self):
        """The step size (C,) and inverse mass of the draws; warns about the chains restarted
        during warmup and those that ended it stalled."""
        if self._adapt:
            self._eps = self._averager.final_step_size
            _warn_about_warmup(self._rescued, stalled_chains(self._averager), self._n_chains)
        elif not self._kernel_adapts:  # a kernel that bounds its own step (SG: the curvature)
            self._eps = self._kernel.final_step_size(self._eps)
        return self._eps, self._inv_mass


def _warn_about_warmup(rescued: list, stalled: dict, n_chains: int) -> None:
    """One convergence warning for the chains restarted during warmup, one for those that
    ended it stalled (:func:`~sklearn_bnn._warnings.warn`: a fit joins them to its one
    warning)."""
    if rescued:
        lines = "; ".join(
            f"chain {c} (step size {eps:.3g}, log density {lp:.6g}) from chain {d}"
            for c, d, eps, lp in rescued
        )
        warn(
            f"warmup restarted {len(rescued)} chain(s) whose adapted step size had collapsed to "
            "under 1/100 of the other chains' (a region much narrower than theirs, or where "
            f"every proposal diverges): {lines}. Each took the position and adaptation of a "
            "healthy chain; the sampling phase is exact, but its chains no longer all come "
            "from independent starts.",
            ConvergenceWarning,
            kind="warmup",
        )
    if stalled:
        causes = "; ".join(
            f"{f'chain {c}' if n_chains > 1 else 'the chain'} ended warmup stalled: {cause}"
            for c, cause in stalled.items()
        )
        its = "Its" if len(stalled) == 1 else "Their"
        warn(
            f"{causes}. {its} draws barely move; look at {its.lower()} starting point (a "
            "region much narrower than the posterior's bulk, a degenerate mode, or non-finite "
            "log densities), or give a numeric step_size.",
            ConvergenceWarning,
            kind="warmup",
        )


def prior_variance(target):
    """The prior variance T / tau of every coordinate (D,) of a network target with a Gaussian
    prior, toward which window variances shrink; Stan's 1e-3 for any other target."""
    try:
        precision = target.prior_precision
    except AttributeError:
        return 1e-3
    if not isinstance(precision, torch.Tensor):
        return 1e-3
    return capabilities(target).temperature / precision.double()
