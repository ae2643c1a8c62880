"""The kernels of the stochastic-gradient samplers of :mod:`.sgmcmc` (Schmal & Mäder 2026).

Batches, the warmup step-size schedule (told its length by the loop through ``init``), the
momentum draws and the divergence bookkeeping shared by all of them (:class:`SGKernel`); the
unadjusted updates of SGLD and SGHMC. The adjusted kernels (AMAGOLD, GSGHMC, HTE) are in
:mod:`.sg_adjusted`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...targets import capabilities
from .._base import Info, Kernel, State
from ._sg_graphs import DrawnNoise, GraphedSGSteps
from .sg_integrators import (
    cosine_step_size,
    euler_momentum,
    ornstein_uhlenbeck,
    skew_momentum,
    skew_noise_variance,
)

__all__ = ["SGHMCKernel", "SGLDKernel"]


#: During warmup the unadjusted kernels bound their step by this fraction of the full-data
#: dynamics' stability scale (``sg_step_size.curvature_step_size``), measured at the chains'
#: positions at each of the first :data:`CURVATURE_EVERY` transitions (where a chain leaving
#: its start stiffens fastest) and every :data:`CURVATURE_EVERY` after.
CURVATURE_FRACTION = 0.5
CURVATURE_EVERY = 25
#: Fewest minibatch steps in a transition at ``n_steps=None`` (an epoch otherwise): on small
#: data an epoch is one to a few steps, and a draw every step or two would make the budget of
#: a run, counted in transitions, a few hundred steps.
MIN_STEPS_PER_TRANSITION = 16


def _run_state_field(name: str) -> property:
    """A read-write kernel attribute that is the field ``name`` of the kernel's ``_run_state``
    (which the copies a Gibbs step makes share).

    Parameters
    ----------
    name : str
        A field of :class:`_RunState`.

    Returns
    -------
    property
    """
    return property(
        lambda kernel: getattr(kernel._run_state, name),
        lambda kernel, value: setattr(kernel._run_state, name, value),
        doc=f"The run's ``{name}``.",
    )


class SGKernel(Kernel):
    """Batches, schedule, momentum and divergence bookkeeping shared by the SG kernels."""

    adapts_step_size = False

    def __init__(self, sampler, target):
        self.target = target
        self.sampler = sampler
        self.step_size = float(sampler.step_size)
        self.warmup_step_size = sampler.warmup_step_size
        self.n_rows = int(target.n_data)
        self.rows_per_batch = min(int(target.batch_size), self.n_rows)
        self.n_batches = max(self.n_rows // self.rows_per_batch, 1)
        self.n_steps = int(sampler.n_steps) if sampler.n_steps is not None else self.n_batches
        self.alpha = float(getattr(sampler, "momentum", 0.0))
        # a step chosen from the data (AutoStepSampler) is bounded by the curvature in warmup
        self.bounds_step = bool(getattr(sampler, "step_chosen_from_data", False))
        self.temperature = float(getattr(sampler, "temperature", 1.0))
        self._run_state = _RunState(0)

    # -- the run's state, shared with the copies a Gibbs step makes (``with_target``) ----------
    @property
    def n_warmup(self) -> int:
        """Warmup transitions, told by the loop through :meth:`init` (the cosine schedule)."""
        return self._run_state.n_warmup

    _transition = _run_state_field("transition")
    _epochs = _run_state_field("epochs")

    def progress(self, info) -> str:
        """Epochs of minibatch gradients so far."""
        return f"epoch={float(info.extra['epoch'].max()):.4g}"

    # -- data ----------------------------------------------------------------------------------
    def _batches(self, generator):
        """Row indices of ``n_steps`` batches: consecutive slices of random permutations, as a
        tensor on the data's device where the target keeps them resident (no transfer, no
        host synchronisation), else as numpy indices. The same rows either way."""
        device = self.capabilities.batch_device
        done = 0
        while done < self.n_steps:
            if self.rows_per_batch >= self.n_rows:
                perm = torch.arange(self.n_rows, device=generator.device)
            else:
                perm = torch.randperm(self.n_rows, generator=generator, device=generator.device)
            perm = perm.to(device) if device is not None else perm.cpu().numpy()
            batches = perm[: self.n_batches * self.rows_per_batch].reshape(self.n_batches, -1)
            # each batch sorted: contiguous reads from a memory map, the same order on any device
            batches = batches.sort(dim=1).values if device is not None else np.sort(batches, 1)
            for rows in batches:
                if done == self.n_steps:
                    return
                yield rows
                done += 1

    def _first_rows(self):
        """Rows spread evenly over the data: a representative start batch even when the rows
        are sorted (the first rows of a class-sorted data set are a single class)."""
        return np.unique(np.linspace(0, self.n_rows - 1, self.rows_per_batch).astype(np.int64))

    def init(self, position: torch.Tensor, generator=None, *, n_warmup: int = 0) -> State:
        """The start state: log density estimate and gradient on one batch (the first rows);
        the schedule restarts, with ``n_warmup`` transitions of warmup."""
        if position.ndim == 1:
            position = position[None]
        self._run_state = _RunState(int(n_warmup))
        value, grad = self.target.batch_value_and_grad(position.detach(), self._first_rows())
        return State(position.detach(), value, grad)

    # -- helpers ---------------------------------------------------------------------------------
    def _eps(self, eps: torch.Tensor, step: int) -> torch.Tensor:
        """(C, 1) step size of minibatch step ``step`` of this transition (cosine in warmup;
        after it, the sampler's ``schedule`` of the sampling transition, if it has one)."""
        if self._transition >= self.n_warmup:
            schedule = getattr(self.sampler, "schedule", None)  # fixed within a transition
            if schedule is None:
                return eps[:, None]
            return schedule(eps[:, None], self._transition - self.n_warmup)
        if self.warmup_step_size is None:
            return eps[:, None]
        progress = (self._transition + step / self.n_steps) / self.n_warmup
        return cosine_step_size(eps[:, None], float(self.warmup_step_size), progress)

    def _randn(self, like, generator):
        return torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)

    def _momentum(self, position, inv_mass, generator, temperature):
        """m ~ N(0, T M)."""
        if temperature == 0:
            return torch.zeros_like(position)
        return self._randn(position, generator) * (temperature / inv_mass).sqrt()

    def _grad_fn(self, rows):
        return lambda theta: self.target.batch_value_and_grad(theta, rows)

    def _likelihood_grad_fn(self, rows):
        """``theta -> (value, grad)`` on ``rows`` for a caller that uses only the gradient:
        the value without the log prior where the target can leave it out."""
        split = self.capabilities.batch_likelihood_and_grad
        if split is None:
            return self._grad_fn(rows)
        return lambda theta: split(theta, rows)

    def _info(self, eps, accept_prob, accepted, energy_error, divergent, n_div_steps, extra=None):
        C = eps.shape[0]
        extra = dict(extra or {})
        extra["divergent_steps"] = n_div_steps.to(torch.float64)
        # epochs of minibatch gradients so far (the progress bar shows it)
        passes = self.n_steps * self.rows_per_batch / self.n_rows
        tries = extra.get("n_tries")
        self._epochs += passes * (float(tries.max()) if tries is not None else 1.0)
        extra["epoch"] = torch.full((C,), self._epochs, dtype=torch.float64)
        return Info(
            accept_prob=accept_prob,
            accepted=accepted,
            energy_error=energy_error,
            divergent=divergent,
            step_size=eps.expand(C).clone(),
            n_grad=self.n_steps * self.rows_per_batch / self.n_rows,
            extra=extra,
        )

    @staticmethod
    def _finite(value, grad, theta):
        """(C,) True where the density, the gradient and the position are all finite: one
        reduction (a NaN or an infinity anywhere makes the sum non-finite; a sum that overflows
        counts as a divergence too), which keeps this check off the step's critical path."""
        return torch.isfinite(value + grad.sum(-1) + theta.sum(-1))


