"""The fit / predict / persistence machinery that MC dropout's estimators share.

:class:`MCDropoutBase` trains the network through skorch on the objective of
:mod:`sklearn_bnn.estimators.dropout` (the data term and the weight decay of Gal & Ghahramani's
eq. 3.21, and with ``dropout="auto"`` the learned rates' terms of
:mod:`._concrete_dropout`), predicts with dropout masks drawn from a generator seeded at fit
(:mod:`._dropout_masks`), and saves and checks its fitted state. The subclasses
(:class:`~sklearn_bnn.MCDropoutClassifier`, :class:`~sklearn_bnn.MCDropoutRegressor`,
:class:`~sklearn_bnn.LossCalibratedBNN`) give the likelihood.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn

from .._seeding import child, torch_seed
from .._threads import module_work, sampling_threads
from .._utils import seeded_torch
from ..nets import build_module, check_hidden_layer_sizes
from ._concrete_dropout import (
    INIT_DROPOUT,
    LearnedDropoutPenalty,
    dropout_rates,
    with_bernoulli_dropout,
    with_learned_dropout,
)
from ._dropout_masks import PREDICT_CHUNK_ELEMENTS, masked_output_samples
from ._skorch import (
    TensorData,
    check_history,
    history_curves,
    plain_history,
    row_weight_tensor,
    split_weights,
    train_net,
    weighted_mean,
)
from ._trained import SKORCH_KWARGS_DOC, TrainedEstimator, parameters
from ._weights import row_weights

# the parameters every MC dropout estimator documents (numpydoc lines, indented for a class)
DROPOUT_PARAMS_DOC = """
    hidden_layer_sizes : sequence of int, default=(100,)
        Widths of the hidden layers of the multilayer perceptron.
    activation : str, default="relu"
        One of ``"relu"``, ``"tanh"``, ``"logistic"``, ``"gelu"``, ``"silu"``, ``"elu"``,
        ``"identity"``.
    dropout : float in [0, 1) or "auto", default="auto"
        Dropout probability after every hidden layer, in training and at prediction. "auto"
        learns it, one rate per layer from 0.1, on the same objective (concrete dropout,
        Gal, Hron & Kendall 2017): the mask's Concrete relaxation in training, the entropy of
        the rate in the KL term (docs/mc_dropout.md); prediction draws Bernoulli masks at the
        learned rates, ``dropout_``. The learned rate follows the data size (about 0.15-0.3 on
        a few hundred rows, near 0 on 160,000), where a fixed rate under-fits large data.
        (:class:`LossCalibratedBNN` takes a float only, default 0.1.)
    prior_precision : float > 0, default=1.0
        Precision ``lambda`` of the Gaussian prior ``N(0, lambda^-1 I)`` on the weights (Gal's
        length-scale ``l`` is ``sqrt(lambda)``). It sets the weight decay of each layer as in Gal &
        Ghahramani (2016): weights fed by dropped-out units get ``lambda / (2 N (1 - dropout))``
        (their eq. 3.21 term ``lambda (1 - dropout) ||M||^2 / 2N`` written for the weights of
        torch's inverted dropout, ``W = (1 - dropout) M``), the other weights and the biases
        ``lambda / (2 N)``, ``N`` being the number of training points.
    n_predict_draws : int, default=100
        Number of dropout passes averaged at prediction.
    max_iter : int, default=200
        Maximum number of passes over the training data (epochs).
    batch_size : int, default=128
    learning_rate_init : float, default=1e-3
        Adam step size.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training data, stop when the validation loss has
        not improved for ``n_iter_no_change`` epochs and keep the best weights (skorch's
        ``EarlyStopping``). The validation loss is the negative log-likelihood with dropout
        replaced by its expectation.
    validation_fraction : float in (0, 1), default=0.1
        Also held out when a callback in ``callbacks`` monitors a ``"valid_*"`` quantity.
    n_iter_no_change : int, default=10
    callbacks : list of skorch callbacks or None, default=None
        Extra :mod:`skorch.callbacks` for the training loop (e.g. ``LRScheduler``,
        ``EarlyStopping``, ``Checkpoint``), or ``(name, callback)`` pairs; copied at each fit.
        Their losses are ``train_loss`` and ``valid_loss`` (the data term per point).
    device : str, default="cpu"
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``.
    dtype : {"float32", "float64"}, default="float32"
    verbose : bool, default=False
        Show a progress bar over epochs.
    random_state : int, RandomState or None, default=None
        Seeds the initial weights, the shuffling and every dropout mask. Training runs with
        torch's global generator forked and seeded from it, prediction with a local generator:
        results are reproducible on a given device and the caller's global random state (torch's
        and numpy's) is unchanged by ``fit`` and ``predict``. (Two threads fitting at once share
        torch's global generator and lose reproducibility.)
""" + SKORCH_KWARGS_DOC


@parameters
class MCDropoutBase(TrainedEstimator):
    """Shared fit / predict machinery; subclasses define the likelihood."""

    dropout: object = "auto"

    _parameter_constraints = {
        **TrainedEstimator._parameter_constraints,
        "dropout": [Interval(Real, 0, 1, closed="left"), StrOptions({"auto"})],
        "prior_precision": [Interval(Real, 0, None, closed="neither")],
    }

    # ------------------------------------------------------------------ hooks
    def _prepare_targets(self, y) -> np.ndarray:
        raise NotImplementedError

    def _targets_tensor(self, targets, device, dtype) -> torch.Tensor:
        raise NotImplementedError

    def _n_net_outputs(self) -> int:
        raise NotImplementedError

    def _training_module(self, net: nn.Sequential) -> nn.Module:
        """The module skorch trains (the network, or the network with extra parameters)."""
        return net

    def _nll(self, out, yb, log_tau) -> torch.Tensor:
        """Per-point negative log-likelihood of the targets ``yb`` given network outputs."""
        raise NotImplementedError

    def _n_warmup_epochs(self, max_iter: int) -> int:
        """Leading epochs during which early stopping does not track the validation loss."""
        return 0

    def _extra_callbacks(self) -> list:
        return []

    def _loss(self, net, y_pred, y_true, X, training) -> torch.Tensor:
        """skorch loss hook: the mean data term of a batch (eq. 3.20), each point's term times
        its weight (scaled to mean 1 over the training rows) when the fit has weights.

        In training the module's ``nn.Dropout`` layers draw one fresh mask per point; in
        validation skorch puts the module in eval mode, replacing dropout by its expectation.
        """
        y_true, weights = split_weights(y_true)
        return weighted_mean(self._nll(y_pred, y_true, None), weights)

    def _finish(self, module) -> nn.Sequential:
        """Keep fitted values of extra parameters as attributes; return the bare network."""
        return module

    # ------------------------------------------------------------- parameters
    def _build_net(self, dtype) -> nn.Sequential:
        return (
            build_module(
                None,
                self.n_features_in_,
                self._n_net_outputs(),
                hidden_layer_sizes=self.hidden_layer_sizes,
                activation=self.activation,
                dropout=INIT_DROPOUT if self._learns_dropout() else self.dropout,
            )
            .to(dtype)
            .eval()
        )

    def _learns_dropout(self) -> bool:
        return isinstance(self.dropout, str)  # "auto"

    def _weight_decay_terms(self, net, n_train: int):
        """(parameter, coefficient) pairs of the KL term, eq. 3.21 (see
        :mod:`sklearn_bnn.estimators.dropout`)."""
        lam = float(self.prior_precision)
        terms, keep = [], 1.0
        for layer in net:
            if isinstance(layer, nn.Linear):
                if not (self._learns_dropout() and keep < 1.0):  # else in the penalty
                    # W applies to the inverted-dropout input x z / keep: W = keep M, so the
                    # KL's (lambda keep / 2N) ||M||^2 is (lambda / (2 N keep)) ||W||^2
                    terms.append((layer.weight, lam / (2 * n_train * keep)))
                terms.append((layer.bias, lam / (2 * n_train)))
                keep = 1.0
            elif isinstance(layer, nn.Dropout):
                keep = 1.0 - layer.p
        return terms

    # -------------------------------------------------------------------- fit
    def _fit_checked(self, X, y, weights, device, dtype, seeds):
        """Train the dropout network (see :meth:`TrainedEstimator.fit`)."""
        self._row_weights = weights  # read by _prepare_targets
        try:
            return self._fit_network(X, y, device, dtype, seeds)
        finally:
            del self._row_weights

    def _fit_network(self, X, y, device, dtype, seeds):
        targets = self._prepare_targets(y)
        codes = targets if isinstance(self, ClassifierMixin) else None
        weights = row_weights(self._row_weights, codes=codes, name=type(self).__name__)
        with seeded_torch(torch_seed(child(seeds, "network"))):
            net = self._build_net(dtype)
        stratify = targets if isinstance(self, ClassifierMixin) else None
        idx_train, idx_val = self._split_rows(len(X), seeds, stratify=stratify)
        Xt = torch.tensor(X, dtype=dtype, device=device)
        yt = self._targets_tensor(targets, device, dtype)
        n_train = len(idx_train) if weights is None else float(weights[idx_train].sum())
        train_w = row_weight_tensor(weights, idx_train, Xt)
        valid_w = row_weight_tensor(weights, idx_val, Xt)
        module, groups, penalty = self._training_setup(net, device, n_train)
        train = TensorData(Xt[idx_train], yt[idx_train], train_w)
        valid = None if idx_val is None else TensorData(Xt[idx_val], yt[idx_val], valid_w)
        net_ = train_net(
            self,
            module,
            train,
            valid,
            loss=self._loss,
            penalty=penalty,
            seed=torch_seed(child(seeds, "training")),
            device=device,
            early_stopping=bool(self.early_stopping),
            patience=self.n_iter_no_change,
            warmup=self._n_warmup_epochs(self.max_iter),
            extra_callbacks=self._extra_callbacks(),
            optimizer_params={"param_groups": groups},
            desc=getattr(self, "_progress_desc", None),  # a stage's name (calibrated fit)
        )
        self._store_training(net_, net, device)
        self.mc_seed_ = torch_seed(child(seeds, "predict"))
        return self

    def _training_setup(self, net, device, n_train: int):
        """The module skorch trains (with learned dropout layers under ``dropout="auto"``), the
        optimiser's weight-decay groups and the learned rates' penalty (or None)."""
        learned = self._learns_dropout()
        module = self._training_module(with_learned_dropout(net) if learned else net)
        module = module.to(device)
        decay = self._weight_decay_terms(net, n_train)
        penalty = None
        if learned:
            penalty = LearnedDropoutPenalty(float(self.prior_precision), n_train)
        # c ||p||^2 in the loss has gradient 2 c p: exactly Adam's (coupled, L2) weight decay
        # 2 c, which skips building the penalty into the graph at every step
        names = {id(p): name for name, p in module.named_parameters()}
        groups = [(names[id(p)], {"weight_decay": 2.0 * c}) for p, c in decay if c > 0]
        return module, groups, penalty

    def _store_training(self, net_, net, device) -> None:
        """The fitted attributes from the trained skorch net ``net_``: the curves, the trained
        network on the CPU (``net``, the network built for the fit, given the trained weights
        and learned rates under ``dropout="auto"``) and its rates, ``dropout_``."""
        self.loss_curve_, self.validation_loss_curve_ = history_curves(net_)
        self.history_ = plain_history(net_.history)
        self.n_iter_ = len(net_.history)
        tracked = self.validation_loss_curve_[self._n_warmup_epochs(self.max_iter) :]
        self.best_validation_loss_ = min(tracked) if self.early_stopping and tracked else None
        trained = self._finish(net_.module_)
        if self._learns_dropout():
            trained = with_bernoulli_dropout(trained, net.to(device))
        self.module_ = trained.cpu().eval()
        self.dropout_ = dropout_rates(self.module_)

    # ---------------------------------------------------------------- predict
    def _net_output_samples(self, X, reduce=None, out=None, transform=None) -> torch.Tensor:
        """Network outputs for ``n_predict_draws`` dropout draws: shape (n_predict_draws, n, n_out).

        Every draw uses one mask for all points (a draw of the weights ``M diag(z)`` from
        ``q(w)``), from a generator seeded at fit, so predictions are reproducible and do not
        depend on how ``X`` is ordered or split into batches. ``reduce`` maps each chunk of
        rows' float64 outputs (n_predict_draws, rows, n_out) to (rows, ...) before the chunks are
        joined, so the draws of all rows are never held at once; ``out`` (with ``transform``)
        receives the per-draw outputs chunk by chunk (see ``masked_output_samples``).
        """
        X, device, (net,) = self._begin_predict(X, "module_")
        Xt = torch.tensor(X, dtype=next(net.parameters()).dtype, device=device)
        sizes = check_hidden_layer_sizes(self.hidden_layer_sizes)
        width = max([self.n_features_in_, self._n_net_outputs(), *sizes])
        T = self.n_predict_draws
        rows = min(len(Xt), max(1, PREDICT_CHUNK_ELEMENTS // (T * width)))  # per forward
        with sampling_threads(module_work(net, T * rows)):  # the fits' rule (_threads.py)
            return masked_output_samples(
                net, Xt, T, self.mc_seed_, width, reduce, out=out, transform=transform
            )

    def _empty_samples(self, X, n_columns: int) -> torch.Tensor:
        """The float64 (n_predict_draws, n_samples, n_columns) tensor ``predict_samples`` fills
        (``X`` checked first, so a bad ``X`` gets scikit-learn's error, not ours)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return torch.from_numpy(np.empty((self.n_predict_draws, len(X), n_columns)))

    # ----------------------------------------------------------- persistence
    def _get_state(self) -> dict:
        state = super()._get_state()
        state["module_"] = dict(self.module_.state_dict())
        return state

    def _extra_loaded_spec(self, state: dict) -> dict:
        """Checks of subclass-specific fitted attributes (see :meth:`_check_loaded_state`)."""
        return {}

    def _check_loaded_state(self, state: dict) -> None:
        """Types of the fitted attributes, and the weights' shapes against the network these
        parameters build (on the ``meta`` device: no size in the file allocates memory)."""
        from sklearn.base import is_classifier

        from .. import _state_checks as P

        self._validate_params()
        required = {
            "n_features_in_": P.is_int(1),
            "loss_curve_": P.list_of(P.is_float),
            "validation_loss_curve_": P.list_of(P.is_float),
            "n_iter_": P.is_int(0),
            "best_validation_loss_": P.optional(P.is_float),
            "module_": P.dict_of(P.is_tensor(floating=True)),
            "mc_seed_": P.is_seed,
            **self._extra_loaded_spec(state),
        }
        if is_classifier(self):
            n_out = len(state.get("classes_", ()))
            required.update(classes_=P.check_classes, class_weight_=P.is_array(shape=(n_out,)))
        else:
            n_out = state.get("n_outputs_")
            vector = P.is_array(kinds="f", shape=(n_out,))
            required.update(
                n_outputs_=P.is_int(1), y_mean_=vector, y_scale_=vector, noise_precision_=vector
            )
        optional = {
            "feature_names_in_": P.is_array(ndim=1, kinds="UO"),
            "dropout_": P.list_of(P.is_float),  # absent from files written before "auto"
            "history_": check_history,  # absent from files written before it was kept
        }
        if is_classifier(self):  # absent from files written before the calibration
            optional.update(
                calibration_temperature_=P.check_temperature,
                calibration_posterior_=P.check_temperature_posterior,
            )
        P.check_state(state, required, optional)
        P.check_feature_names(state)
        self.n_features_in_ = state["n_features_in_"]  # read by _build_net
        if is_classifier(self):
            self.classes_ = state["classes_"]
        else:
            self.n_outputs_ = n_out
        P.check_depth(self.hidden_layer_sizes, len(state["module_"]), "module_")
        dtype = next(iter(state["module_"].values()), torch.zeros(())).dtype
        expected = P.meta_module(lambda: self._build_net(dtype)).state_dict()
        what = f"the network of n_features_in_={self.n_features_in_} and these parameters"
        P.check_named_shapes("module_", state["module_"], expected, what)
        if "dropout_" in state:
            n_layers = len(dropout_rates(P.meta_module(lambda: self._build_net(dtype))))
            rates = state["dropout_"]
            if len(rates) != n_layers or not all(0 <= r < 1 for r in rates):
                raise ValueError(f"dropout_ must hold {n_layers} rates in [0, 1).")

    def _set_state(self, state: dict) -> None:
        state = dict(state)
        weights = state.pop("module_")
        super()._set_state(state)
        with seeded_torch(0):
            net = self._build_net(next(iter(weights.values())).dtype)
        net.load_state_dict(weights)
        rates = iter(state.get("dropout_", dropout_rates(net)))
        for layer in net:  # the fitted rates (learned with dropout="auto")
            if isinstance(layer, nn.Dropout):
                layer.p = float(next(rates))
        self.module_ = net
