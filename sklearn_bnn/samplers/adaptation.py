"""Warmup adaptation of the step size and of a diagonal mass matrix.

Dual averaging (Hoffman & Gelman 2014, Algorithm 5; REFERENCE §1): gamma = 0.05, t0 = 10,
kappa = 0.75, mu = log(10 eps0), applied in warmup only, then frozen at the averaged value.
The diagonal mass matrix is estimated over Stan's windows (a fast initial buffer, slow windows
doubling in length, a fast terminal buffer); dual averaging restarts at the end of each slow
window. All quantities are per chain: step sizes (C,), inverse masses (C, D).
"""

from __future__ import annotations

import math

import torch

from ._base import State
from .geometry.euclidean import as_metric
from .integrators import drift, kick

__all__ = [
    "DualAveraging",
    "SettlingVariance",
    "WelfordVariance",
    "find_reasonable_step_size",
    "warmup_windows",
]


class DualAveraging:
    """Per-chain dual-averaging step-size adaptation.

    Parameters
    ----------
    initial_step_size : tensor (C,)
    target_accept : float
        Desired mean acceptance probability (0.8 by default).
    """

    def __init__(
        self,
        initial_step_size: torch.Tensor,
        target_accept: float = 0.8,
        gamma: float = 0.05,
        t0: float = 10.0,
        kappa: float = 0.75,
    ):
        self.target_accept = target_accept
        self.gamma, self.t0, self.kappa = gamma, t0, kappa
        self.mu = torch.log(10 * initial_step_size)
        self.h_bar = torch.zeros_like(initial_step_size)
        self.log_eps_bar = torch.zeros_like(initial_step_size)
        self.log_eps = torch.log(initial_step_size)
        self.m = 0

    @property
    def step_size(self) -> torch.Tensor:
        """The step size to use for the next transition during warmup."""
        return torch.exp(self.log_eps)

    @property
    def final_step_size(self) -> torch.Tensor:
        """The averaged step size, frozen after warmup."""
        if self.m == 0:
            return self.step_size
        return torch.exp(self.log_eps_bar)

    def update(self, accept_prob: torch.Tensor) -> None:
        """Take one transition's acceptance probability (C,) into account."""
        self.m += 1
        m = self.m
        accept_prob = torch.nan_to_num(accept_prob, nan=0.0)
        w = 1.0 / (m + self.t0)
        self.h_bar = (1 - w) * self.h_bar + w * (self.target_accept - accept_prob)
        self.log_eps = self.mu - math.sqrt(m) / self.gamma * self.h_bar
        eta = m ** (-self.kappa)
        self.log_eps_bar = eta * self.log_eps + (1 - eta) * self.log_eps_bar


def find_reasonable_step_size(
    target,
    state: State,
    inv_mass,
    generator: torch.Generator,
    initial=0.1,
    max_iter: int = 60,
) -> torch.Tensor:
    """A starting step size per chain (Hoffman & Gelman 2014, Algorithm 4).

    Doubles or halves eps until the acceptance ratio of one leapfrog step crosses 1/2.
    ``inv_mass`` is a metric of :mod:`.geometry.euclidean` or a diagonal of M^-1 (a tensor).
    """
    q, g, lp = state.position, state.grad, state.log_prob
    C = q.shape[0]
    metric = as_metric(inv_mass)
    eps = torch.as_tensor(initial, dtype=q.dtype, device=q.device).expand(C).clone()
    p = metric.sample_momentum(q.shape, generator, dtype=q.dtype, device=q.device)
    h0 = -lp + metric.kinetic_energy(p)

    def log_ratio(eps):
        p1 = kick(p, g, 0.5 * eps)
        lp1, g1 = target.value_and_grad(drift(q, p1, eps, metric))
        p1 = kick(p1, g1, 0.5 * eps)
        r = h0 - (-lp1 + metric.kinetic_energy(p1))
        return torch.nan_to_num(r, nan=-math.inf)

    r = log_ratio(eps)
    direction = torch.where(r > math.log(0.5), 1.0, -1.0).to(q.dtype)
    active = torch.ones(C, dtype=torch.bool, device=q.device)
    for _ in range(max_iter):
        active = active & (direction * r > -direction * math.log(2.0))
        if not active.any():
            break
        eps = torch.where(active, eps * torch.pow(2.0, direction), eps)
        r = torch.where(active, log_ratio(eps), r)
    return eps.clamp(1e-8, 10.0)


