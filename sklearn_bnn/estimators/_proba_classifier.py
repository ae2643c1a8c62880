"""What a classifier derives from its ``predict_proba``: the log-probabilities and the labels."""

from __future__ import annotations

import numpy as np
from sklearn.base import ClassifierMixin

__all__ = ["ProbaClassifierMixin"]


class ProbaClassifierMixin(ClassifierMixin):
    """``predict_log_proba`` and ``predict`` of a classifier, both from its ``predict_proba``.

    The class defines ``predict_proba(X)`` (columns in the order of ``classes_``) and
    ``classes_``; the mixin adds no state.
    """

    def predict_log_proba(self, X) -> np.ndarray:
        """Logarithm of :meth:`predict_proba`, (n_samples, n_classes): ``-inf`` where a
        probability is 0."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X) -> np.ndarray:
        """The class of highest :meth:`predict_proba` for each row, (n_samples,): labels from
        ``classes_``."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
