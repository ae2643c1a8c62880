"""A predictive temperature learned from held-out rows inside ``fit``: the MCMC classifiers'
calibration.

The posterior predictive of a network sampled at temperature 1 under an N(0, 1) prior is often
*under*-confident: each draw is a sharp classifier, the draws disagree on the test points, and
their average is more accurate than any of them but less confident than it is accurate
(``docs/hmc.md``, "Calibration"). A classifier with ``calibration="temperature"`` sets aside a
stratified ``validation_fraction`` of the training rows, samples the posterior of the rest
through warmup and a short calibration phase, and learns the temperature T of the predictive

    p_T(y | x) = pbar(y | x)^(1/T) / sum_k pbar(k | x)^(1/T),   pbar = mean over draws,

from the held-out rows: log T gets a N(0, 0.5^2) prior (T within a factor 1.65 of 1 at one
standard deviation), its posterior given the held-out labels is computed on a grid, and the
prediction averages p_T over that posterior. Averaging instead of picking the best T matters
on small held-out sets: when they happen to hold no error, the likelihood alone sends T to 0,
and a confidently wrong test point then costs dearly; the average keeps the weight that the
held-out rows leave on T near 1. The chains then continue on **all** the rows for the
``n_draws`` kept draws, so the model learns from every row and only T from held-out ones. This
is temperature scaling (Guo et al., ICML 2017, §4.2) made Bayesian and applied to the model
average rather than to one network's logits; ``predict_samples`` keeps the per-draw
probabilities as sampled.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.utils import _safe_indexing
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import column_or_1d

from .._persistence_registry import register
from .._seeding import child, root_seed
from .._utils import SettingsObject, check_scalar_param
from .._warnings import one_convergence_warning
from ._weights import class_weights, sample_weights

__all__ = [
    "MIN_VALIDATION_ROWS",
    "TemperatureCalibrationMixin",
    "calibrated",
    "held_out_rows",
    "temper",
    "temperature_posterior",
]

# fewer held-out rows than this and the temperature is left at 1 (its prior mode)
MIN_VALIDATION_ROWS = 20
# prior sd of log T, and the grid of log T the posterior is computed on (+-8 prior sd)
LOG_T_PRIOR_SD = 0.5
_LOG_T_GRID = np.linspace(-4.0, 4.0, 161)
# grid points whose posterior weight is below this are dropped (the rest renormalised)
_MIN_WEIGHT = 1e-6
# fewest draws of the calibration stage (n_draws // 4 above this, n_draws below it)
MIN_CALIBRATION_DRAWS = 100


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


def _held_out_log_likelihood(
    proba: np.ndarray, y: np.ndarray, temperature: float, weights=None
) -> float:
    p = temper(proba, temperature)[np.arange(len(y)), y]
    log_p = np.log(np.clip(p, 1e-300, None))
    return float(np.sum(log_p if weights is None else weights * log_p))


def held_out_weights(estimator, y, sample_weight, held) -> np.ndarray | None:
    """The held-out rows' weights in the temperature's likelihood: their ``sample_weight``
    times their class's weight (``class_weight``, computed on all of ``y``, as the fit's);
    None when there are none."""
    per_class = class_weights(estimator.class_weight, estimator.classes_, y)
    weights = None if sample_weight is None else np.asarray(sample_weight)[held]
    if np.any(per_class != 1.0):
        by_class = per_class[np.searchsorted(estimator.classes_, _safe_indexing(y, held))]
        weights = by_class if weights is None else weights * by_class
    return weights


def temperature_posterior(proba: np.ndarray, y: np.ndarray, weights=None) -> np.ndarray:
    """The posterior of the predictive temperature given held-out rows, on a grid.

    log T ~ N(0, LOG_T_PRIOR_SD^2) a priori; the likelihood of the held-out labels is
    prod_i p_T(y_i | x_i). Computed on 161 points of log T in [-4, 4] (the prior's +-8 sd).

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes)
        The posterior predictive (mean over draws) on the held-out rows.
    y : ndarray of int, shape (n_samples,)
        Their classes as column indices of ``proba``.
    weights : ndarray of shape (n_samples,), optional
        The rows' weights, multiplying their log-likelihoods.

    Returns
    -------
    ndarray of shape (2, k)
        Row 0 the temperatures, row 1 their posterior weights (summing to one); grid points of
        weight below 1e-6 are left out.
    """
    log_post = np.array(
        [_held_out_log_likelihood(proba, y, math.exp(t), weights) for t in _LOG_T_GRID]
    ) - 0.5 * (_LOG_T_GRID / LOG_T_PRIOR_SD) ** 2
    weights = np.exp(log_post - log_post.max())
    weights /= weights.sum()
    keep = weights >= _MIN_WEIGHT
    return np.stack([np.exp(_LOG_T_GRID[keep]), weights[keep] / weights[keep].sum()])


def calibrated(proba: np.ndarray, posterior: np.ndarray) -> np.ndarray:
    """The predictive averaged over the temperature posterior: sum_j w_j p_{T_j}.

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes)
        The untempered posterior predictive.
    posterior : ndarray of shape (2, k)
        Temperatures and weights, as :func:`temperature_posterior` returns them.
    """
    out = np.zeros_like(proba)
    for temperature, weight in posterior.T:
        out += weight * temper(proba, float(temperature))
    # rounding in the weighted sum can leave a certain class at 1 + 2e-16
    return np.clip(out / out.sum(axis=-1, keepdims=True), 0.0, 1.0)


def calibration_draws(n_draws, thin: int = 1):
    """Transitions of the calibration stage: a quarter of ``n_draws``, at least
    :data:`MIN_CALIBRATION_DRAWS` (at most ``n_draws``), at least ``thin``; "auto" as it is
    (the adaptive budget keeps at least that many draws)."""
    if isinstance(n_draws, str):
        return n_draws
    return max(thin, min(n_draws, max(n_draws // 4, MIN_CALIBRATION_DRAWS)))


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


@register
class TemperatureCalibration(SettingsObject):
    """A temperature of the predictive learned on held-out rows (docs/hmc.md, "Calibration").

    The classifiers' ``calibration="temperature"`` is ``TemperatureCalibration()``;
    ``calibration=TemperatureCalibration(validation_fraction=0.3)`` or
    ``set_params(calibration__validation_fraction=0.3)`` holds out another share.

    Parameters
    ----------
    validation_fraction : float in (0, 1), default=0.2
        Share of the training rows held out (stratified) to learn the temperature.

    Examples
    --------
    >>> from sklearn_bnn import HMCClassifier
    >>> HMCClassifier().set_params(calibration__validation_fraction=0.3).calibration
    TemperatureCalibration(validation_fraction=0.3)
    """

    def __init__(self, validation_fraction=0.2):
        self.validation_fraction = validation_fraction

    def _check_params(self) -> None:
        check_scalar_param(
            self.validation_fraction,
            "validation_fraction",
            low=0,
            high=1,
            low_inclusive=False,
            high_inclusive=False,
        )

    def held_out_split(self, y, random_state):
        """``(fit_rows, held_rows)`` of the labels ``y``, stratified, drawn from the
        "calibration" child of ``random_state``'s seed sequence; None when fewer than 20 rows
        would be held out (see :func:`held_out_rows`)."""
        self._check_params()
        codes = np.unique(column_or_1d(y, warn=True), return_inverse=True)[1]
        seed = int(child(root_seed(random_state), "calibration").generate_state(1)[0])
        return held_out_rows(codes, self.validation_fraction, seed)


def resolve_calibration(calibration):
    """The calibration ``calibration`` asks for: ``TemperatureCalibration()`` for
    "temperature", None for None, an object as it is."""
    if isinstance(calibration, str):
        if calibration == "temperature":
            return TemperatureCalibration()
        raise ValueError(
            f"calibration must be 'temperature', None or a TemperatureCalibration, got "
            f"{calibration!r}."
        )
    return calibration


# the parameter's constraint, for every classifier that takes it
CALIBRATION_CONSTRAINT = [StrOptions({"temperature"}), None, HasMethods(["held_out_split"])]


class TemperatureCalibrationMixin:
    """``calibration`` for the MCMC classifiers (module docstring).

    Goes before :class:`~._tasks.SamplingClassifierMixin`'s sampling base in the MRO: its
    ``_fit`` runs the base's ``_fit`` twice (the held-out phase, then the continuation on every
    row), and ``_temper`` is what ``predict_proba`` applies.
    """

    _own_constraints: dict = {
        "calibration": CALIBRATION_CONSTRAINT,
    }

    def _fit(self, X, y, sample_weight=None):
        if self._continuing():  # a warm start keeps the temperature it had
            return super()._fit(X, y, sample_weight)
        self.calibration_temperature_ = 1.0
        self.calibration_posterior_ = _NO_CALIBRATION
        split = None
        # SG-MCMC reads a memory map one batch at a time: the calibration stage's rows would be
        # copied into memory, so it goes uncalibrated (the full-batch estimators load it whole)
        on_disk = isinstance(X, np.memmap) and self._data_access == "minibatch"
        self._check_params()  # scikit-learn's messages first, for calibration too
        calibration = resolve_calibration(self.calibration)
        if calibration is not None and not on_disk:
            split = calibration.held_out_split(y, self.random_state)
        if split is None:
            return super()._fit(X, y, sample_weight)
        fit_rows, held = split
        weights = sample_weights(sample_weight, X)  # scikit-learn's messages before indexing
        n_phase = calibration_draws(self.n_draws, self.thin)
        name = type(self).__name__  # the two stages' progress bars say which is which
        stage = f"{name} calibration stage ({len(fit_rows)} rows, {len(held)} held out)"
        # the calibration stage's draws are dropped: its divergences and R-hat are not the
        # fit's (the final stage checks its own); its warmup's problems are, as the chains
        # continue from it
        keep = ("warmup",)
        with (
            _overridden(
                self,
                n_draws=n_phase,
                _min_auto_draws=MIN_CALIBRATION_DRAWS,
                _progress_desc=stage,
            ),
            one_convergence_warning(keep=keep),
        ):
            super()._fit(
                _safe_indexing(X, fit_rows),
                _safe_indexing(y, fit_rows),
                None if weights is None else weights[fit_rows],
            )
        if self.diagnostics_.get("interrupted"):
            return self  # Ctrl-C in the calibration phase: keep its draws, T = 1, stop there
        start = {k: v for k, v in self.diagnostics_.items() if k.startswith("init_")}
        proba = self._predictive_mean(_safe_indexing(X, held))
        codes = np.searchsorted(self.classes_, _safe_indexing(np.asarray(y), held))
        posterior = temperature_posterior(
            proba, codes, held_out_weights(self, np.asarray(y), weights, held)
        )
        with _overridden(
            self,
            warm_start=True,
            _drop_previous_draws=True,
            _progress_desc=f"{name} sampling (all {len(fit_rows) + len(held)} rows)",
        ):
            super()._fit(X, y, sample_weight)
        self.diagnostics_ = {**start, **self.diagnostics_}  # the MAP start's figures
        self.calibration_posterior_ = posterior
        # the posterior mean of log T, reported as one temperature
        self.calibration_temperature_ = float(np.exp(np.sum(posterior[1] * np.log(posterior[0]))))
        return self

    def _temper(self, proba: np.ndarray) -> np.ndarray:
        return calibrated(proba, getattr(self, "calibration_posterior_", _NO_CALIBRATION))


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
_NO_CALIBRATION = np.array([[1.0], [1.0]])


CALIBRATION_DOC = """\
    calibration : {"temperature"}, TemperatureCalibration or None, default="temperature"
        "temperature" (``TemperatureCalibration()``): hold out its ``validation_fraction``
        (0.2; ``calibration__validation_fraction``) of the rows (stratified), sample the
        rest through warmup and a calibration stage (with ``n_draws="auto"``, the adaptive
        budget's draws, at least 100; with a number, ``n_draws // 4``, at least 100 and at
        most ``n_draws``: T learned from the average of a few draws is too high), learn the
        posterior of the temperature T of the predictive ``mean_draws(p)^(1/T)``
        (renormalised) from the held-out labels under a N(0, 0.5^2) prior on log T, then
        continue the chains on **every** row for the kept draws (the calibration draws are
        dropped); ``predict_proba`` averages the tempered predictive over that posterior.
        Costs those calibration transitions more than None. Skipped (T = 1) when fewer than
        20 rows would be held out. None: the posterior predictive as sampled (docs/hmc.md,
        "Calibration").
"""

CALIBRATION_ATTRS_DOC = """    calibration_temperature_ : float
        exp(E[log T]) under the temperature's posterior (1.0 when ``calibration`` is None or
        was skipped): a summary; ``predict_proba`` averages over the whole posterior.
    calibration_posterior_ : ndarray of shape (2, k)
        Temperatures and their posterior weights. ``predict_samples`` returns the per-draw
        probabilities untempered.
"""
