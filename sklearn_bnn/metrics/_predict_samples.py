"""Per-draw predictions of an estimator, or of a ``Pipeline`` that ends in one."""

from __future__ import annotations

import numpy as np
from sklearn.pipeline import Pipeline

__all__ = ["predict_samples"]


def predict_samples(estimator, X) -> np.ndarray:
    """Per-draw predictions on ``X`` of an estimator that has ``predict_samples``.

    ``Pipeline`` has no ``predict_samples`` method; this function reads one through it: ``X`` goes
    through the ``transform`` of every step but the last, and the last step's
    ``predict_samples`` answers. Pipelines nested inside pipelines are followed too.

    Parameters
    ----------
    estimator : fitted estimator or Pipeline
        One of this package's Bayesian estimators (per-draw outputs of the posterior draws),
        :class:`~sklearn_bnn.ensemble.EnsembleReducer` (per member), or a pipeline whose last
        step is one of these.
    X : array-like of shape (n_samples, n_features)

    Returns
    -------
    ndarray
        What the final estimator's ``predict_samples`` returns: ``(n_draws, n_samples,
        n_classes)`` probabilities for a classifier, ``(n_draws, n_samples)`` or ``(n_draws,
        n_samples, n_outputs)`` noise-free outputs for a regressor.

    Raises
    ------
    TypeError
        If neither the estimator nor the last step of the pipeline has ``predict_samples``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from sklearn_bnn import HMCRegressor
    >>> X = np.linspace(0, 10, 30)[:, None]; y = np.sin(X[:, 0])
    >>> pipe = make_pipeline(StandardScaler(), HMCRegressor(
    ...     hidden_layer_sizes=(5,), n_chains=2, n_draws=10, n_warmup=10, random_state=0))
    >>> predict_samples(pipe.fit(X, y), X[:4]).shape  # the draws of both chains, pooled
    (20, 4)
    """
    draws = predict_samples_or_none(estimator, X)
    if draws is None:
        final = estimator[-1] if isinstance(estimator, Pipeline) else estimator
        raise TypeError(
            f"{type(final).__name__} has no predict_samples: per-draw predictions need an "
            "estimator that has one (HMC, split HMC, MC dropout, EnsembleReducer) or a "
            "Pipeline ending in one."
        )
    return draws


def predict_samples_or_none(estimator, X):
    """``predict_samples(estimator, X)`` as an array, or None when there is none to call."""
    if hasattr(estimator, "predict_samples"):
        return np.asarray(estimator.predict_samples(X))
    if isinstance(estimator, Pipeline):
        final = estimator[-1]
        if hasattr(final, "predict_samples") or isinstance(final, Pipeline):
            return predict_samples_or_none(final, estimator[:-1].transform(X))
    return None
