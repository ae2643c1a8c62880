"""The Metropolis-adjusted stochastic-gradient kernels: AMAGOLD, GSGHMC and HTE.

Schmal & Mäder (2026).

AMAGOLD (Algorithm 2) and HTE (Algorithm 1) test a whole minibatch trajectory on the exact
full-data energy; GSGHMC tests every minibatch step on the batch energies (eq. 9). The shared
batches, schedule and bookkeeping are :class:`~.sg_kernels.SGKernel`'s.
"""

from __future__ import annotations

import math

import torch

from .._base import State, kinetic_energy
from ..defaults import DIVERGENCE_THRESHOLD
from .sg_integrators import (
    bab,
    ornstein_uhlenbeck,
    skew_momentum,
    skew_noise_variance,
)
from .sg_kernels import SGKernel

__all__ = ["AMAGOLDKernel", "GSGHMCKernel", "HTEKernel", "amagold_trajectory"]


def amagold_trajectory(theta, r, eps, alpha, inv_mass, grad_fn, noise_fn, n_steps):
    """The skew-symmetric trajectory of AMAGOLD (Zhang et al. 2020; Schmal & Mäder 2026, Alg. 2).

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


class _ExactEnergyKernel(SGKernel):
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


class GSGHMCKernel(SGKernel):
    """OBABO with a Metropolis-Hastings test of each B-A-B move on the batch of the new point."""

    def __init__(self, sampler, target):
        super().__init__(sampler, target)
        self.paired = sampler.energy == "paired"

    def _batch_log_prob(self, theta, rows):
        """(N/|B|) l_B(theta) + log p(theta) without a gradient (a forward pass only)."""
        own = self.capabilities.batch_log_prob
        if own is not None:
            return own(theta, rows)
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
            # Schmal & Mäder (2026), eq. 9: the augmented target
            # exp(-U_tau(theta)) Unif_B(tau) N(m; 0, M)
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
    """Schmal & Mäder (2026), Alg. 1: m ~ N(0, M); OBABO at T = 0 along the path; HMC-style test.

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
