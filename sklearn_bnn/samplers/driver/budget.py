"""Budgets that follow the need: a warmup that ends when the step size has settled, and draws
that stop when every chain is stationary and the draws are precise enough.

``n_warmup="auto"`` and ``n_draws="auto"`` (the MCMC estimators' defaults, and
:func:`~sklearn_bnn.samplers.sample`'s when asked) hand the sampling loop a
:class:`WarmupRule` and a :class:`DrawRule`. Both are checked every ``block`` transitions on the
host, never inside a transition, and both depend only on the draws, so the same
``random_state`` gives the same draws.

The draws rule is the convergence check the estimators report and warn on
(:func:`sklearn_bnn.diagnostics.converged`: the within-chain split R-hat, rank-normalised, bulk
and folded, of the log density and of every monitored quantity, each chain's mean taken out so
that chains settled in different modes do not count; Vehtari, Gelman, Simpson, Carpenter &
Bürkner 2021), applied while sampling, and the bulk effective sample size of the monitored
quantities pooled over the chains (the estimators monitor predictions on reference rows).
Chains that fail the R-hat test on a window of at least ``2 * min_draws`` draws lose the first
half of the window, which becomes warmup (one discards more of a chain that has not forgotten
its start), and sampling goes on; the run stops at the first check that passes, or at
``max_draws`` draws.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ...diagnostics import converged, convergence_check, ess_bulk

__all__ = ["DrawRule", "WarmupRule", "as_length", "is_auto"]

#: The length a sampler that cannot stop early (bridged HMC's boxes) runs for an adaptive budget.
FIXED_LENGTH = 500


def is_auto(value) -> bool:
    """Whether a budget is ``"auto"``."""
    return isinstance(value, str) and value == "auto"


def as_length(budget) -> int:
    """A budget as a number of transitions: an int as it is, a rule as :data:`FIXED_LENGTH`."""
    if isinstance(budget, WarmupRule | DrawRule):
        return FIXED_LENGTH
    return int(budget)


@dataclass(frozen=True)
class WarmupRule:
    """When an adaptive warmup may end (``n_warmup="auto"``).

    The warmup runs at least ``min_warmup`` transitions, then ends at the first multiple of
    ``block`` transitions where every chain's adapted step size (dual averaging's averaged
    iterate) moved by less than ``tolerance`` (relative) over the last ``block`` transitions;
    at most ``max_warmup`` transitions.

    Parameters
    ----------
    min_warmup : int, default=150
    block : int, default=25
    tolerance : float, default=0.1
    max_warmup : int, default=500
    """

    min_warmup: int = 150
    block: int = 25
    tolerance: float = 0.1
    max_warmup: int = 500

    def settled(self, i: int, history: list) -> bool:
        """Whether warmup may end after transition ``i`` (from 0), given the per-chain final
        step sizes after every transition so far (``history``, a list of (C,) tensors)."""
        n = i + 1
        if n < self.min_warmup or n % self.block:
            return False
        now, before = history[-1], history[-1 - self.block]
        change = (torch.log(now) - torch.log(before)).abs()
        return bool((change < np.log1p(self.tolerance)).all())


@dataclass(frozen=True)
class DrawRule:
    """When adaptive sampling may stop (``n_draws="auto"``).

    Parameters
    ----------
    min_draws : int, default=100
        Fewest kept draws per chain.
    max_draws : int, default=1000
        Most kept draws per chain (the run stops there, converged or not; the estimators then
        warn).
    block : int, default=25
        Kept draws between two checks.
    min_ess : float, default=50
        The bulk effective sample size the draws must reach, pooled over the chains: the median
        over the monitored quantities (the log density's when nothing else is monitored).
    monitor : callable or None, default=None
        ``monitor(draws)`` with draws (C, S, D) on the CPU returns an array (C, S, Q) of
        quantities to check beside the log density (the estimators: predictions on reference
        rows).
    """

    min_draws: int = 100
    max_draws: int = 1000
    block: int = 25
    min_ess: float = 50.0
    monitor: object = None

    def due(self, n_window: int, n_kept: int) -> bool:
        """Whether to check after ``n_kept`` kept draws, ``n_window`` of them in the window."""
        return n_window >= self.min_draws and n_kept % self.block == 0

    def check(self, draws: torch.Tensor, log_prob: torch.Tensor) -> tuple[bool, int]:
        """Judge the window of draws ``(C, S, D)`` and their log densities ``(C, S)``.

        Returns
        -------
        done : bool
            The chains converged by :func:`~sklearn_bnn.diagnostics.converged` (the check the
            estimators report and warn on), and the effective sample size reached.
        drop : int
            Draws at the start of the window to discard as warmup (a chain failed on a window
            of at least ``2 * min_draws`` draws: its first half).
        """
        lp = log_prob.double().cpu().numpy()
        if self.monitor is not None:
            extra = np.asarray(self.monitor(draws), dtype=np.float64)
        else:
            extra = np.empty(lp.shape + (0,))
        S = lp.shape[1]
        if not converged(convergence_check(lp, extra)):
            return False, (S // 2 if S >= 2 * self.min_draws else 0)
        return _ess_reached(np.concatenate([lp[..., None], extra], axis=-1), self.min_ess), 0


def _ess_reached(quantities: np.ndarray, min_ess: float) -> bool:
    """The median over the monitored quantities (columns 1 on) of their pooled bulk ESS reaches
    ``min_ess``; without monitored quantities, the log density's (column 0). The log density
    of a network's posterior moves along the directions the data leave to the prior, which
    barely change the predictions; the draws are precise enough once the predictions are."""
    columns = range(1, quantities.shape[-1]) if quantities.shape[-1] > 1 else [0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ess = [ess_bulk(quantities[..., q]) for q in columns]
    finite = [e for e in ess if np.isfinite(e)]
    return bool(finite) and float(np.median(finite)) >= min_ess
