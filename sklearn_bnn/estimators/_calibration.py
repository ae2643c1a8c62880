"""A predictive temperature chosen on held-out rows inside ``fit``: the MCMC classifiers'
calibration.

The posterior predictive of a network sampled at temperature 1 under an N(0, 1) prior is often
*under*-confident: each draw is a sharp classifier, the draws disagree on the test points, and
their average is more accurate than any of them but less confident than it is accurate
(``docs/hmc.md``, "Calibration"). A classifier with ``calibration="temperature"`` sets aside a
stratified ``validation_fraction`` of the training rows, samples the posterior of the rest
through warmup and a short calibration phase, and chooses one temperature T for the predictive

    p_T(y | x) = pbar(y | x)^(1/T) / sum_k pbar(k | x)^(1/T),   pbar = mean over draws

by maximising the held-out log-likelihood plus a N(0, 1) prior on log T (a maximum a posteriori
choice: with few held-out rows T stays near 1). The chains then continue on **all** the rows for
the ``n_draws`` kept draws, so the model learns from every row and only the temperature is
learned from held-out ones. This is temperature scaling (Guo et al., ICML 2017, §4.2) applied to
the Bayesian model average rather than to one network's logits; the per-draw probabilities of
``predict_samples`` are left as sampled.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from numbers import Real

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.model_selection import train_test_split
from sklearn.utils import _safe_indexing
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import column_or_1d

from .._seeding import child, root_seed

__all__ = [
    "MIN_VALIDATION_ROWS",
    "TemperatureCalibrationMixin",
    "choose_temperature",
    "held_out_rows",
    "temper",
]

# fewer held-out rows than this and the temperature is left at 1 (its prior mode)
MIN_VALIDATION_ROWS = 20
# T is searched on [exp(-4), exp(3)]: beyond, the prior (sd 1 on log T) has no mass to speak of
_LOG_T_BOUNDS = (-4.0, 3.0)


def temper(proba: np.ndarray, temperature: float) -> np.ndarray:
    """``proba ** (1 / T)`` renormalised over the last axis, computed in log space.

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes)
        Predictive probabilities (rows summing to one).
    temperature : float
        T > 0; 1 returns ``proba`` unchanged, T < 1 sharpens, T > 1 flattens.

    Returns
    -------
    ndarray of shape (n_samples, n_classes)
    """
    if temperature == 1.0:
        return proba
    with np.errstate(divide="ignore"):
        logits = np.log(proba) / temperature
    logits -= logits.max(axis=-1, keepdims=True)
    out = np.exp(logits)
    return out / out.sum(axis=-1, keepdims=True)


def _objective(log_t: float, proba: np.ndarray, y: np.ndarray) -> float:
    """Negative held-out log-likelihood of the tempered predictive plus -log N(log T | 0, 1)."""
    p = temper(proba, math.exp(log_t))[np.arange(len(y)), y]
    return -float(np.sum(np.log(np.clip(p, 1e-300, None)))) + 0.5 * log_t**2


def choose_temperature(proba: np.ndarray, y: np.ndarray) -> float:
    """The maximum a posteriori temperature of the predictive on held-out rows.

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes)
        The posterior predictive (mean over draws) on the held-out rows.
    y : ndarray of int, shape (n_samples,)
        Their classes as column indices of ``proba``.

    Returns
    -------
    float
        argmax over T of sum_i log p_T(y_i | x_i) + log N(log T | 0, 1).
    """
    result = minimize_scalar(
        _objective, bounds=_LOG_T_BOUNDS, args=(proba, y), method="bounded",
        options={"xatol": 1e-4},
    )
    return float(math.exp(result.x))


def held_out_rows(y: np.ndarray, fraction: float, seed) -> tuple[np.ndarray, np.ndarray] | None:
    """Row indices ``(fit, held_out)`` of a stratified split, or None when the held-out part
    would have fewer than :data:`MIN_VALIDATION_ROWS` rows or a class too small to split.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Encoded classes.
    fraction : float
        Share of the rows held out, in (0, 1).
    seed : int
        Seed of the split.
    """
    n = len(y)
    n_held = int(math.ceil(fraction * n))
    counts = np.bincount(y)
    if n_held < MIN_VALIDATION_ROWS or n - n_held < 2 * len(counts) or counts.min() < 2:
        return None
    rows = np.arange(n)
    fit_rows, held = train_test_split(rows, test_size=n_held, stratify=y, random_state=seed)
    return np.sort(fit_rows), np.sort(held)


class TemperatureCalibrationMixin:
    """``calibration`` and ``validation_fraction`` for the MCMC classifiers (module docstring).

    Goes before :class:`~._tasks.SamplingClassifierMixin`'s sampling base in the MRO: its
    ``_fit`` runs the base's ``_fit`` twice (the held-out phase, then the continuation on every
    row), and ``_temper`` is what ``predict_proba`` applies.
    """

    _own_constraints: dict = {
        "calibration": [StrOptions({"temperature"}), None],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
    }

    def _fit(self, X, y):
        if self._continuing():  # a warm start keeps the temperature it had
            return super()._fit(X, y)
        self.calibration_temperature_ = 1.0
        split = None
        if self.calibration == "temperature":
            self._check_params()
            y_codes = np.unique(column_or_1d(y, warn=True), return_inverse=True)[1]
            seed = int(child(root_seed(self.random_state), "calibration").generate_state(1)[0])
            split = held_out_rows(y_codes, self.validation_fraction, seed)
        if split is None:
            return super()._fit(X, y)
        fit_rows, held = split
        n_phase = max(self.thin, self.n_draws // 4)
        with _overridden(self, n_draws=n_phase), warnings.catch_warnings():
            # the calibration phase's own convergence is not the fit's: its draws are dropped
            warnings.filterwarnings("ignore", message="R-hat", category=RuntimeWarning)
            super()._fit(_safe_indexing(X, fit_rows), _safe_indexing(y, fit_rows))
        proba = self._predictive_mean(_safe_indexing(X, held))
        codes = np.searchsorted(self.classes_, _safe_indexing(np.asarray(y), held))
        temperature = choose_temperature(proba, codes)
        with _overridden(self, warm_start=True, _drop_previous_draws=True):
            super()._fit(X, y)
        self.calibration_temperature_ = temperature
        return self

    def _temper(self, proba: np.ndarray) -> np.ndarray:
        return temper(proba, getattr(self, "calibration_temperature_", 1.0))


@contextmanager
def _overridden(estimator, **values):
    """Set attributes of ``estimator`` for the duration of a block, then restore them."""
    saved = {name: vars(estimator).get(name, _MISSING) for name in values}
    vars(estimator).update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is _MISSING:
                vars(estimator).pop(name, None)
            else:
                vars(estimator)[name] = value


_MISSING = object()


CALIBRATION_DOC = """    calibration : {"temperature"} or None, default="temperature"
        "temperature": hold out ``validation_fraction`` of the rows (stratified), sample the
        rest through warmup and ``n_draws // 4`` calibration transitions, choose the temperature
        T of the predictive ``mean_draws(p)^(1/T)`` (renormalised) that maximises the held-out
        log-likelihood under a N(0, 1) prior on log T, then continue the chains on **every** row
        for the ``n_draws`` kept draws (the calibration draws are dropped). Costs about
        ``n_draws // 4`` transitions more than None. Skipped (T = 1) when fewer than 20 rows
        would be held out. None: the posterior predictive as sampled (docs/hmc.md,
        "Calibration").
    validation_fraction : float, default=0.2
        Share of the rows held out to choose the temperature, in (0, 1).
"""

CALIBRATION_ATTRS_DOC = """    calibration_temperature_ : float
        The temperature T applied by ``predict_proba`` (1.0 when ``calibration`` is None or
        was skipped); ``predict_samples`` returns the per-draw probabilities untempered.
"""