class _RunState:
    """What a kernel carries from one transition to the next: where it is in its schedule
    (transitions and epochs done, warmup length) and the momentum of its chains."""

    __slots__ = ("epochs", "momentum", "n_warmup", "step_bound", "transition")

    def __init__(self, n_warmup: int):
        self.n_warmup, self.transition, self.epochs = n_warmup, 0, 0.0
        self.momentum = None  # (C, D), set by the first transition
        self.step_bound = None  # (C, 1), the curvature's bound on the step, set in warmup


class _Scratch:
    """The buffers of one transition of an unadjusted kernel, reused by every minibatch step.

    ``noise`` receives each step's N(0, 1) draw, ``tmp`` the one product an update needs
    rounded on its own (a fused multiply-add would change the last bits of the draws), and
    ``spare`` the next position.
    """

    __slots__ = ("noise", "spare", "start", "tmp")

    def __init__(self, theta: torch.Tensor):
        self.start = theta  # the caller's position: never written into
        self.noise = torch.empty_like(theta)
        self.tmp = torch.empty_like(theta)
        self.spare = torch.empty_like(theta)

    def moved(self, old: torch.Tensor, new: torch.Tensor) -> None:
        """``new`` (written into ``spare``) replaced ``old``: ``old``'s memory is the next spare."""
        self.spare = torch.empty_like(old) if old is self.start else old


