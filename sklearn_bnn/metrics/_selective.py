"""Selective classification: accuracy when the most uncertain inputs are refused."""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_consistent_length, column_or_1d

from .._validation import check_classification
from ._uncertainty import predictive_entropy

__all__ = ["accuracy_coverage_curve"]


def accuracy_coverage_curve(y_true, y_prob, *, uncertainty=None, labels=None):
    """Accuracy on the inputs kept when the most uncertain ones are refused, per coverage.

    Inputs are ranked by ``uncertainty`` (by default the predictive entropy of ``y_prob``);
    keeping the least uncertain fraction ``coverage`` of them and refusing the rest, the
    accuracy is that of the predictions kept. ``1 - accuracy`` against ``coverage`` is the
    risk-coverage curve of selective classification (El-Yaniv & Wiener, 2010; Geifman &
    El-Yaniv, 2017): a model whose uncertainty points at its errors keeps a high accuracy as
    coverage falls. Inputs with equal uncertainty are kept or refused together, so the curve has
    one point per distinct uncertainty value, as :func:`sklearn.metrics.roc_curve` has one per
    distinct score.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    y_prob : array-like of shape (n_samples, n_classes) or (n_draws, n_samples, n_classes)
        Predictive probabilities, or per-draw probabilities (averaged over draws first).
    uncertainty : array-like of shape (n_samples,), optional
        Score that ranks the inputs, higher meaning more uncertain (refused first), e.g.
        :func:`~sklearn_bnn.metrics.mutual_information`. By default the predictive entropy.
    labels : array-like, optional
        All class labels (e.g. ``classes_``), needed when ``y_true`` lacks some class.

    Returns
    -------
    coverage : ndarray of shape (n_thresholds,)
        Fraction of the inputs kept, increasing, ending at 1.
    accuracy : ndarray of shape (n_thresholds,)
        Accuracy on the kept inputs; the last value is the accuracy on all of them.
    thresholds : ndarray of shape (n_thresholds,)
        The largest uncertainty kept at each coverage.

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.45, 0.55]]
    >>> coverage, accuracy, _ = accuracy_coverage_curve([0, 1, 1, 0], y_prob)
    >>> coverage, accuracy.round(4)
    (array([0.25, 0.5 , 0.75, 1.  ]), array([1.    , 1.    , 0.6667, 0.5   ]))
    """
    p = np.asarray(y_prob)
    mean = p.mean(axis=0) if p.ndim == 3 else p
    y_index, mean, _, _ = check_classification(y_true, mean, labels)
    if uncertainty is None:
        score = predictive_entropy(mean)
    else:
        score = column_or_1d(uncertainty).astype(np.float64)
        check_consistent_length(y_index, score)
        if not np.all(np.isfinite(score)):
            raise ValueError("uncertainty must be finite.")
    correct = (np.argmax(mean, axis=1) == y_index).astype(np.float64)
    order = np.argsort(score, kind="stable")
    score, correct = score[order], correct[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(score) > 0), len(score) - 1]
    kept = last_of_tie + 1
    accuracy = np.cumsum(correct)[last_of_tie] / kept
    return kept / len(score), accuracy, score[last_of_tie]
