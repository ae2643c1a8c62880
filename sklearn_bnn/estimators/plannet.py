"""Full-covariance Bayesian regression with concrete dropout: plan-net (Cobb 2019, ch. 7).

Each network maps an input to a Gaussian ``N(mu, (L L^T)^-1)`` over the targets and is trained on
eq. 7.1 plus the concrete-dropout regularisers; prediction averages ``T`` Monte Carlo passes and an
ensemble of ``M`` networks is combined by the law of total variance (eq. 7.7-7.8).

The estimator is here; the training of one network (the loss hook, the fixed validation noise)
is in ``_plannet_training.py``, the predictive (dropout passes, each network's Gaussian, the
ensemble's mixture and draws) in ``_plannet_predictive.py``.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions

from .._persistence_registry import register
from .._seeding import child, torch_seed
from .._threads import module_work, sampling_threads
from .._utils import check_scalar_param, draw_seed, seeded_torch
from ..nets import PlanNet, check_hidden_layer_sizes
from ._plannet_predictive import (
    ROWS_PER_FORWARD,
    combine_gaussians,
    ensemble_gaussian_draws,
    member_moments,
    pass_draws,
)
from ._plannet_training import train_member
from ._skorch import (
    TensorData,
    check_history,
    row_weight_tensor,
    standardize_targets,
)
from ._trained import SKORCH_KWARGS_DOC, TrainedEstimator, parameters
from ._variance_parts import PredictiveCovarianceParts, variance_parts
from ._weights import row_weights

__all__ = ["PlanNetRegressor", "combine_gaussians"]


@register
@parameters
class PlanNetRegressor(RegressorMixin, TrainedEstimator):
    __doc__ = f"""Multi-output regression with a full predictive covariance per input: plan-net.

    An ensemble of ``n_estimators`` networks, each a stack of concrete-dropout layers
    (Gal, Hron & Kendall 2017) ending in a Gaussian head that outputs a mean ``mu`` and the
    Cholesky factor ``L`` of the precision ``L L^T`` (exp on its diagonal), trained with Adam on
    the loss of Cobb (2019, eq. 7.1) plus the concrete-dropout regularisers, with early stopping on
    a held-out fraction. Training runs through skorch (eq. 7.1 is the net's loss hook, the
    regularisers its penalty; ``callbacks`` takes skorch callbacks). Inputs and targets are
    standardised internally; every output (means, covariances, draws) is in the units of ``y``.
    Cobb et al. (2019); Cobb (2019), ch. 7.

    Parameters
    ----------
    hidden_layer_sizes : sequence of int, default=(1024, 1024, 1024, 1024)
        Widths of the concrete-dropout hidden layers (four of 1024 in plan-net).
    activation : str, default="relu"
    covariance : {{"full", "diagonal"}}, default="full"
        ``"diagonal"`` trains the heteroscedastic variant (no correlations between targets).
    n_estimators : int, default=5
        Networks in the ensemble (eq. 7.7-7.8).
    n_predict_draws : int, default=30
        Monte Carlo dropout passes ``T`` per network at prediction.
    prediction : {{"expectation", "sampling"}}, default="expectation"
        ``"expectation"``: each network predicts ``N(E[mu], E[L L^T]^-1)`` over its ``T`` passes
        (eq. 7.4-7.5). ``"sampling"``: each pass is its own Gaussian and the network predicts
        their mixture (eq. 7.6; its moments for ``predict``, one pass per draw in
        :meth:`sample_y`).
    prior_precision : float >= 0, default=1e-8
        Precision ``lambda`` of the Gaussian prior on the weights (``l^2`` for the thesis's
        length-scale ``l = 1e-4``): weight regulariser ``lambda / N``; the dropout regulariser
        is ``2 / N`` (``N`` training points, standardised inputs).
    concrete_temperature : float, default=0.1
        Temperature of the Concrete relaxation of the dropout masks (Gal, Hron & Kendall 2017;
        not a posterior temperature: that is ``temperature`` on the MCMC estimators).
    init_dropout : float, default=0.1
        Initial drop probability of every layer (then learned).
    learning_rate_init : float, default=1e-3
        Adam step size.
    batch_size : int, default=512
    max_iter : int, default=200
        Maximum number of epochs per network.
    early_stopping : bool, default=True
        Hold out ``validation_fraction`` of the data, stop when its loss has not improved by
        ``tol`` for ``n_iter_no_change`` epochs, and keep the best weights.
    validation_fraction : float, default=0.1
    n_iter_no_change : int, default=20
    tol : float, default=1e-4
    device : {{"auto", "cpu", "cuda"}} or torch.device, default="auto"
    dtype : {{"float32", "float64"}}, default="float32"
    callbacks : list of skorch callbacks or None, default=None
        Extra :mod:`skorch.callbacks` (``LRScheduler``, ``EarlyStopping``, ``Checkpoint`` ...)
        or ``(name, callback)`` pairs, copied for every network. A callback monitoring
        ``"valid_*"`` makes the fit hold out ``validation_fraction`` even without
        ``early_stopping``.
    verbose : int, default=0
        Show a progress bar per network.
    random_state : int, RandomState or None, default=None
        Seeds initialisation, shuffling, the validation split and the dropout masks; prediction
        is deterministic once fitted. Training runs with torch's global generator forked and
        seeded from it, so the caller's global random state is unchanged.
    {SKORCH_KWARGS_DOC.strip()}

    Attributes
    ----------
    estimators_ : list of PlanNet
        The trained networks, on the CPU.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.
    n_outputs_ : int
    n_iter_ : ndarray of shape (n_estimators,)
        Epochs run by each network.
    history_ : list of list of dict
        Each network's skorch training history as plain dicts, one per epoch.
    validation_loss_ : ndarray of shape (n_estimators,)
        Best held-out eq. 7.1 loss per point (standardised units; NaN without early stopping).
    dropout_rates_ : ndarray of shape (n_estimators, n_layers)
        Learned drop probability of every concrete-dropout layer, input side first.
    x_mean_, x_scale_ : ndarray of shape (n_features_in_,)
        Standardisation of the inputs.
    y_mean_, y_scale_ : ndarray of shape (n_outputs_,)
        Standardisation of the targets.
    single_target_ : bool
        Whether ``y`` was 1-D at fit (predictions are then 1-D).
    mc_seeds_ : list of int
        Seeds of each network's prediction masks.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); Y = X[:, :2] + 0.1 * rng.normal(size=(200, 2))
    >>> reg = PlanNetRegressor(hidden_layer_sizes=(32,), n_estimators=2, max_iter=20,
    ...                        random_state=0).fit(X, Y)
    >>> mean, cov = reg.predict(X[:4], return_cov=True)
    >>> mean.shape, cov.shape
    ((4, 2), (4, 2, 2))
    """

    covariance: str = "full"
    n_estimators: int = 5
    prediction: str = "expectation"
    concrete_temperature: float = 0.1
    init_dropout: float = 0.1
    tol: float = 1e-4
    # the family's parameters (TrainedEstimator) that plan-net defaults otherwise
    hidden_layer_sizes: object = (1024, 1024, 1024, 1024)
    n_predict_draws: int = 30
    prior_precision: float = 1e-8
    batch_size: int = 512
    early_stopping: bool = True
    n_iter_no_change: int = 20
    device: object = "auto"
    verbose: int = 0

    # ------------------------------------------------------------------ checks and set-up
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    _parameter_constraints = {
        **TrainedEstimator._parameter_constraints,
        "covariance": [StrOptions({"full", "diagonal"})],
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "prediction": [StrOptions({"expectation", "sampling"})],
        "prior_precision": [Interval(Real, 0, None, closed="left")],
        "concrete_temperature": [Interval(Real, 0, None, closed="neither")],
        "init_dropout": [Interval(Real, 0, 1, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="left")],
    }

    def _new_net(self) -> PlanNet:
        return PlanNet(
            self.n_features_in_,
            check_hidden_layer_sizes(self.hidden_layer_sizes),
            self.n_outputs_,
            activation=self.activation,
            diagonal=self.covariance == "diagonal",
            temperature=self.concrete_temperature,
            init_p=self.init_dropout,
        )

    # ------------------------------------------------------------------ fit
    def _validate_kwargs(self) -> dict:
        return {"multi_output": True, "y_numeric": True}

    def _fit_checked(self, X, y, weights, device, dtype, seeds):
        """Train ``n_estimators`` networks (see :meth:`TrainedEstimator.fit`); the data term is
        the loss of eq. 7.1, the standardisation of X and y by the weighted moments."""
        weights = row_weights(weights)
        Xs, Ys = self._standardize_fit_data(X, y, device, dtype, weights)
        train, val = self._split_rows(len(X), seeds)
        if val is not None:
            train, val = np.sort(train), np.sort(val)
        data = TensorData(Xs[train], Ys[train], row_weight_tensor(weights, train, Xs))
        valid = None
        if val is not None:
            valid = TensorData(Xs[val], Ys[val], row_weight_tensor(weights, val, Xs))
        members = [child(child(seeds, "members"), m) for m in range(self.n_estimators)]
        self.mc_seeds_ = [torch_seed(child(member, "predict")) for member in members]
        n_train = len(train) if weights is None else float(weights[train].sum())
        weight_reg, dropout_reg = self.prior_precision / n_train, 2.0 / n_train

        def penalty(module):
            return module.net.regularizer(weight_reg, dropout_reg)

        self.estimators_, n_iter, val_loss, self.history_ = [], [], [], []
        for m, member in enumerate(members):
            with seeded_torch(torch_seed(child(member, "network"))):
                net = self._new_net().to(dtype=dtype)
            desc = f"plan-net {m + 1}/{self.n_estimators}"
            net, epochs, best, history = train_member(
                self, net, member, data, valid, penalty, device, desc
            )
            self.history_.append(history)
            self.estimators_.append(net)
            n_iter.append(epochs)
            val_loss.append(best)
        self.n_iter_ = np.array(n_iter)
        self.validation_loss_ = np.array(val_loss, dtype=float)
        self.dropout_rates_ = np.array([net.dropout_rates() for net in self.estimators_])
        return self

    def _standardize_fit_data(self, X, y, device, dtype, weights=None):
        """Inputs and targets standardised (by the rows' weighted moments when ``weights``
        are given), as tensors; records the shapes and scales."""
        self.single_target_ = y.ndim == 1
        Y = y.reshape(len(y), -1)
        self.n_outputs_ = Y.shape[1]
        if weights is None:
            self.x_mean_ = X.mean(0)
            x_std = X.std(0)
        else:
            self.x_mean_ = np.average(X, axis=0, weights=weights)
            x_std = np.sqrt(np.average((X - self.x_mean_) ** 2, axis=0, weights=weights))
        self.x_scale_ = np.where(x_std > 0, x_std, 1.0)
        Xs = torch.as_tensor((X - self.x_mean_) / self.x_scale_, dtype=dtype, device=device)
        Ys = torch.as_tensor(standardize_targets(self, Y, weights), dtype=dtype, device=device)
        return Xs, Ys

    # ------------------------------------------------------------------ prediction
    def _prepare(self, X):
        X, device, nets = self._begin_predict(X, "estimators_")
        dtype = next(self.estimators_[0].parameters()).dtype
        Xs = torch.as_tensor((X - self.x_mean_) / self.x_scale_, dtype=dtype, device=device)
        return nets, Xs

    def _member_moments(self, X, parts: bool = False):
        """Per-network predictive mean and covariance, standardised units.

        Returns tensors of shape (n_estimators, n, D) and (n_estimators, n, D, D); with
        ``parts`` the covariance in two, the noise's and the dropout passes' (see
        ``member_moments``).
        """
        nets, Xs = self._prepare(X)
        T = self.n_predict_draws
        rows = min(len(Xs), max(1, ROWS_PER_FORWARD // T)) * T  # per forward call
        with sampling_threads(module_work(nets[0], rows)):  # the fits' rule (_threads.py)
            return member_moments(
                nets, self.mc_seeds_, Xs, self.n_outputs_, T, self.prediction, parts=parts
            )

    def _to_original_units(self, mean, cov=None):
        """Undo the target standardisation: ndarrays ``mean`` and, if given, ``cov``."""
        scale = torch.as_tensor(self.y_scale_, dtype=mean.dtype, device=mean.device)
        mean = (mean * scale + torch.as_tensor(self.y_mean_, device=mean.device)).cpu().numpy()
        if cov is None:
            return mean
        return mean, (cov * scale[:, None] * scale[None, :]).cpu().numpy()

    def predict(self, X, return_std: bool = False, return_cov: bool = False):
        """Predictive mean, and optionally its standard deviation or covariance.

        The ensemble predictive is ``N(mu_ens, Sigma_ens)`` of eq. 7.7-7.8, built from each
        network's Gaussian (see ``prediction``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool
            Also return the marginal standard deviations.
        return_cov : bool
            Also return the full covariance between the targets, per input.

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
            1-D when ``y`` was 1-D at fit.
        std : ndarray, same shape as ``mean``
            Only with ``return_std``.
        cov : ndarray of shape (n_samples, n_targets, n_targets)
            Only with ``return_cov``.
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        mean, cov = self._to_original_units(*combine_gaussians(*self._member_moments(X)))
        out_mean = mean[:, 0] if self.single_target_ else mean
        if return_cov:
            return out_mean, cov
        if return_std:
            std = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
            return out_mean, std[:, 0] if self.single_target_ else std
        return out_mean

    def predict_variance_parts(self, X, return_cov: bool = False):
        """The predictive (co)variance split into observation noise and weight uncertainty.

        The ensemble predictive's covariance (eq. 7.7-7.8) is, by the law of total variance
        over the networks ``m`` and their dropout passes ``t``,
        ``Sigma = E[Sigma_noise(x)] + Cov[mu(x)]``:

        - ``noise``: the networks' predicted noise covariance, averaged over the networks (and
          the passes): ``E_t[L L^T]^-1`` of each network under ``prediction="expectation"``,
          ``E_t[(L L^T)^-1]`` under ``"sampling"``. It depends on the input
          (heteroscedastic, correlated between targets with ``covariance="full"``).
        - ``weight``: the covariance of the predicted means between the networks, plus,
          under ``"sampling"``, between the dropout passes of each network (the
          ``"expectation"`` Gaussian of eq. 7.4-7.5 leaves that spread out, so there the weight
          part is the ensemble's disagreement alone, zero for ``n_estimators=1``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_cov : bool, default=False
            Return the full covariances between the targets instead of the standard
            deviations (the square roots of their diagonals).

        Returns
        -------
        PredictiveVarianceParts or PredictiveCovarianceParts
            ``(mean, noise_std, weight_std, total_std)``, each of the shape of ``predict(X)``;
            or, with ``return_cov``, ``(mean, noise_cov, weight_cov, total_cov)``, the
            covariances of shape (n_samples, n_targets, n_targets). ``total_std`` and
            ``total_cov`` are ``predict``'s ``std`` and ``cov``, and the parts add up:
            ``total_cov == noise_cov + weight_cov``, ``total_std**2 == noise_std**2 +
            weight_std**2``.
        """
        means, noise_covs, pass_spreads = self._member_moments(X, parts=True)
        ensemble_mean = means.mean(0)
        dev = means - ensemble_mean
        between = (dev[..., :, None] * dev[..., None, :]).mean(0)
        mean, noise = self._to_original_units(ensemble_mean, noise_covs.mean(0))
        weight = self._to_original_units(ensemble_mean, between + pass_spreads.mean(0))[1]
        mean = mean[:, 0] if self.single_target_ else mean
        if return_cov:
            return PredictiveCovarianceParts(mean, noise, weight, noise + weight)
        noise_var = np.diagonal(noise, axis1=1, axis2=2)
        weight_var = np.diagonal(weight, axis1=1, axis2=2)
        if self.single_target_:
            noise_var, weight_var = noise_var[:, 0], weight_var[:, 0]
        return variance_parts(mean, noise_var, weight_var)

    def sample_y(self, X, n_draws: int = 1, random_state=0):
        """Draw targets from the predictive distribution.

        ``prediction="expectation"``: from ``N(mu_ens, Sigma_ens)`` (eq. 7.5, 7.7-7.8).
        ``prediction="sampling"``: each draw from its own dropout pass of a network taken in
        turn (eq. 7.6).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        n_draws : int
        random_state : int, RandomState or None, default=0

        Returns
        -------
        ndarray of shape (n_samples, n_draws) when ``y`` was 1-D, else
        (n_samples, n_targets, n_draws)
        """
        check_scalar_param(n_draws, "n_draws", kind="int", low=1)
        rng = check_random_state(random_state)
        noise_gen = torch.Generator().manual_seed(draw_seed(rng))
        if self.prediction == "expectation":
            mean, cov = combine_gaussians(*self._member_moments(X))
            draws = ensemble_gaussian_draws(mean, cov, n_draws, noise_gen)
        else:  # eq. 7.6: draw k comes from one dropout pass of network k mod M
            nets, Xs = self._prepare(X)
            draws = pass_draws(nets, Xs, self.n_outputs_, n_draws, rng, noise_gen)
        draws = np.moveaxis(self._to_original_units(draws), 0, -1)  # (n, D, n_draws)
        return draws[:, 0] if self.single_target_ else draws

    # ------------------------------------------------------------------ persistence
    def _get_state(self) -> dict:
        state = super()._get_state()
        state["estimators_"] = [net.state_dict() for net in self.estimators_]
        return state

    def _check_loaded_state(self, state: dict) -> None:
        """Types of the fitted attributes, and every network's weights against the network
        these parameters build (on the ``meta`` device: no size in the file allocates memory)."""
        from .. import _state_checks as P

        self._validate_params()
        m, n_in, n_out = self.n_estimators, state.get("n_features_in_"), state.get("n_outputs_")
        P.check_state(
            state,
            {
                "n_features_in_": P.is_int(1),
                "n_outputs_": P.is_int(1),
                "n_iter_": P.is_array(kinds="iu", shape=(m,)),
                "validation_loss_": P.is_array(kinds="f", shape=(m,)),
                "dropout_rates_": P.is_array(kinds="f", shape=(m, None)),
                "estimators_": P.list_of(P.dict_of(P.is_tensor(floating=True)), length=m),
                "single_target_": P.is_bool,
                "x_mean_": P.is_array(kinds="f", shape=(n_in,)),
                "x_scale_": P.is_array(kinds="f", shape=(n_in,)),
                "y_mean_": P.is_array(kinds="f", shape=(n_out,)),
                "y_scale_": P.is_array(kinds="f", shape=(n_out,)),
                "mc_seeds_": P.list_of(P.is_seed, length=m),
            },
            {
                "feature_names_in_": P.is_array(ndim=1, kinds="UO"),
                # absent from files written before it was kept
                "history_": P.list_of(check_history, length=m),
            },
        )
        P.check_feature_names(state)
        if state["single_target_"] and n_out != 1:
            raise ValueError(f"n_outputs_={n_out} for a single-target model.")
        self.n_features_in_, self.n_outputs_ = n_in, n_out  # read by _new_net
        P.check_depth(self.hidden_layer_sizes, len(state["estimators_"][0]), "estimators_[0]")
        expected = P.meta_module(self._new_net).state_dict()
        what = f"the plan-net of n_features_in_={n_in}, n_outputs_={n_out} and these parameters"
        for i, weights in enumerate(state["estimators_"]):
            P.check_named_shapes(f"estimators_[{i}]", weights, expected, what)

    def _set_state(self, state: dict) -> None:
        state = dict(state)
        weights = state.pop("estimators_")
        super()._set_state(state)
        self.estimators_ = []
        for sd in weights:
            net = self._new_net().to(next(iter(sd.values())).dtype)
            net.load_state_dict(sd)
            self.estimators_.append(net)
