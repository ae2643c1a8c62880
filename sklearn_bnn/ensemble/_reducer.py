"""The scikit-learn meta-estimator of ensemble-size reduction (see :mod:`sklearn_bnn.ensemble`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import train_test_split
from sklearn.utils import _safe_indexing, check_random_state, column_or_1d
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.metadata_routing import (
    _routing_enabled,
    process_routing,
)
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .._metadata_routing import RoutesFitToEstimatorMixin
from .._persistence_registry import WeightsOnlyMixin, register
from ._selection import SCORES, greedy_member_selection, random_order_member_selection

__all__ = ["EnsembleReducer"]


def _has_estimator(self) -> bool:
    return self.estimator is not None


def _is_stack_mode(self) -> bool:
    return self.estimator is None


@register
@dataclass(kw_only=True, eq=False, repr=False)
class EnsembleReducer(
    ClassifierMixin, MetaEstimatorMixin, RoutesFitToEstimatorMixin, WeightsOnlyMixin, BaseEstimator
):
    """Keep the fewest ensemble members (posterior draws) for which a metric still holds.

    By default the members are taken in a random order fixed before the validation data are
    looked at, and the reducer keeps the shortest prefix of that order whose loss against the
    full ensemble has a statistical upper bound within ``tolerance``: no member is chosen for
    its validation score, so the validation data judge the reduced ensemble without the
    optimism of a selection (see :func:`random_order_member_selection`). ``method="greedy"``
    is the procedure of Schmal & Mäder 2026 ("Ensemble size reduction"),
    :func:`greedy_member_selection`, which picks members on the validation data and is
    over-optimistic when they are few.

    Works with any classifier exposing ``predict_samples(X)`` that returns per-member
    probabilities of shape ``(n_members, n_samples, n_classes)``, such as this package's
    Bayesian classifiers.

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
    method : {"random_order", "greedy"}, default="random_order"
        ``"random_order"``: a prefix of a random order, sized by a fixed-sequence test of an
        upper confidence bound on its loss. ``"greedy"``: the greedy passes of Schmal & Mäder 2026.
    scoring : {"accuracy", "nll", "brier", "ece"}, default="accuracy"
        The validation score that must hold (scikit-learn's name for what a meta-estimator
        scores by; ``metric`` on the samplers is their mass matrix).
    tolerance : float >= 0, default=0.005
        Largest loss allowed against the full ensemble, in the metric's units (0.005 for
        accuracy is half a point). ``"random_order"`` bounds the loss from above; with
        accuracy, it drops no member unless ``tolerance`` exceeds one over the number of
        validation points plus one. ``"greedy"`` compares the validation scores themselves.
    confidence_level : float in (0, 1), default=0.95
        One-sided level of the upper bound on the loss (``"random_order"`` only).
    validation_fraction : float in (0, 1), default=0.2
        Share of ``(X, y)`` held out for the selection (unused for a frozen estimator or a
        stack).
    n_repeats : int >= 1 or None, default=None
        ``"random_order"``: random orders over which the loss of a subset of each size is
        averaged (the kept members are a prefix of the first); None means 20. ``"greedy"``:
        greedy passes over different random orders, of which the smallest kept set is used;
        None means 5, as in Schmal & Mäder 2026.
    n_resamples : int >= 1, default=500
        Bootstrap resamples of the validation points for the upper bound (``"random_order"``
        only).
    random_state : int, RandomState or None
        Seeds the validation split, the orders and the resamples.

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
    member_order_ : ndarray of shape (n_members_full_,)
        The random order whose first ``n_members_`` members are kept (``"random_order"``).
    loss_upper_bound_ : ndarray of shape (n_members_full_,)
        At index k - 1, the upper confidence bound on the loss of k random members against all
        of them, or the validation loss of the first k of ``member_order_`` where higher: the
        statistic compared with ``tolerance`` (``"random_order"``).
    n_members_per_repeat_ : ndarray of shape (n_repeats,)
        Kept members in each greedy pass (their spread is the error bar of Schmal & Mäder's
        (2026) Fig. 5; ``"greedy"`` only).
    score_full_, score_reduced_ : float
        The metric of the full and of the reduced ensemble on the validation data.

    Notes
    -----
    :func:`sklearn_bnn.save` / :func:`sklearn_bnn.load` store this model weights-only when the
    wrapped estimator (frozen or not) is one of this package's, or with ``estimator=None``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_bnn.ensemble import EnsembleReducer
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 400)
    >>> p_true = np.clip(0.8 + 0.1 * rng.standard_normal((50, 400)), 0.01, 0.99)
    >>> p_one = np.where(y == 1, p_true, 1.0 - p_true)
    >>> stack = np.stack([1.0 - p_one, p_one], axis=-1)
    >>> reducer = EnsembleReducer(tolerance=0.01, random_state=0).fit(stack, y)
    >>> reducer.n_members_ < 50, reducer.transform(stack).shape == (reducer.n_members_, 400, 2)
    (True, True)
    """

    _parameter_constraints = {
        "estimator": [HasMethods(["fit", "predict_samples"]), None],
        "method": [StrOptions({"random_order", "greedy"})],
        "scoring": [StrOptions(set(SCORES))],
        "tolerance": [Interval(Real, 0, None, closed="left")],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_repeats": [Interval(Integral, 1, None, closed="left"), None],
        "n_resamples": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    # positional, as scikit-learn's meta-estimators take their estimator; the rest keyword-only
    estimator: object = field(default=None, kw_only=False)
    method: str = "random_order"
    scoring: str = "accuracy"
    tolerance: float = 0.005
    confidence_level: float = 0.95
    validation_fraction: float = 0.2
    n_repeats: int | None = None
    n_resamples: int = 500
    random_state: object = None

    def fit(self, X, y, **fit_params):
        """Fit the estimator (unless frozen) and select the members to keep.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or (n_members, n_samples, n_classes)
            Features; with ``estimator=None``, the stack of member predictions.
        y : array-like of shape (n_samples,)
        **fit_params
            Passed to the estimator's ``fit`` (row-aligned ones, such as ``sample_weight``,
            on the rows it is fitted on; with metadata routing on, those it requests). The
            member selection on the held-out rows is unweighted.

        Returns
        -------
        self
        """
        self._validate_params()
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
        if _routing_enabled() and self.estimator is not None:
            fit_params = process_routing(self, "fit", **fit_params).estimator.fit
        rng = check_random_state(self.random_state)
        if self.estimator is None:
            samples, y_val = X, y
            labels = None
        else:
            X_val, y_val = self._fit_estimator(X, y, rng, fit_params)
            self.classes_ = self.estimator_.classes_
            samples, labels = self.estimator_.predict_samples(X_val), self.classes_
            for name in ("n_features_in_", "feature_names_in_"):
                if hasattr(self.estimator_, name):
                    setattr(self, name, getattr(self.estimator_, name))
        common = {"scoring": self.scoring, "tolerance": self.tolerance, "labels": labels}
        if self.method == "greedy":
            n_repeats = 5 if self.n_repeats is None else self.n_repeats
            result = greedy_member_selection(
                samples, y_val, n_repeats=n_repeats, random_state=rng, **common
            )
        else:
            result = random_order_member_selection(
                samples,
                y_val,
                confidence_level=self.confidence_level,
                n_repeats=20 if self.n_repeats is None else self.n_repeats,
                n_resamples=self.n_resamples,
                random_state=rng,
                **common,
            )
        if self.estimator is None:
            self.classes_ = np.unique(y_val)
        for name in ("member_order_", "loss_upper_bound_", "n_members_per_repeat_"):
            if hasattr(self, name):  # left by a fit with the other method
                delattr(self, name)
        self.n_members_full_ = int(np.shape(samples)[0])
        self.kept_indices_ = result["kept"]
        self.n_members_ = len(self.kept_indices_)
        if self.method == "greedy":
            self.n_members_per_repeat_ = result["n_kept_per_repeat"]
        else:
            self.member_order_ = result["order"]
            self.loss_upper_bound_ = result["loss_upper_bound"]
        self.score_full_ = result["score_full"]
        self.score_reduced_ = result["score_reduced"]
        return self

    def _fit_estimator(self, X, y, rng, fit_params):
        if isinstance(self.estimator, FrozenEstimator):
            self.estimator_ = self.estimator
            return X, y
        _, counts = np.unique(y, return_counts=True)
        X_fit, X_val, y_fit, y_val, rows, _ = train_test_split(
            X,
            y,
            np.arange(len(y)),
            test_size=self.validation_fraction,
            random_state=rng,
            stratify=y if counts.min() >= 2 else None,
        )
        # per-row fit parameters (sample_weight) follow the rows the estimator is fitted on
        fit_params = {
            k: _safe_indexing(v, rows) if _num_samples_or_none(v) == len(y) else v
            for k, v in fit_params.items()
        }
        self.estimator_ = clone(self.estimator).fit(X_fit, y_fit, **fit_params)
        return X_val, y_val

    def _check_loaded_state(self, state: dict) -> None:
        """Check a decoded fitted state (see :func:`sklearn_bnn.load`): kept members within the
        wrapped estimator's members, and the classes and features of the wrapped estimator."""
        from .. import _state_checks as P

        self._validate_params()
        required = {
            "classes_": lambda v, f: P.check_classes(v, f, min_classes=1),
            "kept_indices_": P.is_array(ndim=1, kinds="iu"),
            "n_members_": P.is_int(1),
            "n_members_full_": P.is_int(1),
            "score_full_": P.is_float,
            "score_reduced_": P.is_float,
        }
        if self.method == "greedy":
            required["n_members_per_repeat_"] = P.is_array(ndim=1, kinds="iu")
        else:
            required["member_order_"] = P.is_array(ndim=1, kinds="iu")
            required["loss_upper_bound_"] = P.is_array(ndim=1, kinds="f")
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
            P.check_same_as_wrapped(state)
            n_wrapped = _n_members(state["estimator_"])
            if n_wrapped is not None and n_wrapped != n_full:
                raise ValueError(
                    f"n_members_full_={n_full}, but the wrapped estimator_ has {n_wrapped} members."
                )
        if self.method != "greedy":
            order = state["member_order_"]
            if (
                len(order) != n_full
                or not np.array_equal(np.sort(order), np.arange(n_full))
                or not np.array_equal(np.sort(order[: len(kept)]), kept)
                or len(state["loss_upper_bound_"]) != n_full
            ):
                raise ValueError(
                    "member_order_ must be an order of the n_members_full_ members that starts "
                    "with kept_indices_, and loss_upper_bound_ must hold one value per member."
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


def _num_samples_or_none(value):
    """The number of rows of an array-like fit parameter, or None for anything else."""
    if isinstance(value, str) or not hasattr(value, "__len__"):
        return None
    try:
        return len(value)
    except TypeError:
        return None
