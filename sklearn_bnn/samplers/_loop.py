"""The sampling loop: warmup with adaptation, then draws, with progress and interrupts.

The one loop of the package: the estimators and the public driver (:func:`.sample`) both run
their kernels through :func:`run_chains`. The kernels themselves stay pure; whatever a kernel
reports in ``Info.extra`` is kept beside each draw.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from .._utils import flush_subnormals
from ._base import State
from .adaptation import (
    DualAveraging,
    SettlingVariance,
    find_reasonable_step_size,
    rescue_collapsed_chains,
    stalled_chains,
    warmup_windows,
)
from .euclidean import EuclideanMetric, check_n_chains


@dataclass
class ChainRun:
    """What one call of :func:`run_chains` produced (per chain along the first axis)."""

    draws: torch.Tensor  # (C, n_kept, D), CPU
    log_prob: torch.Tensor  # (C, n_kept), CPU
    accept_prob: torch.Tensor  # (C, n_transitions) of the sampling phase
    accepted: torch.Tensor  # (C, n_transitions)
    acceptance: torch.Tensor  # (C, n_transitions) the kernel's acceptance statistic
    divergent: torch.Tensor  # (C, n_transitions)
    energy_error: torch.Tensor  # (C, n_transitions)
    warmup_divergent: torch.Tensor  # (C,) divergences during warmup
    step_size: torch.Tensor  # (C,) the step size used for the draws
    state: State  # the last state, to continue from
    inv_mass: torch.Tensor  # (D,) or (C, D): the (diagonal of the) inverse mass of the draws
    draw_stats: dict = field(default_factory=dict)  # per kept draw: (C, n_kept) each
    n_grad: int = 0
    interrupted: bool = False
    stats: dict = field(default_factory=dict)


@flush_subnormals
def run_chains(
    kernel,
    state: State,
    generator: torch.Generator,
    *,
    n_warmup: int,
    n_draws: int,
    thin: int = 1,
    step_size="auto",
    target_accept: float = 0.8,
    inv_mass=None,
    adapt_mass: bool = False,
    verbose: bool = False,
    desc: str = "sampling",
) -> ChainRun:
    """Run ``n_warmup`` adaptation transitions, then ``n_draws`` transitions keeping every
    ``thin``-th.

    ``step_size="auto"`` finds a starting value (Hoffman & Gelman Alg. 4) and adapts it by dual
    averaging during warmup, restarting at the end of each of Stan's slow windows; a number (or
    a (C,) tensor) is used as it is. ``adapt_mass`` estimates a diagonal inverse mass per chain
    over the slow windows, unless the kernel has a fixed ``metric`` (a user's
    :class:`~.euclidean.DenseMetric`, say): that metric wins, no mass is adapted (with a
    warning when ``adapt_mass`` asked for it), the step size is found and adapted under it, and
    the run reports the diagonal of its inverse mass. When the target has a
    ``gibbs_update(state, generator) -> (state, stats)`` (not None), it runs once before warmup
    and after every transition (a Gibbs step of parameters outside the kernel's position, e.g. a
    learned noise precision); its per-chain ``stats`` are kept beside each draw as
    ``info.extra`` is. A KeyboardInterrupt stops the loop and returns what was collected,
    flagged ``interrupted``.
    """
    C, D = state.position.shape
    dtype, device = state.position.dtype, state.position.device
    adapt = isinstance(step_size, str) and getattr(kernel, "adapts_step_size", True)
    if adapt and n_warmup == 0:
        raise ValueError(
            "step_size='auto' is adapted during warmup, but n_warmup=0: give n_warmup >= 1 "
            "or a numeric step_size."
        )
    if inv_mass is None:
        inv_mass = torch.ones(D, dtype=dtype, device=device)
    inv_mass = inv_mass.to(device, dtype)
    fixed_metric = getattr(kernel, "metric", None)
    if not isinstance(fixed_metric, EuclideanMetric):  # e.g. RMHMC's position-dependent one
        fixed_metric = None
    if fixed_metric is not None:
        fixed_metric = fixed_metric.to(device, dtype)
        check_n_chains(fixed_metric, C)
        if adapt_mass:
            warnings.warn(
                "adapt_mass=True is ignored: the sampler has a fixed metric, which wins over "
                "mass adaptation.",
                UserWarning,
                stacklevel=3,
            )
        adapt_mass = False
        diagonal = fixed_metric.diagonal()
        if diagonal is not None:
            inv_mass = diagonal.to(device, dtype)
    gibbs = getattr(kernel.target, "gibbs_update", None)
    n_grad, gibbs_stats = 0, {}
    if gibbs is not None:
        state, gibbs_stats = gibbs(state, generator)
        n_grad += 1
    if isinstance(step_size, str) and not adapt:
        step_size = getattr(kernel, "step_size", 1.0)
    if adapt:
        eps0 = find_reasonable_step_size(
            kernel.target, state, inv_mass if fixed_metric is None else fixed_metric, generator
        )
        averager = DualAveraging(eps0, target_accept)
        eps = averager.step_size
    else:
        eps = torch.as_tensor(step_size).to(device, dtype).expand(C).clone()

    n_kept_max = n_draws // thin
    draws = torch.empty((C, n_kept_max, D), dtype=dtype)
    log_probs = torch.empty((C, n_kept_max), dtype=dtype)
    accept_prob = torch.empty((C, n_draws), dtype=dtype)
    accepted = torch.zeros((C, n_draws), dtype=torch.bool)
    acceptance = torch.empty((C, n_draws), dtype=torch.float64)
    divergent = torch.zeros((C, n_draws), dtype=torch.bool)
    energy_error = torch.empty((C, n_draws), dtype=dtype)
    warmup_divergent = torch.zeros(C, dtype=torch.long)
    draw_stats = {
        "accept_prob": torch.empty((C, n_kept_max), dtype=dtype),
        "diverging": torch.zeros((C, n_kept_max), dtype=torch.bool),
        "energy_error": torch.empty((C, n_kept_max), dtype=dtype),
    }
    window_ends = {end - 1 for _, end in warmup_windows(n_warmup)} if adapt_mass else set()
    window_starts = {start: end - start for start, end in warmup_windows(n_warmup)}
    toward = _prior_variance(kernel.target) if adapt_mass else None
    welford = None
    n_done, n_kept, interrupted = 0, 0, False
    rescued = []

    bar = tqdm(
        total=n_warmup + n_draws,
        desc=desc,
        disable=not verbose,
        leave=True,
        unit="draw",
        dynamic_ncols=True,
    )
    try:
        for i in range(n_warmup):
            state, info = kernel.step(state, generator, step_size=eps, inv_mass=inv_mass)
            n_grad += info.n_grad
            if gibbs is not None:
                state, gibbs_stats = gibbs(state, generator)
                n_grad += 1
            warmup_divergent += info.divergent.cpu()
            if adapt:
                averager.update(info.accept_prob)
                if gibbs is None:  # a Gibbs step keeps per-chain state the copy would miss
                    state, restarts = rescue_collapsed_chains(averager, state)
                    rescued += restarts
                eps = averager.step_size
            if adapt_mass and i in window_starts:
                welford = SettlingVariance(state.position.shape, device, window_starts[i])
            if adapt_mass and welford is not None:
                welford.update(state.position, state.log_prob)
            if i in window_ends:
                if adapt_mass:
                    inv_mass = welford.regularized_variance(toward).to(dtype)
                    welford = None
                if adapt:  # new metric: restart dual averaging from the current step size
                    averager = DualAveraging(averager.final_step_size, target_accept)
                    eps = averager.step_size
            _progress(bar, i, "warmup", info, warmup_divergent)
        if adapt:
            eps = averager.final_step_size
            _warn_about_warmup(rescued, stalled_chains(averager), C)
        n_div = torch.zeros(C, dtype=torch.long)
        for i in range(n_draws):
            state, info = kernel.step(state, generator, step_size=eps, inv_mass=inv_mass)
            n_grad += info.n_grad
            if gibbs is not None:
                state, gibbs_stats = gibbs(state, generator)
                n_grad += 1
            accept_prob[:, i] = info.accept_prob.cpu()
            accepted[:, i] = info.accepted.cpu()
            acceptance[:, i] = kernel.acceptance(info).cpu()
            divergent[:, i] = info.divergent.cpu()
            energy_error[:, i] = info.energy_error.cpu()
            n_div += info.divergent.cpu()
            n_done = i + 1
            if n_done % thin == 0 and n_kept < n_kept_max:
                draws[:, n_kept] = state.position.cpu()
                log_probs[:, n_kept] = state.log_prob.cpu()
                draw_stats["accept_prob"][:, n_kept] = accept_prob[:, i]
                draw_stats["diverging"][:, n_kept] = divergent[:, i]
                draw_stats["energy_error"][:, n_kept] = energy_error[:, i]
                for name, value in {**(info.extra or {}), **gibbs_stats}.items():
                    if name not in draw_stats:  # (C,) or (C, k) per draw
                        shape = (C, n_kept_max, *value.shape[1:])
                        draw_stats[name] = torch.zeros(shape, dtype=value.dtype)
                    draw_stats[name][:, n_kept] = value.cpu()
                n_kept += 1
            _progress(bar, i, "sampling", info, n_div)
    except KeyboardInterrupt:
        interrupted = True
        warnings.warn(
            f"sampling interrupted after {n_done} of {n_draws} draws; the estimator keeps "
            f"the {n_kept} draws collected so far.",
            RuntimeWarning,
            stacklevel=3,
        )
        if n_kept == 0:  # keep at least the current position so the estimator can predict
            draws[:, 0] = state.position.cpu()
            log_probs[:, 0] = state.log_prob.cpu()
            for values in draw_stats.values():
                values[:, 0] = 0
            n_kept = 1
    finally:
        bar.close()
    return ChainRun(
        draws=draws[:, :n_kept],
        log_prob=log_probs[:, :n_kept],
        accept_prob=accept_prob[:, :n_done],
        accepted=accepted[:, :n_done],
        acceptance=acceptance[:, :n_done],
        divergent=divergent[:, :n_done],
        energy_error=energy_error[:, :n_done],
        warmup_divergent=warmup_divergent,
        step_size=eps.detach().cpu(),
        state=state,
        inv_mass=inv_mass.detach().cpu(),
        draw_stats={k: v[:, :n_kept] for k, v in draw_stats.items()},
        n_grad=n_grad,
        interrupted=interrupted,
    )


def _warn_about_warmup(rescued: list, stalled: dict, n_chains: int) -> None:
    """One warning for the chains restarted during warmup, one for those that ended it badly."""
    if rescued:
        lines = "; ".join(
            f"chain {c} (step size {eps:.3g}, log density {lp:.6g}) from chain {d}"
            for c, d, eps, lp in rescued
        )
        warnings.warn(
            f"warmup restarted {len(rescued)} chain(s) whose adapted step size had collapsed to "
            "under 1/100 of the other chains' (a region much narrower than theirs, or where "
            f"every proposal diverges): {lines}. Each took the position and adaptation of a "
            "healthy chain; the sampling phase is exact, but its chains no longer all come "
            "from independent starts.",
            RuntimeWarning,
            stacklevel=4,
        )
    for c, cause in stalled.items():
        name = f"chain {c}" if n_chains > 1 else "the chain"
        warnings.warn(
            f"{name} ended warmup stalled: {cause}. Its draws barely move; look at its "
            "starting point (a region much narrower than the posterior's bulk, a degenerate "
            "mode, or non-finite log densities), or give a numeric step_size.",
            RuntimeWarning,
            stacklevel=4,
        )


def _prior_variance(target):
    """The prior variance T / tau of every coordinate (D,) of a network target with a Gaussian
    prior, toward which window variances shrink; Stan's 1e-3 for any other target."""
    try:
        precision = target.prior_precision
    except AttributeError:
        return 1e-3
    if not isinstance(precision, torch.Tensor):
        return 1e-3
    return getattr(target, "temperature", 1.0) / precision.double()


def _progress(bar, i: int, phase: str, info, n_div) -> None:
    bar.update(1)
    if bar.disable or (i % 10 and i > 0):
        return
    acc = info.accept_prob.double()
    per_chain = "/".join(f"{a:.2f}" for a in acc.tolist()) if len(acc) <= 8 else f"{acc.mean():.2f}"
    epoch = (info.extra or {}).get("epoch")  # stochastic-gradient kernels count epochs
    epoch = f" epoch={float(epoch.max()):.4g}" if epoch is not None else ""
    bar.set_postfix_str(
        f"{phase}{epoch} acc={per_chain} eps={info.step_size.mean().item():.2e} "
        f"div={int(n_div.sum())}",
        refresh=False,
    )
