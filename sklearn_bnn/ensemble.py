"""Ensemble-size reduction: keep only the posterior draws a metric needs (seeds/004).

A Bayesian classifier predicts with the average of many posterior draws (ensemble members),
and every draw costs a forward pass. seeds/004 ("Ensemble size reduction", Fig. 5) drops
members greedily while a validation metric is not impaired, repeating the greedy pass over
several random orderings: accuracy survives with under half of the members, calibration needs
almost all of them.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state, column_or_1d
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._persistence import WeightsOnlyMixin, register
from ._utils import check_scalar_param
from ._validation import check_probabilities, encode_labels
from .metrics import brier_score, expected_calibration_error, negative_log_likelihood

__all__ = ["EnsembleReducer", "greedy_member_selection"]


def _accuracy(y_index, y_prob, labels):
    return float(np.mean(np.argmax(y_prob, axis=1) == y_index))


# name -> (metric(y_index, y_prob, labels), greater_is_better)
_METRICS = {
    "accuracy": (_accuracy, True),
    "nll": (negative_log_likelihood, False),
    "brier": (brier_score, False),
    "ece": (expected_calibration_error, False),
}


def _check_metric(metric: str):
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {sorted(_METRICS)}, got {metric!r}.")
    return _METRICS[metric]


def greedy_member_selection(
    y_prob_samples,
    y_true,
    *,
    metric: str = "accuracy",
    tolerance: float = 0.0,
    n_repeats: int = 5,
    labels=None,
    random_state=None,
) -> dict:
    """Greedy ensemble-size reduction on a stack of member predictions (seeds/004, Fig. 5).

    One greedy pass visits the members in a random order and drops a member when the ensemble
    without it still scores within ``tolerance`` of the full ensemble on ``y_true``; members
    whose removal would impair the metric are kept. The pass is repeated over ``n_repeats``
    orderings and the smallest kept set wins (ties: the better score).

    Parameters
    ----------
    y_prob_samples : array-like of shape (n_members, n_samples, n_classes)
        Per-member predictive probabilities on validation data.
    y_true : array-like of shape (n_samples,)
        Validation labels.
    metric : {"accuracy", "nll", "brier", "ece"}, default="accuracy"
        Accuracy, negative log-likelihood, multi-class Brier score or expected calibration
        error (15 equal-width bins) of the ensemble mean.
    tolerance : float >= 0, default=0.0
        Allowed impairment, in the metric's units (0.01 for accuracy is one point).
    n_repeats : int >= 1, default=5
        Number of greedy passes, each with its own ordering.
    labels : array-like, optional
        Class labels of the columns (sorted); by default those of ``y_true``.
    random_state : int, RandomState or None
        Seeds the orderings.

    Returns
    -------
    dict
        ``kept`` (sorted member indices of the best pass), ``n_kept_per_repeat``, ``score_full``
        and ``score_reduced`` (metric values of the full and reduced ensembles).

    Examples
    --------
    >>> import numpy as np
    >>> good, bad = [[0.9, 0.1], [0.2, 0.8]], [[0.6, 0.4], [0.55, 0.45]]
    >>> result = greedy_member_selection(np.array([good, bad]), [0, 1], random_state=0)
    >>> result["kept"], result["score_full"], result["score_reduced"]
    (array([0]), 1.0, 1.0)
    """
    score_func, greater_is_better = _check_metric(metric)
    check_scalar_param(tolerance, "tolerance", low=0.0)
    check_scalar_param(n_repeats, "n_repeats", kind="int", low=1)
    samples = check_probabilities(y_prob_samples, name="y_prob_samples", ndim=3)
    if samples.shape[1] != np.shape(y_true)[0]:
        raise ValueError(
            f"y_prob_samples has {samples.shape[1]} samples but y_true has {np.shape(y_true)[0]}."
        )
    y_index, _ = encode_labels(y_true, samples.shape[2], labels)
    columns = np.arange(samples.shape[2])
    sign = 1.0 if greater_is_better else -1.0

    def score(y_prob):
        return sign * score_func(y_index, y_prob, labels=columns)

    rng = check_random_state(random_state)
    full = score(samples.mean(axis=0))
    best_keep, best_score, n_kept = None, -np.inf, []
    for _ in range(n_repeats):
        keep = np.ones(samples.shape[0], dtype=bool)
        total, size = samples.sum(axis=0), samples.shape[0]
        for m in rng.permutation(samples.shape[0]):
            if size == 1:
                break
            reduced = (total - samples[m]) / (size - 1)
            if score(reduced) >= full - tolerance:
                keep[m], total, size = False, total - samples[m], size - 1
        current = score(total / size)
        n_kept.append(size)
        if best_keep is None or (size, -current) < (best_keep.sum(), -best_score):
            best_keep, best_score = keep, current
    return {
        "kept": np.flatnonzero(best_keep),
        "n_kept_per_repeat": np.array(n_kept),
        "score_full": sign * full,
        "score_reduced": sign * best_score,
    }


def _has_estimator(self) -> bool:
    return self.estimator is not None


def _is_stack_mode(self) -> bool:
    return self.estimator is None


@register
class EnsembleReducer(ClassifierMixin, MetaEstimatorMixin, WeightsOnlyMixin, BaseEstimator):
    """Keep the fewest ensemble members (posterior draws) that preserve a validation metric.

    The greedy procedure of seeds/004 ("Ensemble size reduction"), see
    :func:`greedy_member_selection`. Works with any classifier exposing
    ``predict_samples(X)`` that returns per-member probabilities of shape
    ``(n_members, n_samples, n_classes)``, such as this package's Bayesian classifiers.

    ``fit(X, y)`` holds out ``validation_fraction`` of the data (stratified when every class
    has two points or more), fits a clone of ``estimator`` on the rest and selects members on
    the held-out part. To reduce an estimator that is already fitted, wrap it in
    :class:`sklearn.frozen.FrozenEstimator`: it is not refitted and all of ``(X, y)`` is used
    for the selection. With ``estimator=None``, ``fit`` takes a stack of member predictions
    ``(n_members, n_samples, n_classes)`` as ``X`` and :meth:`transform` selects the kept
    members of any such stack.

    Parameters
    ----------
    estimator : classifier with ``predict_samples``, or None
    metric : {"accuracy", "nll", "brier", "ece"}, default="accuracy"
        The validation metric that must not be impaired.
    tolerance : float >= 0, default=0.0
        Allowed impairment, in the metric's units.
    validation_fraction : float in (0, 1), default=0.2
        Share of ``(X, y)`` held out for the selection (unused for a frozen estimator or a
        stack).
    n_repeats : int >= 1, default=5
        Greedy passes over different random orderings; the smallest kept set is used.
    random_state : int, RandomState or None
        Seeds the validation split and the orderings.

    Attributes
    ----------
    estimator_ : classifier
        The fitted clone (absent with ``estimator=None``).
    classes_ : ndarray of shape (n_classes,)
    kept_indices_ : ndarray of int
        Sorted indices of the kept members.
    n_members_ : int
        Number of kept members.
    n_members_full_ : int
        Number of members before the reduction.
    n_members_per_repeat_ : ndarray of shape (n_repeats,)
        Kept members in each greedy pass (their spread is the error bar of seeds/004 Fig. 5).
    metric_full_, metric_reduced_ : float
        The metric of the full and of the reduced ensemble on the validation data.

    Notes
    -----
    :func:`sklearn_bnn.save` / :func:`sklearn_bnn.load` store this model weights-only when the
    wrapped estimator (frozen or not) is one of this package's, or with ``estimator=None``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_bnn.ensemble import EnsembleReducer
    >>> good, bad = [[0.9, 0.1], [0.2, 0.8]], [[0.6, 0.4], [0.55, 0.45]]
    >>> reducer = EnsembleReducer(random_state=0).fit(np.array([good, bad]), [0, 1])
    >>> reducer.n_members_, reducer.transform(np.zeros((2, 5, 2))).shape
    (1, (1, 5, 2))
    """

    def __init__(
        self,
        estimator=None,
        metric="accuracy",
        tolerance=0.0,
        validation_fraction=0.2,
        n_repeats=5,
        random_state=None,
    ):
        self.estimator = estimator
        self.metric = metric
        self.tolerance = tolerance
        self.validation_fraction = validation_fraction
        self.n_repeats = n_repeats
        self.random_state = random_state

    def fit(self, X, y, **fit_params):
        """Fit the estimator (unless frozen) and select the members to keep.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or (n_members, n_samples, n_classes)
            Features; with ``estimator=None``, the stack of member predictions.
        y : array-like of shape (n_samples,)
        **fit_params
            Passed to the estimator's ``fit``.

        Returns
        -------
        self
        """
        _check_metric(self.metric)
        check_scalar_param(
            self.validation_fraction,
            "validation_fraction",
            low=0.0,
            high=1.0,
            low_inclusive=False,
            high_inclusive=False,
        )
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        y = column_or_1d(y, warn=True)
        if len(y) == 0:  # the same message scikit-learn gives for empty X
            raise ValueError(
                f"Found array with 0 sample(s) (shape={np.shape(X)}) while a minimum of 1 is "
                f"required by {type(self).__name__}."
            )
        check_classification_targets(y)
        rng = check_random_state(self.random_state)
        if self.estimator is None:
            samples, y_val = X, y
            labels = None
        else:
            if not hasattr(self.estimator, "predict_samples"):
                raise ValueError(
                    "estimator must implement predict_samples(X) returning per-member "
                    f"probabilities; {type(self.estimator).__name__} does not."
                )
            X_val, y_val = self._fit_estimator(X, y, rng, fit_params)
            self.classes_ = self.estimator_.classes_
            samples, labels = self.estimator_.predict_samples(X_val), self.classes_
            for name in ("n_features_in_", "feature_names_in_"):
                if hasattr(self.estimator_, name):
                    setattr(self, name, getattr(self.estimator_, name))
        result = greedy_member_selection(
            samples,
            y_val,
            metric=self.metric,
            tolerance=self.tolerance,
            n_repeats=self.n_repeats,
            labels=labels,
            random_state=rng,
        )
        if self.estimator is None:
            self.classes_ = np.unique(y_val)
        self.n_members_full_ = int(np.shape(samples)[0])
        self.kept_indices_ = result["kept"]
        self.n_members_ = len(self.kept_indices_)
        self.n_members_per_repeat_ = result["n_kept_per_repeat"]
        self.metric_full_ = result["score_full"]
        self.metric_reduced_ = result["score_reduced"]
        return self

    def _fit_estimator(self, X, y, rng, fit_params):
        if isinstance(self.estimator, FrozenEstimator):
            self.estimator_ = self.estimator
            return X, y
        _, counts = np.unique(y, return_counts=True)
        X_fit, X_val, y_fit, y_val = train_test_split(
            X,
            y,
            test_size=self.validation_fraction,
            random_state=rng,
            stratify=y if counts.min() >= 2 else None,
        )
        self.estimator_ = clone(self.estimator).fit(X_fit, y_fit, **fit_params)
        return X_val, y_val

    def _check_loaded_state(self, state: dict) -> None:
        """Check a decoded fitted state (see :func:`sklearn_bnn.load`): kept members within the
        wrapped estimator's members, and the classes and features of the wrapped estimator."""
        from . import _persistence as P
        from .decision import _check_same_as_wrapped

        _check_metric(self.metric)
        required = {
            "classes_": lambda v, f: P.check_classes(v, f, min_classes=1),
            "kept_indices_": P.is_array(ndim=1, kinds="iu"),
            "n_members_": P.is_int(1),
            "n_members_full_": P.is_int(1),
            "n_members_per_repeat_": P.is_array(ndim=1, kinds="iu"),
            "metric_full_": P.is_float,
            "metric_reduced_": P.is_float,
        }
        optional = {}
        if self.estimator is not None:
            required["estimator_"] = P.is_fitted_estimator
            optional = {
                "n_features_in_": P.is_int(1),
                "feature_names_in_": P.is_array(ndim=1, kinds="UO"),
            }
        P.check_state(state, required, optional)
        kept, n_full = state["kept_indices_"], state["n_members_full_"]
        if (
            len(kept) != state["n_members_"]
            or len(kept) == 0
            or np.any(np.diff(kept) <= 0)
            or kept[0] < 0
            or kept[-1] >= n_full
        ):
            raise ValueError(
                f"kept_indices_ must be n_members_={state['n_members_']} sorted distinct indices "
                f"below n_members_full_={n_full}."
            )
        if self.estimator is not None:
            _check_same_as_wrapped(state)
            n_wrapped = _n_members(state["estimator_"])
            if n_wrapped is not None and n_wrapped != n_full:
                raise ValueError(
                    f"n_members_full_={n_full}, but the wrapped estimator_ has {n_wrapped} members."
                )

    def _select(self, stack) -> np.ndarray:
        check_is_fitted(self)
        stack = np.asarray(stack)
        if stack.ndim == 0 or stack.shape[0] != self.n_members_full_:
            raise ValueError(
                f"expected a stack of {self.n_members_full_} member predictions along the first "
                f"axis, got shape {stack.shape}."
            )
        return stack[self.kept_indices_]

    @available_if(_is_stack_mode)
    def transform(self, y_prob_samples) -> np.ndarray:
        """Keep the selected members of a stack ``(n_members, ...)`` (``estimator=None`` only).

        With an estimator, :meth:`predict_samples` gives the reduced stack and
        ``kept_indices_`` indexes any other one.
        """
        return self._select(y_prob_samples)

    @available_if(_is_stack_mode)
    def fit_transform(self, y_prob_samples, y) -> np.ndarray:
        """Select members on a stack and return its kept members (``estimator=None`` only)."""
        return self.fit(y_prob_samples, y).transform(y_prob_samples)

    @available_if(_has_estimator)
    def predict_samples(self, X) -> np.ndarray:
        """Per-member probabilities of the kept members, (n_members_, n_samples, n_classes)."""
        check_is_fitted(self)
        return self._select(self.estimator_.predict_samples(X))

    @available_if(_has_estimator)
    def predict_proba(self, X) -> np.ndarray:
        """Mean of the kept members' probabilities, shape (n_samples, n_classes)."""
        return self.predict_samples(X).mean(axis=0)

    @available_if(_has_estimator)
    def predict(self, X) -> np.ndarray:
        """Most probable class under the reduced ensemble."""
        best = np.argmax(self.predict_proba(X), axis=1)
        return self.classes_[best]


def _n_members(estimator) -> int | None:
    """Members that ``estimator.predict_samples`` returns, when known without predicting."""
    estimator = getattr(estimator, "estimator", estimator)  # a FrozenEstimator's model
    if hasattr(estimator, "samples_"):
        return len(estimator.samples_)
    return getattr(estimator, "n_predict_draws", None)
