"""Probabilistic regression metrics for Gaussian predictive distributions (REFERENCE §9).

A regressor's prediction is a mean ``y_mean`` and a standard deviation ``y_std`` per output,
as ``predict(X, return_std=True)`` gives. For R^2 use :func:`sklearn.metrics.r2_score`.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm
from sklearn.utils import check_array, check_consistent_length

from .._validation import check_weights

__all__ = ["gaussian_nll", "interval_coverage", "regression_calibration_curve"]

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

    ``0.5 log(2 pi sigma^2) + (y - mu)^2 / (2 sigma^2)``, averaged over points (REFERENCE §9).

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


def interval_coverage(y_true, y_mean, y_std, level=0.95):
    """Fraction of targets inside the central Gaussian predictive interval(s).

    The interval at level ``a`` is ``mu +- z sigma`` with ``z = Phi^-1((1 + a) / 2)``; a
    calibrated regressor covers a fraction ``a`` of the targets (REFERENCE §9). All outputs are
    pooled.

    Parameters
    ----------
    y_true, y_mean, y_std
        As in :func:`gaussian_nll`.
    level : float or array-like of floats in (0, 1), default=0.95

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
    z = norm.ppf((1.0 + levels) / 2.0)
    scaled = (np.abs(y - mu) / sigma).ravel()
    coverage = (scaled[:, None] <= np.atleast_1d(z)[None, :]).mean(axis=0)
    return float(coverage[0]) if levels.ndim == 0 else coverage


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