def warmup_windows(
    n_warmup: int, init_buffer: int = 75, term_buffer: int = 50, base_window: int = 25
) -> list[tuple[int, int]]:
    """Stan's slow adaptation windows as (start, end) iteration ranges, end exclusive.

    For short warmups the buffers shrink to 15 % and 10 % of it; under 20 iterations there is no
    window (step size only).
    """
    if n_warmup < 20:
        return []
    if init_buffer + term_buffer + base_window > n_warmup:
        init_buffer, term_buffer = int(0.15 * n_warmup), int(0.1 * n_warmup)
        base_window = n_warmup - init_buffer - term_buffer
    windows, start, size = [], init_buffer, base_window
    last = n_warmup - term_buffer
    while start < last:
        end = start + size
        if end + 2 * size > last:  # the next window would not fit: stretch this one to the end
            end = last
        windows.append((start, end))
        start, size = end, 2 * size
    return windows


class WelfordVariance:
    """Running per-chain mean and variance of positions (C, D), in float64."""

    def __init__(self, shape, device):
        self.n = 0
        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.m2 = torch.zeros(shape, dtype=torch.float64, device=device)

    def update(self, x: torch.Tensor) -> None:
        self.n += 1
        x = x.double()
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)

    def regularized_variance(self, toward=1e-3) -> torch.Tensor:
        """Stan's shrunk estimate: (n / (n + 5)) var + toward (5 / (n + 5)).

        ``toward`` is Stan's 1e-3 by default; a network's posterior shrinks better toward its
        prior variance (a (D,) tensor), the scale of a weight the data do not pin down.
        """
        n = self.n
        var = self.m2 / max(n - 1, 1)
        if isinstance(toward, torch.Tensor):
            toward = toward.to(var)
        return (n / (n + 5.0)) * var + toward * (5.0 / (n + 5.0))


class SettlingVariance:
    """Window variance that discards an unsettled first half (per chain).

    Started from a mode (``init="map"``), a network's chains fall in log density for a while
    before they reach the typical set; the positions of that descent inflate a mass-matrix
    estimate along the directions of the descent. Two accumulators run over a window, one over
    all of it and one over its second half; at the end a chain whose mean log density moved by
    more than one standard deviation (of its second half) between the halves has not settled,
    and only its second half counts.
    """

    def __init__(self, shape, device, length: int):
        self.full = WelfordVariance(shape, device)
        self.second = None
        self.half, self.i = max(length // 2, 1), 0
        self.lp_first = WelfordVariance(shape[:1], device)
        self.lp_second = WelfordVariance(shape[:1], device)

    def update(self, x: torch.Tensor, log_prob: torch.Tensor) -> None:
        if self.i == self.half:
            self.second = WelfordVariance(x.shape, x.device)
        self.full.update(x)
        if self.second is not None:
            self.second.update(x)
            self.lp_second.update(log_prob)
        else:
            self.lp_first.update(log_prob)
        self.i += 1

    def regularized_variance(self, toward=1e-3) -> torch.Tensor:
        full = self.full.regularized_variance(toward)
        if self.second is None or self.second.n < 10:
            return full
        sd = (self.lp_second.m2 / max(self.lp_second.n - 1, 1)).sqrt()
        drift = (self.lp_first.mean - self.lp_second.mean).abs()
        unsettled = torch.nan_to_num(drift, nan=0.0) > sd
        return torch.where(unsettled[:, None], self.second.regularized_variance(toward), full)
