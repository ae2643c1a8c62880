"""ChEES: the integration time of HMC adapted across chains during warmup.

Hoffman, Radul & Sountsov (2021), "An adaptive-MCMC scheme for setting trajectory lengths in
Hamiltonian Monte Carlo", AISTATS, §3-4. Each transition integrates for a time t = h T, the
jitter h uniform in (0, 1) drawn from the chains' generator, independently of the state, so
every transition is a valid HMC kernel. (The paper draws h from a Halton sequence, which
lowers the adaptation's noise; a draw from the generator keeps a warm-started chain identical
to the same chain run in one go.) During warmup, T climbs the Change in the
Estimator of the Expected Square,

    ChEES(T) = E[(|q' - E q'|^2 - |q - E q|^2)^2] / 4,

q the start and q' the end of a trajectory, the expectations over chains. The paper's
estimate of its gradient in log T, for chain c (its gradient in t times dt / dlog T = t), is

    g_c = t_c (|q'_c - mean q'|^2 - |q_c - mean q|^2) (q'_c - mean q') . v'_c,

v' = M^-1 p' the end velocity; chains average g_c weighted by their acceptance probability
(divergent ones weigh nothing), and the mean of the ends is taken with the same weights.
log T follows Adam (beta1 = 0, beta2 = 0.95, learning rate 0.025), each move clipped to
+-0.35, and the sampling phase uses the exponential of log T's running average with weights
k^-0.5 (iterate averaging, as the paper averages its step-size and trajectory iterates).
"""

from __future__ import annotations

import math

import torch

__all__ = ["ChEESTrajectory", "chees_gradient"]


class ChEESTrajectory:
    """The adapted integration time of an HMC kernel, shared by its shallow copies.

    Parameters
    ----------
    n_warmup : int
        Transitions during which T adapts; it is fixed afterwards.
    initial_time : float or None
        T before the first update; None leaves it to :meth:`start` (the kernel passes
        ``n_steps`` times its first step size).
    max_steps : int
        Cap on the leapfrog steps of one trajectory.
    learning_rate : float, default=0.025
    """

    beta2 = 0.95
    clip = 0.35

    def __init__(self, n_warmup: int, initial_time: float, max_steps: int, learning_rate=0.025):
        self.n_warmup = n_warmup
        self.max_steps = max_steps
        self.learning_rate = learning_rate
        self.second_moment = 0.0
        self.count = 0
        self.log_time = self.log_time_average = self.fixed_time = None
        if initial_time is not None:
            self.start(initial_time)

    def start(self, initial_time: float) -> None:
        """Set T before the first transition (kept exactly when there is no warmup)."""
        self.log_time = self.log_time_average = math.log(initial_time)
        if not self.adapting:
            self.fixed_time = float(initial_time)

    @property
    def adapting(self) -> bool:
        return self.count < self.n_warmup

    @property
    def time(self) -> float:
        """T now: Adam's iterate during warmup, the running average's after."""
        if self.adapting:
            return math.exp(self.log_time)
        if self.fixed_time is None:
            self.fixed_time = math.exp(self.log_time_average)
        return self.fixed_time

    def n_steps(self, mean_step_size, generator: torch.Generator) -> int:
        """Leapfrog steps of the next trajectory: ceil(h T / eps), h uniform in (0, 1)."""
        return self.steps_and_time(mean_step_size, generator)[0]

    def steps_and_time(self, mean_step_size, generator: torch.Generator):
        """The leapfrog steps of the next trajectory (:meth:`n_steps`) and T, as Python
        numbers: the uniform h, and the mean step size and T where they are on the device,
        come to the host in one transfer (the transition's one read)."""
        u = torch.rand((), generator=generator, dtype=torch.float64, device=generator.device)
        parts = [u]
        on_device = isinstance(mean_step_size, torch.Tensor)
        if on_device:
            parts.append(mean_step_size.to(u).reshape(()))
        log_time = self.log_time if self.adapting else None
        if isinstance(log_time, torch.Tensor):
            parts.append(log_time.to(u))
        values = torch.stack(parts).tolist()
        u, mean_step_size = values[0], values[1] if on_device else mean_step_size
        time = math.exp(values[-1]) if isinstance(log_time, torch.Tensor) else self.time
        n = math.ceil((1.0 - u) * time / mean_step_size)
        return int(min(max(n, 1), self.max_steps)), time

    def update(self, start, end, velocity, times, accept_prob, divergent) -> None:
        """Count one transition; during warmup, one Adam step of log T on the ChEES gradient
        of the chains' trajectories (``start``, ``end``, ``velocity`` (C, D), ``times`` the
        integration time of each chain (C,)).

        Device arithmetic throughout (log T, its average and Adam's moment become 0-d tensors
        on the chains' device): a non-finite gradient leaves them as they were by a mask, not a
        branch, so nothing waits for the host.
        """
        if not self.adapting:
            self.count += 1
            return
        grad = _chees_gradient(start, end, velocity, times, accept_prob, divergent)
        finite = torch.isfinite(grad)
        grad = torch.where(finite, grad, torch.zeros_like(grad))
        second = self.beta2 * self.second_moment + (1 - self.beta2) * grad**2
        second = torch.where(finite, second, self.second_moment)
        self.second_moment = second
        corrected = second / (1 - self.beta2 ** (self.count + 1))
        move = self.learning_rate * grad / (torch.sqrt(corrected) + 1e-8)
        move = torch.where(finite, move.clamp(-self.clip, self.clip), torch.zeros_like(move))
        self.log_time = self.log_time + move
        self.count += 1
        weight = self.count**-0.5
        self.log_time_average = (1 - weight) * self.log_time_average + weight * self.log_time


def chees_gradient(start, end, velocity, times, accept_prob, divergent) -> float:
    """The acceptance-weighted mean over chains of d ChEES / d log T (module docstring); NaN
    when no chain weighs anything."""
    return float(_chees_gradient(start, end, velocity, times, accept_prob, divergent))


def _chees_gradient(start, end, velocity, times, accept_prob, divergent) -> torch.Tensor:
    """:func:`chees_gradient` as a 0-d float64 tensor on the chains' device (no host read)."""
    finite = torch.isfinite(end).all(-1) & ~divergent
    weight = torch.where(finite, accept_prob, torch.zeros_like(accept_prob)).double()
    total = weight.sum()
    end = torch.where(finite[:, None], end, start).double()
    velocity = torch.where(finite[:, None], velocity, torch.zeros_like(velocity)).double()
    start = start.double()
    end_centred = end - (weight[:, None] * end).sum(0) / total
    start_centred = start - start.mean(0)
    change = end_centred.square().sum(-1) - start_centred.square().sum(-1)
    per_chain = times.double() * change * (end_centred * velocity).sum(-1)
    gradient = (weight * per_chain).sum() / total
    return torch.where(total > 0, gradient, torch.full_like(gradient, math.nan))
