"""Row weights at fit: ``sample_weight`` and a classifier's ``class_weight``, checked and combined.

Every estimator's ``fit`` takes ``sample_weight`` (so scikit-learn's metadata routing reaches it
through ``set_fit_request``), and every classifier ``class_weight``, whose weight of a row's
class multiplies into its sample weight, as in scikit-learn. The result is None when there are
no weights, or when every row's weight is exactly 1: the unweighted fit, computed as it is
without weights.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.validation import _check_sample_weight

__all__ = ["CLASS_WEIGHT_CONSTRAINT", "class_weights", "row_weights", "sample_weights"]

# the parameter's constraint, for every classifier that takes it
CLASS_WEIGHT_CONSTRAINT = [dict, StrOptions({"balanced"}), None]


def sample_weights(sample_weight, X) -> np.ndarray | None:
    """``sample_weight`` checked by scikit-learn (one finite, non-negative weight per row of
    ``X``, not all zero: a ValueError naming it otherwise), float64; None stays None."""
    if sample_weight is None:
        return None
    return _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)


def class_weights(class_weight, classes: np.ndarray, y) -> np.ndarray:
    """One weight per class (``compute_class_weight``): ones for None, ``n / (k * count)`` for
    "balanced", the given values for a dict (finite and non-negative, or a ValueError)."""
    if isinstance(class_weight, dict):
        bad = {k: v for k, v in class_weight.items() if not (np.isfinite(v) and v >= 0)}
        if bad:
            raise ValueError(f"class_weight must map classes to finite weights >= 0, got {bad!r}.")
    return compute_class_weight(class_weight, classes=classes, y=y)


def row_weights(weights, per_class=None, codes=None, name: str = "") -> np.ndarray | None:
    """The rows' weights: ``weights`` (checked, or None) times ``per_class[codes]`` for a
    classifier; None when all are 1. A classifier whose weights leave fewer than two classes
    with a positive weight is refused (ValueError naming the classes)."""
    if per_class is not None and np.any(per_class != 1.0):
        by_class = per_class[codes]
        weights = by_class if weights is None else weights * by_class
    if weights is None:
        return None
    if codes is not None:
        kept = np.unique(codes[weights > 0])
        if len(kept) < 2:
            raise ValueError(
                f"{name} needs samples of at least 2 classes with a positive weight, but "
                f"sample_weight and class_weight leave only class index {kept.tolist()}."
            )
    if np.all(weights == 1.0):
        return None
    return weights


CLASS_WEIGHT_DOC = """\
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, as in scikit-learn: a dict ``{class_label: weight}``,
        "balanced" (``n_samples / (n_classes * np.bincount(y))``) or None (all 1). A row's
        class weight multiplies its ``sample_weight``, hence its log-likelihood (docs/interop.md,
        "Weights").
"""
