"""Monte Carlo dropout networks: :class:`MCDropoutClassifier` and :class:`MCDropoutRegressor`.

A multilayer perceptron trained with dropout and L2 weight decay is a variational approximation
to a Bayesian neural network (Gal & Ghahramani, 2016; Cobb 2019, section 3.2.5, eq. 3.19-3.21):
each weight matrix is ``M diag(z)`` with Bernoulli masks ``z``, and keeping dropout on at
prediction draws networks from the approximate posterior ``q(w)``. Averaging
``n_predict_draws`` such passes gives the predictive distribution.

The objective minimised here is the negative ELBO of eq. 3.20 divided by the number of training
points ``N``, with the KL term replaced by its weight-decay form (eq. 3.21)::

    (1/N) sum_n -log p(y_n | x_n, w_n) + sum_l (lambda p_l / 2N) ||M_l||^2 + (lambda / 2N) ||m_l||^2

(``M_l`` in Gal & Ghahramani's parametrisation; the ``nn.Linear`` weights of torch's inverted
dropout are ``W_l = p_l M_l``, so the decay applied to them is ``lambda / (2 N p_l)``), where
``w_n`` is the network with a fresh dropout mask for point ``n``, ``lambda`` is the prior
precision (prior ``N(0, lambda^-1 I)`` on every weight; ``lambda = l^2`` for Gal's length-scale
``l``), ``p_l`` is the keep probability of the units feeding layer ``l`` (``1 - dropout`` after a
hidden layer, 1 for the inputs, which are not dropped) and ``m_l`` the biases.

Training runs through skorch (:mod:`sklearn_bnn.estimators._skorch`; the estimators' shared
machinery is :mod:`._dropout_base`): the data term is the net's loss hook, the weight decay its
regulariser, and the fit runs under torch's global generator forked and seeded from
``random_state``, so it is reproducible and leaves the caller's random state alone. Prediction
draws its masks from a local generator seeded at fit.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from .._persistence_registry import register
from .._utils import to_numpy
from ._calibration import CALIBRATION_CONSTRAINT, resolve_calibration
from ._dropout_base import DROPOUT_PARAMS_DOC, MCDropoutBase
from ._dropout_classifier import DropoutClassifierBase
from ._dropout_masks import draw_masks, forward_with_masks
from ._dropout_noise import NoiseFromResiduals, WithNoise, gaussian_nll
from ._nested import NestedSettingsMixin
from ._skorch import split_weights, standardize_targets, weighted_mean
from ._trained import parameters
from ._variance_parts import PredictiveVarianceParts, variance_parts

# draw_masks and forward_with_masks are imported from here (lcbnn, tests, benchmarks)
__all__ = ["MCDropoutClassifier", "MCDropoutRegressor", "draw_masks", "forward_with_masks"]

@register
@parameters
class MCDropoutClassifier(NestedSettingsMixin, DropoutClassifierBase):
    __doc__ = f"""Classifier with Monte Carlo dropout (Cobb 2019, section 3.2.5).

    A softmax multilayer perceptron trained with dropout and weight decay; at prediction
    ``n_predict_draws`` networks are drawn from the dropout distribution ``q(w)`` and their class
    probabilities averaged. ``class_weight`` turns the likelihood into the weighted
    cross-entropy of eq. 4.12 (the baseline of the loss-calibrated experiments).

    Parameters
    ----------
    {DROPOUT_PARAMS_DOC.strip()}
    class_weight : dict, "balanced" or None, default=None
        Weight ``alpha_c`` of each class in the cross-entropy, ``-alpha_y log p(y | x, w)``
        (eq. 4.12); ``"balanced"`` as in scikit-learn.
    calibration : {{"temperature"}}, TemperatureCalibration or None, default="temperature"
        "temperature" (``TemperatureCalibration()``): hold out its ``validation_fraction``
        (0.2; ``calibration__validation_fraction``; ``validation_fraction`` itself is early
        stopping's) of the training rows (stratified), train the network on
        the rest, learn the posterior of the temperature T of the predictive
        ``mean_draws(p)^(1/T)`` (renormalised) from the held-out labels under a N(0, 0.5^2)
        prior on log T, as :class:`HMCClassifier` does, then train afresh on **every** row
        (the network ``calibration=None`` gives); ``predict_proba`` averages the tempered
        predictive over that posterior. About twice the fit time of None. Skipped (T = 1)
        when fewer than 20 rows would be held out. None: the dropout average as it comes
        (under-confident on the small multi-class sets of docs/mc_dropout.md, "Calibration",
        where the learned rate keeps 0.15-0.3 of dropout noise; over-confident on small noisy
        ones).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_weight_ : ndarray of shape (n_classes,)
        Weights must be finite and >= 0.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when ``X`` had string column names.
    module_ : torch.nn.Sequential
        The trained network (weight means ``M``), on the CPU.
    loss_curve_ : list of float
        Mean data term per epoch.
    validation_loss_curve_ : list of float
        Validation loss per epoch (empty without early stopping).
    best_validation_loss_ : float or None
    n_iter_ : int
        Epochs run.
    history_ : list of dict
        skorch's training history as plain dicts, one per epoch (its ``batches`` included).
    mc_seed_ : int
        Seed of the dropout masks used at prediction.
    calibration_temperature_ : float
        exp(E[log T]) under the temperature's posterior (1.0 when ``calibration`` is None or
        was skipped): a summary; ``predict_proba`` averages over the whole posterior.
    calibration_posterior_ : ndarray of shape (2, k)
        Temperatures and their posterior weights. ``predict_samples`` returns the per-draw
        probabilities untempered.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn_bnn import MCDropoutClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = MCDropoutClassifier(hidden_layer_sizes=(32,), max_iter=100, learning_rate_init=1e-2,
    ...                           random_state=0).fit(X, y)
    >>> clf.predict_samples(X[:2]).shape
    (100, 2, 3)
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    calibration: object = "temperature"

    _parameter_constraints = {
        **DropoutClassifierBase._parameter_constraints,
        "calibration": CALIBRATION_CONSTRAINT,
    }
    _NAMED_OBJECTS = {"calibration": resolve_calibration}

    def _held_out_split(self, y):
        calibration = resolve_calibration(self.calibration)
        return None if calibration is None else calibration.held_out_split(y, self.random_state)


