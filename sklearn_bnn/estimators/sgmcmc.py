"""SGMCMCClassifier and SGMCMCRegressor: stochastic-gradient MCMC over a network's weights.

Schmal & Mäder (2026). The budget is in epochs: ``n_warmup`` epochs of warmup, then
``n_draws`` epochs keeping a draw every ``thin`` epochs. The data stay in host memory (a numpy
array or a memory map) and go to the device one batch of ``batch_size`` rows at a time
(:class:`~sklearn_bnn.targets.MinibatchTarget`), so device memory is bounded by a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._persistence_registry import register
from ..samplers import with_sampler_names
from ._base import BaseSamplingEstimator
from ._calibration import CALIBRATION_DOC
from ._families import MinibatchData
from ._tasks import SamplingClassifierMixin, SamplingRegressorMixin
from ._weights import CLASS_WEIGHT_DOC

__all__ = ["SGMCMCClassifier", "SGMCMCRegressor"]

_SG_PARAMS_DOC = """
    Parameters
    ----------
    hidden_layer_sizes, activation, module, prior_precision
        As for :class:`{base}` (``module`` may be any ``nn.Module``: CNNs, recurrent nets).
    sampler : {{{minibatch_samplers}}} or sampler object, default="sghmc"
        The stochastic-gradient sampler (see
        :mod:`sklearn_bnn.samplers.stochastic_gradient.sgmcmc`), by name (built with its
        defaults) or as an object; its settings live on it and are reached as
        ``sampler__<setting>``: ``momentum`` (decay per step, 0.99 for SGHMC: the momentum is
        carried across transitions and persists about a hundred steps), ``warmup_step_size``
        (start of a cosine warmup schedule annealed to the step over ``n_warmup``; None:
        constant, except from a random start at ``step_size="auto"``, where warmup starts at a
        per-datum learning rate of 0.05) and ``step_size``, the time step eps (SGD learning rate
        eps**2 on the summed loss, eps**2 N per datum; SGLD: eps and eps N). At
        ``step_size="auto"``, the samplers' default, it is chosen per chain at the start of
        warmup from the minibatch gradient noise v (mean variance per coordinate of the
        N/|B|-scaled gradient estimate, 16 batches): the largest step whose gradient noise is
        a tenth of the injected noise (eps**2 v = 0.1 * 2 (1 - momentum); SGLD: eps**2 v =
        0.1 * 2 eps; Chen et al. 2014, §3.2), at most a per-datum learning rate of 0.03,
        fixed from then on; see :mod:`sklearn_bnn.samplers.stochastic_gradient.sg_step_size`
        and docs/sgmcmc.md.
    batch_size : int, default=128
        Rows per minibatch.
    n_cycles : int, default=None
        Cyclical SG-MCMC (Zhang et al., ICLR 2020): over the sampling phase, ``n_cycles``
        cosine cycles of the step from a per-datum learning rate of 0.05 down to
        ``step_size``, to move between modes. The step is constant within an epoch and the
        schedule fixed in advance, so AMAGOLD's and HTE's tests stay exact. Every draw is kept
        (those early in a cycle are the most dispersed). None: a constant step.
    temperature : float, default=1.0
        Posterior temperature T > 0: the draws follow p(w | D)^(1/T) (likelihood and prior
        divided by T), as for the full-batch MCMC estimators; every sampler, the
        Metropolis-corrected ones included, sees the tempered density. (A sampler object's own
        ``temperature`` scales its injected noise instead; leave it at 1 when you set this.)
    n_draws : int or "auto", default="auto"
        Transitions of sampling after warmup; a transition is an epoch of minibatch steps, or
        16 steps where an epoch holds fewer (the sampler's ``n_steps``). "auto": at least
        100 and at most 200, stopped once every chain is stationary by its own split R-hat
        (log density and predictions on 64 training rows) and the draws' effective sample size
        reaches 50; draws a chain had not forgotten its start in become warmup
        (:class:`~sklearn_bnn.samplers.driver.budget.DrawRule`; docs/sgmcmc.md).
    n_warmup : int or "auto", default="auto"
        Transitions of warmup (discarded); "auto": 100.
    thin : int, default=1
        Keep a draw every ``thin`` transitions.
    n_chains, n_jobs, device, dtype, verbose, warm_start, random_state
        As for :class:`{base}`.
    init : {{"map", "random"}} or MAPStart, default="map"
        Start at a mode found by minibatch Adam, or at the network's random initialisation
        (warmup does the rest). "map" is :class:`~sklearn_bnn.samplers.starts.MAPStart` at its
        defaults: steps on one batch of ``batch_size`` rows each, as scikit-learn's
        ``MLPClassifier`` trains (learning rate 1e-3, the rows in a fresh order every epoch),
        ended when the epoch's mean training loss (the per-datum negative log posterior) has
        not improved by 1e-4 for more than 10 epochs (its ``tol`` and ``n_iter_no_change``),
        or after at most 200 epochs (its ``max_iter``) or 10,000 steps, whichever is more (on
        small data an epoch is a few steps); ``init__n_steps`` sets another budget. The search
        is reported in ``diagnostics_`` (``init_steps``, ``init_loss``, ``init_converged``).
        (The HMC estimators' MAP start takes full-data steps.)
"""
_SG_PARAMS_DOC = with_sampler_names(_SG_PARAMS_DOC)


SG_CALIBRATION_DOC = CALIBRATION_DOC.rstrip() + """ A memory map (``X`` from
        ``np.load(..., mmap_mode="r")``) is fitted uncalibrated: the calibration stage's rows
        would be copied into memory, where the data otherwise go to the device a batch at a
        time.
"""


@register
@dataclass(kw_only=True, eq=False, repr=False)
class SGMCMCClassifier(SamplingClassifierMixin, BaseSamplingEstimator):
    __doc__ = (
        """Bayesian neural network classifier sampled by SG-MCMC (Schmal & Mäder 2026).

    The posterior of :class:`HMCClassifier`, explored with minibatch gradients: for data too
    large for a full-batch gradient per step. ``predict_proba`` averages the draws.
    """
        + _SG_PARAMS_DOC.replace("{base}", "HMCClassifier").replace("{{", "{").replace("}}", "}")
        + SG_CALIBRATION_DOC
        + CLASS_WEIGHT_DOC
        + """
    Attributes
    ----------
    As for :class:`HMCClassifier`; ``acceptance_rate_`` is the per-step acceptance for GSGHMC,
    the trajectory acceptance for AMAGOLD and HTE, and 1 for SGLD / SGHMC.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.preprocessing import StandardScaler
    >>> X, y = load_iris(return_X_y=True)
    >>> from sklearn_bnn.samplers import SGHMC
    >>> X = StandardScaler().fit_transform(X)
    >>> clf = SGMCMCClassifier(hidden_layer_sizes=(10,), batch_size=32,
    ...                        sampler=SGHMC(step_size=0.02), n_warmup=20, n_draws=20,
    ...                        random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 3)
    """
    )

    _family = MinibatchData()
    _parameter_constraints = {
        **BaseSamplingEstimator._parameter_constraints,
        **SamplingClassifierMixin.task_constraints,
        **MinibatchData.constraints,
    }

    sampler: object = "sghmc"
    batch_size: int = 128
    n_cycles: int | None = None


@register
@dataclass(kw_only=True, eq=False, repr=False)
class SGMCMCRegressor(SamplingRegressorMixin, BaseSamplingEstimator):
    __doc__ = (
        """Bayesian neural network regressor sampled by SG-MCMC (Schmal & Mäder 2026).

    The posterior of :class:`HMCRegressor` (Gaussian likelihood, Gaussian prior), explored with
    minibatch gradients.
    """
        + _SG_PARAMS_DOC.replace("{base}", "HMCRegressor").replace("{{", "{").replace("}}", "}")
        + """
    noise_precision : float or None, default=None
        As for :class:`HMCRegressor`, in units of y. None learns it: a Gibbs step from its
        conjugate conditional after every epoch, with the residuals taken batch by batch (one
        forward pass over the data; the data never reach the device whole).
    noise_prior : (float, float), default=(1.0, 0.01)
        As for :class:`HMCRegressor`: the Gamma prior of a learned noise precision, relative to
        the training target's variance.
    normalize_y : bool, default=False

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_bnn.samplers import SGHMC
    >>> X = np.linspace(-1, 1, 64)[:, None]; y = np.sin(3 * X[:, 0])
    >>> reg = SGMCMCRegressor(hidden_layer_sizes=(20,), noise_precision=100.0, batch_size=16,
    ...                       sampler=SGHMC(step_size=0.005), n_warmup=20, n_draws=20,
    ...                       random_state=0)
    >>> reg.fit(X, y).predict(X[:3]).shape
    (3,)
    """
    )

    _family = MinibatchData()
    _parameter_constraints = {
        **BaseSamplingEstimator._parameter_constraints,
        **SamplingRegressorMixin.task_constraints,
        **MinibatchData.constraints,
    }

    sampler: object = "sghmc"
    batch_size: int = 128
    n_cycles: int | None = None
