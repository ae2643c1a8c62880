"""Default step sizes and schedules of the stochastic-gradient samplers.

Three pieces, used by :class:`~sklearn_bnn.SGMCMCClassifier` and
:class:`~sklearn_bnn.SGMCMCRegressor` at ``step_size="auto"``:

* :func:`gradient_noise_step_size`, the sampling step chosen by the gradient noise. The minibatch
  gradient g_B = (N/|B|) grad l_B + grad log p is the full gradient plus a noise of variance
  v_i per coordinate. One SGHMC step (Chen et al. 2014, eq. 3 in the constant-momentum form of
  Schmal & Mäder 2026) adds eps * g_B to the momentum, hence a gradient-noise variance eps**2 v_i,
  beside the injected 2 (1 - alpha) T; SGLD (Welling & Teh 2011) adds eps**2 v_i to the position
  beside the injected 2 eps T. The dynamics sample the posterior only while the first is small
  against the second (Chen et al. 2014, §3.2: the noise the sampler does not correct for must
  vanish); the rule takes the largest step at which the mean over the coordinates of the ratio is
  ``noise_ratio``. v scales like N**2 / |B|, so the step falls like sqrt(|B|) / N: the step in
  units of a per-datum learning rate (eps**2 N for SGHMC) shrinks as the data grow, which is
  what keeps the minibatch noise from dominating the posterior's own spread on large data.
  A cap, ``max_learning_rate``, bounds the per-datum learning rate where the noise is small (one
  batch holding all the data has none).
* :class:`CyclicalSchedule`, the cyclical step size of cyclical SG-MCMC (Zhang et al., ICLR 2020,
  eq. 1): over the sampling phase, ``n_cycles`` cosine cycles from a large exploring step down
  to the sampling step; the step is fixed within a transition (an epoch) and the schedule is
  fixed in advance, so AMAGOLD's and HTE's tests stay exact transition by transition.
* :class:`AutoStepSampler`, the sampler the estimators run: the MAP start (minibatch Adam
  with scikit-learn's stopping rule, :func:`~sklearn_bnn.samplers.starts.find_mode_minibatch`),
  then the noise-rule step measured there, then the wrapped sampler with that step (and the
  schedule, if any). Nothing is adapted during the sampling phase. :func:`estimator_setup`
  wraps a sampler in it where an estimator's parameters ask for it; :mod:`.sgmcmc` registers
  it as the setup of the "minibatch" samplers (:func:`~._registry.register_setup`), which is
  how the estimators reach it without naming it.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from ..._seeding import child, root_seed
from ...targets import capabilities
from .._base import State
from ..adaptation.step_size_and_mass import find_reasonable_step_size
from ..driver.budget import as_length

__all__ = [
    "AutoStepSampler",
    "CyclicalSchedule",
    "estimator_setup",
    "gradient_noise_step_size",
    "gradient_noise_variance",
]

NOISE_RATIO = 0.1
MAX_LEARNING_RATE = 0.03



def gradient_noise_variance(target, theta: torch.Tensor, n_batches: int = 16, seed=0):
    """Mean over the coordinates of the variance of the minibatch gradient estimate at ``theta``.

    Parameters
    ----------
    target : MinibatchTarget
        With ``batch_value_and_grad(theta, rows)``, ``n_data`` and ``batch_size``.
    theta : tensor (C, D)
    n_batches : int, default=16
        Batches of ``target.batch_size`` rows: disjoint slices of one permutation (fewer when
        the data hold fewer), or, when the data hold fewer than two disjoint batches, the first
        rows of ``n_batches`` independent permutations, as the sampler draws one batch a
        permutation then.
    seed : int or numpy.random.SeedSequence, default=0
        Seeds the permutations the batches are cut from.

    Returns
    -------
    tensor (C,)
        (1/D) sum_i Var_B[g_B,i], the variance over batches (ddof 1); 0 when one batch holds all
        the rows.
    """
    n, size = int(target.n_data), min(int(target.batch_size), int(target.n_data))
    if size >= n:
        return torch.zeros(theta.shape[0], dtype=theta.dtype, device=theta.device)
    rng = np.random.default_rng(seed)
    if n // size >= 2:
        perm = rng.permutation(n)
        batches = [perm[b * size : (b + 1) * size] for b in range(min(n_batches, n // size))]
    else:
        batches = [rng.permutation(n)[:size] for _ in range(n_batches)]
    grads = []
    for rows in batches:
        grads.append(target.batch_value_and_grad(theta.detach(), np.sort(rows))[1])
    grads = torch.stack(grads)  # (k, C, D)
    return grads.var(0).mean(-1)


def gradient_noise_step_size(
    noise_variance,
    n_data: int,
    *,
    langevin: bool = False,
    momentum: float = 0.9,
    noise_ratio: float = NOISE_RATIO,
    max_learning_rate: float = MAX_LEARNING_RATE,
):
    """The largest step whose gradient noise is ``noise_ratio`` of the injected noise.

    SGHMC family: eps**2 v = noise_ratio * 2 (1 - alpha), so eps = sqrt(2 (1 - alpha)
    noise_ratio / v); SGLD (``langevin``): eps**2 v = noise_ratio * 2 eps, so eps = 2
    noise_ratio / v. Capped at the step whose per-datum learning rate (eps**2 N for the SGHMC
    family, eps N for SGLD) is ``max_learning_rate``. With ``momentum=1`` (no friction) the
    SGHMC rule has no noise to compare with; the cap alone is used.

    Parameters
    ----------
    noise_variance : float or tensor
        v, the mean per-coordinate variance of the minibatch gradient
        (:func:`gradient_noise_variance`).
    n_data : int
        N.

    Returns
    -------
    tensor or float
        eps, shaped like ``noise_variance``.

    Examples
    --------
    >>> round(float(gradient_noise_step_size(2000.0, 10)), 5)  # sqrt(2 * 0.1 * 0.1 / 2000)
    0.00316
    >>> round(float(gradient_noise_step_size(0.0, 1000)), 5)  # the cap: sqrt(0.03 / 1000)
    0.00548
    """
    v = torch.as_tensor(noise_variance, dtype=torch.float64)
    if langevin:
        cap = max_learning_rate / n_data
        eps = 2.0 * noise_ratio / v
    else:
        cap = math.sqrt(max_learning_rate / n_data)
        eps = torch.sqrt(2.0 * (1.0 - momentum) * noise_ratio / v)
    eps = torch.where(torch.isfinite(eps) & (eps > 0), eps, torch.full_like(eps, cap))
    return torch.clamp(eps, max=cap)


def curvature_step_size(target, theta: torch.Tensor, generator, max_rows: int = 1024):
    """The step at which one leapfrog step of the full-data dynamics from ``theta`` has an
    acceptance ratio of one half (Hoffman & Gelman 2014, Algorithm 4), per chain.

    The log density is the minibatch target's on up to ``max_rows`` rows spread over the data
    (all of them when there are fewer), taken a batch at a time and scaled to the whole data
    as every batch is: a step
    near this one is near the edge of stability of the dynamics in the stiffest direction,
    which the gradient noise does not see (a regression whose noise is small is far stiffer
    than a classification on the same rows).

    Parameters
    ----------
    target : MinibatchTarget
    theta : tensor (C, D)
    generator : torch.Generator
        Draws the momentum of the trial step.

    Returns
    -------
    tensor (C,)
    """
    n = int(target.n_data)
    rows = np.unique(np.linspace(0, n - 1, min(n, max_rows)).astype(np.int64))
    size = min(int(target.batch_size), n)
    probe = _RowsTarget(target, [rows[i : i + size] for i in range(0, len(rows), size)])
    value, grad = probe.value_and_grad(theta.detach())
    state = State(theta.detach(), value, grad)
    inv_mass = torch.ones(theta.shape[-1], dtype=theta.dtype, device=theta.device)
    return find_reasonable_step_size(probe, state, inv_mass, generator)


class _RowsTarget:
    """A minibatch target on fixed rows, as a full-data target (``value_and_grad``): the
    weighted mean of its estimates on batches of those rows (each scaled to the whole data),
    so that no request asks for more than a batch."""

    def __init__(self, target, batches):
        self.target, self.batches = target, batches
        total = sum(len(b) for b in batches)
        self.weights = [len(b) / total for b in batches]

    def value_and_grad(self, theta):
        value = grad = 0.0
        for rows, weight in zip(self.batches, self.weights, strict=True):
            v, g = self.target.batch_value_and_grad(theta, rows)
            value, grad = value + weight * v, grad + weight * g
        return value, grad


def training_step_size(n_data: int, *, langevin: bool = False, learning_rate: float = 0.05):
    """The step whose per-datum learning rate is ``learning_rate``: eps = sqrt(lr / N) for the
    SGHMC family (its SGD learning rate on the summed loss is eps**2), lr / N for SGLD."""
    return learning_rate / n_data if langevin else math.sqrt(learning_rate / n_data)


class CyclicalSchedule:
    """Cyclical step size over the sampling phase (Zhang et al., ICLR 2020, eq. 1).

    Transition t of the sampling phase (0-based) of ``n_transitions`` runs at

        eps_t = eps + (peak - eps) (1 + cos(pi r_t)) / 2,  r_t = mod(t, L) / L,
        L = ceil(n_transitions / n_cycles),

    from ``peak`` at the start of each cycle (exploration: the chain leaves its mode) down to the
    sampling step eps at its end. Zhang et al. decay to zero and keep only the draws of a cycle's
    last part; here the floor is the sampling step and every draw is kept (the draws early in a
    cycle are the more dispersed: thin them, or use ``EnsembleReducer``). The step is fixed
    within a transition, and the schedule is fixed before sampling starts, so a
    Metropolis-corrected sampler's test is exact at every transition.

    Parameters
    ----------
    n_cycles : int
    n_transitions : int
        Transitions of the sampling phase.
    peak : float
        The step at the start of each cycle.

    Examples
    --------
    >>> s = CyclicalSchedule(2, 4, peak=1.0)
    >>> [round(s.factor(t), 3) for t in range(4)]
    [1.0, 0.5, 1.0, 0.5]
    """

    def __init__(self, n_cycles: int, n_transitions: int, peak: float):
        self.n_cycles = int(n_cycles)
        self.n_transitions = int(n_transitions)
        self.peak = float(peak)
        self.cycle_length = max(math.ceil(self.n_transitions / max(self.n_cycles, 1)), 1)

    def factor(self, t: int) -> float:
        """(1 + cos(pi r_t)) / 2: 1 at the start of a cycle, falling towards 0 at its end."""
        r = (t % self.cycle_length) / self.cycle_length
        return 0.5 * (1.0 + math.cos(math.pi * r))

    def __call__(self, eps: torch.Tensor, t: int) -> torch.Tensor:
        """The step of sampling transition ``t`` given the sampling step ``eps`` (C, 1)."""
        peak = torch.clamp(torch.full_like(eps, self.peak), min=eps)  # never below eps
        return eps + (peak - eps) * self.factor(t)


class AutoStepSampler:
    """A stochastic-gradient sampler run at a step size chosen from the data.

    ``run`` starts the chains at a mode when the run has a ``start``
    (:class:`~sklearn_bnn.samplers.starts.MAPStart`: minibatch Adam ended by scikit-learn's
    stopping rule; the batches from the run seed's "init" child), measures the minibatch
    gradient noise there (:func:`gradient_noise_variance`) and runs ``sampler`` with the step of
    :func:`gradient_noise_step_size`, one per chain. With ``init="random"`` the warmup starts at
    the training step of :func:`training_step_size` (a per-datum learning rate of 0.05) and
    anneals to it along the cosine of Schmal & Mäder (2026). ``n_cycles`` adds a
    :class:`CyclicalSchedule` over the sampling phase, peaking at ``peak_step_size`` (default: the
    training step). When the run is given a step size (a number, or a warm start), the sampler runs
    with it unchanged, from the MAP start all the same. The search is recorded in the run's
    ``stats``: ``init_steps`` and ``init_loss`` per chain (the steps taken, the last epoch's mean
    training loss) and ``init_converged`` (whether the stopping rule, not the budget, ended it).

    Parameters
    ----------
    sampler : stochastic-gradient sampler object
        SGLD, SGHMC, GSGHMC, AMAGOLD or HTE; copied, never changed.
    noise_ratio : float, default=0.1
    max_learning_rate : float, default=0.03
    n_cycles : int or None, default=None
    peak_step_size : float or None, default=None
    choose_step : bool, default=True
        False keeps the sampler's own step (only the MAP start and the schedule are added).

    Examples
    --------
    >>> from sklearn_bnn.samplers import SGHMC
    >>> AutoStepSampler(SGHMC()).sampler.step_size
    'auto'
    """

    def __init__(
        self,
        sampler,
        noise_ratio: float = NOISE_RATIO,
        max_learning_rate: float = MAX_LEARNING_RATE,
        n_cycles: int | None = None,
        peak_step_size: float | None = None,
        choose_step: bool = True,
    ):
        self.sampler = sampler
        self.noise_ratio = noise_ratio
        self.max_learning_rate = max_learning_rate
        self.n_cycles = n_cycles
        self.peak_step_size = peak_step_size
        self.choose_step = choose_step

    def build(self, target):
        return self.sampler.build(target)

    def __getattr__(self, name):  # check_target, describe, ...: those of the wrapped sampler
        if name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def _langevin(self) -> bool:
        return not hasattr(self.sampler, "momentum")

    def choose_step_size(self, target, positions: torch.Tensor, seed=0) -> torch.Tensor:
        """(C,) sampling steps of :func:`gradient_noise_step_size` at ``positions`` (the
        unadjusted kernels then keep them under the curvature's bound through warmup)."""
        v = gradient_noise_variance(target, positions, seed=seed)
        return gradient_noise_step_size(
            v.double().cpu(),
            int(target.n_data),
            langevin=self._langevin(),
            momentum=float(getattr(self.sampler, "momentum", 0.9)),
            noise_ratio=self.noise_ratio,
            max_learning_rate=self.max_learning_rate,
        )

    def run(self, target, positions, driver, **kwargs):
        """The sampler protocol's run (see :meth:`~sklearn_bnn.samplers.Sampler.run`): MAP start,
        step choice and schedule, then the wrapped sampler's own run."""
        config = kwargs["config"]
        sampler = copy.copy(self.sampler)
        n = int(target.n_data)
        train = training_step_size(n, langevin=self._langevin())
        seed = kwargs.get("seed")  # the run's SeedSequence: its "init" and "step_size" children
        start = kwargs.get("start")
        kwargs = {**kwargs, "start": None}  # the chains start here, not in the chain runner
        search = None
        # on the target's device before the step-size choice evaluates gradients there (a
        # random start is drawn on the CPU)
        found = capabilities(target)
        positions = positions.to(
            positions.device if found.device is None else found.device,
            positions.dtype if found.dtype is None else found.dtype,
        )
        if start is not None:
            positions, search = start.find(
                target,
                positions,
                seed=0 if seed is None else child(root_seed(seed), "init"),
                desc=kwargs.get("desc", "SG-MCMC"),
                verbose=kwargs.get("verbose", False),
            )
        if isinstance(config.step_size, str) and self.choose_step:
            seed = 0 if seed is None else child(root_seed(seed), "step_size")
            eps = self.choose_step_size(target, positions, seed=seed)
            config = config.replace(step_size=eps.to(positions.dtype))
            sampler.step_size = float(eps.max())
            sampler.step_chosen_from_data = True  # its kernels bound it by the curvature
            if search is None and sampler.warmup_step_size is None:
                sampler.warmup_step_size = max(train, float(eps.max()))
        elif isinstance(sampler.step_size, str) and not isinstance(config.step_size, str):
            # a continued run (warm start, the calibrated fit's second stage) goes on at the
            # steps it chose before, which the run carries; the kernel's own is their largest
            sampler.step_size = float(torch.as_tensor(config.step_size).max())
        if self.n_cycles:  # a schedule planned over the sampling phase: a fixed length
            config = config.replace(n_draws=as_length(config.n_draws))
            sampler.schedule = CyclicalSchedule(
                self.n_cycles,
                int(config.n_draws),
                self.peak_step_size if self.peak_step_size is not None else train,
            )
        run, states = sampler.run(target, positions, driver, **{**kwargs, "config": config})
        if search is not None:
            run.stats.update(
                init_steps=search.steps_per_chain,
                init_loss=search.loss_curve[-1],  # the budget allows at least one step
                init_converged=bool(search.converged.all()),
            )
        return run, states


def estimator_setup(sampler, *, n_cycles=None, map_start=False):
    """A minibatch sampler as the SG-MCMC estimators run it: wrapped in
    :class:`AutoStepSampler` where it needs the minibatch MAP start (``map_start``), the step
    chosen from the data (the sampler's ``step_size="auto"``) or a cyclical schedule
    (``n_cycles``); else unchanged.

    Examples
    --------
    >>> from sklearn_bnn.samplers import SGHMC
    >>> type(estimator_setup(SGHMC(), map_start=True)).__name__
    'AutoStepSampler'
    >>> type(estimator_setup(SGHMC(step_size=1e-3))).__name__
    'SGHMC'
    """
    choose_step = isinstance(sampler.step_size, str) and sampler.step_size == "auto"
    if choose_step or n_cycles or map_start:
        return AutoStepSampler(sampler, n_cycles=n_cycles, choose_step=choose_step)
    return sampler
