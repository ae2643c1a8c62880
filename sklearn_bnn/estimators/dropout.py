"""Monte Carlo dropout networks: :class:`MCDropoutClassifier` and :class:`MCDropoutRegressor`.

A multilayer perceptron trained with dropout and L2 weight decay is a variational approximation
to a Bayesian neural network (Gal & Ghahramani, 2016; seeds/003, section 3.2.5, eq. 3.19-3.21):
each weight matrix is ``M diag(z)`` with Bernoulli masks ``z``, and keeping dropout on at
prediction draws networks from the approximate posterior ``q(w)``. Averaging ``n_mc_samples`` such
passes gives the predictive distribution.

The objective minimised here is the negative ELBO of eq. 3.20 divided by the number of training
points ``N``, with the KL term replaced by its weight-decay form (eq. 3.21)::

    (1/N) sum_n -log p(y_n | x_n, w_n) + sum_l (l^2 p_l / 2N) ||M_l||^2 + (l^2 / 2N) ||m_l||^2

where ``w_n`` is the network with a fresh dropout mask for point ``n``, ``l`` is the prior
length-scale (prior ``N(0, l^-2 I)`` on every weight, so the prior precision is ``l^2``), ``p_l``
is the keep probability of the units feeding layer ``l`` (``1 - dropout`` after a hidden layer,
1 for the inputs, which are not dropped) and ``m_l`` the biases.

Training is a small plain-torch loop rather than skorch's: every random number (initial weights,
shuffling, dropout masks during training and prediction) comes from a local
:class:`torch.Generator` seeded from ``random_state``, which skorch's loop (global torch RNG for
dropout) does not allow.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data
from torch import nn
from tqdm.auto import tqdm

from .._persistence import WeightsOnlyMixin, register
from .._utils import (
    check_scalar_param,
    draw_seed,
    make_generator,
    resolve_device,
    resolve_dtype,
    seeded_torch,
    to_numpy,
)
from ..nets import ACTIVATIONS, build_module, check_hidden_layer_sizes

__all__ = ["MCDropoutClassifier", "MCDropoutRegressor"]

# Upper bound on the elements of one hidden activation tensor during prediction.
_PREDICT_CHUNK_ELEMENTS = 2**24


def draw_masks(net: nn.Sequential, prefix: tuple, generator: torch.Generator, like: torch.Tensor):
    """One scaled Bernoulli mask per dropout layer of ``net``, of shape ``(*prefix, width)``.

    Entries are ``z / (1 - p)`` with ``z ~ Bernoulli(1 - p)`` (inverted dropout), drawn from
    ``generator`` only.
    """
    masks, width = [], None
    for layer in net:
        if isinstance(layer, nn.Linear):
            width = layer.out_features
        elif isinstance(layer, nn.Dropout) and layer.p > 0:
            keep = 1.0 - layer.p
            z = torch.empty((*prefix, width), device=like.device, dtype=like.dtype)
            masks.append(z.bernoulli_(keep, generator=generator) / keep)
    return masks


def forward_with_masks(net: nn.Sequential, x: torch.Tensor, masks) -> torch.Tensor:
    """Run ``net`` with the given dropout ``masks`` (broadcast against the hidden activations)."""
    masks = iter(masks)
    h = x
    for layer in net:
        if isinstance(layer, nn.Dropout):
            if layer.p > 0:
                h = h * next(masks)
        else:
            h = layer(h)
    return h


class _MCDropoutBase(WeightsOnlyMixin, BaseEstimator):
    """Shared fit / predict machinery; subclasses define the likelihood."""

    # ------------------------------------------------------------------ hooks
    def _prepare_targets(self, y) -> np.ndarray:
        raise NotImplementedError

    def _targets_tensor(self, targets, device, dtype) -> torch.Tensor:
        raise NotImplementedError

    def _n_net_outputs(self) -> int:
        raise NotImplementedError

    def _init_extra(self, device, dtype) -> dict:
        """Trainable tensors besides the network weights (e.g. a learned noise precision)."""
        return {}

    def _nll(self, out, yb, extra) -> torch.Tensor:
        """Per-point negative log-likelihood of the targets ``yb`` given network outputs."""
        raise NotImplementedError

    def _n_warmup_epochs(self) -> int:
        """Leading epochs during which early stopping does not track the validation loss."""
        return 0

    def _batch_loss(self, net, extra, xb, yb, generator, epoch) -> torch.Tensor:
        """Mean data term over a minibatch, one fresh dropout mask per point (eq. 3.20)."""
        out = forward_with_masks(net, xb, draw_masks(net, (len(xb),), generator, xb))
        return self._nll(out, yb, extra).mean()

    def _validation_loss(self, net, extra, X, y, epoch) -> float:
        """Mean negative log-likelihood with dropout replaced by its expectation."""
        return float(self._nll(net(X), y, extra).mean())

    def _store_extra(self, extra) -> None:
        """Keep fitted values of the extra tensors as attributes."""

    # ------------------------------------------------------------- validation
    def _check_params(self) -> None:
        check_hidden_layer_sizes(self.hidden_layer_sizes)
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}."
            )
        check_scalar_param(self.dropout, "dropout", low=0, high=1, high_inclusive=False)
        check_scalar_param(
            self.prior_length_scale, "prior_length_scale", low=0, low_inclusive=False
        )
        if self.weight_decay is not None:
            check_scalar_param(self.weight_decay, "weight_decay", low=0)
        self._check_n_mc_samples()
        check_scalar_param(self.max_epochs, "max_epochs", kind="int", low=1)
        check_scalar_param(self.batch_size, "batch_size", kind="int", low=1)
        check_scalar_param(self.lr, "lr", low=0, low_inclusive=False)
        check_scalar_param(
            self.validation_fraction,
            "validation_fraction",
            low=0,
            high=1,
            low_inclusive=False,
            high_inclusive=False,
        )
        check_scalar_param(self.n_iter_no_change, "n_iter_no_change", kind="int", low=1)

    def _check_n_mc_samples(self) -> None:
        check_scalar_param(self.n_mc_samples, "n_mc_samples", kind="int", low=1)

    def _build_net(self, dtype) -> nn.Sequential:
        return (
            build_module(
                None,
                self.n_features_in_,
                self._n_net_outputs(),
                hidden_layer_sizes=self.hidden_layer_sizes,
                activation=self.activation,
                dropout=self.dropout,
            )
            .to(dtype)
            .eval()
        )

    def _weight_decay_terms(self, net, n_train: int) -> list[tuple[torch.Tensor, float]]:
        """(parameter, coefficient) pairs of the KL term, eq. 3.21 (see the module docstring)."""
        if self.weight_decay is not None:
            return [(p, float(self.weight_decay)) for p in net.parameters()]
        l2 = float(self.prior_length_scale) ** 2
        terms, keep = [], 1.0
        for layer in net:
            if isinstance(layer, nn.Linear):
                terms.append((layer.weight, l2 * keep / (2 * n_train)))
                terms.append((layer.bias, l2 / (2 * n_train)))
                keep = 1.0
            elif isinstance(layer, nn.Dropout):
                keep = 1.0 - layer.p
        return terms

    # -------------------------------------------------------------------- fit
    def fit(self, X, y):
        """Train the dropout network on ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)

        Returns
        -------
        self
        """
        self._check_params()
        X, y = self._validate_xy(X, y)
        targets = self._prepare_targets(y)
        device, dtype = resolve_device(self.device), resolve_dtype(self.dtype)
        rng = check_random_state(self.random_state)
        with seeded_torch(draw_seed(rng)):
            net = self._build_net(dtype).to(device)
        generator = make_generator(rng, device)

        idx_train = np.arange(len(X))
        idx_val = None
        if self.early_stopping:
            stratify = targets if isinstance(self, ClassifierMixin) else None
            idx_train, idx_val = train_test_split(
                idx_train,
                test_size=self.validation_fraction,
                stratify=stratify,
                random_state=rng,
            )
        Xt = torch.tensor(X, dtype=dtype, device=device)
        yt = self._targets_tensor(targets, device, dtype)
        extra = self._init_extra(device, dtype)
        params = list(net.parameters()) + list(extra.values())
        optimizer = torch.optim.Adam(params, lr=self.lr)
        decay = self._weight_decay_terms(net, len(idx_train))
        train_idx = torch.as_tensor(idx_train, device=device)

        self.loss_curve_, self.validation_loss_curve_ = [], []
        best, best_state, stall = math.inf, None, 0
        n_warmup = self._n_warmup_epochs()
        bar = tqdm(range(self.max_epochs), disable=not self.verbose, desc=type(self).__name__)
        for epoch in bar:
            order = train_idx[torch.randperm(len(train_idx), generator=generator, device=device)]
            total = 0.0
            for batch in order.split(self.batch_size):
                loss = self._batch_loss(net, extra, Xt[batch], yt[batch], generator, epoch)
                penalty = sum(c * p.pow(2).sum() for p, c in decay)
                optimizer.zero_grad()
                (loss + penalty).backward()
                optimizer.step()
                total += float(loss.detach()) * len(batch)
            self.loss_curve_.append(total / len(train_idx))
            postfix = {"loss": f"{self.loss_curve_[-1]:.4f}"}
            if idx_val is not None:
                with torch.no_grad():
                    val = self._validation_loss(net, extra, Xt[idx_val], yt[idx_val], epoch)
                self.validation_loss_curve_.append(val)
                postfix["val_loss"] = f"{val:.4f}"
                if epoch >= n_warmup and val < best:
                    best, stall = val, 0
                    best_state = copy.deepcopy((net.state_dict(), extra))
                elif epoch >= n_warmup:
                    stall += 1
            bar.set_postfix(postfix)
            if stall >= self.n_iter_no_change:
                break
        bar.close()
        if best_state is not None:
            net.load_state_dict(best_state[0])
            extra = best_state[1]
        self.n_iter_ = epoch + 1
        self.best_validation_loss_ = best if idx_val is not None else None
        self._store_extra(extra)
        self.module_ = net.cpu()
        self.mc_seed_ = draw_seed(rng)
        return self

    def _validate_xy(self, X, y):
        return validate_data(self, X, y, dtype=[np.float64, np.float32])

    # ---------------------------------------------------------------- predict
    def _net_output_samples(self, X) -> torch.Tensor:
        """Network outputs for ``n_mc_samples`` dropout draws: shape (n_mc_samples, n, n_out).

        Every draw uses one mask for all points (a draw of the weights ``M diag(z)`` from
        ``q(w)``), from a generator seeded at fit, so predictions are reproducible and do not
        depend on how ``X`` is ordered or split into batches.
        """
        check_is_fitted(self)
        self._check_n_mc_samples()
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        device = resolve_device(self.device)
        net = self.module_ if device.type == "cpu" else copy.deepcopy(self.module_).to(device)
        dtype = next(net.parameters()).dtype
        generator = torch.Generator(device).manual_seed(self.mc_seed_)
        Xt = torch.tensor(X, dtype=dtype, device=device)
        T = self.n_mc_samples
        with torch.no_grad():
            masks = draw_masks(net, (T, 1), generator, Xt)
            sizes = check_hidden_layer_sizes(self.hidden_layer_sizes)
            width = max([self.n_features_in_, self._n_net_outputs(), *sizes])
            rows = max(1, _PREDICT_CHUNK_ELEMENTS // (T * width))
            out = [
                forward_with_masks(net, chunk, masks).expand(T, len(chunk), -1)
                for chunk in Xt.split(rows)
            ]
        return torch.cat(out, dim=1).cpu()

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

        from .. import _persistence as P

        self._check_params()
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
        P.check_state(state, required, {"feature_names_in_": P.is_array(ndim=1, kinds="UO")})
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

    def _set_state(self, state: dict) -> None:
        state = dict(state)
        weights = state.pop("module_")
        super()._set_state(state)
        with seeded_torch(0):
            net = self._build_net(next(iter(weights.values())).dtype)
        net.load_state_dict(weights)
        self.module_ = net


_COMMON_PARAMS_DOC = """
    hidden_layer_sizes : sequence of int, default=(100,)
        Widths of the hidden layers of the multilayer perceptron.
    activation : str, default="relu"
        One of ``"relu"``, ``"tanh"``, ``"logistic"``, ``"gelu"``, ``"silu"``, ``"elu"``,
        ``"identity"``.
    dropout : float in [0, 1), default=0.1
        Dropout probability after every hidden layer, in training and at prediction.
    prior_length_scale : float > 0, default=1.0
        Length-scale ``l`` of the Gaussian prior ``N(0, l^-2 I)`` on the weights (prior precision
        ``l^2``). It sets the weight decay of each layer as in Gal & Ghahramani (2016): weights
        fed by dropped-out units get ``l^2 (1 - dropout) / (2 N)``, the other weights and the
        biases ``l^2 / (2 N)``, ``N`` being the number of training points.
    weight_decay : float >= 0 or None, default=None
        If given, one coefficient ``lambda`` for every parameter (``lambda ||w||^2`` added to the
        per-point loss), overriding ``prior_length_scale``; it corresponds to a prior length-scale
        ``l^2 = 2 N lambda / (1 - dropout)``.
    n_mc_samples : int, default=100
        Number of dropout passes averaged at prediction.
    max_epochs : int, default=200
        Passes over the training data.
    batch_size : int, default=128
    lr : float, default=1e-3
        Adam learning rate.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the training data, stop when the validation loss has
        not improved for ``n_iter_no_change`` epochs and keep the best weights. The validation
        loss is the negative log-likelihood with dropout replaced by its expectation.
    validation_fraction : float in (0, 1), default=0.1
    n_iter_no_change : int, default=10
    device : str, default="cpu"
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``.
    dtype : {"float32", "float64"}, default="float32"
    verbose : bool, default=False
        Show a progress bar over epochs.
    random_state : int, RandomState or None, default=None
        Seeds a local generator for the initial weights, the shuffling and every dropout mask
        (global random state is left alone). Results are reproducible on a given device.
