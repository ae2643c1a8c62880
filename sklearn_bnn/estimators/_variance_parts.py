"""The two parts of a regression's predictive variance: observation noise and weight
uncertainty.

For a predictive that mixes ``p(y | x, w)`` over a distribution of the weights ``w`` (posterior
draws, dropout masks, ensemble members), the law of total variance splits the predictive
variance in two:

``Var[y | x] = E_w[Var(y | x, w)] + Var_w[E(y | x, w)]``,

the expected noise variance (aleatoric: what more data of the same inputs would not remove)
plus the variance of the mean over the weights (epistemic: what more data would). The
regressors' ``predict_variance_parts`` return both with the total, which is
``predict(X, return_std=True)``'s standard deviation.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["PredictiveCovarianceParts", "PredictiveVarianceParts", "variance_parts"]


class PredictiveVarianceParts(NamedTuple):
    """Predictive mean and standard deviations: the noise's, the weights', the total.

    Every field has the shape of ``predict(X)``: (n_samples,) or (n_samples, n_outputs).
    ``total_std ** 2 == noise_std ** 2 + weight_std ** 2`` (to rounding).

    Attributes
    ----------
    mean : ndarray
        The predictive mean, ``predict(X)``.
    noise_std : ndarray
        Square root of the expected observation-noise variance, ``E_w[Var(y | x, w)]``.
    weight_std : ndarray
        Standard deviation over the weights of the network's mean, ``sqrt(Var_w[f(x, w)])``.
    total_std : ndarray
        The predictive standard deviation, ``predict(X, return_std=True)[1]``.
    """

    mean: np.ndarray
    noise_std: np.ndarray
    weight_std: np.ndarray
    total_std: np.ndarray


class PredictiveCovarianceParts(NamedTuple):
    """Predictive mean and covariances between the outputs: the noise's, the weights', the
    total (:class:`~sklearn_bnn.PlanNetRegressor`'s ``predict_variance_parts(X,
    return_cov=True)``).

    ``total_cov == noise_cov + weight_cov`` (to rounding); the diagonals are the squares of
    :class:`PredictiveVarianceParts`' standard deviations.

    Attributes
    ----------
    mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
    noise_cov : ndarray of shape (n_samples, n_outputs, n_outputs)
        Expected observation-noise covariance, ``E_w[Cov(y | x, w)]``.
    weight_cov : ndarray of shape (n_samples, n_outputs, n_outputs)
        Covariance over the weights of the network's mean, ``Cov_w[f(x, w)]``.
    total_cov : ndarray of shape (n_samples, n_outputs, n_outputs)
        The predictive covariance, ``predict(X, return_cov=True)[1]``.
    """

    mean: np.ndarray
    noise_cov: np.ndarray
    weight_cov: np.ndarray
    total_cov: np.ndarray


def variance_parts(mean, noise_var, weight_var, *, one_output=False) -> PredictiveVarianceParts:
    """The parts from a mean and the two variances.

    Parameters
    ----------
    mean : array-like of shape (n_samples, n_outputs)
    noise_var : array-like
        The noise variance, broadcast to the shape of ``mean``.
    weight_var : array-like of shape (n_samples, n_outputs)
    one_output : bool, default=False
        Drop the outputs' axis (for a model fitted on a 1-d ``y``, whose ``predict`` returns
        (n_samples,)).

    Returns
    -------
    PredictiveVarianceParts
    """
    mean = np.asarray(mean)
    noise_var = np.broadcast_to(np.asarray(noise_var, dtype=np.float64), mean.shape)
    weight_var = np.asarray(weight_var, dtype=np.float64)
    parts = PredictiveVarianceParts(
        mean, np.sqrt(noise_var), np.sqrt(weight_var), np.sqrt(noise_var + weight_var)
    )
    if one_output:
        return PredictiveVarianceParts(*(field[:, 0] for field in parts))
    return parts
