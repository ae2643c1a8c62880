"""Probabilistic regression metrics for Gaussian predictive distributions.

A regressor's prediction is a mean ``y_mean`` and a standard deviation ``y_std`` per output,
as ``predict(X, return_std=True)`` gives. For R^2 use :func:`sklearn.metrics.r2_score`.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm
from sklearn.utils import check_array, check_consistent_length

from .._validation import check_weights

__all__ = [
    "gaussian_crps",
    "gaussian_nll",
    "interval_coverage",
    "interval_coverage_error",
    "regression_calibration_curve",
]

_MULTIOUTPUT = ("raw_values", "uniform_average")


def _check_gaussian(y_true, y_mean, y_std):
    y = check_array(y_true, ensure_2d=False, dtype=np.float64, input_name="y_true")
    mu = check_array(y_mean, ensure_2d=False, dtype=np.float64, input_name="y_mean")
    if y.ndim > 2 or y.shape != mu.shape:
        raise ValueError(
            f"y_true and y_mean must have the same shape (n_samples,) or (n_samples, n_outputs), "
            f"got {y.shape} and {mu.shape}."
        )
    sigma = np.asarray(y_std, dtype=np.float64)
    try:
        sigma = np.broadcast_to(sigma, y.shape)
    except ValueError:
        raise ValueError(
            f"y_std of shape {sigma.shape} does not broadcast to y_true's shape {y.shape}."
        ) from None
    if not np.all(np.isfinite(sigma)) or np.any(sigma <= 0):
        raise ValueError("y_std must be finite and strictly positive.")
    check_consistent_length(y, mu)
    return y, mu, sigma


def _check_levels(level) -> np.ndarray:
    levels = np.asarray(level, dtype=np.float64)
    if (
        levels.ndim > 1
        or np.any(~np.isfinite(levels))
        or np.any(levels <= 0)
        or np.any(levels >= 1)
    ):
        raise ValueError(
            f"level must be a number or 1-D array of numbers in (0, 1), got {level!r}."
        )
    return levels


def gaussian_nll(
    y_true, y_mean, y_std, *, sample_weight=None, multioutput: str = "uniform_average"
):
    """Mean negative log density of the targets under ``N(y_mean, y_std^2)``.

    ``0.5 log(2 pi sigma^2) + (y - mu)^2 / (2 sigma^2)``, averaged over points.

    Parameters
    ----------
    y_true, y_mean : array-like of shape (n_samples,) or (n_samples, n_outputs)
    y_std : array-like broadcastable to ``y_true``'s shape, strictly positive
    sample_weight : array-like of shape (n_samples,), optional
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        Average the per-output values, or return them, as scikit-learn's regression metrics do.

    Returns
    -------
    float or ndarray of shape (n_outputs,)

    Examples
    --------
    >>> round(gaussian_nll([0.0], [0.0], [1.0]), 6)  # 0.5 * log(2 pi)
    0.918939
    """
    if multioutput not in _MULTIOUTPUT:
        raise ValueError(f"multioutput must be one of {_MULTIOUTPUT}, got {multioutput!r}.")
    y, mu, sigma = _check_gaussian(y_true, y_mean, y_std)
    weights = check_weights(sample_weight, y.shape[0])
    per_output = np.atleast_1d(
        np.average(-norm.logpdf(y, loc=mu, scale=sigma), weights=weights, axis=0)
    )
    return per_output if multioutput == "raw_values" else float(per_output.mean())


def gaussian_crps(
    y_true, y_mean, y_std, *, sample_weight=None, multioutput: str = "uniform_average"
):
    """Mean continuous ranked probability score of ``N(y_mean, y_std^2)`` at the targets.

    CRPS(F, y) is the integral over t of ``(F(t) - 1[y <= t])^2``: the squared distance
    between the predictive CDF and the step at the observation, in the units of y; lower is
    better, and it reduces to the absolute error when ``y_std -> 0``. For a Gaussian it has the
    closed form ``sigma (z (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi))`` with
    ``z = (y - mu) / sigma`` (Gneiting & Raftery 2007, "Strictly proper scoring rules,
    prediction, and estimation", JASA, eq. 21). Unlike the log-likelihood it grows only
    linearly with a gross error, so a single outlier does not dominate it.

    Parameters
    ----------
    y_true, y_mean, y_std, sample_weight, multioutput
        As in :func:`gaussian_nll`.

    Returns
    -------
    float or ndarray of shape (n_outputs,)

    Examples
    --------
    >>> round(gaussian_crps([0.0], [0.0], [1.0]), 6)  # (sqrt(2) - 1) / sqrt(pi)
    0.233695
    """
    if multioutput not in _MULTIOUTPUT:
        raise ValueError(f"multioutput must be one of {_MULTIOUTPUT}, got {multioutput!r}.")
    y, mu, sigma = _check_gaussian(y_true, y_mean, y_std)
    weights = check_weights(sample_weight, y.shape[0])
    z = (y - mu) / sigma
    crps = sigma * (z * (2.0 * norm.cdf(z) - 1.0) + 2.0 * norm.pdf(z) - 1.0 / np.sqrt(np.pi))
    per_output = np.atleast_1d(np.average(crps, weights=weights, axis=0))
    return per_output if multioutput == "raw_values" else float(per_output.mean())


def interval_coverage(y_true, y_mean, y_std, level=0.95, *, sample_weight=None):
    """Fraction of targets inside the central Gaussian predictive interval(s).

    The interval at level ``a`` is ``mu +- z sigma`` with ``z = Phi^-1((1 + a) / 2)``; a
    calibrated regressor covers a fraction ``a`` of the targets. All outputs are
    pooled.

    Parameters
    ----------
    y_true, y_mean, y_std
        As in :func:`gaussian_nll`.
    level : float or array-like of floats in (0, 1), default=0.95
    sample_weight : array-like of shape (n_samples,), optional
        Weight of each point (shared by its outputs).

    Returns
    -------
    float, or ndarray of the shape of ``level``

    Examples
    --------
    >>> interval_coverage([0.0, 1.0, 3.0], [0.0, 0.0, 0.0], 1.0, level=0.95)
    0.6666666666666666
    """
    y, mu, sigma = _check_gaussian(y_true, y_mean, y_std)
    levels = _check_levels(level)
    weights = check_weights(sample_weight, y.shape[0])
    z = norm.ppf((1.0 + levels) / 2.0)
    scaled = (np.abs(y - mu) / sigma).reshape(y.shape[0], -1)
    inside = scaled[:, :, None] <= np.atleast_1d(z)[None, None, :]  # (n, n_outputs, n_levels)
    coverage = np.average(inside.mean(axis=1), weights=weights, axis=0)
    return float(coverage[0]) if levels.ndim == 0 else coverage


def interval_coverage_error(y_true, y_mean, y_std, level=0.95, *, sample_weight=None):
    """Distance between observed and nominal coverage, ``|coverage - level|``.

    Zero for a calibrated interval; unlike the coverage itself it does not reward intervals
    that are too wide, so ``-interval_coverage_error`` can be maximised in model selection.

    Parameters
    ----------
    y_true, y_mean, y_std, level, sample_weight
        As in :func:`interval_coverage`.

    Returns
    -------
    float, or ndarray of the shape of ``level``

    Examples
    --------
    >>> round(interval_coverage_error([0.0, 1.0, 3.0], [0.0, 0.0, 0.0], 1.0, level=0.95), 4)
    0.2833
    """
    levels = _check_levels(level)
    coverage = interval_coverage(y_true, y_mean, y_std, level, sample_weight=sample_weight)
    error = np.abs(coverage - levels)
    return float(error) if levels.ndim == 0 else error


def regression_calibration_curve(y_true, y_mean, y_std, *, levels=None):
    """Observed against nominal coverage of central Gaussian intervals.

    A calibrated regressor lies on the diagonal; a curve below it means intervals that are too
    narrow (over-confidence), above it too wide.

    Parameters
    ----------
    y_true, y_mean, y_std
        As in :func:`gaussian_nll`.
    levels : array-like of floats in (0, 1), optional
        Nominal levels; by default 0.05, 0.10, ..., 0.95.

    Returns
    -------
    levels : ndarray of shape (n_levels,)
    coverage : ndarray of shape (n_levels,)
    """
    levels = np.linspace(0.05, 0.95, 19) if levels is None else np.atleast_1d(levels)
    return levels, interval_coverage(y_true, y_mean, y_std, level=levels)