"""


@register
class MCDropoutClassifier(ClassifierMixin, _MCDropoutBase):
    __doc__ = f"""Classifier with Monte Carlo dropout (seeds/003, section 3.2.5).

    A softmax multilayer perceptron trained with dropout and weight decay; at prediction
    ``n_mc_samples`` networks are drawn from the dropout distribution ``q(w)`` and their class
    probabilities averaged. ``class_weight`` turns the likelihood into the weighted
    cross-entropy of eq. 4.12 (the baseline of the loss-calibrated experiments).

    Parameters
    ----------
    {_COMMON_PARAMS_DOC.strip()}
    class_weight : dict, "balanced" or None, default=None
        Weight ``alpha_c`` of each class in the cross-entropy, ``-alpha_y log p(y | x, w)``
        (eq. 4.12); ``"balanced"`` as in scikit-learn.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_weight_ : ndarray of shape (n_classes,)
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
    mc_seed_ : int
        Seed of the dropout masks used at prediction.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn_bnn import MCDropoutClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = MCDropoutClassifier(hidden_layer_sizes=(32,), max_epochs=100, lr=1e-2,
    ...                           random_state=0).fit(X, y)
    >>> clf.predict_samples(X[:2]).shape
    (100, 2, 3)
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        dropout=0.1,
        prior_length_scale=1.0,
        weight_decay=None,
        n_mc_samples=100,
        max_epochs=200,
        batch_size=128,
        lr=1e-3,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        class_weight=None,
        device="cpu",
        dtype="float32",
        verbose=False,
        random_state=None,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.dropout = dropout
        self.prior_length_scale = prior_length_scale
        self.weight_decay = weight_decay
        self.n_mc_samples = n_mc_samples
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.class_weight = class_weight
        self.device = device
        self.dtype = dtype
        self.verbose = verbose
        self.random_state = random_state

    def _prepare_targets(self, y):
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                f"but the data contain only one class: {self.classes_[0]!r}."
            )
        self.class_weight_ = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
        return encoded

    def _targets_tensor(self, targets, device, dtype):
        return torch.as_tensor(targets, device=device)

    def _n_net_outputs(self):
        return len(self.classes_)

    def _nll(self, out, yb, extra):
        """Weighted cross-entropy ``-alpha_y log softmax(out)_y`` (eq. 4.12)."""
        alpha = torch.as_tensor(self.class_weight_, dtype=out.dtype, device=out.device)
        return alpha[yb] * F.cross_entropy(out, yb, reduction="none")

    def predict_samples(self, X) -> np.ndarray:
        """Class probabilities of every dropout draw.

        Returns
        -------
        ndarray of shape (n_mc_samples, n_samples, n_classes)
        """
        return to_numpy(torch.softmax(self._net_output_samples(X), dim=-1))

    def predict_proba(self, X) -> np.ndarray:
        """Predictive probabilities: the mean of :meth:`predict_samples` over draws."""
        return self.predict_samples(X).mean(axis=0)

    def predict_log_proba(self, X) -> np.ndarray:
        """Logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    def predict(self, X) -> np.ndarray:
        """The class with the highest predictive probability."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


