"""Uncertainty from posterior draws, and the utility of decisions.

Per-draw probabilities ``y_prob_samples`` have shape ``(n_draws, n_samples, n_classes)``: what
``predict_samples`` of our classifiers returns, one probability matrix per posterior draw (or
ensemble member). Entropies are in nats.
"""

from __future__ import annotations

import numpy as np
from scipy.special import entr
from sklearn.utils import check_consistent_length, column_or_1d

from .._utility_matrix import bayes_decision, check_utility
from .._validation import check_classification, check_probabilities, check_weights, encode_labels

__all__ = [
    "predictive_entropy",
    "mutual_information",
    "mutual_information_matrix",
    "cumulative_accuracy",
    "mean_utility",
    "expected_utility_score",
]


def _entropy(p: np.ndarray) -> np.ndarray:
    return entr(p).sum(axis=-1)


def predictive_entropy(y_prob) -> np.ndarray:
    """Entropy of the posterior predictive distribution, ``H[E_w p(y | x, w)]``, per point.

    Cobb & Jalaian 2021, §6.4 (the quantity of its Fig. 2); total uncertainty, in nats, between 0
    and ``log(n_classes)``.

    Parameters
    ----------
    y_prob : array-like of shape (n_samples, n_classes) or (n_draws, n_samples, n_classes)
        Predictive probabilities, or per-draw probabilities (averaged over draws first).

    Returns
    -------
    ndarray of shape (n_samples,)

    Examples
    --------
    >>> predictive_entropy([[0.5, 0.5], [1.0, 0.0]]).round(4)
    array([0.6931, 0.    ])
    """
    p = np.asarray(y_prob)
    if p.ndim == 3:
        p = check_probabilities(p, name="y_prob", ndim=3).mean(axis=0)
    return _entropy(check_probabilities(p))


def mutual_information(y_prob_samples) -> np.ndarray:
    """Mutual information between the prediction and the weights, per point.

    ``I[y, w | x] = H[E_w p(y | x, w)] - E_w H[p(y | x, w)]`` (Cobb & Jalaian 2021, §6.4,
    Fig. 3): the part of the predictive entropy due to disagreement between draws
    (model uncertainty). Zero when all draws agree; non-negative by Jensen's inequality (tiny
    negative rounding errors are set to zero).

    Parameters
    ----------
    y_prob_samples : array-like of shape (n_draws, n_samples, n_classes)

    Returns
    -------
    ndarray of shape (n_samples,)

    Examples
    --------
    >>> draws = [[[1.0, 0.0]], [[0.0, 1.0]]]  # two draws that disagree completely
    >>> mutual_information(draws).round(4)
    array([0.6931])
    """
    p = check_probabilities(y_prob_samples, name="y_prob_samples", ndim=3)
    return np.maximum(_entropy(p.mean(axis=0)) - _entropy(p).mean(axis=0), 0.0)


def mutual_information_matrix(y_true, y_prob_samples, *, labels=None):
    """Average mutual information per (true class, predicted class) cell.

    The "confusion-style" matrix of Cobb & Jalaian 2021, Fig. 3: rows are true classes, columns the
    predicted class (argmax of the mean over draws), as in
    :func:`sklearn.metrics.confusion_matrix`. Low values on the diagonal (confident correct
    predictions) and high values off it (errors flagged by model uncertainty) are desirable.

    Returns
    -------
    matrix : ndarray of shape (n_classes, n_classes)
        Mean mutual information; NaN for cells with no points.
    counts : ndarray of int, shape (n_classes, n_classes)
        The confusion matrix (number of points per cell).
    """
    p = check_probabilities(y_prob_samples, name="y_prob_samples", ndim=3)
    check_consistent_length(y_true, p[0])
    n_classes = p.shape[2]
    y_index, _ = encode_labels(y_true, n_classes, labels)
    cell = y_index * n_classes + p.mean(axis=0).argmax(axis=1)
    size = n_classes * n_classes
    counts = np.bincount(cell, minlength=size)
    total = np.bincount(cell, weights=mutual_information(p), minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        matrix = np.where(counts > 0, total / counts, np.nan)
    return matrix.reshape(n_classes, n_classes), counts.reshape(n_classes, n_classes)


def cumulative_accuracy(y_true, y_prob_samples, *, labels=None) -> np.ndarray:
    """Accuracy of the ensemble of the first ``s`` draws, for ``s = 1 .. n_draws``.

    Cobb & Jalaian 2021, App. B.4 (Fig. 7): the prediction after ``s`` draws is the argmax of the
    mean of those draws' probabilities.

    Returns
    -------
    ndarray of shape (n_draws,)

    Examples
    --------
    >>> draws = [[[0.4, 0.6], [0.3, 0.7]], [[0.9, 0.1], [0.4, 0.6]]]
    >>> cumulative_accuracy([0, 1], draws)
    array([0.5, 1. ])
    """
    p = check_probabilities(y_prob_samples, name="y_prob_samples", ndim=3)
    check_consistent_length(y_true, p[0])
    y_index, _ = encode_labels(y_true, p.shape[2], labels)
    running = np.cumsum(p, axis=0)
    return (running.argmax(axis=2) == y_index[None, :]).mean(axis=1)


def mean_utility(y_true, decisions, utility, *, labels=None, sample_weight=None) -> float:
    """Average utility ``U[y_i, h_i]`` of decisions ``h_i`` taken on points of class ``y_i``.

    The empirical expected utility of a decision rule (Cobb 2019, §4.1; the score of its Table
    4.3). The utility matrix follows this package's convention: rows are the true classes in
    sorted label order, columns the decisions.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels.
    decisions : array-like of int, shape (n_samples,)
        Column indices of ``utility`` (e.g. from :func:`~sklearn_bnn.decision.bayes_decision`).
    utility : array-like of shape (n_classes, n_decisions)
    labels : array-like, optional
        All class labels (rows of ``utility``); by default the sorted labels of ``y_true``,
        which must then number ``n_classes``.
    sample_weight : array-like of shape (n_samples,), optional

    Examples
    --------
    >>> U = [[1.0, 0.0], [0.3, 1.0]]
    >>> mean_utility([0, 1, 1], [0, 0, 1], U)
    0.7666666666666666
    """
    u = check_utility(utility)
    d = column_or_1d(decisions)
    check_consistent_length(y_true, d, sample_weight)
    if not np.issubdtype(d.dtype, np.integer) or d.min() < 0 or d.max() >= u.shape[1]:
        raise ValueError(
            f"decisions must be integer column indices of utility in [0, {u.shape[1] - 1}]."
        )
    y_index, _ = encode_labels(y_true, u.shape[0], labels)
    weights = check_weights(sample_weight, d.shape[0])
    return float(np.average(u[y_index, d], weights=weights))


def expected_utility_score(y_true, y_prob, utility, *, labels=None, sample_weight=None) -> float:
    """Average utility obtained by taking the Bayes action on each point.

    The Bayes action maximises the expected utility under ``y_prob`` (Cobb 2019, eq. 4.1-4.2);
    the score is :func:`mean_utility` of those actions against the true labels. With the
    identity utility it is the accuracy.

    Examples
    --------
    >>> expected_utility_score([0, 1], [[0.8, 0.2], [0.4, 0.6]], [[1, 0], [0, 1]])
    1.0
    """
    y_index, p, weights, _ = check_classification(y_true, y_prob, labels, sample_weight)
    u = check_utility(utility, p.shape[1])
    return float(np.average(u[y_index, bayes_decision(p, u)], weights=weights))
