"""Warmup adaptation of the step size and of a diagonal mass matrix.

Dual averaging (Hoffman & Gelman 2014, Algorithm 5): gamma = 0.05, t0 = 10,
kappa = 0.75, mu = log(10 eps0), applied in warmup only, then frozen at the averaged value.
The diagonal mass matrix is estimated over Stan's windows (a fast initial buffer, slow windows
doubling in length, a fast terminal buffer); dual averaging restarts at the end of each slow
window. All quantities are per chain: step sizes (C,), inverse masses (C, D).
"""

from __future__ import annotations

import math

import torch

from .._base import State
from ..defaults import TARGET_ACCEPT
from ..geometry.euclidean import as_metric
from ..hamiltonian.integrators import drift, kick

__all__ = [
    "DualAveraging",
    "SettlingVariance",
    "WelfordVariance",
    "collapsed_chains",
    "find_reasonable_step_size",
    "rescue_collapsed_chains",
    "stalled_chains",
    "warmup_windows",
]


class DualAveraging:
    """Per-chain dual-averaging step-size adaptation.

    Every chain has its own iteration count, so that :meth:`adopt` can hand one chain the
    adaptation of another mid-way (see :func:`rescue_collapsed_chains`). The step size is kept
    at or above ``1e-10`` times the initial one: a chain that accepts nothing drives log eps
    down by about sqrt(m) / gamma, which would otherwise underflow to a step of exactly 0.

    Parameters
    ----------
    initial_step_size : tensor (C,)
    target_accept : float
        Desired mean acceptance probability (0.8 by default).
    gamma, t0, kappa : float
        Hoffman & Gelman's (2014) constants of Algorithm 5.
    """

    def __init__(
        self,
        initial_step_size: torch.Tensor,
        target_accept: float = TARGET_ACCEPT,
        gamma: float = 0.05,
        t0: float = 10.0,
        kappa: float = 0.75,
    ):
        self.target_accept = target_accept
        self.gamma, self.t0, self.kappa = gamma, t0, kappa
        self.initial_step_size = initial_step_size
        self.mu = torch.log(10 * initial_step_size)
        self.h_bar = torch.zeros_like(initial_step_size)
        self.log_eps_bar = torch.zeros_like(initial_step_size)
        self.log_eps = torch.log(initial_step_size)
        self.log_eps_floor = self.log_eps - math.log(1e10)
        # updates per chain, on the host: Algorithm 5's weights are Python numbers of them
        self.counts = [0] * initial_step_size.shape[0]
        self.recent_accept = torch.full_like(initial_step_size, math.nan)  # moving average
        self.m = 0

    @property
    def step_size(self) -> torch.Tensor:
        """The step size to use for the next transition during warmup."""
        return torch.exp(self.log_eps)

    @property
    def final_step_size(self) -> torch.Tensor:
        """The averaged step size, frozen after warmup (the current one for a chain that has
        had no update yet)."""
        if all(self.counts):
            return torch.exp(self.log_eps_bar)
        if not any(self.counts):
            return self.step_size
        updated = self.count.to(self.log_eps.device) > 0
        return torch.where(updated, torch.exp(self.log_eps_bar), self.step_size)

    @property
    def count(self) -> torch.Tensor:
        """Updates per chain (C,), as a tensor on the host."""
        return torch.tensor(self.counts, dtype=torch.long)

    def update(self, accept_prob: torch.Tensor) -> None:
        """Take one transition's acceptance probability (C,) into account (device arithmetic
        only: the iteration counts it needs are kept on the host)."""
        self.m += 1
        self.counts = [m + 1 for m in self.counts]
        accept_prob = torch.nan_to_num(accept_prob, nan=0.0).to(self.h_bar)
        # Algorithm 5's weights, per chain, in Python floats (one value per distinct count)
        w, root, eta = self._weights(
            lambda m: 1.0 / (m + self.t0),
            lambda m: math.sqrt(m) / self.gamma,
            lambda m: m ** (-self.kappa),
        )
        self.h_bar = (1 - w) * self.h_bar + w * (self.target_accept - accept_prob)
        self.log_eps = torch.maximum(self.mu - root * self.h_bar, self.log_eps_floor)
        self.log_eps_bar = eta * self.log_eps + (1 - eta) * self.log_eps_bar
        # about the last 10 transitions (the first one counts alone)
        recent = torch.nan_to_num(self.recent_accept, nan=0.0)
        (weight,) = self._weights(lambda m: max(1.0 / m, 0.1))
        self.recent_accept = (1 - weight) * recent + weight * accept_prob

    def _weights(self, *functions):
        """Each function of the iteration count, per chain: a Python float when every chain
        has the same count (the common case), else a (C,) tensor."""
        counts = self.counts
        if len(set(counts)) == 1:
            return [f(counts[0]) for f in functions]
        h = self.h_bar  # after a rescue only: one small copy to the device
        return [
            torch.tensor([f(m) for m in counts], dtype=h.dtype, device=h.device)
            for f in functions
        ]

    def adopt(self, chains: torch.Tensor, donors: torch.Tensor) -> None:
        """Give each chain of ``chains`` (indices) the adaptation state of the matching chain of
        ``donors``: it goes on from there as if it had been that chain."""
        for name in ("mu", "h_bar", "log_eps_bar", "log_eps", "log_eps_floor", "recent_accept"):
            value = getattr(self, name).clone()
            value[chains] = value[donors]
            setattr(self, name, value)
        counts = list(self.counts)
        for c, d in zip(chains.tolist(), donors.tolist(), strict=True):
            counts[c] = self.counts[d]
        self.counts = counts


