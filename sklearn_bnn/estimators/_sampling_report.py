"""Reporting of the MCMC estimators' runs: ``diagnostics_``, ``summary()``, ArviZ export.

:class:`SamplingReportMixin` turns a run of the sampling loop into ``diagnostics_`` and
``acceptance_rate_`` (the run's figures, with the convergence of the log density and of the
predictions on reference rows), warns about divergences and chains that have not converged,
and gives the text summary and the ``InferenceData`` of the draws.

The convergence check (:func:`convergence_check`, :func:`converged`) separates what happens
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
from sklearn.utils.validation import check_is_fitted

from .._utils import to_numpy
from .._warnings import warn
from ..diagnostics import (
    ess_bulk,
    ess_tail,
    format_summary,
    rhat,
    rhat_per_chain,
    rhat_within,
)
from ..exceptions import ConvergenceWarning
from ..samplers._summary import run_summary


class SamplingReportMixin:
    """``diagnostics_`` and ``acceptance_rate_`` of a run, ``summary`` and
    ``to_inference_data``."""

    def _record_diagnostics(self, run, continuing: bool, X) -> None:
        previous = self.diagnostics_ if continuing else {}
        samples = self.samples_
        diag = run_summary(run)
        diag["n_chains"], diag["n_draws"] = samples.n_chains, len(samples)
        for key in ("n_divergent", "n_divergent_warmup", "n_grad_evals"):
            diag[key] += previous.get(key, 0)
        sampler = self._sampler_object()
        declared = sampler.warmup_options() if hasattr(sampler, "warmup_options") else {}
        if not declared.get("adapt_mass", False):
            del diag["inv_mass"]
        n_div = int(run.divergent.sum())
        lp = samples.log_prob.double().numpy()
        diag.update(ess_bulk_log_prob=ess_bulk(lp), ess_tail_log_prob=ess_tail(lp))
        rows = getattr(self, "_reference_rows", slice(0, 64))  # those the budget monitored
        ref = self._reference_quantity(self._network_outputs(X[rows], validate=False))
        ref = to_numpy(ref).reshape(samples.n_chains, samples.n_draws, -1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # constant columns give NaN
            diag["ess_bulk_predictions_min"] = float(
                np.nanmin([ess_bulk(ref[..., j]) for j in range(ref.shape[-1])] + [np.nan])
            )
        diag.update(convergence_check(lp, ref))
        self.diagnostics_ = diag
        n_transitions = run.accepted.numel()
        self.acceptance_rate_ = float(run.acceptance.mean()) if n_transitions else np.nan
        origin = run.step_size_origin
        if continuing:  # the chains went on at the step size of the fit they continue
            origin = getattr(self, "_step_size_origin", origin)
        self._step_size_origin = origin
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

    def summary(self) -> str:
        """A short text report of the sampling: per-chain statistics and convergence."""
        check_is_fitted(self)
        return format_summary(type(self).__name__, self.diagnostics_)

    def to_inference_data(self, include_weights: bool = True):
        """The draws as an ArviZ ``InferenceData`` (needs ArviZ: ``pip install arviz``).

        Parameters
        ----------
        include_weights : bool, default=True
            Export every named parameter tensor (n_chains, n_draws, *shape); with False, only
            the log density and the sampler statistics.
        """
        check_is_fitted(self)
        self.samples_.info = {"step_size": self.diagnostics_["step_size"]}
        return self.samples_.to_inference_data(include_draws=include_weights)


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


#: The largest split R-hat of a converged quantity (1.1, Gelman & Rubin's long-standing limit;
#: Vehtari et al. 2021 advise 1.01 before trusting final inferences).
RHAT_MAX = 1.1


def _nanmax(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.nanmax(values)) if np.isfinite(values).any() else float("nan")


def _worst(statistic, lp: np.ndarray, ref: np.ndarray):
    """``statistic`` (draws (C, S) -> value) of the log density ``lp`` (C, S), and its
    largest over the reference quantities ``ref`` (C, S, Q), NaNs left out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant quantities give NaN
        values = [statistic(ref[..., j]) for j in range(ref.shape[-1])]
        on_lp = statistic(lp)
    if not values:
        return on_lp, np.full(np.shape(on_lp), np.nan)
    return on_lp, np.fmax.reduce(np.array(values), axis=0)


