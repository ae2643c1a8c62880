"""The kernels of the stochastic-gradient samplers of :mod:`.sgmcmc` (seeds/004, REFERENCE §6).

Batches, the burn-in step-size schedule (told its length by the loop through ``init``), the
momentum draws and the divergence bookkeeping shared by all of them (:class:`_SGKernel`); the
unadjusted updates of SGLD and SGHMC; AMAGOLD's, GSGHMC's and HTE's adjusted transitions.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._base import Info, Kernel, State, kinetic_energy
from .sg_integrators import (
    bab,
    cosine_step_size,
    euler_momentum,
    ornstein_uhlenbeck,
    skew_momentum,
    skew_noise_variance,
)

__all__ = [
    "AMAGOLDKernel",
    "GSGHMCKernel",
    "HTEKernel",
    "SGHMCKernel",
    "SGLDKernel",
    "amagold_trajectory",
]


DIVERGENCE_THRESHOLD = 1000.0


class _SGKernel(Kernel):
    """Batches, schedule, momentum and divergence bookkeeping shared by the SG kernels."""

    adapts_step_size = False

    def __init__(self, sampler, target):
        self.target = target
        self.sampler = sampler
        self.step_size = float(sampler.step_size)
        self.burnin_step_size = sampler.burnin_step_size
        self.n_rows = int(target.n_data)
        self.rows_per_batch = min(int(target.batch_size), self.n_rows)
        self.n_batches = max(self.n_rows // self.rows_per_batch, 1)
        self.n_steps = int(sampler.n_steps) if sampler.n_steps is not None else self.n_batches
        self.alpha = float(getattr(sampler, "momentum", 0.0))
        self.temperature = float(getattr(sampler, "temperature", 1.0))
        self._clock = _Clock(0)

    # -- the schedule's clock, shared with the copies a Gibbs step makes (``with_target``) ----
    @property
    def n_burnin(self) -> int:
        """Warmup transitions, told by the loop through :meth:`init` (the cosine schedule)."""
        return self._clock.n_warmup

    @property
    def _transition(self) -> int:
        return self._clock.transition

    @_transition.setter
    def _transition(self, value: int) -> None:
        self._clock.transition = value

    @property
    def _epochs(self) -> float:
        return self._clock.epochs

    @_epochs.setter
    def _epochs(self, value: float) -> None:
        self._clock.epochs = value

    def progress(self, info) -> str:
        """Epochs of minibatch gradients so far."""
        return f"epoch={float(info.extra['epoch'].max()):.4g}"

    # -- data ----------------------------------------------------------------------------------
    def _batches(self, generator):
        """Row indices of ``n_steps`` batches: consecutive slices of random permutations."""
        done = 0
        while done < self.n_steps:
            if self.rows_per_batch >= self.n_rows:
                perm = np.arange(self.n_rows)
            else:
                perm = torch.randperm(self.n_rows, generator=generator, device=generator.device)
                perm = perm.cpu().numpy()
            for b in range(self.n_batches):
                if done == self.n_steps:
                    return
                rows = perm[b * self.rows_per_batch : (b + 1) * self.rows_per_batch]
                yield np.sort(rows)  # sorted: contiguous reads from a memory map
                done += 1

    def _first_rows(self):
        """Rows spread evenly over the data: a representative start batch even when the rows
        are sorted (the first rows of a class-sorted data set are a single class)."""
        return np.unique(np.linspace(0, self.n_rows - 1, self.rows_per_batch).astype(np.int64))

    def init(self, position: torch.Tensor, generator=None, *, n_warmup: int = 0) -> State:
        """The start state: log density estimate and gradient on one batch (the first rows);
        the schedule restarts, with ``n_warmup`` transitions of burn-in."""
        if position.ndim == 1:
            position = position[None]
        self._clock = _Clock(int(n_warmup))
        value, grad = self.target.batch_value_and_grad(position.detach(), self._first_rows())
        return State(position.detach(), value, grad)

    # -- helpers ---------------------------------------------------------------------------------
    def _eps(self, eps: torch.Tensor, step: int) -> torch.Tensor:
        """(C, 1) step size of minibatch step ``step`` of this transition (cosine in burn-in)."""
        if self.burnin_step_size is None or self._transition >= self.n_burnin:
            return eps[:, None]
        progress = (self._transition + step / self.n_steps) / self.n_burnin
        return cosine_step_size(eps[:, None], float(self.burnin_step_size), progress)

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
        split = getattr(self.target, "batch_likelihood_and_grad", None)
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


class _Clock:
    """Where a kernel is in its schedule: transitions and epochs done, warmup length."""

    __slots__ = ("epochs", "n_warmup", "transition")

    def __init__(self, n_warmup: int):
        self.n_warmup, self.transition, self.epochs = n_warmup, 0, 0.0


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


class _UnadjustedKernel(_SGKernel):
    """SGLD and SGHMC: no acceptance test; a step whose position, density or gradient is not
    finite is undone (a divergence, counted) and the momentum of that chain is drawn afresh.

    The updates run in place on per-transition buffers (:class:`_Scratch`); the noise is drawn
    into one of them, and the coefficients that depend on the step size are computed once per
    transition (per step during the cosine burn-in). Each product is rounded on its own, in
    the order of the update rules in :mod:`.sg_integrators`, so the draws are those of the
    plain expressions bit for bit.
    """

    def __init__(self, sampler, target):
        super().__init__(sampler, target)
        # per step only the likelihood's value where the target can leave the prior out (the
        # finiteness test needs no more); the prior's value is added to the last step's value,
        # which gives batch_value_and_grad's value bit for bit
        self._split = getattr(target, "batch_likelihood_and_grad", None)
        self._evaluate = target.batch_value_and_grad if self._split is None else self._split

    def step(self, state, generator, step_size=None, inv_mass=None):
        theta, value, grad = state
        C = theta.shape[0]
        eps0 = torch.as_tensor(step_size, dtype=theta.dtype, device=theta.device).expand(C)
        inv_mass = inv_mass.to(theta)
        # unit mass (the default): M^-1 = M^1/2 = 1 and their products are skipped, exactly
        mass = None if bool((inv_mass == 1).all()) else (inv_mass, inv_mass.rsqrt())
        T = self.temperature
        m = self._momentum(theta, inv_mass, generator, T)
        work = _Scratch(theta)
        n_div = torch.zeros(C, dtype=torch.long, device=theta.device)
        scheduled = self.burnin_step_size is not None and self._transition < self.n_burnin
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
        self._transition += 1
        moved = n_div < self.n_steps
        if self._split is not None:  # a chain that never moved keeps its full value
            full = value + self.target.log_prior(theta)
            value = full if bool(moved.all()) else torch.where(moved, full, value)
        zeros = torch.zeros(C, dtype=theta.dtype, device=theta.device)
        accept = 1.0 - n_div.to(theta.dtype) / self.n_steps
        info = self._info(eps0, accept, moved, zeros, n_div > 0, n_div)
        return State(theta, value, grad), info

    @staticmethod
    def _all_finite(value, grad, theta) -> bool:
        """Whether every chain passes :meth:`_finite`, with one transfer to the host (for
        several chains, a total that overflows sends the step to the per-chain test)."""
        total = grad.sum(-1).add_(value).add_(theta.sum(-1))
        return math.isfinite(float(total.sum() if total.shape[0] > 1 else total))

    def _noise(self, work, generator):
        """N(0, 1) draws into ``work.noise``: the numbers ``torch.randn`` would give."""
        return work.noise.normal_(generator=generator)

    @staticmethod
    def _position_step(theta, scale, m, work):
        """theta + scale * m, written into ``work.spare`` (scale: (C, 1) or (C, D))."""
        return torch.add(theta, torch.mul(scale, m, out=work.tmp), out=work.spare)


class SGLDKernel(_UnadjustedKernel):
    """theta <- theta + eps M^-1 g + sqrt(2 eps T) M^-1/2 xi (Welling & Teh 2011)."""

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
    """SGHMC with the Euler-Maruyama, OBABO or skew-symmetric update (seeds/004 Table 1)."""

    def __init__(self, sampler, target):
        super().__init__(sampler, target)
        self.integrator = sampler.integrator
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


def amagold_trajectory(theta, r, eps, alpha, inv_mass, grad_fn, noise_fn, n_steps):
    """The skew-symmetric trajectory of AMAGOLD (seeds/004 Algorithm 2; Zhang et al. 2020).

    theta_1/2 = theta + eps/2 M^-1 r; for t = 1..L: g_t = grad_fn(theta_t-1/2, t), r_t =
    ((1-b) r_t-1 + eps g_t + xi_t) / (1+b), theta_t+1/2 = theta_t-1/2 + eps M^-1 r_t (the last
    move a half step). ``noise_fn(t)`` gives xi_t ~ N(0, 4 b M).

    Returns
    -------
    theta_L, r_L, rho
        rho = -sum_t eps/2 g_t . M^-1 (r_t-1 + r_t): with it, log(q_backward / q_forward) =
        K(r_L) - K(r_0) + rho exactly, and the acceptance log-probability is
        log p(theta_L) - log p(theta_0) + rho (the kinetic energies cancel).
    """
    half = theta + 0.5 * eps * inv_mass * r
    rho = torch.zeros(theta.shape[0], dtype=theta.dtype, device=theta.device)
    for t in range(n_steps):
        _, g = grad_fn(half, t)
        r_new = skew_momentum(r, g, eps, alpha, noise_fn(t))
        rho = rho - 0.5 * (eps * g * inv_mass * (r + r_new)).sum(-1)
        r = r_new
        step = eps if t < n_steps - 1 else 0.5 * eps
        half = half + step * inv_mass * r
    return half, r, rho


class _ExactEnergyKernel(_SGKernel):
    """AMAGOLD and HTE: state.log_prob is the exact full-data log density (for the test)."""

    def init(self, position, generator=None, *, n_warmup: int = 0):
        state = super().init(position, generator, n_warmup=n_warmup)
        return State(state.position, self.target.log_prob(state.position).detach(), state.grad)

    def _accept(self, state, theta, grad, log_ratio, generator, C):
        log_prob_new = self.target.log_prob(theta).detach()
        log_ratio = log_ratio + log_prob_new - state.log_prob
        finite = torch.isfinite(log_ratio) & torch.isfinite(theta).all(-1)
        energy_error = torch.where(finite, -log_ratio, torch.full_like(log_ratio, math.inf))
        divergent = energy_error > DIVERGENCE_THRESHOLD
        accept_prob = torch.exp(torch.clamp(-energy_error, max=0.0))
        u = torch.rand(C, generator=generator, dtype=theta.dtype, device=theta.device)
        accepted = (u < accept_prob) & ~divergent
        keep = accepted[:, None]
        new = State(
            torch.where(keep, theta, state.position),
            torch.where(accepted, log_prob_new, state.log_prob),
            torch.where(keep & torch.isfinite(grad).all(-1, keepdim=True), grad, state.grad),
        )
        return new, accept_prob, accepted, energy_error, divergent


class AMAGOLDKernel(_ExactEnergyKernel):
    def step(self, state, generator, step_size=None, inv_mass=None):
        theta = state.position
        C = theta.shape[0]
        eps0 = torch.as_tensor(step_size, dtype=theta.dtype, device=theta.device).expand(C)
        inv_mass = inv_mass.to(theta)
        sd = math.sqrt(skew_noise_variance(self.alpha)) * inv_mass.rsqrt()
        r = self._momentum(theta, inv_mass, generator, 1.0)
        batches = list(self._batches(generator))
        eps = self._eps(eps0, 0)  # one step size per trajectory (the test needs it fixed)
        last = {}

        def grad_fn(x, t):  # the value is not used
            value, g = self._likelihood_grad_fn(batches[t])(x)
            last["grad"] = g
            return value, g

        theta_new, r_new, rho = amagold_trajectory(
            theta,
            r,
            eps,
            self.alpha,
            inv_mass,
            grad_fn,
            lambda t: self._randn(theta, generator) * sd,
            self.n_steps,
        )
        new, prob, acc, err, div = self._accept(state, theta_new, last["grad"], rho, generator, C)
        self._transition += 1
        return new, self._info(eps0, prob, acc, err, div, div.long())


class GSGHMCKernel(_SGKernel):
    """OBABO with a Metropolis-Hastings test of each B-A-B move on the batch of the new point."""

    def __init__(self, sampler, target):
        super().__init__(sampler, target)
        self.paired = sampler.energy == "paired"

    def _batch_log_prob(self, theta, rows):
        """(N/|B|) l_B(theta) + log p(theta) without a gradient (a forward pass only)."""
        if hasattr(self.target, "batch_log_prob"):
            return self.target.batch_log_prob(theta, rows)
        return self.target.batch_value_and_grad(theta, rows)[0]

    def acceptance(self, info):
        return info.extra["step_accept_rate"].double()

    def step(self, state, generator, step_size=None, inv_mass=None):
        theta, value, grad = state
        C = theta.shape[0]
        eps0 = torch.as_tensor(step_size, dtype=theta.dtype, device=theta.device).expand(C)
        inv_mass = inv_mass.to(theta)
        sqrt_mass = inv_mass.rsqrt()
        a = math.sqrt(self.alpha)
        m = self._momentum(theta, inv_mass, generator, 1.0)
        n_acc = torch.zeros(C, dtype=theta.dtype, device=theta.device)
        sum_prob = torch.zeros_like(n_acc)
        n_div = torch.zeros(C, dtype=torch.long, device=theta.device)
        for i, rows in enumerate(self._batches(generator)):
            eps = self._eps(eps0, i)
            m = ornstein_uhlenbeck(m, a, 1.0, sqrt_mass, self._randn(theta, generator))
            th_p, m_p, v_p, g_p = bab(theta, m, grad, eps, inv_mass, self._grad_fn(rows))
            if self.paired:  # both energies on the new batch: one extra forward pass
                value = self._batch_log_prob(theta, rows)
            # seeds/004 eq. 9: the augmented target exp(-U_tau(theta)) Unif_B(tau) N(m; 0, M)
            log_ratio = v_p - value - kinetic_energy(m_p, inv_mass) + kinetic_energy(m, inv_mass)
            ok = self._finite(v_p, g_p, th_p) & torch.isfinite(log_ratio)
            log_ratio = torch.where(ok, log_ratio, torch.full_like(log_ratio, -math.inf))
            prob = torch.exp(torch.clamp(log_ratio, max=0.0))
            u = torch.rand(C, generator=generator, dtype=theta.dtype, device=theta.device)
            acc = u < prob
            keep = acc[:, None]
            theta = torch.where(keep, th_p, theta)
            value = torch.where(acc, v_p, value)
            grad = torch.where(keep, g_p, grad)
            m = torch.where(keep, m_p, -m)  # generalized HMC: flip the momentum on rejection
            m = ornstein_uhlenbeck(m, a, 1.0, sqrt_mass, self._randn(theta, generator))
            n_acc += acc
            sum_prob += prob
            n_div += ~ok
        self._transition += 1
        rate = n_acc / self.n_steps
        zeros = torch.zeros(C, dtype=theta.dtype, device=theta.device)
        info = self._info(
            eps0,
            sum_prob / self.n_steps,
            n_acc > 0,
            zeros,
            n_div > 0,
            n_div,
            {"step_accept_rate": rate},
        )
        return State(theta, value, grad), info


class HTEKernel(_ExactEnergyKernel):
    """seeds/004 Algorithm 1: m ~ N(0, M); OBABO at T = 0 over the trajectory; HMC-style test.

    As in Algorithm 1, a rejected trajectory adds no draw: the chain restarts from the same
    position with a fresh momentum until a trajectory is accepted, at most ``max_tries``
    trajectories per transition (then the previous draw is repeated, as plain HMC would, and
    the transition counts as rejected). ``info.extra["n_tries"]`` records the trajectories used.
    """

    def __init__(self, sampler, target):
        super().__init__(sampler, target)
        self.max_tries = int(sampler.max_tries)

    def acceptance(self, info):
        """Accepted trajectories over trajectories run (with retries, the accept_prob of the
        kept trajectory alone would overstate it)."""
        return info.accepted.double() / info.extra["n_tries"].double()

    def _trajectory(self, theta, grad, eps0, inv_mass, generator, a):
        m0 = self._momentum(theta, inv_mass, generator, 1.0)
        m = m0
        for i, rows in enumerate(self._batches(generator)):
            eps = self._eps(eps0, i)
            m = m * a
            grad_fn = self._likelihood_grad_fn(rows)  # the value is not used
            theta, m, _, grad = bab(theta, m, grad, eps, inv_mass, grad_fn)
            m = m * a
        # r = min(1, exp(U(z.theta) - U(theta) - K(m) + K(z.m))), U the full-data potential
        return theta, grad, kinetic_energy(m0, inv_mass) - kinetic_energy(m, inv_mass)

    def step(self, state, generator, step_size=None, inv_mass=None):
        C = state.position.shape[0]
        eps0 = torch.as_tensor(step_size, dtype=state.position.dtype, device=state.position.device)
        eps0 = eps0.expand(C)
        inv_mass = inv_mass.to(state.position)
        a = math.sqrt(self.alpha)
        done = torch.zeros(C, dtype=torch.bool, device=state.position.device)
        tries = torch.zeros(C, dtype=state.position.dtype, device=state.position.device)
        out = None
        for _ in range(self.max_tries):
            tries += ~done
            theta, grad, log_ratio = self._trajectory(
                state.position, state.grad, eps0, inv_mass, generator, a
            )
            new, prob, acc, err, div = self._accept(state, theta, grad, log_ratio, generator, C)
            if out is None:
                out = [new.position, new.log_prob, new.grad, prob, acc, err, div]
            else:  # chains accepted earlier keep their draw; the others take this try
                fresh = ~done
                latest = [new.position, new.log_prob, new.grad, prob, acc, err, div]
                out = [
                    torch.where(fresh[:, None] if old.ndim == 2 else fresh, value, old)
                    for old, value in zip(out, latest, strict=True)
                ]
            done = done | acc
            if bool(done.all()):
                break
        self._transition += 1
        position, log_prob, grad, prob, acc, err, div = out
        info = self._info(eps0, prob, acc, err, div, div.long(), {"n_tries": tries})
        info = info._replace(n_grad=info.n_grad * float(tries.max()))
        return State(position, log_prob, grad), info
