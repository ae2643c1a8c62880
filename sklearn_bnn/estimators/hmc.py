"""HMCClassifier and HMCRegressor: Hamiltonian Monte Carlo over a network's weights.

Cobb & Jalaian (2021), §3.1 (full HMC); Neal (2011).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._persistence_registry import register
from ..samplers import with_sampler_names
from ._base import BaseSamplingEstimator
from ._calibration import CALIBRATION_ATTRS_DOC, CALIBRATION_DOC
from ._families import FullData
from ._tasks import SamplingClassifierMixin, SamplingRegressorMixin
from ._weights import CLASS_WEIGHT_DOC

__all__ = ["HMCClassifier", "HMCRegressor"]

_PARAMS_DOC = """
    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(100,)
        Hidden widths of the standard MLP (ignored when ``module`` is given).
    activation : {"relu", "tanh", "logistic", "gelu", "silu", "elu", "identity"}, default="relu"
    module : nn.Module subclass, factory or instance, default=None
        A network of your own: called as ``module(n_features_in, n_outputs)`` or deep-copied.
    prior_precision : "auto", "fan_in", float, sequence or dict, default="auto"
        Precision tau of the N(0, 1/tau) prior, one value or one per parameter tensor.
        "auto": each hidden layer's weights at their fan-in (the inputs of a unit), so that
        every unit's summed input has a prior variance of order one whatever the widths
        (Neal 1996), the output layer's weights and every bias at 1; "fan_in": the output
        layer's weights at their fan-in too (a smoother prior over functions).
    n_draws : int or "auto", default="auto"
        Transitions after warmup (draws kept per chain: ``n_draws // thin``). "auto": at least
        100 and at most 500, stopped once every chain is stationary by its own split R-hat
        (of the log density and of the predictions on 64 training rows, the check that
        ``diagnostics_`` reports) and the effective sample size of the draws reaches 50;
        draws a chain had not forgotten its start in become warmup
        (:class:`~sklearn_bnn.samplers.driver.budget.DrawRule`; docs/hmc.md, "Budgets").
    n_warmup : int or "auto", default="auto"
        Transitions of warmup (step-size adaptation), discarded. "auto": at least 150, ended
        once the adapted step size moves by less than 10 % over 25 transitions, at most 500
        (a sampler that adapts a mass matrix or an integration time runs 500;
        :class:`~sklearn_bnn.samplers.driver.budget.WarmupRule`).
    sampler : str or sampler object, default="hmc"
        A name registered in :data:`sklearn_bnn.samplers.SAMPLERS` for a full-batch sampler
        ({full_samplers}; the
        stochastic-gradient names need :class:`SGMCMCClassifier` / :class:`SGMCMCRegressor`),
        built with its defaults, or a configured object such as ``HMC(n_steps=30)`` or
        ``NUTS(max_tree_depth=8, target_accept=0.9)``. A sampler's settings (the trajectory:
        ``n_steps``, ``trajectory_length``, ``max_tree_depth``; the warmup: ``step_size``,
        ``target_accept``, ``adapt_mass``) live on the sampler object only, and are reached as
        ``sampler__<setting>`` through ``set_params`` and ``GridSearchCV``; a setting the chosen
        sampler does not take is a ValueError naming it. "hmc" (:class:`~sklearn_bnn.samplers.HMC`)
        runs 25 leapfrog steps, the step size adapted by dual averaging toward acceptance 0.8
        and scaled per chain and transition by a factor uniform in [0.5, 1.5] so that a fixed
        step count does not resonate with the posterior; "nuts" is the No-U-Turn sampler,
        which chooses the trajectory length itself; ``HMC(trajectory_length="auto")`` adapts
        the integration time across chains (ChEES; docs/hmc.md).
    thin : int, default=1
        Keep every ``thin``-th draw.
    n_chains : int, default=1 (classifier), 4 (regressor)
        Independent chains, run as one batched computation; their draws are pooled. The
        regressor runs four: chains from different MAP starts settle in different modes, and
        their pooled predictions raised the test log-likelihood on every UCI set of the panel
        (docs/benchmarks.md, "Four chains for the regressors") at about twice the fit time of
        one on a CPU.
    n_jobs : int, default=None
        How the chains run: None as one batched computation in this process (fastest on one
        machine); an int as one joblib job per chain, that many at a time (-1: one per core; 1:
        one after another, in this process), which any joblib backend (Dask, Ray) spreads over a
        cluster. Jobs give the same draws whatever their number, but not those of the batched
        run (each chain has its own random stream).
    rescale_moves : bool, default=True
        After every transition, draw each hidden unit's scale exactly from its conditional
        along the directions that leave the network's function unchanged (the unit's incoming
        weights and bias times c, its outgoing weights divided by c; Liu & Sabatti 2000), which
        HMC crosses only by a random walk. Applies to the built-in MLP with ``activation``
        "relu" or "identity" (positively homogeneous) under a Gaussian or hierarchical prior,
        and is ignored for other networks; exact, one extra gradient per transition
        (:class:`~sklearn_bnn.targets.UnitRescaleGibbs`; docs/hmc.md).
    init : {"map", "random"} or MAPStart, default="map"
        Where chains start: at a posterior mode found by full-batch Adam from the network's
        random initialisation (each chain its own; "map" is
        :class:`~sklearn_bnn.samplers.starts.MAPStart` at its defaults, 500 steps, reached as
        ``init__n_steps``), or at that random initialisation itself.
    device : {"cpu", "cuda", "auto"}, default="cpu"
    dtype : {"float32", "float64"}, default="float32"
    verbose : bool, default=False
        Show a progress bar (draws per second, acceptance, step size, divergences).
    warm_start : bool, default=False
        When True, ``fit`` continues the chains of the previous fit and appends draws.
    random_state : int, RandomState or None, default=None
        The fit's one ``numpy.random.SeedSequence`` (docs/architecture.md, "Seeding"): each
        chain's network, the data split and the chains' torch generators come from its
        children, never from global state; the same int gives identical draws.
    temperature : float, default=1.0
        Posterior temperature T: the chains sample p(w | D)^(1/T), the likelihood and the
        prior both tempered (the "cold posterior" of Wenzel et al. 2020, eq. 1). T = 1 is the
        Bayes posterior; T < 1 sharpens it.
