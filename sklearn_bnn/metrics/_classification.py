"""Calibration and proper scoring rules for predictive class probabilities.

Every function takes the true labels and a probability matrix ``y_prob`` of shape
``(n_samples, n_classes)`` whose columns follow the sorted labels (a classifier's ``classes_``).
A 1-D ``y_prob`` is the probability of the positive class of a binary problem.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import brier_score_loss, log_loss

from .._utils import check_scalar_param
from .._validation import check_classification

__all__ = [
    "top_label_calibration_curve",
    "expected_calibration_error",
    "maximum_calibration_error",
    "brier_score",
    "negative_log_likelihood",
]

_STRATEGIES = ("uniform", "quantile")


def _bin_edges(confidence: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)
    if strategy == "quantile":
        return np.unique(np.quantile(confidence, np.linspace(0.0, 1.0, n_bins + 1)))
    raise ValueError(f"strategy must be one of {_STRATEGIES}, got {strategy!r}.")


def top_label_calibration_curve(
    y_true,
    y_prob,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    labels=None,
    sample_weight=None,
):
    """Accuracy against confidence of the top-label prediction, per confidence bin.

    The confidence of a point is its largest predicted probability and its prediction the
    class that has it (Guo et al., 2017, "On calibration of modern neural networks", §2).
    Points are grouped into bins of confidence; only non-empty bins are returned.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predictive probabilities, columns in the order of the sorted labels.
    n_bins : int, default=15
        Number of bins.
    strategy : {"uniform", "quantile"}, default="uniform"
        ``"uniform"``: equal-width bins over [0, 1], each closed on the right.
        ``"quantile"``: bin edges at quantiles of the confidences, so bins hold about equally
        many points (ties can merge bins).
    labels : array-like, optional
        All class labels (e.g. ``classes_``), needed when ``y_true`` lacks some class.
    sample_weight : array-like of shape (n_samples,), optional

    Returns
    -------
    accuracy : ndarray of shape (n_nonempty_bins,)
        Weighted fraction of correct top-label predictions in each bin.
    confidence : ndarray of shape (n_nonempty_bins,)
        Weighted mean confidence in each bin.
    weight : ndarray of shape (n_nonempty_bins,)
        Total sample weight in each bin (the counts when unweighted).

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]]
    >>> acc, conf, w = top_label_calibration_curve([0, 1, 1], y_prob, n_bins=2)
    >>> acc.round(4), conf.round(4), w
    (array([0.6667]), array([0.8]), array([3.]))
    """
    check_scalar_param(n_bins, "n_bins", kind="int", low=1)
    y_index, p, weights, _ = check_classification(y_true, y_prob, labels, sample_weight)
    confidence = p.max(axis=1)
    correct = (p.argmax(axis=1) == y_index).astype(np.float64)
    edges = _bin_edges(confidence, n_bins, strategy)
    which = np.searchsorted(edges[1:-1], confidence, side="left")
    n_edges = len(edges) - 1
    weight = np.bincount(which, weights=weights, minlength=n_edges)
    hit = np.bincount(which, weights=weights * correct, minlength=n_edges)
    conf = np.bincount(which, weights=weights * confidence, minlength=n_edges)
    keep = weight > 0
    return hit[keep] / weight[keep], conf[keep] / weight[keep], weight[keep]


def _calibration_gaps(y_true, y_prob, n_bins, strategy, labels, sample_weight):
    """The calibration gap ``|acc_b - conf_b|`` and the weight of each non-empty bin.

    Parameters
    ----------
    y_true, y_prob, n_bins, strategy, labels, sample_weight
        As in :func:`top_label_calibration_curve`.

    Returns
    -------
    gap, weight : ndarray of shape (n_nonempty_bins,)
    """
    accuracy, confidence, weight = top_label_calibration_curve(
        y_true,
        y_prob,
        n_bins=n_bins,
        strategy=strategy,
        labels=labels,
        sample_weight=sample_weight,
    )
    return np.abs(accuracy - confidence), weight


def expected_calibration_error(
    y_true,
    y_prob,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    labels=None,
    sample_weight=None,
) -> float:
    """Expected calibration error of the top-label prediction.

    ``ECE = sum_b (n_b / n) |acc_b - conf_b|`` over confidence bins ``b`` (Naeini et al., 2015;
    Guo et al., 2017, eq. 3), the calibration score of Schmal & Mäder 2026. Zero for a
    perfectly calibrated predictor (up to the sampling noise within bins); an over-confident one
    scores the gap between its confidence and its accuracy.

    Parameters
    ----------
    y_true, y_prob, n_bins, strategy, labels, sample_weight
        As in :func:`top_label_calibration_curve`.

    Returns
    -------
    float in [0, 1]

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]]
    >>> round(expected_calibration_error([0, 1, 1], y_prob, n_bins=2), 4)
    0.1333
    """
    gap, weight = _calibration_gaps(y_true, y_prob, n_bins, strategy, labels, sample_weight)
    return float(np.sum(weight * gap) / np.sum(weight))


def maximum_calibration_error(
    y_true,
    y_prob,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    labels=None,
    sample_weight=None,
) -> float:
    """Maximum calibration error: the largest ``|acc_b - conf_b|`` over non-empty bins.

    Guo et al. (2017, eq. 5); reported beside the ECE in Schmal & Mäder 2026 ("Bayesian neural
    network comparison"). Parameters as in :func:`top_label_calibration_curve`.

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]]
    >>> round(maximum_calibration_error([0, 1, 1], y_prob, n_bins=10), 4)
    0.7
    """
    gap, _ = _calibration_gaps(y_true, y_prob, n_bins, strategy, labels, sample_weight)
    return float(np.max(gap))


def brier_score(y_true, y_prob, *, labels=None, sample_weight=None) -> float:
    """Multi-class Brier score: mean over points of ``sum_c (p_c - 1[y = c])^2``.

    Brier (1950); the definition of Cobb & Jalaian 2021, Table 4, in [0, 2]. It is
    :func:`sklearn.metrics.brier_score_loss` with ``scale_by_half=False``; for a binary problem
    that is twice scikit-learn's default binary Brier score ``mean (p_1 - y)^2``.

    Examples
    --------
    >>> brier_score([0, 2], [[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], labels=[0, 1, 2])
    0.22
    """
    y_index, p, weights, _ = check_classification(y_true, y_prob, labels, sample_weight)
    return float(
        brier_score_loss(
            y_index,
            p,
            labels=np.arange(p.shape[1]),
            sample_weight=weights,
            scale_by_half=False,
        )
    )


def negative_log_likelihood(y_true, y_prob, *, labels=None, sample_weight=None) -> float:
    """Mean negative log predictive probability of the true class.

    :func:`sklearn.metrics.log_loss` after our input checks (probabilities in [0, 1] summing
    to one, labels mapped to columns); probabilities are clipped at the float64 epsilon. Rows
    are renormalised in float64 first, so float32 probabilities (whose sums are off by ~1e-7,
    within our check) do not trip log_loss's stricter float64 check and its warning.

    Examples
    --------
    >>> round(negative_log_likelihood([0, 1], [[0.8, 0.2], [0.4, 0.6]]), 4)
    0.367
    """
    y_index, p, weights, _ = check_classification(y_true, y_prob, labels, sample_weight)
    p = p / p.sum(axis=1, keepdims=True)
    return float(log_loss(y_index, p, labels=np.arange(p.shape[1]), sample_weight=weights))
