"""Member selection on a stack of member predictions: the greedy passes of Schmal & Mäder 2026 and
the random-order prefix sized by an upper confidence bound (see :mod:`sklearn_bnn.ensemble`)."""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from .._utils import check_scalar_param
from .._validation import check_probabilities, encode_labels
from ..metrics import brier_score, expected_calibration_error, negative_log_likelihood

__all__ = ["greedy_member_selection", "random_order_member_selection"]


def _accuracy(y_index, y_prob, labels):
    return float(np.mean(np.argmax(y_prob, axis=1) == y_index))


# name -> (metric(y_index, y_prob, labels), greater_is_better)
SCORES = {
    "accuracy": (_accuracy, True),
    "nll": (negative_log_likelihood, False),
    "brier": (brier_score, False),
    "ece": (expected_calibration_error, False),
}


def _check_scoring(scoring: str):
    if scoring not in SCORES:
        raise ValueError(f"scoring must be one of {sorted(SCORES)}, got {scoring!r}.")
    return SCORES[scoring]


def greedy_member_selection(
    y_prob_samples,
    y_true,
    *,
    scoring: str = "accuracy",
    tolerance: float = 0.0,
    n_repeats: int = 5,
    labels=None,
    random_state=None,
) -> dict:
    """Greedy ensemble-size reduction on stacked member predictions (Schmal & Mäder 2026).

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
    scoring : {"accuracy", "nll", "brier", "ece"}, default="accuracy"
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
    score_func, greater_is_better = _check_scoring(scoring)
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
        order = rng.permutation(samples.shape[0])
        keep, current = _greedy_pass(samples, order, score, full - tolerance)
        size = int(keep.sum())
        n_kept.append(size)
        if best_keep is None or (size, -current) < (best_keep.sum(), -best_score):
            best_keep, best_score = keep, current
    return {
        "kept": np.flatnonzero(best_keep),
        "n_kept_per_repeat": np.array(n_kept),
        "score_full": sign * full,
        "score_reduced": sign * best_score,
    }


def _greedy_pass(samples, order, score, threshold):
    """One greedy pass over the members in ``order``: drop a member when the mean of the others
    still scores at least ``threshold`` (``score`` oriented so that higher is better), keeping
    one member at least. Returns the kept mask and the score of the kept members' mean."""
    keep = np.ones(samples.shape[0], dtype=bool)
    total, size = samples.sum(axis=0), samples.shape[0]
    for m in order:
        if size == 1:
            break
        reduced = (total - samples[m]) / (size - 1)
        if score(reduced) >= threshold:
            keep[m], total, size = False, total - samples[m], size - 1
    return keep, score(total / size)


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


def _prefix_terms(samples, y_index, order, scoring):
    """Per-point terms of the score ``scoring`` for the mean of the first k members of ``order``.

    Returns ``terms`` of shape (n_members, n_samples), row k - 1 for the first k members: the
    correctness (accuracy), the negative log-probability of the label (nll), the squared
    distance to the one-hot label (brier) or correctness minus confidence (ece). For the ECE
    also the confidence bin of each point (as in :func:`expected_calibration_error`), else None.
    """
    n_members, n_samples, _ = samples.shape
    rows = np.arange(n_samples)
    terms = np.empty((n_members, n_samples))
    bins = np.empty((n_members, n_samples), dtype=np.intp) if scoring == "ece" else None
    inner_edges = np.linspace(0.0, 1.0, _N_BINS + 1)[1:-1]
    total = np.zeros(samples.shape[1:])
    for k, m in enumerate(order):
        total += samples[m]
        p = total / (k + 1)
        if scoring == "accuracy":
            terms[k] = p.argmax(axis=1) == y_index
        elif scoring == "nll":
            p_true = p[rows, y_index] / p.sum(axis=1)
            terms[k] = -np.log(np.clip(p_true, np.finfo(np.float64).eps, 1.0))
        elif scoring == "brier":
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
    scoring: str = "accuracy",
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
    scoring : {"accuracy", "nll", "brier", "ece"}, default="accuracy"
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
    cancer, ``scoring="ece"`` kept 1 to 5 of 100 bootstrap MLPs and lost up to 7 points of test
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
    score_func, greater_is_better = _check_scoring(scoring)
    _check_random_order_params(tolerance, confidence_level, n_repeats, n_resamples)
    samples, y_index = _check_stack(y_prob_samples, y_true, labels)
    n_members, n_samples, n_classes = samples.shape
    sign = 1.0 if greater_is_better else -1.0
    rng = check_random_state(random_state)
    orders = [rng.permutation(n_members) for _ in range(n_repeats)]
    prefixes = [_prefix_terms(samples, y_index, order, scoring) for order in orders]
    losses, own = _bootstrap_losses(prefixes, sign, n_resamples, rng)
    if scoring == "accuracy":  # one unseen point that every subset gets wrong, the full one right
        losses[:-1] = (losses[:-1] * n_samples + 1.0) / (n_samples + 1.0)
        own[:-1] = (own[:-1] * n_samples + 1.0) / (n_samples + 1.0)
    loss = losses[:, 0]
    upper = np.quantile(losses[:, 1:], confidence_level, axis=1)
    upper[-1] = 0.0

    # a size passes when the bound and the loss of the prefix that would be kept are within
    # tolerance (the second condition only makes the test more conservative)
    statistic = np.maximum(upper, own)
    kept = np.sort(orders[0][: _fixed_sequence_size(statistic, tolerance)])
    columns = np.arange(n_classes)
    return {
        "kept": kept,
        "order": orders[0],
        "loss": loss,
        "loss_upper_bound": statistic,
        "score_full": float(score_func(y_index, samples.mean(axis=0), labels=columns)),
        "score_reduced": float(score_func(y_index, samples[kept].mean(axis=0), labels=columns)),
    }


def _check_random_order_params(tolerance, confidence_level, n_repeats, n_resamples):
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


def _bootstrap_losses(prefixes, sign, n_resamples, rng):
    """Loss of the first k members against all of them, averaged over the orders of
    ``prefixes`` (their :func:`_prefix_terms`), on the data as they are (column 0) and on each
    of ``n_resamples`` bootstrap resamples (columns 1 on): shape (n_members, n_resamples + 1).
    Also the loss on the data as they are of the prefixes of the first order, the members that
    may be kept. ``sign`` orients the metric so that a positive loss is worse."""
    n_members, n_samples = prefixes[0][0].shape
    n_repeats = len(prefixes)
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
    return np.concatenate(losses, axis=1), own


def _fixed_sequence_size(statistic, tolerance) -> int:
    """The fixed-sequence test: sizes from n_members - 1 down pass while ``statistic`` (at
    index k - 1 for size k) is within ``tolerance``; the smallest size that passed, stopping at
    the first failure (n_members when none passed)."""
    k = len(statistic)
    while k > 1 and statistic[k - 2] <= tolerance:
        k -= 1
    return k
