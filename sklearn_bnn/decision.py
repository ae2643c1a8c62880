"""Bayes-optimal decisions from a utility matrix (Cobb 2019, ch. 4).

A utility matrix ``U`` has one row per true class ``y`` and one column per decision ``h``:
``U[y, h] = u(h, y)``, the layout of Cobb 2019, Table 4.2 (rows "True", columns "Decision").
Rows follow the classifier's ``classes_`` (sorted labels). Given predictive probabilities
``q``, the expected utility of decision ``h`` is ``sum_y q(y) U[y, h]`` (Cobb 2019, eq. 4.1) and
the Bayes action maximises it (eq. 4.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.utils import get_tags
from sklearn.utils._param_validation import HasMethods, InvalidParameterError
from sklearn.utils.metadata_routing import (
    _routing_enabled,
    process_routing,
)
from sklearn.utils.validation import check_is_fitted

from ._metadata_routing import RoutesFitToEstimatorMixin
from ._persistence_registry import WeightsOnlyMixin, register
from ._utility_matrix import bayes_decision, check_utility, expected_utilities
from .metrics import mean_utility

__all__ = ["check_utility", "expected_utilities", "bayes_decision", "BayesDecisionClassifier"]


@register
@dataclass(kw_only=True, eq=False, repr=False)
class BayesDecisionClassifier(
    ClassifierMixin, MetaEstimatorMixin, RoutesFitToEstimatorMixin, WeightsOnlyMixin, BaseEstimator
):
    """Take the Bayes action of a probabilistic classifier under a utility matrix.

    Wraps any classifier with ``predict_proba`` (one of ours, or any scikit-learn classifier):
    ``predict`` returns, for each point, the decision with the highest expected utility under
    the wrapped model's predictive distribution (Cobb 2019, eq. 4.1-4.2). The wrapped model is
    cloned and fitted in :meth:`fit`, so the meta-estimator clones, pipelines and grid-searches
    (e.g. over ``estimator__C``) like any classifier.

    Parameters
    ----------
    estimator : classifier
        Must implement ``predict_proba``.
    utility : array-like of shape (n_classes, n_decisions), default=None
        ``utility[y, h]``: the gain of decision ``h`` when the true class is ``y``. Rows follow
        the sorted class labels (``classes_``), columns the decisions. None means the identity
        (utility 1 for the right class, 0 otherwise): the Bayes action is then the most probable
        class. Only differences between utilities matter: adding a constant or scaling by a
        positive factor does not change the decisions.
    decision_labels : array-like of shape (n_decisions,), default=None
        What :meth:`predict` returns for each decision. By default the class labels when the
        utility is square (decision ``h`` means "class ``classes_[h]``"), and the column
        indices ``0 .. n_decisions - 1`` otherwise.

    Attributes
    ----------
    estimator_ : classifier
        The fitted clone of ``estimator``.
    classes_ : ndarray of shape (n_classes,)
    utility_ : ndarray of shape (n_classes, n_decisions)
        The validated utility matrix.
    decisions_ : ndarray of shape (n_decisions,)
        The labels :meth:`predict` returns.
    n_features_in_ : int
        When the wrapped estimator defines it (also ``feature_names_in_``).

    Notes
    -----
    :func:`sklearn_bnn.save` / :func:`sklearn_bnn.load` store this model weights-only when the
    wrapped estimator is one of this package's; for any other, use ``joblib``.

    Examples
    --------
    The medical example of Cobb 2019, Table 4.2: a prediction of [0.1, 0.2, 0.7] for (Healthy,
    Mild, Severe) has expected utilities 20.0, 71.5 and 89.5, so the Bayes action is Severe.

    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> U = [[100, 60, 55], [50, 100, 70], [0, 65, 100]]
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0]])
    >>> y = np.array(["Healthy", "Healthy", "Mild", "Mild", "Severe", "Severe"])
    >>> clf = BayesDecisionClassifier(LogisticRegression(), utility=U).fit(X, y)
    >>> clf.predict([[5.0]])
    array(['Severe'], dtype='<U7')
    """

    _parameter_constraints = {
        "estimator": [HasMethods(["fit", "predict_proba"])],
        "utility": ["array-like", None],
        "decision_labels": ["array-like", None],
    }

    # positional, as scikit-learn's meta-estimators take their estimator; the rest keyword-only
    estimator: object = field(kw_only=False)
    utility: object = None
    decision_labels: object = None

    def fit(self, X, y, **fit_params):
        """Fit a clone of ``estimator`` on ``(X, y)`` and validate the utility against its classes.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        **fit_params
            Passed to the wrapped estimator's ``fit``, for one that takes them (e.g.
            ``sample_weight``, which scikit-learn's classifiers and this package's estimators
            take); with metadata routing on, those the estimator requests
            (``estimator.set_fit_request(sample_weight=True)``).

        Returns
        -------
        self
        """
        if hasattr(self.estimator, "fit") and not hasattr(self.estimator, "predict_proba"):
            # scikit-learn's message, with the hint for the classifier people most often pass
            raise InvalidParameterError(
                f"The 'estimator' parameter of {type(self).__name__} must be an object "
                f"implementing 'fit' and 'predict_proba'. Got {self.estimator!r} instead "
                "(for SVC, set probability=True)."
            )
        self._validate_params()
        if _routing_enabled():  # with routing on, what the estimator requested
            fit_params = process_routing(self, "fit", **fit_params).estimator.fit
        self.estimator_ = clone(self.estimator).fit(X, y, **fit_params)
        self.classes_ = self.estimator_.classes_
        n_classes = len(self.classes_)
        if self.utility is None:
            self.utility_ = np.eye(n_classes)
        else:
            self.utility_ = check_utility(self.utility, n_classes)
        self.decisions_ = self._decision_labels()
        for name in ("n_features_in_", "feature_names_in_"):
            if hasattr(self.estimator_, name):
                setattr(self, name, getattr(self.estimator_, name))
        return self

    def _decision_labels(self) -> np.ndarray:
        n_classes, n_decisions = self.utility_.shape
        if self.decision_labels is None:
            return self.classes_ if n_decisions == n_classes else np.arange(n_decisions)
        labels = np.asarray(self.decision_labels)
        if labels.shape != (n_decisions,):
            raise ValueError(
                f"decision_labels must have one entry per utility column ({n_decisions}), "
                f"got shape {labels.shape}."
            )
        return labels

    def _check_loaded_state(self, state: dict) -> None:
        """Check a decoded fitted state against the wrapped fitted estimator (see
        :func:`sklearn_bnn.load`): the same classes, a utility with one row per class and one
        decision label per column."""
        from . import _state_checks as P

        P.check_state(
            state,
            {
                "estimator_": P.is_fitted_estimator,
                "classes_": P.check_classes,
                "utility_": P.is_array(ndim=2, kinds="f"),
                "decisions_": P.is_array(ndim=1, kinds="biufUO"),
            },
            {"n_features_in_": P.is_int(1), "feature_names_in_": P.is_array(ndim=1, kinds="UO")},
        )
        P.check_same_as_wrapped(state)
        check_utility(state["utility_"], len(state["classes_"]))
        if len(state["decisions_"]) != state["utility_"].shape[1]:
            raise ValueError("decisions_ must have one label per column of utility_.")

    def predict_proba(self, X) -> np.ndarray:
        """Predictive probabilities of the wrapped estimator, shape (n_samples, n_classes)."""
        check_is_fitted(self)
        return self.estimator_.predict_proba(X)

    def predict_expected_utility(self, X) -> np.ndarray:
        """Expected utility of every decision, shape (n_samples, n_decisions)."""
        return expected_utilities(self.predict_proba(X), self.utility_)

    def predict(self, X) -> np.ndarray:
        """The Bayes action for each point, as a label of ``decisions_``."""
        best = np.argmax(self.predict_expected_utility(X), axis=1)
        return self.decisions_[best]

    def score(self, X, y, sample_weight=None) -> float:
        """Average utility of the Bayes actions on ``(X, y)``.

        With the default identity utility this is the accuracy, as for other classifiers.
        """
        decisions = np.argmax(self.predict_expected_utility(X), axis=1)
        return mean_utility(
            y, decisions, self.utility_, labels=self.classes_, sample_weight=sample_weight
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags = get_tags(self.estimator).input_tags
        return tags
