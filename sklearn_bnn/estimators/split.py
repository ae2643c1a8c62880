"""SplitHMCClassifier and SplitHMCRegressor: exact HMC walking the data in subsets.

Cobb & Jalaian (2021), §3.2 and §4. The HMC estimators with a :class:`~sklearn_bnn.targets.
SplitTarget` and a split integrator: every gradient is taken over one data subset at a time, so
memory is bounded by a subset, while the Metropolis-Hastings test uses the full-data energy.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._persistence_registry import register
from ._base import BaseSamplingEstimator
from ._calibration import CALIBRATION_DOC
from ._families import SplitData
from ._tasks import SamplingClassifierMixin, SamplingRegressorMixin
from ._weights import CLASS_WEIGHT_DOC
from .hmc import IRIS_EXAMPLE_DOC

__all__ = ["SplitHMCClassifier", "SplitHMCRegressor"]

_SPLIT_PARAMS_DOC = """
    Parameters
    ----------
    n_splits : int, default=4
        Number of data subsets M. The rows are shuffled (seeded by ``random_state``) and cut into
        M nearly equal subsets; never more subsets than rows.
    split_size : int, default=None
        At most this many rows per subset; when given, it sets the number of subsets
        (``ceil(n / split_size)``) and ``n_splits`` is not used.
    data_device : {"cpu", "cuda"} or None, default=None
        Where the training data are kept during sampling; None keeps them on ``device``. With
        ``device="cuda"`` and ``data_device="cpu"`` each subset is copied to the GPU when needed,
        so the data need not fit in GPU memory.

    All other parameters are those of the non-split estimator ({base}). The samplers integrate
    with the novel symmetric split leapfrog by default (Cobb & Jalaian 2021, Algorithm 1;
    reversible, second order, 2(M-1) subset gradients a step); the sampler's ``integrator`` setting
    chooses another, ``sampler__integrator="randomised"`` (Neal 2011, §5.1; Cobb & Jalaian 2021,
    eq. 7; subset order drawn per trajectory, 2M a step) or ``"naive"`` (nested leapfrog, eq. 8;
    exactly full leapfrog computed in chunks, M a step), or
    ``sampler=HMC(integrator="naive", n_steps=30)``.
"""


@register
@dataclass(kw_only=True, eq=False, repr=False)
class SplitHMCClassifier(SamplingClassifierMixin, BaseSamplingEstimator):
    __doc__ = (
        """Bayesian neural network classifier sampled by split HMC over data subsets.

    :class:`HMCClassifier` whose gradients are taken over one subset of the data at a time
    (Cobb & Jalaian 2021, §3.2, §4): memory is bounded by a subset, and the Metropolis-Hastings test
    still uses the full-data energy, so the draws target the exact posterior.
    """
        + _SPLIT_PARAMS_DOC.replace("{base}", "HMCClassifier")
        + CALIBRATION_DOC
        + CLASS_WEIGHT_DOC
        + """
    Attributes
    ----------
    n_splits_ : int
        The number of subsets used.

    Other fitted attributes are those of :class:`HMCClassifier`.
"""
        + IRIS_EXAMPLE_DOC
        + """    >>> clf = SplitHMCClassifier(hidden_layer_sizes=(10,), n_splits=3, n_draws=50,
    ...                          n_warmup=50, random_state=0).fit(X, y)
    >>> clf.n_splits_, clf.predict_proba(X[:2]).shape
    (3, (2, 3))
    """
    )

    _family = SplitData()
    _parameter_constraints = {
        **BaseSamplingEstimator._parameter_constraints,
        **SamplingClassifierMixin.task_constraints,
        **SplitData.constraints,
    }

    n_splits: int = 4
    split_size: int | None = None
    data_device: object = None
    rescale_moves: bool = True


@register
@dataclass(kw_only=True, eq=False, repr=False)
class SplitHMCRegressor(SamplingRegressorMixin, BaseSamplingEstimator):
    __doc__ = (
        """Bayesian neural network regressor sampled by split HMC over data subsets.

    :class:`HMCRegressor` whose gradients are taken over one subset of the data at a time
    (Cobb & Jalaian 2021, §3.2, §4): memory is bounded by a subset, and the Metropolis-Hastings test
    still uses the full-data energy, so the draws target the exact posterior.
    """
        + _SPLIT_PARAMS_DOC.replace("{base}", "HMCRegressor")
        + """
    Attributes
    ----------
    n_splits_ : int
        The number of subsets used.

    Other fitted attributes are those of :class:`HMCRegressor`.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.linspace(-1, 1, 40)[:, None]; y = np.sin(3 * X[:, 0])
    >>> reg = SplitHMCRegressor(hidden_layer_sizes=(20,), noise_precision=100.0, n_splits=4,
    ...                         n_draws=50, n_warmup=50, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    >>> mean.shape, std.shape
    ((3,), (3,))
    """
    )

    _family = SplitData()
    _parameter_constraints = {
        **BaseSamplingEstimator._parameter_constraints,
        **SamplingRegressorMixin.task_constraints,
        **SplitData.constraints,
    }

    n_splits: int = 4
    split_size: int | None = None
    data_device: object = None
    rescale_moves: bool = True