@register
class MCDropoutRegressor(RegressorMixin, _MCDropoutBase):
    __doc__ = f"""Regressor with Monte Carlo dropout (seeds/003, section 3.2.5, eq. 3.21).

    A multilayer perceptron with a Gaussian likelihood ``N(y; f(x, w), tau^-1)`` trained with
    dropout and weight decay. Targets are standardised internally; predictions, standard
    deviations and ``noise_precision_`` are in the units of ``y``. The predictive standard
    deviation combines the noise and the spread of the dropout draws,
    ``sqrt(1/tau + Var_t f(x, w_t))`` (Gal & Ghahramani, 2016).

    Parameters
    ----------
    {_COMMON_PARAMS_DOC.strip()}
    noise_precision : float > 0 or None, default=None
        Precision ``tau`` of the Gaussian noise in the units of ``y``. ``None`` learns one
        precision per output jointly with the weights (maximising the same objective).

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
    >>> reg = MCDropoutRegressor(hidden_layer_sizes=(50,), max_epochs=300, lr=1e-2,
    ...                          random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    >>> mean.shape, std.shape, reg.predict_samples(X[:3]).shape
    ((3,), (3,), (100, 3))
    """

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        dropout=0.1,
        prior_length_scale=1.0,
        weight_decay=None,
        n_mc_samples=100,
        max_epochs=200,
        batch_size=128,
        lr=1e-3,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        noise_precision=None,
        device="cpu",
        dtype="float32",
        verbose=False,
        random_state=None,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.dropout = dropout
        self.prior_length_scale = prior_length_scale
        self.weight_decay = weight_decay
        self.n_mc_samples = n_mc_samples
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.noise_precision = noise_precision
        self.device = device
        self.dtype = dtype
        self.verbose = verbose
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _check_params(self):
        super()._check_params()
        if self.noise_precision is not None:
            check_scalar_param(self.noise_precision, "noise_precision", low=0, low_inclusive=False)

    def _validate_xy(self, X, y):
        return validate_data(
            self, X, y, multi_output=True, y_numeric=True, dtype=[np.float64, np.float32]
        )

    def _prepare_targets(self, y):
        y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        self.n_outputs_ = y2.shape[1]
        self.y_mean_ = y2.mean(axis=0)
        scale = y2.std(axis=0)
        self.y_scale_ = np.where(scale > 0, scale, 1.0)
        return (y2 - self.y_mean_) / self.y_scale_

    def _targets_tensor(self, targets, device, dtype):
        return torch.as_tensor(targets, dtype=dtype, device=device)

    def _n_net_outputs(self):
        return self.n_outputs_

    def _init_extra(self, device, dtype):
        if self.noise_precision is None:
            return {
                "log_tau": torch.zeros(
                    self.n_outputs_, dtype=dtype, device=device, requires_grad=True
                )
            }
        tau = float(self.noise_precision) * self.y_scale_**2  # in standardised units
        return {"log_tau": torch.as_tensor(np.log(tau), dtype=dtype, device=device)}

    def _nll(self, out, yb, extra):
        """Gaussian ``-log N(y; f, tau^-1)`` summed over outputs (standardised units)."""
        log_tau = extra["log_tau"]
        sq = (yb - out).pow(2)
        return 0.5 * (log_tau.exp() * sq - log_tau + math.log(2 * math.pi)).sum(-1)

    def _store_extra(self, extra):
        tau_std = to_numpy(extra["log_tau"].exp()).astype(np.float64)
        self.noise_precision_ = tau_std / self.y_scale_**2

    def predict_samples(self, X) -> np.ndarray:
        """Predicted means of every dropout draw, in the units of ``y``.

        Returns
        -------
        ndarray of shape (n_mc_samples, n_samples) or (n_mc_samples, n_samples, n_outputs)
            The 2-D form for a single output.
        """
        f = to_numpy(self._net_output_samples(X)).astype(np.float64)
        f = f * self.y_scale_ + self.y_mean_
        return f[..., 0] if self.n_outputs_ == 1 else f

    def predict(self, X, return_std: bool = False):
        """Predictive mean, and optionally standard deviation, of the targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return ``sqrt(1/tau + Var_t f(x, w_t))``.

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        std : ndarray of the same shape, when ``return_std``
        """
        samples = self.predict_samples(X)
        mean = samples.mean(axis=0)
        if not return_std:
            return mean
        noise_var = 1.0 / self.noise_precision_
        if self.n_outputs_ == 1:
            noise_var = noise_var[0]
        return mean, np.sqrt(noise_var + samples.var(axis=0))