def collapsed_chains(averager: DualAveraging, ratio: float = 1e-2, min_updates: int = 20):
    """Chains whose adapted step size has collapsed, and healthy chains that could replace them.

    A chain has collapsed when, after at least ``min_updates`` updates, its averaged step size
    is below ``ratio`` times the median of the averaged step sizes of the chains that have not
    (every chain being judged against the others; at least two chains must be judged). Such a
    chain has typically fallen into a region much narrower than where the other chains are (a
    funnel, or a degenerate mode such as a mixture component collapsed onto one data point) or
    into one where every proposal diverges: dual averaging then follows the acceptance down
    and the chain stops moving.

    Returns
    -------
    collapsed, healthy : tensors of chain indices
    """
    eps = averager.final_step_size
    empty = torch.zeros(0, dtype=torch.long, device=eps.device)
    judged_host = [m >= min_updates for m in averager.counts]
    if sum(judged_host) < 2:
        return empty, empty
    collapsed = _collapsed_mask(torch.log(eps), judged_host, ratio)
    if not bool(collapsed.any()):  # the one host read of a warmup transition
        # every judged chain is healthy: their indices, known on the host (a CPU tensor)
        return empty, torch.arange(len(judged_host))[[c for c, j in enumerate(judged_host) if j]]
    judged = torch.tensor(judged_host, device=eps.device)
    return collapsed.nonzero().squeeze(1), (judged & ~collapsed).nonzero().squeeze(1)


def _collapsed_mask(log_eps: torch.Tensor, judged_host: list, ratio: float) -> torch.Tensor:
    """The collapsed chains as a (C,) mask, computed on the device without a host read.

    The fixed point of "below ``ratio`` times the median of the judged chains not found
    collapsed", iterated from none: each pass only adds chains, so it settles within one pass
    per chain and later passes change nothing (the loop has no exit test to read). Where no
    healthy chain would be left, none counts as collapsed.
    """
    if all(judged_host):  # the common case: every chain has had as many updates
        judged = torch.ones_like(log_eps, dtype=torch.bool)
    else:
        judged = torch.tensor(judged_host, device=log_eps.device)
    collapsed = torch.zeros_like(judged)
    threshold = math.log(ratio)
    for _ in range(sum(judged_host)):
        rest = judged & ~collapsed
        median = torch.where(rest, log_eps, torch.full_like(log_eps, math.nan)).nanmedian()
        now = judged & (log_eps < median + threshold)
        collapsed = torch.where(rest.any(), now, collapsed)
    return collapsed & (judged & ~collapsed).any()


def rescue_collapsed_chains(averager: DualAveraging, state: State, **criteria):
    """Restart every collapsed chain (see :func:`collapsed_chains`) from a healthy one.

    The collapsed chain takes the healthy chain's position, log density and gradient, and its
    dual-averaging state (:meth:`DualAveraging.adopt`); the two then go on with independent
    momenta. This happens during warmup only, whose draws are discarded, so every chain's
    sampling phase is still an exact Markov chain; the price is that the chains of the
    sampling phase no longer all come from independent starts (R-hat then cannot reveal the
    region the collapsed chain had found). Healthy chains are handed out in turn, the one with
    the highest log density first.

    Returns
    -------
    state : State
        Unchanged when no chain collapsed.
    restarts : list of (chain, donor, step_size, log_prob)
        What happened, with the collapsed chain's step size and log density before it.
    """
    collapsed, healthy = collapsed_chains(averager, **criteria)
    if len(collapsed) == 0:
        return state, []
    order = healthy[torch.argsort(state.log_prob[healthy], descending=True)]
    donors = order[torch.arange(len(collapsed), device=order.device) % len(order)]
    restarts = [
        (int(c), int(d), float(averager.final_step_size[c]), float(state.log_prob[c]))
        for c, d in zip(collapsed, donors, strict=True)
    ]
    averager.adopt(collapsed, donors)
    rows = collapsed.to(state.position.device)
    from_rows = donors.to(state.position.device)
    new = []
    for tensor in state:
        tensor = tensor.clone()
        tensor[rows] = tensor[from_rows]
        new.append(tensor)
    return type(state)(*new), restarts  # every field of the chain's state (Gibbs values too)


def stalled_chains(averager: DualAveraging, ratio: float = 1e-2, min_accept: float = 0.05):
    """Why each chain's warmup ended badly, by chain index: a step size that is not a positive
    finite number, one collapsed below ``ratio`` times the others' (or, for a single chain,
    below ``ratio**2`` times where it started), or a recent acceptance below ``min_accept``
    (about the last 10 transitions)."""
    eps = averager.final_step_size
    problems = {}
    collapsed, _ = collapsed_chains(averager, ratio=ratio, min_updates=1)
    for c in range(len(eps)):
        value = float(eps[c])
        if not math.isfinite(value) or value <= 0:
            problems[c] = f"its step size is {value}"
        elif c in collapsed.tolist():
            median = float(eps[[k for k in range(len(eps)) if k != c]].median())
            problems[c] = (
                f"its step size {value:.3g} collapsed below {ratio:g} x the other chains' "
                f"({median:.3g})"
            )
        elif len(eps) == 1 and value < ratio**2 * float(averager.initial_step_size[c]):
            problems[c] = (
                f"its step size {value:.3g} collapsed below {ratio**2:g} x its starting "
                f"{float(averager.initial_step_size[c]):.3g}"
            )
        elif float(averager.recent_accept[c]) < min_accept:
            problems[c] = (
                f"it accepted almost nothing at the end of warmup (mean acceptance "
                f"probability {float(averager.recent_accept[c]):.3f})"
            )
    return problems


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