"""
_PARAMS_DOC = with_sampler_names(_PARAMS_DOC)

# the classifiers' examples: the heading and the standardised iris data they fit
IRIS_EXAMPLE_DOC = """
    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.preprocessing import StandardScaler
    >>> X, y = load_iris(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
"""

_FITTED_DOC = """
    samples_ : PosteriorSamples
        The draws (n_chains, n_draws, D) of the flattened weights.
    acceptance_rate_ : float
        Fraction of accepted proposals after warmup.
    diagnostics_ : dict
        Step size, acceptance, divergences (warmup and sampling), gradient evaluations.
    network_ : FunctionalNetwork
        The network the draws parameterise.
    n_features_in_ : int
    feature_names_in_ : ndarray of str, when X has string feature names
"""


@register
@dataclass(kw_only=True, eq=False, repr=False)
class HMCClassifier(SamplingClassifierMixin, BaseSamplingEstimator):
    __doc__ = (
        """Bayesian neural network classifier sampled by Hamiltonian Monte Carlo.

    The posterior over the weights of an MLP (or your own module) under a Gaussian prior and a
    categorical (Bernoulli for two classes) likelihood summed over the data, sampled with HMC
    (Cobb & Jalaian 2021, §3.1). ``predict_proba`` is the posterior predictive mean over the draws.
    """
        + _PARAMS_DOC
        + CALIBRATION_DOC
        + CLASS_WEIGHT_DOC
        + """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
"""
        + CALIBRATION_ATTRS_DOC
        + _FITTED_DOC
        + IRIS_EXAMPLE_DOC
        + """    >>> clf = HMCClassifier(hidden_layer_sizes=(10,), n_draws=50, n_warmup=50,
    ...                     random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 3)
    """
    )

    _parameter_constraints = {
        **BaseSamplingEstimator._parameter_constraints,
        **SamplingClassifierMixin.task_constraints,
        **FullData.constraints,
    }

    rescale_moves: bool = True


@register
@dataclass(kw_only=True, eq=False, repr=False)
class HMCRegressor(SamplingRegressorMixin, BaseSamplingEstimator):
    __doc__ = (
        """Bayesian neural network regressor sampled by Hamiltonian Monte Carlo.

    Likelihood N(y | f(x; w), 1/noise_precision) summed over the data, Gaussian prior over the
    weights, posterior sampled with HMC (Cobb & Jalaian 2021, §3.1). Single- and multi-output.
    """
        + _PARAMS_DOC
        + """
    noise_precision : float or None, default=None
        Precision of the Gaussian observation noise, in units of y (1 / variance of the noise
        in y's own units, whatever ``normalize_y``). None learns it: a Gamma prior
        (``noise_prior``) on the precision and a Gibbs step from its conjugate conditional
        after every HMC transition (exact; one extra gradient per transition), per chain.
    noise_prior : (float, float), default=(1.0, 0.01)
        Shape a and rate b of the Gamma prior on the noise precision measured relative to the
        training target's variance (tau * Var(y), per output): scale-free, so the same prior
        suits y in any units. Used when ``noise_precision`` is None.
    normalize_y : bool, default=False
        Standardise the target before sampling (and undo it in predictions), as
        :class:`~sklearn.gaussian_process.GaussianProcessRegressor` does: with it, the defaults
        suit a target in any units.

    Attributes
    ----------
"""
        + _FITTED_DOC
        + """
    noise_precision_ : float or ndarray of shape (n_outputs,)
        Posterior mean of the noise precision in units of y (the fixed value when given); the
        draws are in ``samples_.stats["noise_precision"]`` (y units, one per draw).
    noise_std_ : float or ndarray of shape (n_outputs,)
        sqrt(E[1 / noise precision]): the noise standard deviation in units of y.
    y_mean_, y_scale_ : float or ndarray of shape (n_outputs,)
        The network is fitted to ``(y - y_mean_) / y_scale_`` (0 and 1 without
        ``normalize_y``), as in the MC-dropout and plan-net regressors.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.linspace(-1, 1, 40)[:, None]; y = np.sin(3 * X[:, 0])
    >>> reg = HMCRegressor(hidden_layer_sizes=(20,), noise_precision=100.0, n_draws=50,
    ...                    n_warmup=50, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    >>> mean.shape, std.shape
    ((3,), (3,))
    """
    )

    _parameter_constraints = {
        **BaseSamplingEstimator._parameter_constraints,
        **SamplingRegressorMixin.task_constraints,
        **FullData.constraints,
    }

    n_chains: int = 4
    rescale_moves: bool = True
