"""Input checks shared by the metrics, the ensemble reducer and the plots: labels, probability
matrices, per-draw stacks, sample weights."""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_array, check_consistent_length, column_or_1d

_SUM_ATOL = 1e-4


def check_probabilities(y_prob, *, name: str = "y_prob", ndim: int = 2) -> np.ndarray:
    """Validate probabilities whose last axis is the class axis and sums to one.

    A 1-D ``y_prob`` (when ``ndim == 2``) is read as the probability of the positive class of a
    binary problem, as scikit-learn's binary metrics do, and stacked into two columns.
    """
    p = np.asarray(y_prob)
    if ndim == 2 and p.ndim == 1:
        p = column_or_1d(check_array(p, ensure_2d=False, dtype=np.float64, input_name=name))
        p = np.column_stack([1.0 - p, p])
    elif ndim == 2:
        p = check_array(p, dtype=np.float64, input_name=name)
    else:
        if p.ndim != ndim:
            raise ValueError(
                f"{name} must have {ndim} dimensions (n_draws, n_samples, n_classes), "
                f"got shape {p.shape}."
            )
        p = check_array(p, dtype=np.float64, allow_nd=True, input_name=name)
    if p.shape[-1] < 2:
        raise ValueError(f"{name} needs at least 2 class columns, got shape {p.shape}.")
    if p.min() < 0.0 or p.max() > 1.0:
        raise ValueError(f"{name} contains values outside [0, 1]; pass probabilities, not logits.")
    deviation = np.abs(p.sum(axis=-1) - 1.0).max()
    if deviation > _SUM_ATOL:
        raise ValueError(
            f"{name} rows do not sum to one (largest deviation {deviation:.3g}); "
            "pass normalised probabilities."
        )
    return p


def encode_labels(y_true, n_classes: int, labels=None) -> tuple[np.ndarray, np.ndarray]:
    """Map ``y_true`` to column indices ``0..n_classes-1``.

    Columns are taken to follow the sorted ``labels`` (the order of a classifier's
    ``classes_``); without ``labels`` the sorted unique values of ``y_true`` must number
    ``n_classes``, as in :func:`sklearn.metrics.log_loss`.

    Returns
    -------
    y_index : ndarray of int, shape (n_samples,)
    classes : ndarray of shape (n_classes,)
    """
    y = column_or_1d(y_true)
    if y.shape[0] == 0:
        raise ValueError("y_true is empty.")
    if labels is None:
        classes = np.unique(y)
        if classes.shape[0] != n_classes:
            raise ValueError(
                f"y_true contains {classes.shape[0]} labels {classes.tolist()} but the "
                f"probabilities have {n_classes} columns; pass the classifier's classes_ "
                "through the labels argument."
            )
    else:
        classes = np.unique(column_or_1d(labels))
        if classes.shape[0] != n_classes:
            raise ValueError(
                f"labels has {classes.shape[0]} distinct values but the probabilities have "
                f"{n_classes} columns."
            )
    y_index = np.searchsorted(classes, y)
    unknown = (y_index >= n_classes) | (classes[np.minimum(y_index, n_classes - 1)] != y)
    if np.any(unknown):
        raise ValueError(f"y_true contains labels not in labels: {np.unique(y[unknown]).tolist()}.")
    return y_index, classes


def check_classification(y_true, y_prob, labels=None, sample_weight=None):
    """Validate a (y_true, y_prob) pair; return indices, probabilities, weights, classes."""
    p = check_probabilities(y_prob)
    check_consistent_length(y_true, p, sample_weight)
    y_index, classes = encode_labels(y_true, p.shape[1], labels)
    return y_index, p, check_weights(sample_weight, p.shape[0]), classes


def check_weights(sample_weight, n_samples: int) -> np.ndarray:
    """Sample weights as a float64 vector (ones when None); finite and non-negative."""
    if sample_weight is None:
        return np.ones(n_samples)
    w = column_or_1d(check_array(sample_weight, ensure_2d=False, input_name="sample_weight"))
    check_consistent_length(w, np.empty(n_samples))
    if np.any(w < 0) or w.sum() <= 0:
        raise ValueError("sample_weight must be non-negative with a positive sum.")
    return w.astype(np.float64)
