"""Scorers for model selection: calibration, Brier score and utility on ``predict_proba``;
log-likelihood, CRPS and interval coverage of a Gaussian predictive ``predict(X, return_std=True)``.

A scorer is a callable ``scorer(estimator, X, y, sample_weight=None) -> float``, greater is
better, which is what ``GridSearchCV``, ``cross_validate`` and ``permutation_importance`` take
as ``scoring``. Classification scorers call ``predict_proba`` and hand the metric the
estimator's ``classes_`` as ``labels``, so a test fold that lacks a class is scored correctly.
Regression scorers call ``predict(X, return_std=True)`` on the estimator, or, for a
:class:`~sklearn.pipeline.Pipeline`, on its last step after the ``transform`` of the others.

No name here means something other than scikit-learn's scorer of the same name: a name that
scikit-learn has is scikit-learn's scorer. With scikit-learn's metadata routing switched on,
a scorer receives ``sample_weight`` once asked to, ``scorer.set_score_request(sample_weight=True)``,
as scikit-learn's own scorers do.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
from sklearn import get_config
from sklearn.metrics import get_scorer as _sklearn_get_scorer
from sklearn.metrics import get_scorer_names as _sklearn_get_scorer_names
from sklearn.pipeline import Pipeline
from sklearn.utils.metadata_routing import MetadataRequest

from ._classification import brier_score, expected_calibration_error, maximum_calibration_error
from ._regression import gaussian_crps, gaussian_nll, interval_coverage, interval_coverage_error
from ._uncertainty import expected_utility_score

__all__ = [
    "GaussianScorer",
    "ProbaScorer",
    "get_scorer",
    "get_scorer_names",
    "make_gaussian_scorer",
    "make_proba_scorer",
]


class _MetricScorer:
    """A metric, its sign and its fixed keyword arguments; subclasses say what to predict."""

    _factory = ""  # the make_*_scorer function that builds this kind, for the repr

    def __init__(self, score_func, sign: int, kwargs: dict):
        self._score_func = score_func
        self._sign = sign
        self._kwargs = kwargs

    def _score(self, *predictions, y_true, sample_weight, **extra) -> float:
        kwargs = dict(self._kwargs, **extra)
        if sample_weight is not None:
            kwargs["sample_weight"] = sample_weight
        value = self._sign * self._score_func(y_true, *predictions, **kwargs)
        if not math.isfinite(value):
            # cross_validate and GridSearchCV would record a NaN as a score; say why instead
            raise ValueError(
                f"{self._score_func.__name__} gave {value} on this data: the predictions or "
                "the sample weights do not allow a finite score."
            )
        return value

    def set_score_request(self, *, sample_weight=None):
        """Ask for ``sample_weight`` under scikit-learn's metadata routing.

        Only available with ``sklearn.set_config(enable_metadata_routing=True)``, like
        the same method of scikit-learn's scorers.

        Parameters
        ----------
        sample_weight : bool, str or None, default=None
            True: the scorer receives ``sample_weight`` when ``cross_validate``,
            ``GridSearchCV`` and the like are given it; False: it never does; a string:
            the metadata of that name is passed as ``sample_weight``; None (the
            initial state): passing ``sample_weight`` is an error.

        Returns
        -------
        self
        """
        if not get_config()["enable_metadata_routing"]:
            raise RuntimeError(
                "set_score_request is only available when metadata routing is enabled: "
                "sklearn.set_config(enable_metadata_routing=True)."
            )
        self._sample_weight_request = sample_weight
        return self

    def get_metadata_routing(self) -> MetadataRequest:
        """The metadata this scorer requests: ``sample_weight`` of ``score``, as set.

        Returns
        -------
        sklearn.utils.metadata_routing.MetadataRequest
        """
        request = MetadataRequest(owner=repr(self))
        request.score.add_request(
            param="sample_weight", alias=getattr(self, "_sample_weight_request", None)
        )
        return request

    def _accept_sample_weight(self) -> bool:
        # read by scikit-learn's multi-metric scoring when metadata routing is off
        return True

    def __repr__(self) -> str:
        extra = "".join(f", {k}={_short(v)}" for k, v in self._kwargs.items())
        sign = "" if self._sign > 0 else ", greater_is_better=False"
        return f"{self._factory}({self._score_func.__name__}{sign}{extra})"


def _sign_and_checked_kwargs(score_func, n_positional, greater_is_better, kwargs) -> int:
    """Check ``kwargs`` against ``score_func``'s signature now, not at the first score."""
    try:
        inspect.signature(score_func).bind_partial(*([None] * n_positional), **kwargs)
    except TypeError as exc:
        raise TypeError(f"invalid arguments for {score_func.__name__}: {exc}") from None
    return 1 if greater_is_better else -1


