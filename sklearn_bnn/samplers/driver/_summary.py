"""Per-run sampler statistics, the same for the estimators and the public driver."""

from __future__ import annotations

import numpy as np

__all__ = ["run_summary"]


def run_summary(run) -> dict:
    """What a :class:`~._loop.ChainRun` did, per chain, as plain numbers and arrays.

    Keys: ``n_chains``, ``n_draws`` (kept, all chains), ``step_size`` and ``acceptance_rate``
    and ``mean_accept_prob`` (per chain), ``n_divergent`` (after warmup), ``n_divergent_warmup``,
    ``n_grad_evals``, ``n_warmup`` (warmup transitions run, with the draws an adaptive budget moved
into warmup), ``interrupted``, ``inv_mass`` (the inverse mass used), plus the run's own
    ``stats`` (what the kernel's ``describe`` gave, e.g. NUTS's mean tree depth, or a
    sampler's per-box figures).
    """
    n_transitions = run.acceptance.shape[1]
    summary = {
        "n_chains": int(run.draws.shape[0]),
        "n_draws": int(run.draws.shape[0] * run.draws.shape[1]),
        "step_size": run.step_size.double().numpy(),
        "acceptance_rate": run.acceptance.double().mean(1).numpy()
        if n_transitions
        else np.full(run.draws.shape[0], np.nan),
        "mean_accept_prob": run.accept_prob.double().mean(1).numpy()
        if n_transitions
        else np.full(run.draws.shape[0], np.nan),
        "n_divergent": int(run.divergent.sum()),
        "n_divergent_warmup": int(run.warmup_divergent.sum()),
        "n_grad_evals": run.n_grad,
        "n_warmup": int(run.n_warmup),
        "interrupted": run.interrupted,
        "inv_mass": run.inv_mass.double().numpy(),
    }
    summary.update(run.stats)
    return summary