@register
@parameters
class MCDropoutRegressor(RegressorMixin, MCDropoutBase):
    __doc__ = f"""Regressor with Monte Carlo dropout (Cobb 2019, section 3.2.5, eq. 3.21).

    A multilayer perceptron with a Gaussian likelihood ``N(y; f(x, w), tau^-1)`` trained with
    dropout and weight decay. Targets are standardised internally; predictions, standard
    deviations and ``noise_precision_`` are in the units of ``y``. The predictive standard
    deviation combines the noise and the spread of the dropout draws,
    ``sqrt(1/tau + Var_t f(x, w_t))`` (Gal & Ghahramani, 2016).

    Parameters
    ----------
    {DROPOUT_PARAMS_DOC.strip()}
    noise_precision : float > 0 or None, default=None
        Precision ``tau`` of the Gaussian noise, in the units of ``y`` (the targets are
        standardised internally; the value given here and ``noise_precision_`` are not).
        ``None`` learns one precision per output on the same objective: before every epoch it
        is set to its maximiser given the network, ``1 / mean (y - f(x, w_n))^2`` over the
        previous epoch's training residuals (dropout on), so it tracks the fit from the start
        rather than creeping by one Adam step at a time.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when ``X`` had string column names.
    n_outputs_ : int
    noise_precision_ : ndarray of shape (n_outputs_,)
        Fixed or learned noise precision, in the units of ``y``.
    y_mean_, y_scale_ : ndarray of shape (n_outputs_,)
        Standardisation of the targets.
    module_ : torch.nn.Sequential
        The trained network, on the CPU (outputs in standardised units).
    loss_curve_, validation_loss_curve_, best_validation_loss_, n_iter_, mc_seed_
        As in :class:`MCDropoutClassifier`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_bnn import MCDropoutRegressor
    >>> X = np.linspace(-2, 2, 200)[:, None]
    >>> y = np.sin(2 * X[:, 0]) + 0.1 * np.random.default_rng(0).normal(size=200)
    >>> reg = MCDropoutRegressor(hidden_layer_sizes=(50,), max_iter=300, learning_rate_init=1e-2,
    ...                          random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    >>> mean.shape, std.shape, reg.predict_samples(X[:3]).shape
    ((3,), (3,), (100, 3))
    """

    noise_precision: object = None

    _parameter_constraints = {
        **MCDropoutBase._parameter_constraints,
        "noise_precision": [Interval(Real, 0, None, closed="neither"), None],
    }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _validate_kwargs(self) -> dict:
        return {"multi_output": True, "y_numeric": True}

    def _prepare_targets(self, y):
        y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        self.n_outputs_ = y2.shape[1]
        return standardize_targets(self, y2, getattr(self, "_row_weights", None))

    def _targets_tensor(self, targets, device, dtype):
        return torch.as_tensor(targets, dtype=dtype, device=device)

    def _n_net_outputs(self):
        return self.n_outputs_

    def _training_module(self, net):
        if self.noise_precision is None:
            tau = np.ones(self.n_outputs_)  # noise sd = sd of y; set from residuals each epoch
        else:
            tau = float(self.noise_precision) * self.y_scale_**2  # in standardised units
        return WithNoise(net, np.log(tau))

    def _extra_callbacks(self):
        return [("noise_update", NoiseFromResiduals())] if self.noise_precision is None else []

    def _loss(self, net, y_pred, y_true, X, training):
        """Gaussian data term; in training also accumulates the residuals for the noise update."""
        module = net.module_
        y_true, weights = split_weights(y_true)
        sq = (y_true - y_pred).pow(2)
        if training and self.noise_precision is None:
            module.record(sq.detach(), weights)
        return weighted_mean(gaussian_nll(sq, module.log_tau), weights)

    def _nll(self, out, yb, log_tau):
        """Gaussian ``-log N(y; f, tau^-1)`` summed over outputs (standardised units)."""
        return gaussian_nll((yb - out).pow(2), log_tau)

    def _finish(self, module):
        tau_std = to_numpy(module.log_tau.exp()).astype(np.float64)
        self.noise_precision_ = tau_std / self.y_scale_**2
        return module.net

    def predict_samples(self, X) -> np.ndarray:
        """Predicted means of every dropout draw, in the units of ``y``.

        Returns
        -------
        ndarray of shape (n_predict_draws, n_samples) or (n_predict_draws, n_samples, n_outputs)
            The 2-D form for a single output.
        """
        check_is_fitted(self)
        f = to_numpy(self._net_output_samples(X, out=self._empty_samples(X, self.n_outputs_)))
        f *= self.y_scale_  # in place: no second block
        f += self.y_mean_
        return f[..., 0] if self.n_outputs_ == 1 else f

    def _mean_and_weight_variance(self, X):
        """Mean and variance over the dropout draws, in the units of y: (n, n_outputs) each."""
        check_is_fitted(self)
        scale = torch.as_tensor(self.y_scale_, dtype=torch.float64)
        loc = torch.as_tensor(self.y_mean_, dtype=torch.float64)

        def moments(f):  # (T, rows, n_out) -> (rows, 2, n_out), in the units of y
            f = f * scale + loc
            return torch.stack([f.mean(0), f.var(0, unbiased=False)], 1)

        both = to_numpy(self._net_output_samples(X, reduce=moments))
        return both[:, 0], both[:, 1]

    def predict(self, X, return_std: bool = False):
        """Predictive mean, and optionally standard deviation, of the targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return ``sqrt(1/tau + Var_t f(x, w_t))``; see :meth:`predict_variance_parts`
            for the two terms apart.

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        std : ndarray of the same shape, when ``return_std``
        """
        mean, var = self._mean_and_weight_variance(X)
        if self.n_outputs_ == 1:
            mean, var = mean[:, 0], var[:, 0]
        if not return_std:
            return mean
        noise_var = 1.0 / np.asarray(self.noise_precision_, dtype=np.float64)
        if self.n_outputs_ == 1:
            noise_var = noise_var[0]
        return mean, np.sqrt(noise_var + var)

    def predict_variance_parts(self, X) -> PredictiveVarianceParts:
        """The predictive variance split into observation noise and weight uncertainty.

        ``Var[y | x] = 1 / tau + Var_t[f(x, w_t)]`` (the law of total variance over the
        dropout draws ``t``): the learned noise variance, the same for every input (this
        model's noise is homoscedastic), plus the variance of the network's output over the
        dropout masks (the approximate posterior's weight uncertainty, Gal & Ghahramani 2016).

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
        mean, var = self._mean_and_weight_variance(X)
        noise_var = 1.0 / np.asarray(self.noise_precision_, dtype=np.float64)
        return variance_parts(mean, noise_var, var, one_output=self.n_outputs_ == 1)
