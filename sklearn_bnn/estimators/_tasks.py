"""What classification and regression add to a sampling estimator: the likelihood, the
encoding of ``y``, the learned noise and what prediction means.

:class:`SamplingClassifierMixin` (categorical, Bernoulli for two classes) and
:class:`SamplingRegressorMixin` (Gaussian, fixed or learned noise precision) go before
:class:`~._base.BaseSamplingEstimator` in a public class's bases, e.g.
``HMCRegressor(SamplingRegressorMixin, BaseSamplingEstimator)``; each declares the parameters
it adds as keyword-only dataclass fields and lists their constraints in ``task_constraints``.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real

import numpy as np
import torch
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .._utils import check_scalar_param, to_numpy
from ..likelihoods import Bernoulli, Categorical, Gaussian
from ._base import BaseSamplingEstimator
from ._calibration import CALIBRATION_CONSTRAINT, fit_calibrated, temper_as_calibrated
from ._proba_classifier import ProbaClassifierMixin
from ._variance_parts import PredictiveVarianceParts, variance_parts
from ._weights import CLASS_WEIGHT_CONSTRAINT

__all__ = ["SamplingClassifierMixin", "SamplingRegressorMixin"]

# Rows of X per chunk of a prediction, sized so that the (draws, rows, outputs) float64 block
# of one chunk stays near 32 MB whatever the number of rows.
_PREDICT_CHUNK_BYTES = 2**25


def _chunk_rows(n_draws: int, n_columns: int) -> int:
    """Rows per chunk: a (n_draws, rows, n_columns) float64 block of ``_PREDICT_CHUNK_BYTES``."""
    return max(1, _PREDICT_CHUNK_BYTES // (8 * n_draws * n_columns))


def _per_draw_outputs(estimator, X, n_columns: int, transform=None) -> np.ndarray:
    """Every draw's (transformed) outputs on the validated ``X``, float64 (n_draws, n, n_columns).

    The result is allocated once and filled chunk by chunk (rows here, draws in
    ``forward_batched``), so beside it only one chunk's outputs are held.
    """
    n_draws = len(estimator.samples_)
    result = np.empty((n_draws, len(X), n_columns))
    target = torch.from_numpy(result)
    rows = _chunk_rows(n_draws, n_columns)
    for start in range(0, len(X), rows):
        stop = min(start + rows, len(X))
        estimator._network_outputs(
            X[start:stop], validate=False, transform=transform, out=target[:, start:stop]
        )
    return result


def _weighted_moments(y: np.ndarray, weights: np.ndarray):
    """Mean and (biased) variance along the rows of ``y`` with the rows weighted."""
    mean = np.average(y, axis=0, weights=weights)
    return mean, np.average((y - mean) ** 2, axis=0, weights=weights)


@dataclass(kw_only=True, eq=False, repr=False)
class SamplingClassifierMixin(ProbaClassifierMixin):
    """Classification: labels encoded as classes, a categorical likelihood (Bernoulli for two
    classes), ``predict_proba`` the posterior predictive mean over the draws, tempered as
    ``calibration`` learned (``_calibration.py``)."""

    calibration: object = "temperature"
    class_weight: object = None

    #: The constraints of the parameters the task adds.
    task_constraints = {
        "calibration": CALIBRATION_CONSTRAINT,
        "class_weight": CLASS_WEIGHT_CONSTRAINT,
    }

    def _fit(self, X, y, sample_weight=None):
        # the sampling base's _fit, run once or in the two stages of ``calibration``
        return fit_calibrated(self, super()._fit, X, y, sample_weight)

    def _is_classifier(self) -> bool:
        return True

    def _prepare_targets(self, y, reset: bool):
        check_classification_targets(y)
        if reset:
            self.classes_, encoded = np.unique(y, return_inverse=True)
            if len(self.classes_) < 2:
                raise ValueError(
                    f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                    f"but the data contain only one class: {self.classes_[0]!r}."
                )
        else:
            unseen = np.setdiff1d(np.unique(y), self.classes_)
            if unseen.size:
                raise ValueError(f"y contains classes {unseen.tolist()} not seen in the first fit.")
            encoded = np.searchsorted(self.classes_, y)
        if len(self.classes_) == 2:
            return torch.as_tensor(encoded, dtype=torch.float64)[:, None], 1
        return torch.as_tensor(encoded, dtype=torch.long), len(self.classes_)

    def _likelihood(self):
        return Bernoulli() if len(self.classes_) == 2 else Categorical()

    def _row_uncertainty(self, outputs):
        """Entropy of each row's posterior predictive."""
        proba = self._likelihood().predictive(outputs).double().mean(0)
        return -(proba * torch.log(proba.clamp_min(1e-300))).sum(-1)

    def _reference_quantity(self, outputs):
        """Probability of each point's posterior-mean class, per draw."""
        proba = self._likelihood().predictive(outputs)
        top = proba.mean(0).argmax(-1)
        return proba.gather(-1, top[None, :, None].expand(proba.shape[0], -1, 1))[..., 0]

    def predict_samples(self, X) -> np.ndarray:
        """Class probabilities under each posterior draw.

        Computed by chunks of rows and draws written into the result, so the memory used
        beyond the result itself stays bounded (a chunk of about 32 MB).

        Returns
        -------
        ndarray of shape (n_draws, n_samples, n_classes)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return _per_draw_outputs(
            self, X, len(self.classes_), transform=self._likelihood().predictive
        )

    def predict_proba(self, X) -> np.ndarray:
        """Posterior predictive class probabilities: the mean over draws, tempered and
        averaged over ``calibration_posterior_`` (untempered when ``calibration=None``).

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        return temper_as_calibrated(self, self._predictive_mean(X))

    def _predictive_mean(self, X) -> np.ndarray:
        """The mean over draws of the class probabilities, untempered: (n_samples, n_classes)."""
        check_is_fitted(self)
        mean = self._network_outputs(X, transform=self._likelihood().predictive, mean=True)
        proba = to_numpy(mean).astype(np.float64)
        return proba / proba.sum(axis=1, keepdims=True)  # exact in float64