class ProbaScorer(_MetricScorer):
    """Score an estimator with a metric of ``(y_true, y_prob, labels=...)``.

    Build it with :func:`make_proba_scorer` or :func:`get_scorer`.

    Parameters
    ----------
    score_func : callable
        ``score_func(y_true, y_prob, *, labels=None, sample_weight=None, **kwargs)``.
    sign : {1, -1}
        -1 turns a loss into a score (greater is better).
    kwargs : dict
        Extra keyword arguments for ``score_func``.
    """

    _factory = "make_proba_scorer"

    def __call__(self, estimator, X, y_true, sample_weight=None) -> float:
        y_prob = estimator.predict_proba(X)
        labels = getattr(estimator, "classes_", None)
        return self._score(y_prob, y_true=y_true, sample_weight=sample_weight, labels=labels)


def _short(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array(shape={value.shape})"
    return repr(value)


def make_proba_scorer(score_func, *, greater_is_better: bool = True, **kwargs) -> ProbaScorer:
    """Turn a probabilistic metric into a scorer.

    Parameters
    ----------
    score_func : callable
        ``score_func(y_true, y_prob, *, labels=None, sample_weight=None, **kwargs)``, for
        example :func:`expected_calibration_error`.
    greater_is_better : bool, default=True
        False for losses: the scorer then returns the negated value.
    **kwargs
        Fixed keyword arguments of ``score_func`` (checked against its signature now).

    Examples
    --------
    >>> from sklearn_bnn.metrics import expected_calibration_error, make_proba_scorer
    >>> make_proba_scorer(expected_calibration_error, greater_is_better=False, n_bins=10)
    make_proba_scorer(expected_calibration_error, greater_is_better=False, n_bins=10)
    """
    sign = _sign_and_checked_kwargs(score_func, 2, greater_is_better, kwargs)
    return ProbaScorer(score_func, sign, kwargs)


class GaussianScorer(_MetricScorer):
    """Score a regressor with a metric of its Gaussian predictive ``(y_true, y_mean, y_std)``.

    Calls ``estimator.predict(X, return_std=True)``: our regressors, scikit-learn's
    :class:`~sklearn.linear_model.BayesianRidge` and
    :class:`~sklearn.gaussian_process.GaussianProcessRegressor`, and a
    :class:`~sklearn.pipeline.Pipeline` ending in any of them (it forwards ``return_std`` to its
    last step). Build it with :func:`make_gaussian_scorer` or :func:`get_scorer`.

    Parameters
    ----------
    score_func : callable
        ``score_func(y_true, y_mean, y_std, *, sample_weight=None, **kwargs)``.
    sign : {1, -1}
        -1 turns a loss into a score (greater is better).
    kwargs : dict
        Extra keyword arguments for ``score_func``.
    """

    _factory = "make_gaussian_scorer"

    def __call__(self, estimator, X, y_true, sample_weight=None) -> float:
        # A Pipeline's own predict would route return_std as metadata when metadata routing
        # is on, and refuse it unless its last step had requested it: ask that step directly.
        while isinstance(estimator, Pipeline):
            X = estimator[:-1].transform(X) if len(estimator) > 1 else X
            estimator = estimator[-1]
        try:
            prediction = estimator.predict(X, return_std=True)
        except TypeError as exc:
            if "return_std" not in str(exc):
                raise
            raise TypeError(
                f"{type(estimator).__name__}.predict does not take return_std=True; the "
                f"{self._score_func.__name__} scorer needs a predictive standard deviation "
                "(HMCRegressor, MCDropoutRegressor, BayesianRidge, GaussianProcessRegressor, "
                "or a Pipeline ending in one)."
            ) from exc
        if not (isinstance(prediction, tuple) and len(prediction) == 2):
            raise TypeError(
                f"{type(estimator).__name__}.predict(X, return_std=True) must return (mean, std)."
            )
        y_mean, y_std = prediction
        return self._score(y_mean, y_std, y_true=y_true, sample_weight=sample_weight)


def make_gaussian_scorer(score_func, *, greater_is_better: bool = True, **kwargs) -> GaussianScorer:
    """Turn a metric of a Gaussian predictive distribution into a scorer.

    Parameters
    ----------
    score_func : callable
        ``score_func(y_true, y_mean, y_std, *, sample_weight=None, **kwargs)``, for example
        :func:`gaussian_nll` or :func:`gaussian_crps`.
    greater_is_better : bool, default=True
        False for losses: the scorer then returns the negated value.
    **kwargs
        Fixed keyword arguments of ``score_func`` (checked against its signature now).

    Examples
    --------
    >>> from sklearn_bnn.metrics import interval_coverage, make_gaussian_scorer
    >>> make_gaussian_scorer(interval_coverage, level=0.9)
    make_gaussian_scorer(interval_coverage, level=0.9)
    """
    sign = _sign_and_checked_kwargs(score_func, 3, greater_is_better, kwargs)
    return GaussianScorer(score_func, sign, kwargs)


# None of these names is one of scikit-learn's (a test checks it): "neg_brier_score" is
# scikit-learn's, half of the summed score below on a binary problem.
_SCORERS = {
    "neg_expected_calibration_error": (expected_calibration_error, False),
    "neg_maximum_calibration_error": (maximum_calibration_error, False),
    "neg_summed_brier_score": (brier_score, False),
    "expected_utility": (expected_utility_score, True),
}

_GAUSSIAN_SCORERS = {
    "neg_gaussian_nll": (gaussian_nll, False),
    "neg_crps": (gaussian_crps, False),
    "interval_coverage": (interval_coverage, True),
    "neg_interval_coverage_error": (interval_coverage_error, False),
}


def get_scorer(scoring, **kwargs):
    """A scorer by name: this package's names first, then scikit-learn's.

    Classification (on ``predict_proba``): ``"neg_expected_calibration_error"``,
    ``"neg_maximum_calibration_error"`` (keyword arguments ``n_bins``, ``strategy``),
    ``"neg_summed_brier_score"`` (:func:`brier_score`, the squared error summed over all
    classes, binary problems included, in [0, 2]) and ``"expected_utility"``
    (requires ``utility=``, a matrix with one row per class in the order of ``classes_`` and one
    column per decision; the score is the average utility of the Bayes actions).

    Regression (on the Gaussian predictive of ``predict(X, return_std=True)``):
    ``"neg_gaussian_nll"`` (the mean log-likelihood per point, :func:`gaussian_nll` negated),
    ``"neg_crps"`` (:func:`gaussian_crps` negated), ``"interval_coverage"`` (fraction of targets
    inside the central interval, keyword ``level``, default 0.95: a report, not a quantity to
    maximise, as wide intervals cover everything) and ``"neg_interval_coverage_error"``
    (``-|coverage - level|``, for model selection).

    Any other name is looked up with :func:`sklearn.metrics.get_scorer`, so a name that
    scikit-learn knows means what it means there: ``"neg_brier_score"`` is scikit-learn's
    (:func:`sklearn.metrics.brier_score_loss`, halved on binary problems, which makes it half
    of ``"neg_summed_brier_score"`` there and equal to it on multi-class ones). A callable is
    returned as it is.

    Examples
    --------
    >>> from sklearn_bnn.metrics import get_scorer
    >>> get_scorer("expected_utility", utility=[[1, 0], [0.3, 1]])
    make_proba_scorer(expected_utility_score, utility=[[1, 0], [0.3, 1]])
    >>> get_scorer("neg_gaussian_nll")
    make_gaussian_scorer(gaussian_nll, greater_is_better=False)
    >>> get_scorer("accuracy")
    make_scorer(accuracy_score, response_method='predict')
    """
    if callable(scoring):
        return scoring
    if scoring in _SCORERS:
        func, greater_is_better = _SCORERS[scoring]
        if func is expected_utility_score and "utility" not in kwargs:
            raise ValueError('get_scorer("expected_utility") needs utility=<matrix>.')
        return make_proba_scorer(func, greater_is_better=greater_is_better, **kwargs)
    if scoring in _GAUSSIAN_SCORERS:
        func, greater_is_better = _GAUSSIAN_SCORERS[scoring]
        return make_gaussian_scorer(func, greater_is_better=greater_is_better, **kwargs)
    if kwargs:
        raise ValueError(
            f"keyword arguments {sorted(kwargs)} are only accepted for this package's scorers "
            f"{sorted(set(_SCORERS) | set(_GAUSSIAN_SCORERS))}; scikit-learn's {scoring!r} "
            "takes none (see make_scorer)."
        )
    try:
        return _sklearn_get_scorer(scoring)
    except ValueError:
        raise ValueError(
            f"{scoring!r} is not a valid scoring value; use sklearn_bnn.metrics.get_scorer_names()"
            " for the list."
        ) from None


def get_scorer_names() -> list[str]:
    """All names :func:`get_scorer` accepts: this package's and scikit-learn's, sorted."""
    return sorted(set(_SCORERS) | set(_GAUSSIAN_SCORERS) | set(_sklearn_get_scorer_names()))