def pooled_rhat(lp: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """The split R-hat of all the chains together (:func:`~sklearn_bnn.diagnostics.rhat`):
    of the log density ``lp`` (C, S), and the largest over the reference quantities ``ref``
    (C, S, Q). Above :data:`RHAT_MAX` when a chain drifts or when the chains disagree."""
    on_lp, on_ref = _worst(rhat, lp, ref)
    return float(on_lp), float(on_ref)


def within_chain_rhat(lp: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """The within-chain split R-hat (:func:`~sklearn_bnn.diagnostics.rhat_within`: each
    chain's mean taken out, pooled over the chains) of the log density ``lp`` (C, S), and the
    largest over the reference quantities ``ref`` (C, S, Q). For one chain it is
    :func:`pooled_rhat`."""
    on_lp, on_ref = _worst(rhat_within, lp, ref)
    return float(on_lp), float(on_ref)


def chain_rhat(lp: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The split R-hat of each chain alone (:func:`~sklearn_bnn.diagnostics.rhat_per_chain`)
    of the log density ``lp`` (C, S), and each chain's largest over the reference quantities
    ``ref`` (C, S, Q): two arrays of shape (C,)."""
    return _worst(rhat_per_chain, lp, ref)


def convergence_check(lp: np.ndarray, ref: np.ndarray) -> dict:
    """The convergence entries of ``diagnostics_`` from the log density ``lp`` (C, S) and the
    reference quantities ``ref`` (C, S, Q).

    Returns
    -------
    dict
        ``rhat_log_prob``, ``rhat_predictions_max``: :func:`pooled_rhat`;
        ``rhat_within_log_prob``, ``rhat_within_predictions_max``: :func:`within_chain_rhat`;
        ``rhat_chain_log_prob``, ``rhat_chain_predictions_max``: the worst chain alone
        (:func:`chain_rhat`); ``rhat_per_chain`` (C,): each chain's own, the larger of its
        log density's and its worst quantity's; ``converged``: :func:`converged`;
        ``chains_disagree``: the chains each stationary (every chain's own R-hat and the
        within-chain R-hat at most :data:`RHAT_MAX`) but the pooled R-hat above it, the
        chains sitting in different modes. For one chain every R-hat is the pooled one and
        the chains never disagree.
    """
    rhat_lp, rhat_pred = pooled_rhat(lp, ref)
    within_lp, within_pred = within_chain_rhat(lp, ref)
    chain_lp, chain_pred = chain_rhat(lp, ref)
    check = {
        "rhat_log_prob": rhat_lp,
        "rhat_predictions_max": rhat_pred,
        "rhat_within_log_prob": within_lp,
        "rhat_within_predictions_max": within_pred,
        "rhat_chain_log_prob": _nanmax(chain_lp),
        "rhat_chain_predictions_max": _nanmax(chain_pred),
        "rhat_per_chain": np.fmax(chain_lp, chain_pred),
    }
    check["converged"] = converged(check)
    check["chains_disagree"] = bool(
        lp.shape[0] > 1
        and check["converged"]
        and _nanmax([rhat_lp, rhat_pred]) > RHAT_MAX
        and not _nanmax(check["rhat_per_chain"]) > RHAT_MAX
    )
    return check


def converged(check: dict) -> bool:
    """Whether the chains of :func:`convergence_check`'s R-hats have converged: not if the
    within-chain R-hat exceeds :data:`RHAT_MAX` (the chains drift), nor if the pooled one
    does while some chain's own does too (a drifting chain, which pooling the within-chain
    statistic over the others dilutes). A pooled R-hat above the limit with every chain
    stationary by both checks is chains in different modes, which running longer does not
    change. For one chain: its split R-hat at most :data:`RHAT_MAX`."""
    within = _nanmax([check["rhat_within_log_prob"], check["rhat_within_predictions_max"]])
    pooled = _nanmax([check["rhat_log_prob"], check["rhat_predictions_max"]])
    drifting = _nanmax(check["rhat_per_chain"]) > RHAT_MAX
    return not (within > RHAT_MAX or (pooled > RHAT_MAX and drifting))


def _rhat_message(diag: dict, continuing: bool) -> str | None:
    """The warning about draws that have not converged (:func:`converged`), naming the chains
    that drift and what to do from the fit's state; None when they have converged."""
    if converged(diag):
        return None
    per_chain = np.asarray(diag["rhat_per_chain"], dtype=float)
    within = _nanmax([diag["rhat_within_log_prob"], diag["rhat_within_predictions_max"]])
    pooled = _nanmax([diag["rhat_log_prob"], diag["rhat_predictions_max"]])
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
