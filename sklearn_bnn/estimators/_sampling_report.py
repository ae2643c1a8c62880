"""Reporting of the MCMC estimators' runs: ``diagnostics_``, ``summary()``, ArviZ export.

:func:`record_diagnostics` turns a run of the sampling loop into ``diagnostics_`` and
``acceptance_rate_`` (the run's figures, with the convergence of the log density and of the
predictions on reference rows) and warns about divergences and chains that have not
converged (the estimators' ``summary()`` and ``to_inference_data()`` read what it records).

The convergence check (:func:`~sklearn_bnn.diagnostics.convergence_check`,
:func:`~sklearn_bnn.diagnostics.converged`) separates what happens
inside the chains from what the chains do to each other. The within-chain split R-hat (each
chain's first half against its second, pooled over the chains) above :data:`RHAT_MAX` says
the chains are still drifting, and so does a chain whose own split R-hat is above it while the
chains together are too: the draws have not converged, and the fit warns. Chains each
stationary but far apart (the pooled R-hat above the limit, every chain's own and the
within-chain one below) have settled in different modes: their pooled draws are an ensemble
of those modes, which is reported (``chains_disagree``, ``summary()``) but not warned about,
as running longer would not bring them together.
"""

from __future__ import annotations

import warnings

import numpy as np

from .._utils import to_numpy
from .._warnings import warn
from ..diagnostics import (
    RHAT_MAX,
    converged,
    convergence_check,
    ess_bulk,
    ess_tail,
)
from ..exceptions import ConvergenceWarning
from ..samplers.driver._summary import run_summary


def record_diagnostics(estimator, run, continuing: bool, X) -> None:
    """``diagnostics_`` and ``acceptance_rate_`` of ``run``; warns about divergences and
    chains that have not converged."""
    previous = estimator.diagnostics_ if continuing else {}
    samples = estimator.samples_
    diag = run_summary(run)
    diag["n_chains"], diag["n_draws"] = samples.n_chains, len(samples)
    for key in ("n_divergent", "n_divergent_warmup", "n_grad_evals"):
        diag[key] += previous.get(key, 0)
    sampler = estimator._sampler_object()
    declared = sampler.warmup_options() if hasattr(sampler, "warmup_options") else {}
    if not declared.get("adapt_mass", False):
        del diag["inv_mass"]
    n_div = int(run.divergent.sum())
    lp = samples.log_prob.double().numpy()
    diag.update(ess_bulk_log_prob=ess_bulk(lp), ess_tail_log_prob=ess_tail(lp))
    rows = getattr(estimator, "_reference_rows", slice(0, 64))  # those the budget monitored
    ref = estimator._reference_quantity(estimator._network_outputs(X[rows], validate=False))
    ref = to_numpy(ref).reshape(samples.n_chains, samples.n_draws, -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant columns give NaN
        diag["ess_bulk_predictions_min"] = float(
            np.nanmin([ess_bulk(ref[..., j]) for j in range(ref.shape[-1])] + [np.nan])
        )
    diag.update(convergence_check(lp, ref))
    estimator.diagnostics_ = diag
    n_transitions = run.accepted.numel()
    estimator.acceptance_rate_ = float(run.acceptance.mean()) if n_transitions else np.nan
    origin = run.step_size_origin
    if continuing:  # the chains went on at the step size of the fit they continue
        origin = getattr(estimator, "_step_size_origin", origin)
    estimator._step_size_origin = origin
    if n_transitions and n_div > 0.05 * n_transitions:
        warn(
            f"{n_div} of {n_transitions} transitions diverged (rejected); "
            + _divergence_advice(origin, float(run.step_size.mean()), run.target_accept),
            ConvergenceWarning,
            kind="divergence",
        )
    message = _rhat_message(diag, continuing)
    if message:
        warn(message, ConvergenceWarning, kind="rhat")


def _divergence_advice(origin: str, step_size: float, target_accept) -> str:
    """What to do about divergent transitions, from where their step size came from.

    Parameters
    ----------
    origin : {"adapted", "given", "kernel"}
        ``ChainRun.step_size_origin``: adapted by dual averaging in warmup, a number given by
        the user, or the sampler's own schedule.
    step_size : float
        The mean step size of the draws.
    target_accept : float or None
        The acceptance the adapted step size aimed at.

    Returns
    -------
    str
        The end of the warning's sentence: the cause, and a remedy possible from that state
        (never ``step_size='auto'`` when the step size was already adapted).
    """
    if origin == "adapted":
        text = (
            f"the step size adapted in warmup ({step_size:.3g}) is too large for the most "
            "curved regions of this posterior"
        )
        if target_accept is not None and target_accept < 0.99:
            aim = 0.9 if target_accept < 0.9 else 0.95 if target_accept < 0.95 else 0.99
            return (
                f"{text}: raise the sampler's target_accept ({target_accept:.2f} now, e.g. "
                f"to {aim}) so that warmup adapts a smaller step, or lengthen the warmup "
                "(n_warmup)."
            )
        return (
            f"{text}, even at target_accept={target_accept}: lengthen the warmup (n_warmup), "
            "or make the posterior smoother (a larger prior_precision, standardised inputs)."
        )
    if origin == "kernel":
        return (
            f"the sampler's own step size ({step_size:.3g}) is probably too large for this "
            "posterior: give a smaller numeric step_size."
        )
    return (
        f"the step_size given ({step_size:.3g}) is probably too large for this posterior: "
        "lower it, or use step_size='auto' (with n_warmup >= 1) to adapt it in warmup."
    )


def _largest(values) -> float:
    """The largest of ``values`` that is a number (NaN when none is)."""
    values = np.asarray(values, dtype=float)
    return float(np.nanmax(values)) if np.isfinite(values).any() else float("nan")


def _rhat_message(diag: dict, continuing: bool) -> str | None:
    """The warning about draws that have not converged (:func:`converged`), naming the chains
    that drift and what to do from the fit's state; None when they have converged."""
    if converged(diag):
        return None
    per_chain = np.asarray(diag["rhat_per_chain"], dtype=float)
    within = _largest([diag["rhat_within_log_prob"], diag["rhat_within_predictions_max"]])
    pooled = _largest([diag["rhat_log_prob"], diag["rhat_predictions_max"]])
    failing = np.flatnonzero(per_chain > RHAT_MAX)
    if len(per_chain) == 1:
        lead, where = pooled, ""
        what = "the chain is still drifting (its second half differs from its first)"
    elif failing.size:
        lead = float(np.nanmax(per_chain))
        plural = failing.size > 1
        names = ", ".join(str(c) for c in failing)
        where = f" within chain{'s' if plural else ''} {names} of {len(per_chain)}"
        what = (
            f"{'those chains are' if plural else 'that chain is'} still drifting (second half "
            f"unlike the first; within-chain R-hat of all the chains {within:.2f}, R-hat of the "
            f"chains together {pooled:.2f})"
        )
    else:
        lead = within
        where = f" within the {len(per_chain)} chains (each chain's mean taken out)"
        what = "the chains are still drifting (their second halves differ from their first)"
    more = (
        "fit again (warm_start=True) to run the chains longer, or afresh with a larger n_warmup"
        if continuing
        else "increase n_warmup or n_draws, or fit again with warm_start=True to run the "
        "chains longer"
    )
    return (
        f"R-hat {lead:.2f} > {RHAT_MAX}{where}: the draws have not converged; {what} (see "
        f"diagnostics_ and summary()); {more}."
    )
