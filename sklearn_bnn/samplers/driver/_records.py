"""What a run of chains produced (:class:`ChainRun`), per-chain seeds, and merging runs.

Shared by the sampling loop, the chain runners and the samplers that drive their own runs
(bridged HMC), none of which need to import another for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

from ..._seeding import child, root_seed, torch_seed
from .._base import State
from ..defaults import TARGET_ACCEPT

__all__ = ["ChainRun", "RunConfig", "chain_seeds", "merge_runs"]


@dataclass(frozen=True)
class RunConfig:
    """One run of the sampling loop: its budget and its warmup, as :func:`run_chains` takes
    them (``run_chains(kernel, state, generator, **config.loop_options())``).

    ``step_size``, ``target_accept`` and ``adapt_mass`` left at None are the sampler's
    (:meth:`~sklearn_bnn.samplers.Sampler.warmup_options`, filled in by :func:`run_sampler`;
    the loop's defaults "auto", 0.8 and False for a sampler that declares none); a continued
    run gives its adapted per-chain step sizes and ``adapt_mass=False`` instead.
    """

    n_warmup: object = 0  # int, or a budget.WarmupRule
    n_draws: object = 1  # int, or a budget.DrawRule
    thin: int = 1
    step_size: object = None  # "auto", a number, or (C,) adapted steps
    target_accept: float | None = None
    adapt_mass: bool | str | None = None
    inv_mass: torch.Tensor | None = None  # (D,) or (C, D): a continued run's mass

    _LOOP_DEFAULTS = {"step_size": "auto", "target_accept": TARGET_ACCEPT, "adapt_mass": False}

    def with_warmup_of(self, sampler) -> RunConfig:
        """The warmup settings left at None taken from ``sampler`` (or the loop's defaults)."""
        declared = sampler.warmup_options() if hasattr(sampler, "warmup_options") else {}
        return replace(
            self,
            **{
                name: declared.get(name, default)
                for name, default in self._LOOP_DEFAULTS.items()
                if getattr(self, name) is None
            },
        )

    def replace(self, **changes) -> RunConfig:
        """A copy with ``changes``."""
        return replace(self, **changes)

    def loop_options(self) -> dict:
        """The keyword arguments of :func:`run_chains` (warmup settings still None take the
        loop's defaults)."""
        options = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, default in self._LOOP_DEFAULTS.items():
            if options[name] is None:
                options[name] = default
        return options


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
    # the sampled hyperparameters whose per-draw values are in ``draw_stats``, by name: a
    # hierarchical target's precisions moved out of ``draws``, or values drawn by Gibbs blocks
    # (kept in the chain state); the estimators report them as sampled precisions
    hyperparameters: list = field(default_factory=list)
    # where the draws' step size came from: "adapted" (dual averaging in warmup), "given" (a
    # number passed to the loop) or "kernel" (a kernel with a step-size schedule of its own);
    # the estimators' divergence warning gives the advice that fits it
    step_size_origin: str = "given"
    target_accept: float | None = None  # the acceptance the adapted step size aimed at
    # warmup transitions run, with the draws an adaptive budget moved into warmup
    n_warmup: int = 0


def chain_seeds(seed, n_chains: int) -> list[int]:
    """Independent torch seeds of chains 0 .. n_chains - 1 from ``seed`` (an int or the run's
    ``numpy.random.SeedSequence``): those of its children 0, 1, ... (see ``_seeding.py``)."""
    seq = root_seed(seed)
    return [torch_seed(child(seq, c)) for c in range(n_chains)]


def merge_runs(runs: list[ChainRun]) -> ChainRun:
    """Stack single-chain runs into one (chains along the first axis), cut to the shortest."""
    n_kept = min(r.draws.shape[1] for r in runs)
    n_done = min(r.accept_prob.shape[1] for r in runs)
    cat = torch.cat
    inv_masses = [r.inv_mass if r.inv_mass.ndim == 2 else r.inv_mass[None] for r in runs]
    return ChainRun(
        draws=cat([r.draws[:, :n_kept] for r in runs]),
        log_prob=cat([r.log_prob[:, :n_kept] for r in runs]),
        accept_prob=cat([r.accept_prob[:, :n_done] for r in runs]),
        accepted=cat([r.accepted[:, :n_done] for r in runs]),
        acceptance=cat([r.acceptance[:, :n_done] for r in runs]),
        divergent=cat([r.divergent[:, :n_done] for r in runs]),
        energy_error=cat([r.energy_error[:, :n_done] for r in runs]),
        warmup_divergent=cat([r.warmup_divergent for r in runs]),
        step_size=cat([r.step_size for r in runs]),
        state=type(runs[0].state)(
            *(cat(parts) for parts in zip(*(r.state for r in runs), strict=True))
        ),
        inv_mass=cat(inv_masses),
        draw_stats={
            k: cat([r.draw_stats[k][:, :n_kept] for r in runs]) for k in runs[0].draw_stats
        },
        n_grad=sum(r.n_grad for r in runs),
        interrupted=any(r.interrupted for r in runs),
        step_size_origin=runs[0].step_size_origin,
        target_accept=runs[0].target_accept,
        n_warmup=max(r.n_warmup for r in runs),
    )
