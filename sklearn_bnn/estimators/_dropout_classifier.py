"""What the MC dropout classifiers share: :class:`DropoutClassifierBase`.

:class:`~sklearn_bnn.MCDropoutClassifier` (which adds the ``calibration`` parameter) and
:class:`~sklearn_bnn.LossCalibratedBNN` (which adds the utility and the loss-calibrated
penalty) encode the classes, weight the cross-entropy by class and row, and average the class
probabilities of the dropout draws.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.utils import _safe_indexing
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .._utils import to_numpy
from .._warnings import one_convergence_warning, one_warning_per_call
from ._calibration import (
    NO_CALIBRATION,
    calibrated,
    held_out_weights,
    overridden,
    temperature_posterior,
)
from ._dropout_base import MCDropoutBase
from ._proba_classifier import ProbaClassifierMixin
from ._skorch import split_weights, weighted_mean
from ._trained import parameters
from ._weights import sample_weights

__all__ = ["DropoutClassifierBase"]


@parameters
class DropoutClassifierBase(ProbaClassifierMixin, MCDropoutBase):
    """Classification with MC dropout: the categorical likelihood (class- and row-weighted
    cross-entropy), the classes' encoding and the dropout predictive. ``fit`` trains on every
    row; a subclass whose :meth:`_held_out_split` returns rows first learns the temperature of
    the predictive on them (the calibration stage). The predictive is untempered
    (``calibration_temperature_`` 1.0) otherwise.
    """

    class_weight: object = None

    _parameter_constraints = {
        **MCDropoutBase._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }

    @one_warning_per_call
    def fit(self, X, y, sample_weight=None):
        """Train the dropout network on ``(X, y)``; a classifier with a ``calibration`` first
        learns the predictive temperature on the rows it holds out (``calibration="temperature"``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row, multiplying its term of the loss (the weighted
            mean, ``N`` in the KL term the sum of the weights; the held-out temperature's
            likelihood weighted too). None: every row weighs 1.

        Returns
        -------
        self
        """
        self._validate_params()
        weights = sample_weights(sample_weight, X)  # scikit-learn's messages before indexing
        split = self._held_out_split(y)
        posterior = NO_CALIBRATION
        name, last = type(self).__name__, None
        if split is not None:
            fit_rows, held = split
            # the two stages' progress bars (verbose=True) say which is which
            stage = f"{name} calibration stage ({len(fit_rows)} rows, {len(held)} held out)"
            # the fit's convergence warning is the final training's
            with overridden(self, _progress_desc=stage), one_convergence_warning(keep=()):
                super().fit(
                    _safe_indexing(X, fit_rows),
                    _safe_indexing(y, fit_rows),
                    None if weights is None else weights[fit_rows],
                )
            proba = self._dropout_average(_safe_indexing(X, held))
            classes = np.searchsorted(self.classes_, _safe_indexing(np.asarray(y), held))
            posterior = temperature_posterior(
                proba, classes, held_out_weights(self, np.asarray(y), weights, held)
            )
            last = f"{name} training (all {len(fit_rows) + len(held)} rows)"
        with overridden(self, _progress_desc=last or name):
            super().fit(X, y, weights)  # every row: the network calibration=None gives
        self.calibration_posterior_ = posterior
        self.calibration_temperature_ = float(np.exp(np.sum(posterior[1] * np.log(posterior[0]))))
        return self

    def _held_out_split(self, y):
        """``(fit_rows, held_rows)`` for the temperature, or None: no calibration here."""
        return None

    def _prepare_targets(self, y):
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                f"but the data contain only one class: {self.classes_[0]!r}."
            )
        if isinstance(self.class_weight, dict):
            bad = {k: v for k, v in self.class_weight.items() if not (np.isfinite(v) and v >= 0)}
            if bad:
                raise ValueError(
                    f"class_weight must map classes to finite weights >= 0, got {bad!r}."
                )
        self.class_weight_ = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
        self._unweighted = bool(np.all(self.class_weight_ == 1.0))
        return encoded

    def _targets_tensor(self, targets, device, dtype):
        return torch.as_tensor(targets, device=device)

    def _n_net_outputs(self):
        return len(self.classes_)

    def _loss(self, net, y_pred, y_true, X, training):
        """skorch loss hook: mean (class- and row-weighted) cross-entropy of a batch."""
        y_true, weights = split_weights(y_true)
        if self._unweighted and weights is None:
            return F.cross_entropy(y_pred, y_true)
        return weighted_mean(self._nll(y_pred, y_true, None), weights)

    def _nll(self, out, yb, log_tau):
        """Weighted cross-entropy ``-alpha_y log softmax(out)_y`` (eq. 4.12)."""
        alpha = torch.as_tensor(self.class_weight_, dtype=out.dtype, device=out.device)
        return alpha[yb] * F.cross_entropy(out, yb, reduction="none")

    def predict_samples(self, X) -> np.ndarray:
        """Class probabilities of every dropout draw (float64).

        Computed by chunks of rows written into the result, so the memory used beyond the
        result itself stays bounded.

        Returns
        -------
        ndarray of shape (n_predict_draws, n_samples, n_classes)
        """
        check_is_fitted(self)
        out = self._empty_samples(X, len(self.classes_))
        softmax = lambda f: torch.softmax(f, dim=-1)  # noqa: E731
        return to_numpy(self._net_output_samples(X, out=out, transform=softmax))

    def _dropout_average(self, X) -> np.ndarray:
        """The mean of :meth:`predict_samples` over draws, untempered."""
        return self.predict_samples(X).mean(axis=0)

    def predict_proba(self, X) -> np.ndarray:
        """Predictive probabilities: the mean of :meth:`predict_samples` over draws, tempered
        and averaged over ``calibration_posterior_`` (untempered when ``calibration=None``)."""
        posterior = getattr(self, "calibration_posterior_", NO_CALIBRATION)
        return calibrated(self._dropout_average(X), posterior)
