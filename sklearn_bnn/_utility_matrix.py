"""Utility-matrix helpers shared by :mod:`sklearn_bnn.decision` and :mod:`sklearn_bnn.metrics`.

A utility matrix ``U`` has one row per true class and one column per decision (Cobb 2019,
Table 4.2). These functions are public through :mod:`sklearn_bnn.decision`; they live here so
that ``decision`` (which scores with :func:`sklearn_bnn.metrics.mean_utility`) and ``metrics``
(which takes Bayes actions in :func:`~sklearn_bnn.metrics.expected_utility_score`) both import
them without importing each other in a circle.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_utility", "expected_utilities", "bayes_decision"]


def check_utility(utility, n_classes: int | None = None) -> np.ndarray:
    """Validate a utility matrix and return it as a float64 array.

    Parameters
    ----------
    utility : array-like of shape (n_classes, n_decisions)
        Rows: the true class; columns: the decision.
    n_classes : int, optional
        When given, the number of rows must match it.

    Raises
    ------
    ValueError
        If the matrix is not 2-D, has non-finite entries, or its rows do not match ``n_classes``.
    """
    try:
        u = np.asarray(utility, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"utility must be a 2-D array of numbers, got {utility!r}.") from exc
    if u.ndim != 2 or u.shape[0] == 0 or u.shape[1] == 0:
        raise ValueError(
            f"utility must be a 2-D array (n_classes, n_decisions), got shape {u.shape}."
        )
    if not np.all(np.isfinite(u)):
        raise ValueError("utility must contain only finite values (found NaN or inf).")
    if n_classes is not None and u.shape[0] != n_classes:
        raise ValueError(
            f"utility has {u.shape[0]} rows but the classifier has {n_classes} classes; "
            "rows are the true classes in the order of classes_."
        )
    return u


def expected_utilities(y_prob, utility) -> np.ndarray:
    """Expected utility of every decision for every point.

    Parameters
    ----------
    y_prob : array-like of shape (n_samples, n_classes)
        Predictive probabilities.
    utility : array-like of shape (n_classes, n_decisions)
        ``utility[y, h]``: the gain of deciding ``h`` when the truth is ``y``.

    Returns
    -------
    ndarray of shape (n_samples, n_decisions)
        ``y_prob @ utility``.

    Examples
    --------
    Cobb 2019, Table 4.2 (classes and decisions Healthy, Mild, Severe):

    >>> U = [[100, 60, 55], [50, 100, 70], [0, 65, 100]]
    >>> expected_utilities([[0.1, 0.2, 0.7]], U).round(1)
    array([[20. , 71.5, 89.5]])
    """
    q = np.asarray(y_prob, dtype=np.float64)
    if q.ndim == 1:
        q = q[None, :]
    u = check_utility(utility, q.shape[1])
    return q @ u


def bayes_decision(y_prob, utility) -> np.ndarray:
    """Index of the decision with the highest expected utility, for each point."""
    return np.argmax(expected_utilities(y_prob, utility), axis=1)