class _UnadjustedKernel(SGKernel):
    """SGLD and SGHMC: no acceptance test; a step whose position, density or gradient is not
    finite is undone (a divergence, counted) and the momentum of that chain is drawn afresh.

    The updates run in place on per-transition buffers (:class:`_Scratch`); the noise is drawn
    into one of them, and the coefficients that depend on the step size are computed once per
    transition (per step during the cosine warmup). Each product is rounded on its own, in
    the order of the update rules in :mod:`.sg_integrators`, so the draws are those of the
    plain expressions bit for bit.
    """

    draws_per_step = 1  # normal draws of the position's shape per minibatch step

    def __init__(self, sampler, target):
        super().__init__(sampler, target)
        if sampler.n_steps is None:  # no test on the trajectory: at least a few dozen steps
            self.n_steps = max(self.n_batches, MIN_STEPS_PER_TRANSITION)
        self._bind(target)
        self.graphs = GraphedSGSteps()  # on a GPU: the step recorded once, replayed (shared)

    def _bind(self, target) -> None:
        # per step only the likelihood's value where the target can leave the prior out (the
        # finiteness test needs no more); the prior's value is added to the last step's value,
        # which gives batch_value_and_grad's value bit for bit
        self._split = capabilities(target).batch_likelihood_and_grad
        self._evaluate = target.batch_value_and_grad if self._split is None else self._split

    def with_target(self, target):
        """As :meth:`Kernel.with_target`, with the batch evaluations bound to ``target``."""
        kernel = super().with_target(target)
        kernel._bind(target)
        return kernel

    def step(self, state, generator, step_size=None, inv_mass=None):
        theta, value, grad = state
        C = theta.shape[0]
        eps0 = torch.as_tensor(step_size, dtype=theta.dtype, device=theta.device).expand(C)
        eps0 = self.final_step_size(self._bound_in_warmup(theta, generator, eps0))
        inv_mass = inv_mass.to(theta)
        # unit mass (the default): M^-1 = M^1/2 = 1 and their products are skipped, exactly
        mass = None if bool((inv_mass == 1).all()) else (inv_mass, inv_mass.rsqrt())
        T = self.temperature
        m = self._carried_momentum(theta, inv_mass, generator, T)
        replayed = None
        if self.graphs.applies(self, theta):
            replayed = self.graphs.transition(self, theta, value, grad, m, eps0, mass, generator)
        if replayed is None:
            theta, value, grad, n_div = self._eager_steps(
                theta, value, grad, m, eps0, inv_mass, mass, generator
            )
        else:
            theta, value, grad, n_div = replayed
        self._run_state.momentum = m  # updated in place by the steps
        self._transition += 1
        moved = n_div < self.n_steps
        if self._split is not None:  # a chain that never moved keeps its full value
            full = value + self.target.log_prior(theta)
            value = full if bool(moved.all()) else torch.where(moved, full, value)
        zeros = torch.zeros(C, dtype=theta.dtype, device=theta.device)
        accept = 1.0 - n_div.to(theta.dtype) / self.n_steps
        info = self._info(eps0, accept, moved, zeros, n_div > 0, n_div)
        return State(theta, value, grad), info

    def _bound_in_warmup(self, theta, generator, eps0):
        """At the warmup transitions of :data:`CURVATURE_EVERY`, the bound on the step from the
        curvature at the chains' positions (the dynamics grow stiffer as a chain leaves its
        start: a regression's learned noise precision rises a hundredfold on some data); the
        bound of the last such measure holds for the rest of the run. Returns ``eps0``."""
        t = self._transition
        if not self.bounds_step:  # a step the user gave is taken as it is
            return eps0
        if t < self.n_warmup and (t < CURVATURE_EVERY or t % CURVATURE_EVERY == 0):
            from .sg_step_size import curvature_step_size

            scale = curvature_step_size(self.target, theta, generator)
            self._run_state.step_bound = self._bound(scale).to(theta.dtype)
        return eps0

    def _bound(self, scale):
        """The largest step this kernel takes given the stability scale of a leapfrog step."""
        return CURVATURE_FRACTION * scale

    def final_step_size(self, eps):
        """The step the kernel takes for ``eps`` (C,): at most the curvature's bound."""
        bound = self._run_state.step_bound
        if bound is None:
            return eps
        return torch.minimum(torch.as_tensor(eps).to(bound), bound)

    def _carried_momentum(self, theta, inv_mass, generator, temperature):
        """The momentum the chains ended their previous transition with, drawn from N(0, T M)
        at the first. Carrying it keeps the dynamics' persistence (about 1 / (1 - alpha)
        steps) across transitions: a fresh draw at every transition made the chain a random
        walk wherever a transition holds fewer steps than that."""
        m = self._run_state.momentum
        if m is None or m.shape != theta.shape or m.device != theta.device:
            return self._momentum(theta, inv_mass, generator, temperature)
        return m.to(theta.dtype)

    def _eager_steps(self, theta, value, grad, m, eps0, inv_mass, mass, generator):
        """The transition's minibatch steps launched one by one (the CPU's path), with one
        host read per step to test for a divergence."""
        C, T = theta.shape[0], self.temperature
        work = _Scratch(theta)
        n_div = torch.zeros(C, dtype=torch.long, device=theta.device)
        scheduled = self.warmup_step_size is not None and self._transition < self.n_warmup
        coef = None
        for i, rows in enumerate(self._batches(generator)):
            if coef is None or scheduled:
                coef = self._coefficients(self._eps(eps0, i), mass)
            new_theta, new_value, new_grad = self._move(
                theta, m, grad, coef, mass, work, generator, rows
            )
            ok = None  # the per-chain test runs only where the one-sync test fails
            if not self._all_finite(new_value, new_grad, new_theta):
                ok = self._finite(new_value, new_grad, new_theta)
            if ok is None or bool(ok.all()):
                work.moved(theta, new_theta)
                theta, value, grad = new_theta, new_value, new_grad
                continue
            n_div += ~ok
            keep = ok[:, None]
            theta = torch.where(keep, new_theta, theta)
            work.spare = new_theta
            value = torch.where(ok, new_value, value)
            grad = torch.where(keep, new_grad, grad)
            m.copy_(torch.where(keep, m, self._momentum(theta, inv_mass, generator, T)))
        return theta, value, grad, n_div

    @staticmethod
    def _all_finite(value, grad, theta) -> bool:
        """Whether every chain passes :meth:`_finite`, with one transfer to the host (for
        several chains, a total that overflows sends the step to the per-chain test)."""
        total = grad.sum(-1).add_(value).add_(theta.sum(-1))
        return math.isfinite(float(total.sum() if total.shape[0] > 1 else total))

    def _noise(self, work, generator):
        """N(0, 1) draws into ``work.noise``: the numbers ``torch.randn`` would give (a replayed
        step takes the draws made before its replay instead)."""
        if isinstance(generator, DrawnNoise):
            return generator.take()
        return work.noise.normal_(generator=generator)

    @staticmethod
    def _position_step(theta, scale, m, work):
        """theta + scale * m, written into ``work.spare`` (scale: (C, 1) or (C, D))."""
        return torch.add(theta, torch.mul(scale, m, out=work.tmp), out=work.spare)


