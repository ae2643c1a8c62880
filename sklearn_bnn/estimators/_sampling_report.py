"""Reporting of the MCMC estimators' runs: ``diagnostics_``, ``summary()``, ArviZ export.

:class:`SamplingReportMixin` turns a run of the sampling loop into ``diagnostics_`` and
``acceptance_rate_`` (the run's figures, with the convergence of the log density and of the
predictions on reference rows), warns about divergences and R-hat, and gives the text summary
and the ``InferenceData`` of the draws.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._utils import to_numpy
from .._warnings import warn
from ..diagnostics import ess_bulk, ess_tail, format_summary, rhat
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
        diag.update(
            ess_bulk_log_prob=ess_bulk(lp), ess_tail_log_prob=ess_tail(lp), rhat_log_prob=rhat(lp)
        )
        rows = getattr(self, "_reference_rows", slice(0, 64))  # those the budget monitored
        ref = self._reference_quantity(self._network_outputs(X[rows], validate=False))
        ref = to_numpy(ref).reshape(samples.n_chains, samples.n_draws, -1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # constant columns give NaN
            diag["rhat_predictions_max"] = float(
                np.nanmax([rhat(ref[..., j]) for j in range(ref.shape[-1])] + [np.nan])
            )
            diag["ess_bulk_predictions_min"] = float(
                np.nanmin([ess_bulk(ref[..., j]) for j in range(ref.shape[-1])] + [np.nan])
            )
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
                RuntimeWarning,
            )
        worst = np.nanmax([diag["rhat_log_prob"], diag["rhat_predictions_max"], 0.0])
        if worst > 1.1:
            more = (
                "fit again with warm_start=True to run the chains longer, or afresh with "
                "more n_warmup or n_chains"
                if continuing
                else "increase n_warmup, n_draws or n_chains"
            )
            warn(
                f"R-hat {worst:.2f} > 1.1: the draws have not converged (see "
                f"diagnostics_ and summary()); {more}.",
                RuntimeWarning,
            )

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
