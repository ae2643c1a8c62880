"""HMCClassifier and HMCRegressor: Hamiltonian Monte Carlo over a network's weights.

seeds/000 §3.1 (full HMC), REFERENCE §1.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .._registry import register
from .._utils import check_scalar_param, to_numpy
from ..likelihoods import Bernoulli, Categorical, Gaussian
from ._base import BaseSamplingEstimator

__all__ = ["HMCClassifier", "HMCRegressor"]

# Rows of X per chunk of a regressor's prediction, sized so that the (draws, rows, outputs)
# float64 block of one chunk stays near 32 MB whatever the number of rows.
_PREDICT_CHUNK_BYTES = 2**25

_PARAMS_DOC = """
    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(100,)
        Hidden widths of the standard MLP (ignored when ``module`` is given).
    activation : {"relu", "tanh", "logistic", "gelu", "silu", "elu", "identity"}, default="relu"
    module : nn.Module subclass, factory or instance, default=None
        A network of your own: called as ``module(n_features_in, n_outputs)`` or deep-copied.
    prior_precision : float, sequence or dict, default=1.0
        Precision tau of the N(0, 1/tau) prior, one value or one per parameter tensor.
    n_draws : int, default=500
        Transitions after warmup (draws kept per chain: ``n_draws // thin``).
    n_warmup : int, default=500
        Transitions of warmup (step-size adaptation), discarded.
    sampler : str or sampler object, default="hmc"
        A name registered in :data:`sklearn_bnn.samplers.SAMPLERS` for a full-batch sampler
        ("hmc", "nuts", "rmhmc", "s3hmc", "constrained_hmc", "bridged_hmc"; the
        stochastic-gradient names need :class:`SGMCMCClassifier` / :class:`SGMCMCRegressor`),
        built with this estimator's ``n_steps``, ``trajectory_length`` and ``max_tree_depth``
        where it takes them, or a configured object such as ``NUTS(max_tree_depth=8)``.
        "hmc" runs a fixed number of leapfrog steps; "nuts" is the No-U-Turn sampler
        (multinomial, with the generalized U-turn criterion), which chooses the trajectory
        length itself.
    step_size : float or "auto", default="auto"
        Leapfrog step size; "auto" adapts it by dual averaging during warmup.
    n_steps : int, default=50
        Leapfrog steps per trajectory (when ``trajectory_length`` is None). With
        ``sampler="hmc"`` each transition scales the step size by a factor uniform in
        [0.5, 1.5] per chain (``HMC(step_jitter=0.5)``), so that a fixed step count does not
        resonate with the posterior; ``sampler=HMC(step_jitter=0)`` turns that off.
    trajectory_length : float, default=None
        HMC only: the integration time of a trajectory instead of a step count. Each transition
        takes ``ceil(u * trajectory_length / step_size)`` steps with u drawn uniformly in
        [0.5, 1.5] from the sampler's generator (Neal 2011, §5.4.2.2, on jittering), the step
        size being the adapted one: a trajectory moves the same distance whatever step size
        the adaptation settles on.
    max_tree_depth : int, default=10
        NUTS only: at most 2**max_tree_depth - 1 leapfrog steps per transition.
    target_accept : float, default=0.8
        Acceptance probability the adaptation aims for.
    thin : int, default=1
        Keep every ``thin``-th draw.
    n_chains : int, default=1
        Independent chains, run as one batched computation; their draws are pooled.
    chain_method : {"vectorized", "parallel", "sequential"}, default="vectorized"
        "vectorized" runs all chains as one batched computation; "parallel" runs each chain as
        a joblib job (``n_jobs``; any joblib backend, e.g. Dask or Ray, spreads them over a
        cluster); "sequential" runs them one after the other. "parallel" and "sequential" give
        identical draws.
    n_jobs : int, default=None
        Jobs for ``chain_method="parallel"`` (joblib's convention: None is 1, -1 all cores).
    adapt_mass : bool, default=False
        Adapt a diagonal mass matrix per chain during warmup (Stan's windowed schedule).
    init : {"map", "random"}, default="map"
        Where chains start: at a posterior mode found by full-batch Adam from the network's
        random initialisation (each chain its own), or at that random initialisation itself.
    n_init_steps : int, default=500
        Adam steps of the "map" initialisation.
    device : {"cpu", "cuda", "auto"}, default="cpu"
    dtype : {"float32", "float64"}, default="float32"
    verbose : bool, default=False
        Show a progress bar (draws per second, acceptance, step size, divergences).
    warm_start : bool, default=False
        When True, ``fit`` continues the chains of the previous fit and appends draws.
    random_state : int, RandomState or None, default=None
        Seeds a local torch generator: the same seed gives identical draws.
    temperature : float, default=1.0
        Posterior temperature T: the chains sample p(w | D)^(1/T), the likelihood and the
        prior both tempered (the "cold posterior" of Wenzel et al. 2020, eq. 1). T = 1 is the
        Bayes posterior; T < 1 sharpens it.
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
class HMCClassifier(ClassifierMixin, BaseSamplingEstimator):
    __doc__ = (
        """Bayesian neural network classifier sampled by Hamiltonian Monte Carlo.

    The posterior over the weights of an MLP (or your own module) under a Gaussian prior and a
    categorical (Bernoulli for two classes) likelihood summed over the data, sampled with HMC
    (seeds/000 §3.1). ``predict_proba`` is the posterior predictive mean over the draws.
    """
        + _PARAMS_DOC
        + """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
"""
        + _FITTED_DOC
        + """
    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.preprocessing import StandardScaler
    >>> X, y = load_iris(return_X_y=True)
    >>> X = StandardScaler().fit_transform(X)
    >>> clf = HMCClassifier(hidden_layer_sizes=(10,), n_draws=50, n_warmup=50,
    ...                     random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 3)
    """
    )

    def _is_classifier(self) -> bool:
        return True

    def _prepare_targets(self, y, reset: bool):
        check_classification_targets(y)
        if reset:
            self.classes_, encoded = np.unique(y, return_inverse=True)
            if len(self.classes_) < 2:
                raise ValueError(
                    "HMCClassifier needs samples of at least 2 classes in the data, but the data "
                    f"contain only one class: {self.classes_[0]!r}."
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

    def _reference_quantity(self, outputs):
        """Probability of each point's posterior-mean class, per draw."""
        proba = self._likelihood().predictive(outputs)
        top = proba.mean(0).argmax(-1)
        return proba.gather(-1, top[None, :, None].expand(proba.shape[0], -1, 1))[..., 0]

    def predict_samples(self, X) -> np.ndarray:
        """Class probabilities under each posterior draw.

        Returns
        -------
        ndarray of shape (n_draws, n_samples, n_classes)
        """
        out = self._network_outputs(X)
        return to_numpy(self._likelihood().predictive(out)).astype(np.float64)

    def predict_proba(self, X) -> np.ndarray:
        """Posterior predictive class probabilities: the mean over draws.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        mean = self._network_outputs(X, transform=self._likelihood().predictive, mean=True)
        proba = to_numpy(mean).astype(np.float64)
        return proba / proba.sum(axis=1, keepdims=True)  # exact in float64

    def predict_log_proba(self, X) -> np.ndarray:
        """Logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X) -> np.ndarray:
        """The most probable class under the posterior predictive."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


@register
class HMCRegressor(RegressorMixin, BaseSamplingEstimator):
    __doc__ = (
        """Bayesian neural network regressor sampled by Hamiltonian Monte Carlo.

    Likelihood N(y | f(x; w), 1/noise_precision) summed over the data, Gaussian prior over the
    weights, posterior sampled with HMC (seeds/000 §3.1). Single- and multi-output.
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

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        module=None,
        prior_precision=1.0,
        noise_precision=None,
        noise_prior=(1.0, 0.01),
        normalize_y=False,
        n_draws=500,
        n_warmup=500,
        sampler="hmc",
        step_size="auto",
        n_steps=50,
        trajectory_length=None,
        max_tree_depth=10,
        target_accept=0.8,
        thin=1,
        n_chains=1,
        chain_method="vectorized",
        n_jobs=None,
        adapt_mass=False,
        init="map",
        n_init_steps=500,
        device="cpu",
        dtype="float32",
        verbose=False,
        warm_start=False,
        random_state=None,
        temperature=1.0,
    ):
        super().__init__(
            hidden_layer_sizes=hidden_layer_sizes,
            activation=activation,
            module=module,
            prior_precision=prior_precision,
            n_draws=n_draws,
            n_warmup=n_warmup,
            sampler=sampler,
            step_size=step_size,
            n_steps=n_steps,
            trajectory_length=trajectory_length,
            max_tree_depth=max_tree_depth,
            target_accept=target_accept,
            thin=thin,
            n_chains=n_chains,
            chain_method=chain_method,
            n_jobs=n_jobs,
            adapt_mass=adapt_mass,
            init=init,
            n_init_steps=n_init_steps,
            device=device,
            dtype=dtype,
            verbose=verbose,
            warm_start=warm_start,
            random_state=random_state,
            temperature=temperature,
        )
        self.noise_precision = noise_precision
        self.noise_prior = noise_prior
        self.normalize_y = normalize_y

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

    _parameter_constraints: dict = {
        **BaseSamplingEstimator._parameter_constraints,
        "noise_precision": [Interval(Real, 0, None, closed="neither"), None],
        "noise_prior": [tuple, list],
        "normalize_y": ["boolean"],
    }

    def _check_params(self) -> None:
        super()._check_params()
        prior = getattr(self, "noise_prior", (1.0, 0.01))
        if not (isinstance(prior, tuple | list) and len(prior) == 2):
            raise ValueError(f"noise_prior must be a pair (shape, rate), got {prior!r}.")
        check_scalar_param(prior[0], "noise_prior shape", low=0, low_inclusive=False)
        check_scalar_param(prior[1], "noise_prior rate", low=0, low_inclusive=False)

    def _prepare_targets(self, y, reset: bool):
        y = np.asarray(y, dtype=np.float64)
        if reset:
            self._y_2d = y.ndim == 2
            y_var = y.reshape(len(y), -1).var(axis=0)
            self._y_var = np.where(y_var > 0, y_var, 1.0)
            if self.normalize_y:
                self.y_mean_ = y.mean(axis=0)
                scale = y.std(axis=0)
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
        a, b = getattr(self, "noise_prior", (1.0, 0.01))
        rel = self._y_var / scale2  # Var(y) in fitted units
        return Gaussian(torch.as_tensor(25.0 / rel), prior=(float(a), torch.as_tensor(b * rel)))

    def fit(self, X, y):
        """Sample the posterior over the weights (and the noise precision, when learned).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)

        Returns
        -------
        self
        """
        n_before = self.samples_.n_draws if self._continuing() else 0
        super().fit(X, y)
        scale2 = torch.as_tensor(np.reshape(self.y_scale_, -1) ** 2)
        stats = self.samples_.stats
        if "noise_precision" in stats:  # fitted units -> y units, the new draws only
            tau = stats["noise_precision"].double()
            new = tau[:, n_before:]
            tau[:, n_before:] = new / (scale2 if new.ndim == 3 else scale2[0])
            stats["noise_precision"] = tau
            flat = tau.reshape(-1, *tau.shape[2:]).numpy()
            mean, inv = flat.mean(0), (1.0 / flat).mean(0)
        elif "noise_precision" in getattr(self, "precision_names_", ()):  # learned by S3HMC
            flat = self.precisions_[..., -1].double().reshape(-1, 1).numpy() / scale2.numpy()
            mean, inv = flat.mean(0), (1.0 / flat).mean(0)
        else:
            tau = np.full(scale2.shape, float(self.noise_precision))
            mean, inv = tau, 1.0 / tau
        squeeze = (lambda v: float(np.reshape(v, -1)[0])) if not self._y_2d else np.asarray
        self.noise_precision_, self.noise_std_ = squeeze(mean), squeeze(np.sqrt(inv))
        return self

    def _reference_quantity(self, outputs):
        """The first output, per draw."""
        return outputs[..., 0]

    def _raw_samples(self, X, validate: bool = True) -> np.ndarray:
        out = to_numpy(self._network_outputs(X, validate=validate))  # (S, n, n_out)
        out = out.astype(np.float64, copy=False)
        out *= np.reshape(self.y_scale_, -1)
        out += np.reshape(self.y_mean_, -1)
        return out

    def predict_samples(self, X) -> np.ndarray:
        """The network's prediction under each posterior draw (noise-free).

        Returns
        -------
        ndarray of shape (n_draws, n_samples) or (n_draws, n_samples, n_outputs)
        """
        out = self._raw_samples(X)
        return out if self._y_2d else out[..., 0]

    def predict(self, X, return_std: bool = False):
        """Posterior predictive mean, and optionally its standard deviation.

        The draws are evaluated on chunks of rows, so memory stays bounded (about 32 MB of
        per-draw outputs) however many rows ``X`` has.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the predictive standard deviation, combining the spread of the draws
            (weight uncertainty) with the observation noise E[1 / noise precision].

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        std : ndarray of the same shape, when ``return_std``
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        per_row = 8 * len(self.samples_) * self.n_outputs_
        rows = max(1, _PREDICT_CHUNK_BYTES // per_row)
        means, variances = [], []
        for start in range(0, len(X), rows):
            out = self._raw_samples(X[start : start + rows], validate=False)
            means.append(out.mean(axis=0))
            if return_std:
                variances.append(out.var(axis=0))
        mean = np.concatenate(means)
        if not self._y_2d:
            mean = mean[:, 0]
        if not return_std:
            return mean
        noise_var = np.reshape(self.noise_std_, -1) ** 2  # E[1 / tau] over draws, y units
        std = np.sqrt(np.concatenate(variances) + noise_var)
        return mean, (std if self._y_2d else std[:, 0])
