"""Ensemble-size reduction: keep only the posterior draws a metric needs (seeds/004).

A Bayesian classifier predicts with the average of many posterior draws (ensemble members),
and every draw costs a forward pass. seeds/004 ("Ensemble size reduction", Fig. 5) drops
members greedily while a validation metric is not impaired, repeating the greedy pass over
several random orderings: accuracy survives with under half of the members, calibration needs
almost all of them.

Picking the best few of many members on a small validation set fits that set's noise: the
greedy subset scores better on the validation data than it will on new data.
:func:`random_order_member_selection` (the default of :class:`EnsembleReducer`) therefore
never chooses members by their validation score: it keeps a prefix of one random order of the
members and sizes it with a statistical upper bound on what the prefix loses against the full
ensemble; :func:`greedy_member_selection` is the procedure of seeds/004.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state, column_or_1d
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ._registry import WeightsOnlyMixin, register
from ._utils import check_scalar_param
from ._validation import check_probabilities, encode_labels
from .metrics import brier_score, expected_calibration_error, negative_log_likelihood

__all__ = ["EnsembleReducer", "greedy_member_selection", "random_order_member_selection"]


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
    samples, y_index = _check_stack(y_prob_samples, y_true, labels)
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


_N_BINS = 15  # the ECE's bins, as expected_calibration_error's default
_CHUNK_ELEMENTS = 2**22  # bootstrap weights held at once (32 MiB of float64)


def _check_stack(y_prob_samples, y_true, labels):
    """Validated stack (n_members, n_samples, n_classes) and the column index of each label."""
    samples = check_probabilities(y_prob_samples, name="y_prob_samples", ndim=3)
    if samples.shape[1] != np.shape(y_true)[0]:
        raise ValueError(
            f"y_prob_samples has {samples.shape[1]} samples but y_true has {np.shape(y_true)[0]}."
        )
    y_index, _ = encode_labels(y_true, samples.shape[2], labels)
    return samples, y_index


def _prefix_terms(samples, y_index, order, metric):
    """Per-point terms of ``metric`` for the mean of the first k members of ``order``.

    Returns ``terms`` of shape (n_members, n_samples), row k - 1 for the first k members: the
    correctness (accuracy), the negative log-probability of the label (nll), the squared
    distance to the one-hot label (brier) or correctness minus confidence (ece). For the ECE
    also the confidence bin of each point (as in :func:`expected_calibration_error`), else None.
    """
    n_members, n_samples, _ = samples.shape
    rows = np.arange(n_samples)
    terms = np.empty((n_members, n_samples))
    bins = np.empty((n_members, n_samples), dtype=np.intp) if metric == "ece" else None
    inner_edges = np.linspace(0.0, 1.0, _N_BINS + 1)[1:-1]
    total = np.zeros(samples.shape[1:])
    for k, m in enumerate(order):
        total += samples[m]
        p = total / (k + 1)
        if metric == "accuracy":
            terms[k] = p.argmax(axis=1) == y_index
        elif metric == "nll":
            p_true = p[rows, y_index] / p.sum(axis=1)
            terms[k] = -np.log(np.clip(p_true, np.finfo(np.float64).eps, 1.0))
        elif metric == "brier":
            terms[k] = np.sum(p**2, axis=1) - 2.0 * p[rows, y_index] + 1.0
        else:
            confidence = p.max(axis=1)
            terms[k] = (p.argmax(axis=1) == y_index) - confidence
            bins[k] = np.searchsorted(inner_edges, confidence, side="left")
    return terms, bins


def _resampled_metric(terms, bins, weights):
    """The metric of every prefix under every row of point ``weights``: (n_members, n_rows)."""
    if bins is None:  # a weighted mean of per-point terms
        return terms @ weights.T / weights.sum(axis=1)
    n_members = terms.shape[0]  # ECE: sum over bins of |sum of weight x (correct - confidence)|
    flat_bins = (bins + _N_BINS * np.arange(n_members)[:, None]).ravel()
    values = np.empty((n_members, len(weights)))
    for r, w in enumerate(weights):
        gaps = np.bincount(flat_bins, weights=(terms * w).ravel(), minlength=n_members * _N_BINS)
        values[:, r] = np.abs(gaps.reshape(n_members, _N_BINS)).sum(axis=1) / w.sum()
    return values


def random_order_member_selection(
    y_prob_samples,
    y_true,
    *,
    metric: str = "accuracy",
    tolerance: float = 0.005,
    confidence_level: float = 0.95,
    n_repeats: int = 20,
    n_resamples: int = 500,
    labels=None,
    random_state=None,
) -> dict:
    """Keep the first k members of a random order, k bounded so the metric holds on new data.

    The principle: a member is never chosen for its score on the validation data, so that
    score stays an honest estimate of the score on new data. The members are taken in a random
    order drawn before the data are looked at, and only the size k is chosen: the smallest k
    for which the loss of a k-member subset against the full ensemble (the metric of the full
    ensemble minus that of the subset, oriented so that a positive loss is worse) is shown to
    stay within ``tolerance``. The procedure:

    1. Draw ``n_repeats`` random orders of the members. The loss of k random members on the
       validation set is the mean over these orders of the loss of their first k members
       (averaging over orders removes the luck of one particular order from the estimate).
    2. Bound the loss from above: the ``confidence_level`` quantile of the loss over
       ``n_resamples`` bootstrap resamples of the validation points (paired: the subsets and
       the full ensemble are scored on the same resample). For accuracy, one extra point on
       which every subset is wrong and the full ensemble right is counted as well, since a
       validation set of n points in which no subset errs cannot show that a subset errs less
       often than about once in n points (the bound is then at least 1 / (n + 1)).
    3. Test the sizes in a fixed sequence, k = n_members - 1, n_members - 2, ..., 1, and stop
       at the first k that fails; the smallest size that passed is kept (all members when none
       did). A size passes when its upper bound is within ``tolerance`` and so is the
       validation loss of the first k members of the first order, the members that would be
       kept: the bound is on the expected loss of k random members, from which one subset
       deviates (the second condition can only make the test more conservative). Testing
       hypotheses in an order fixed in advance, each at level ``1 - confidence_level``, and
       stopping at the first that is not rejected, bounds by ``1 - confidence_level`` the
       chance that any size passed whose expected loss on new data exceeds ``tolerance`` (the
       fixed-sequence procedure of Maurer, Hothorn and Lehmacher, 1995; up to the bootstrap's
       approximation, Efron and Tibshirani, 1993, ch. 13).

    The kept members are the first k of the first order.

    Parameters
    ----------
    y_prob_samples : array-like of shape (n_members, n_samples, n_classes)
        Per-member predictive probabilities on validation data.
    y_true : array-like of shape (n_samples,)
        Validation labels.
    metric : {"accuracy", "nll", "brier", "ece"}, default="accuracy"
        Accuracy, negative log-likelihood, multi-class Brier score or expected calibration
        error (15 equal-width bins) of the ensemble mean.
    tolerance : float >= 0, default=0.005
        Largest loss allowed, in the metric's units (0.005 for accuracy is half a point).
        For accuracy it must exceed ``1 / (n_samples + 1)`` for any member to be dropped.
    confidence_level : float in (0, 1), default=0.95
        One-sided level of the upper bound on the loss.
    n_repeats : int >= 1, default=20
        Random orders over which the loss of a k-member subset is averaged (with 5, the
        average was too rough on digits: a 7-member subset that lost 0.9 test points passed).
    n_resamples : int >= 1, default=500
        Bootstrap resamples of the validation points.
    labels : array-like, optional
        Class labels of the columns (sorted); by default those of ``y_true``.
    random_state : int, RandomState or None
        Seeds the orders and the resamples.

    Returns
    -------
    dict
        ``kept`` (sorted indices of the kept members), ``order`` (the random order whose first
        members are kept), ``loss`` and ``loss_upper_bound`` (arrays of shape (n_members,),
        at index k - 1: the validation loss of k random members, averaged over the orders, and
        the statistic tested, its upper bound or the validation loss of the first k members of
        ``order`` if that is higher; both 0 for all members), ``score_full`` and
        ``score_reduced`` (the metric of the full and of the kept ensemble on the validation
        data).

    Notes
    -----
    NLL, Brier score and ECE have no counterpart of the extra point of step 2: their bound
    sees only the harms that occur on the validation set, and on a small one they can drop
    members whose harm is too rare to show (on 25 and 80 validation points of wine and breast
    cancer, ``metric="ece"`` kept 1 to 5 of 100 bootstrap MLPs and lost up to 7 points of test
    accuracy; ``docs/ensemble_reduction.md``).

    The cost is ``n_repeats`` passes over the stack plus, for accuracy, NLL and Brier, one
    product of an (n_members, n_samples) matrix with ``n_resamples`` weight vectors; the ECE,
    which is not a mean over points, is recomputed for every order and resample
    (``n_repeats * n_resamples`` binnings of n_members x n_samples confidences).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 400)
    >>> p_true = np.clip(0.8 + 0.1 * rng.standard_normal((50, 400)), 0.01, 0.99)
    >>> p_one = np.where(y == 1, p_true, 1.0 - p_true)
    >>> stack = np.stack([1.0 - p_one, p_one], axis=-1)
    >>> result = random_order_member_selection(stack, y, tolerance=0.01, random_state=0)
    >>> k = len(result["kept"])
    >>> k < 50, bool(result["loss_upper_bound"][k - 1] <= 0.01)
    (True, True)
    """
    score_func, greater_is_better = _check_metric(metric)
    check_scalar_param(tolerance, "tolerance", low=0.0)
    check_scalar_param(
        confidence_level,
        "confidence_level",
        low=0.0,
        high=1.0,
        low_inclusive=False,
        high_inclusive=False,
    )
    check_scalar_param(n_repeats, "n_repeats", kind="int", low=1)
    check_scalar_param(n_resamples, "n_resamples", kind="int", low=1)
    samples, y_index = _check_stack(y_prob_samples, y_true, labels)
    n_members, n_samples, n_classes = samples.shape
    sign = 1.0 if greater_is_better else -1.0
    rng = check_random_state(random_state)
    orders = [rng.permutation(n_members) for _ in range(n_repeats)]
    prefixes = [_prefix_terms(samples, y_index, order, metric) for order in orders]

    # loss of the first k members against all of them, averaged over the orders, on the data
    # as they are (row 0 of the weights) and on each bootstrap resample
    per_chunk = max(1, _CHUNK_ELEMENTS // n_samples)
    losses = []
    for start in range(0, n_resamples + 1, per_chunk):
        n_rows = min(per_chunk, n_resamples + 1 - start)
        weights = rng.multinomial(n_samples, np.full(n_samples, 1.0 / n_samples), size=n_rows)
        weights = weights.astype(np.float64)
        if start == 0:
            weights[0] = 1.0
        chunk = np.zeros((n_members, n_rows))
        for r, (terms, bins) in enumerate(prefixes):
            values = _resampled_metric(terms, bins, weights)
            chunk += sign * (values[-1] - values) / n_repeats
            if start == 0 and r == 0:
                own = sign * (values[-1, 0] - values[:, 0])  # the prefixes that may be kept
        losses.append(chunk)
    losses = np.concatenate(losses, axis=1)
    if metric == "accuracy":  # one unseen point that every subset gets wrong, the full one right
        losses[:-1] = (losses[:-1] * n_samples + 1.0) / (n_samples + 1.0)
        own[:-1] = (own[:-1] * n_samples + 1.0) / (n_samples + 1.0)
    loss = losses[:, 0]
    upper = np.quantile(losses[:, 1:], confidence_level, axis=1)
    upper[-1] = 0.0

    # a size passes when the bound and the loss of the prefix that would be kept are within
    # tolerance (the second condition only makes the test more conservative)
    statistic = np.maximum(upper, own)

    k = n_members  # fixed-sequence test: from n_members - 1 down, stop at the first failure
    while k > 1 and statistic[k - 2] <= tolerance:
        k -= 1
    kept = np.sort(orders[0][:k])
    columns = np.arange(n_classes)
    return {
        "kept": kept,
        "order": orders[0],
        "loss": loss,
        "loss_upper_bound": statistic,
        "score_full": float(score_func(y_index, samples.mean(axis=0), labels=columns)),
        "score_reduced": float(score_func(y_index, samples[kept].mean(axis=0), labels=columns)),
    }


def _has_estimator(self) -> bool:
    return self.estimator is not None


def _is_stack_mode(self) -> bool:
    return self.estimator is None


@register
class EnsembleReducer(ClassifierMixin, MetaEstimatorMixin, WeightsOnlyMixin, BaseEstimator):
    """Keep the fewest ensemble members (posterior draws) for which a metric still holds.

    By default the members are taken in a random order fixed before the validation data are
    looked at, and the reducer keeps the shortest prefix of that order whose loss against the
    full ensemble has a statistical upper bound within ``tolerance``: no member is chosen for
    its validation score, so the validation data judge the reduced ensemble without the
    optimism of a selection (see :func:`random_order_member_selection`). ``method="greedy"``
    is the procedure of seeds/004 ("Ensemble size reduction"), :func:`greedy_member_selection`,
    which picks members on the validation data and is over-optimistic when they are few.

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
        upper confidence bound on its loss. ``"greedy"``: the greedy passes of seeds/004.
    metric : {"accuracy", "nll", "brier", "ece"}, default="accuracy"
        The validation metric that must hold.
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
        None means 5, as in seeds/004.
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
        Kept members in each greedy pass (their spread is the error bar of seeds/004 Fig. 5;
        ``"greedy"`` only).
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
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 400)
    >>> p_true = np.clip(0.8 + 0.1 * rng.standard_normal((50, 400)), 0.01, 0.99)
    >>> p_one = np.where(y == 1, p_true, 1.0 - p_true)
    >>> stack = np.stack([1.0 - p_one, p_one], axis=-1)
    >>> reducer = EnsembleReducer(tolerance=0.01, random_state=0).fit(stack, y)
    >>> reducer.n_members_ < 50, reducer.transform(stack).shape == (reducer.n_members_, 400, 2)
    (True, True)
    """

    _parameter_constraints: dict = {
        "estimator": [HasMethods(["fit", "predict_samples"]), None],
        "method": [StrOptions({"random_order", "greedy"})],
        "metric": [StrOptions(set(_METRICS))],
        "tolerance": [Interval(Real, 0, None, closed="left")],
        "confidence_level": [Interval(Real, 0, 1, closed="neither")],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_repeats": [Interval(Integral, 1, None, closed="left"), None],
        "n_resamples": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        estimator=None,
        method="random_order",
        metric="accuracy",
        tolerance=0.005,
        confidence_level=0.95,
        validation_fraction=0.2,
        n_repeats=None,
        n_resamples=500,
        random_state=None,
    ):
        self.estimator = estimator
        self.method = method
        self.metric = metric
        self.tolerance = tolerance
        self.confidence_level = confidence_level
        self.validation_fraction = validation_fraction
        self.n_repeats = n_repeats
        self.n_resamples = n_resamples
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
        common = {"metric": self.metric, "tolerance": self.tolerance, "labels": labels}
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
        from . import _state_checks as P
        from .decision import _check_same_as_wrapped

        self._validate_params()
        required = {
            "classes_": lambda v, f: P.check_classes(v, f, min_classes=1),
            "kept_indices_": P.is_array(ndim=1, kinds="iu"),
            "n_members_": P.is_int(1),
            "n_members_full_": P.is_int(1),
            "metric_full_": P.is_float,
            "metric_reduced_": P.is_float,
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
            _check_same_as_wrapped(state)
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