@dataclass(kw_only=True, eq=False, repr=False)
class SamplingRegressorMixin(RegressorMixin):
    """Regression: a Gaussian likelihood with a fixed or learned noise precision (in units of
    y), optional standardisation of y, ``predict(X, return_std=True)``."""

    noise_precision: float | None = None
    noise_prior: tuple = (1.0, 0.01)
    normalize_y: bool = False

    #: The constraints of the parameters the task adds.
    task_constraints = {
        "noise_precision": [Interval(Real, 0, None, closed="neither"), None],
        "noise_prior": [tuple, list],
        "normalize_y": ["boolean"],
    }

    _private_state = BaseSamplingEstimator._private_state + (
        "_y_2d",
        "_y_var",
    )

    def _multi_output(self) -> bool:
        return True

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _check_params(self) -> None:
        super()._check_params()
        prior = self.noise_prior
        if not (isinstance(prior, tuple | list) and len(prior) == 2):
            raise ValueError(f"noise_prior must be a pair (shape, rate), got {prior!r}.")
        check_scalar_param(prior[0], "noise_prior shape", low=0, low_inclusive=False)
        check_scalar_param(prior[1], "noise_prior rate", low=0, low_inclusive=False)

    def _prepare_targets(self, y, reset: bool):
        y = np.asarray(y, dtype=np.float64)
        weights = getattr(self, "_row_weights", None)
        if reset:
            self._y_2d = y.ndim == 2
            if weights is None:
                y_var = y.reshape(len(y), -1).var(axis=0)
            else:  # the moments of the data with each row repeated by its weight
                y_var = _weighted_moments(y.reshape(len(y), -1), weights)[1]
            self._y_var = np.where(y_var > 0, y_var, 1.0)
            if self.normalize_y:
                if weights is None:
                    self.y_mean_ = y.mean(axis=0)
                    scale = y.std(axis=0)
                else:
                    self.y_mean_, var = _weighted_moments(y, weights)
                    scale = np.sqrt(var)
                self.y_scale_ = np.where(scale > 0, scale, 1.0)
            else:
                n_out = y.shape[1] if y.ndim == 2 else 1
                self.y_mean_ = np.zeros(n_out) if y.ndim == 2 else np.float64(0.0)
                self.y_scale_ = np.ones(n_out) if y.ndim == 2 else np.float64(1.0)
        y = (y - self.y_mean_) / self.y_scale_
        y = y.reshape(len(y), -1)
        return torch.as_tensor(y), y.shape[1]

    def _likelihood(self):
        """N(y | f, 1/tau) in the units the network is fitted in (standardised with
        ``normalize_y``): tau there is the y-unit precision times ``y_scale_**2``."""
        scale2 = np.reshape(self.y_scale_, -1) ** 2
        if self.noise_precision is not None:
            if np.ndim(self.y_scale_) == 0:
                return Gaussian(float(self.noise_precision * scale2[0]))
            return Gaussian(torch.as_tensor(self.noise_precision * scale2))
        # Gamma(a, b) on tau * Var(y) is Gamma(a, b Var(y) / scale^2) on the fitted units' tau
        a, b = self.noise_prior
        rel = self._y_var / scale2  # Var(y) in fitted units
        return Gaussian(torch.as_tensor(25.0 / rel), prior=(float(a), torch.as_tensor(b * rel)))

    def fit(self, X, y, sample_weight=None):
        """Sample the posterior over the weights (and the noise precision, when learned).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row, multiplying its log-likelihood: an integer weight
            k is the row repeated k times (for the learned noise precision and
            ``normalize_y``'s moments too). None: every row weighs 1.

        Returns
        -------
        self
        """
        n_before = self.samples_.n_draws if self._continuing() else 0
        super().fit(X, y, sample_weight=sample_weight)
        scale2 = torch.as_tensor(np.reshape(self.y_scale_, -1) ** 2)
        stats = self.samples_.stats
        if "noise_precision" in stats:  # fitted units -> y units, the new draws only
            tau = stats["noise_precision"].double()
            new = tau[:, n_before:]
            tau[:, n_before:] = new / (scale2 if new.ndim == 3 else scale2[0])
            stats["noise_precision"] = tau
            flat = tau.reshape(-1, *tau.shape[2:]).numpy()
            mean, inv = flat.mean(0), (1.0 / flat).mean(0)
        elif "noise_precision" in getattr(self, "precision_names_", ()):  # sampled jointly (S3HMC)
            flat = self.precisions_[..., -1].double().reshape(-1, 1).numpy() / scale2.numpy()
            mean, inv = flat.mean(0), (1.0 / flat).mean(0)
        else:
            tau = np.full(scale2.shape, float(self.noise_precision))
            mean, inv = tau, 1.0 / tau
        squeeze = (lambda v: float(np.reshape(v, -1)[0])) if not self._y_2d else np.asarray
        self.noise_precision_, self.noise_std_ = squeeze(mean), squeeze(np.sqrt(inv))
        return self

    def _row_uncertainty(self, outputs):
        """Spread of each row's first output over the draws (the weights' uncertainty)."""
        return outputs[..., 0].double().std(0)

    def _reference_quantity(self, outputs):
        """The first output, per draw."""
        return outputs[..., 0]

    def _raw_samples(self, X, validate: bool = True) -> np.ndarray:
        """Every draw's outputs in the units of y, float64 (S, n, n_outputs)."""
        if validate:
            check_is_fitted(self)
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        out = _per_draw_outputs(self, X, self.n_outputs_)
        out *= np.reshape(self.y_scale_, -1)  # in place: no second block
        out += np.reshape(self.y_mean_, -1)
        return out

    def predict_samples(self, X) -> np.ndarray:
        """The network's prediction under each posterior draw (noise-free).

        Computed by chunks of rows and draws written into the result, so the memory used
        beyond the result itself stays bounded (a chunk of about 32 MB).

        Returns
        -------
        ndarray of shape (n_draws, n_samples) or (n_draws, n_samples, n_outputs)
        """
        out = self._raw_samples(X)
        return out if self._y_2d else out[..., 0]

    def _mean_and_weight_variance(self, X, weight_variance: bool):
        """Mean over the draws and (when asked) variance over the draws of the network's
        output, in the units of y, (n, n_outputs) each; chunk by chunk of rows."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        rows = _chunk_rows(len(self.samples_), self.n_outputs_)
        means, variances = [], []
        for start in range(0, len(X), rows):
            out = self._raw_samples(X[start : start + rows], validate=False)
            means.append(out.mean(axis=0))
            if weight_variance:
                variances.append(out.var(axis=0))
        mean = np.concatenate(means)
        return mean, (np.concatenate(variances) if weight_variance else None)

    def _noise_variance(self) -> np.ndarray:
        """E[1 / tau] over the draws, in the units of y: (n_outputs,)."""
        return np.reshape(self.noise_std_, -1) ** 2

    def predict(self, X, return_std: bool = False):
        """Posterior predictive mean, and optionally its standard deviation.

        The draws are evaluated on chunks of rows, so memory stays bounded (about 32 MB of
        per-draw outputs) however many rows ``X`` has.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the predictive standard deviation, combining the spread of the draws
            (weight uncertainty) with the observation noise E[1 / noise precision]; see
            :meth:`predict_variance_parts` for the two apart.

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        std : ndarray of the same shape, when ``return_std``
        """
        mean, weight_var = self._mean_and_weight_variance(X, return_std)
        if not self._y_2d:
            mean = mean[:, 0]
        if not return_std:
            return mean
        std = np.sqrt(weight_var + self._noise_variance())
        return mean, (std if self._y_2d else std[:, 0])

    def predict_variance_parts(self, X) -> PredictiveVarianceParts:
        """The predictive variance split into observation noise and weight uncertainty.

        By the law of total variance over the posterior draws ``w_s``,
        ``Var[y | x] = E_s[1 / tau_s] + Var_s[f(x, w_s)]``: the expected noise variance (the
        Gaussian likelihood's, the same for every input: this model's noise is
        homoscedastic) plus the variance over the draws of the network's output (epistemic,
        larger away from the training data).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        PredictiveVarianceParts
            ``(mean, noise_std, weight_std, total_std)``, each of the shape of ``predict(X)``;
            ``total_std`` is ``predict(X, return_std=True)[1]`` and
            ``total_std**2 == noise_std**2 + weight_std**2``.
        """
        mean, weight_var = self._mean_and_weight_variance(X, True)
        return variance_parts(mean, self._noise_variance(), weight_var, one_output=not self._y_2d)
