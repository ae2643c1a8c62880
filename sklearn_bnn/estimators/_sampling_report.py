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
        ref = self._reference_quantity(self._network_outputs(X[:64], validate=False))
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
        if n_transitions and n_div > 0.05 * n_transitions:
            warnings.warn(
                f"{n_div} of {n_transitions} transitions diverged (rejected); the "
                f"step_size ({float(run.step_size.mean()):.3g}) is probably too large for this "
                "posterior: lower step_size or use step_size='auto'.",
                RuntimeWarning,
                stacklevel=3,
            )
        worst = np.nanmax([diag["rhat_log_prob"], diag["rhat_predictions_max"], 0.0])
        if worst > 1.1:
            warnings.warn(
                f"R-hat {worst:.2f} > 1.1: the draws have not converged (see "
                "diagnostics_ and summary()); increase n_warmup, n_draws or n_chains.",
                RuntimeWarning,
                stacklevel=3,
            )

    def summary(self) -> str:
        """A short text report of the sampling: per-chain statistics and convergence."""
        check_is_fitted(self)
        return format_summary(type(self).__name__, self.diagnostics_)

    def to_inference_data(self, include_weights: bool = True):
        """The draws as an ArviZ ``InferenceData`` (needs ``pip install sklearn-bnn[arviz]``).

        Parameters
        ----------
        include_weights : bool, default=True
            Export every named parameter tensor (n_chains, n_draws, *shape); with False, only
            the log density and the sampler statistics.
        """
        check_is_fitted(self)
        self.samples_.info = {"step_size": self.diagnostics_["step_size"]}
        return self.samples_.to_inference_data(include_draws=include_weights)
