"""One call for the usual accuracy, calibration and uncertainty figures of a classifier."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score
from sklearn.utils.validation import check_is_fitted

from ._classification import (
    brier_score,
    expected_calibration_error,
    maximum_calibration_error,
    negative_log_likelihood,
)
from ._predict_samples import predict_samples_or_none
from ._uncertainty import expected_utility_score, mutual_information, predictive_entropy

__all__ = ["uncertainty_report"]


def uncertainty_report(estimator, X, y, utility=None, *, n_bins: int = 15) -> dict[str, float]:
    """Accuracy, NLL, Brier, ECE, MCE, mean entropy and mean mutual information on ``(X, y)``.

    Works with any fitted classifier that has ``predict_proba``. When the estimator also has
    ``predict_samples`` (our Bayesian classifiers, :class:`~sklearn_bnn.ensemble.EnsembleReducer`)
    the per-draw probabilities are computed once: their mean is the predictive distribution
    and they give the mutual information; a :class:`~sklearn.pipeline.Pipeline` ending in such
    an estimator counts as one. Otherwise the mutual information is NaN: a single predictive
    distribution says nothing about disagreement between posterior draws.

    Parameters
    ----------
    estimator : fitted classifier
    X : array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,)
    utility : array-like of shape (n_classes, n_decisions), optional
        When given, the report adds ``"expected_utility"``: the average utility of the Bayes
        actions (:func:`expected_utility_score`).
    n_bins : int, default=15
        Bins of the ECE and MCE.

    Returns
    -------
    dict
        Keys ``accuracy``, ``nll``, ``brier``, ``ece``, ``mce``, ``mean_entropy``,
        ``mean_mutual_information`` and, with a utility, ``expected_utility``.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> X, y = load_iris(return_X_y=True)
    >>> report = uncertainty_report(LogisticRegression(max_iter=500).fit(X, y), X, y)
    >>> sorted(report)
    ['accuracy', 'brier', 'ece', 'mce', 'mean_entropy', 'mean_mutual_information', 'nll']
    """
    check_is_fitted(estimator)
    labels = estimator.classes_
    samples = predict_samples_or_none(estimator, X)
    if samples is not None:
        y_prob = samples.mean(axis=0)
        mean_mi = float(mutual_information(samples).mean())
    else:
        y_prob = estimator.predict_proba(X)
        mean_mi = float("nan")
    report = {
        "accuracy": float(accuracy_score(y, labels[np.argmax(y_prob, axis=1)])),
        "nll": negative_log_likelihood(y, y_prob, labels=labels),
        "brier": brier_score(y, y_prob, labels=labels),
        "ece": expected_calibration_error(y, y_prob, labels=labels, n_bins=n_bins),
        "mce": maximum_calibration_error(y, y_prob, labels=labels, n_bins=n_bins),
        "mean_entropy": float(predictive_entropy(y_prob).mean()),
        "mean_mutual_information": mean_mi,
    }
    if utility is not None:
        report["expected_utility"] = expected_utility_score(y, y_prob, utility, labels=labels)
    return report