class SGLDKernel(_UnadjustedKernel):
    """theta <- theta + eps M^-1 g + sqrt(2 eps T) M^-1/2 xi (Welling & Teh 2011)."""

    def _bound(self, scale):
        # SGLD's eps is a learning rate, a leapfrog step's square
        return (CURVATURE_FRACTION * scale) ** 2

    def _coefficients(self, eps, mass):
        drift = eps if mass is None else eps * mass[0]
        return drift, (2.0 * eps * self.temperature).sqrt()

    def _move(self, theta, m, grad, coef, mass, work, generator, rows):
        drift, scale = coef
        noise = self._noise(work, generator)
        theta = self._position_step(theta, drift, grad, work)
        if self.temperature > 0:
            noise.mul_(scale)
            theta.add_(noise if mass is None else noise.div_(mass[1]))
        value, grad = self._evaluate(theta, rows)
        return theta, value, grad


class SGHMCKernel(_UnadjustedKernel):
    """SGHMC with the Euler-Maruyama, OBABO or skew-symmetric update (Schmal & Mäder 2026)."""

    def __init__(self, sampler, target):
        self.integrator = sampler.integrator
        super().__init__(sampler, target)
        self.draws_per_step = 2 if self.integrator == "obabo" else 1

    def _bind(self, target) -> None:
        super()._bind(target)
        if self.integrator == "skew":  # the value is that of the midpoint: computed there
            self._split, self._evaluate = None, target.batch_value_and_grad

    def _coefficients(self, eps, mass):
        if self.integrator == "euler":
            return eps, (eps if mass is None else eps * mass[0])
        half = 0.5 * eps
        if self.integrator == "obabo":
            return half, (eps if mass is None else eps * mass[0])
        return eps, (half if mass is None else half * mass[0])

    def _move(self, theta, m, grad, coef, mass, work, generator, rows):
        T, alpha = self.temperature, self.alpha
        sqrt_mass = None if mass is None else mass[1]
        if self.integrator == "euler":
            eps, drift = coef
            noise = self._noise(work, generator)
            euler_momentum(m, grad, eps, alpha, T, sqrt_mass, noise, work.tmp)
            theta = self._position_step(theta, drift, m, work)
            value, grad = self._evaluate(theta, rows)
            return theta, value, grad
        if self.integrator == "obabo":  # O, then B-A-B (bab), then O
            half, drift = coef
            a = math.sqrt(alpha)
            ornstein_uhlenbeck(m, a, T, sqrt_mass, self._noise(work, generator))
            m.add_(torch.mul(half, grad, out=work.tmp))
            theta = self._position_step(theta, drift, m, work)
            value, grad = self._evaluate(theta, rows)
            m.add_(torch.mul(half, grad, out=work.tmp))
            ornstein_uhlenbeck(m, a, T, sqrt_mass, self._noise(work, generator))
            return theta, value, grad
        # skew-symmetric: half position steps around a momentum update at the midpoint
        eps, half_drift = coef
        half = self._position_step(theta, half_drift, m, work)
        value, grad = self._evaluate(half, rows)
        xi = self._noise(work, generator).mul_(math.sqrt(skew_noise_variance(alpha) * T))
        if sqrt_mass is not None:
            xi.mul_(sqrt_mass)
        skew_momentum(m, grad, eps, alpha, xi, work.tmp)
        half.add_(torch.mul(half_drift, m, out=work.tmp))
        return half, value, grad
