"""Monte Carlo dropout networks: :class:`MCDropoutClassifier` and :class:`MCDropoutRegressor`.

A multilayer perceptron trained with dropout and L2 weight decay is a variational approximation
to a Bayesian neural network (Gal & Ghahramani, 2016; seeds/003, section 3.2.5, eq. 3.19-3.21):
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

Training runs through skorch (:mod:`sklearn_bnn.estimators._skorch`): the data term is the
net's loss hook, the weight decay its regulariser, and the fit runs under torch's global
generator forked and seeded from ``random_state``, so it is reproducible and leaves the caller's
random state alone. Prediction draws its masks from a local generator seeded at fit.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted
from skorch.callbacks import Callback
from torch import nn

from .._registry import register
from .._seeding import child, torch_seed
from .._utils import seeded_torch, to_numpy
from ..nets import build_module, check_hidden_layer_sizes
from ._skorch import (
    TensorData,
    history_curves,
    standardize_targets,
    train_net,
)
from ._trained import TrainedEstimator

__all__ = ["MCDropoutClassifier", "MCDropoutRegressor"]

# Upper bound on the elements of one hidden activation tensor during prediction.
_PREDICT_CHUNK_ELEMENTS = 2**24
# dropout="auto": the rate every learned dropout layer starts from, and the temperature of the
# Concrete relaxation (Gal, Hron & Kendall 2017, who use 0.1)
INIT_DROPOUT = 0.1
CONCRETE_TEMPERATURE = 0.1


class _LearnedDropout(nn.Module):
    """Dropout whose rate p is learned: the Concrete relaxation of the Bernoulli mask.

    In training every input gets ``(1 - z) / (1 - p)`` with ``z = sigmoid((logit p + logit u)
    / t)``, ``u ~ U(0, 1)`` (Gal, Hron & Kendall 2017), so that p gets gradients; in eval mode
    (skorch's validation) the layer is the identity, dropout's expectation. After training the
    layer is replaced by ``nn.Dropout(p)``: prediction draws exact Bernoulli masks.
    """

    def __init__(self, p: float, width: int, temperature: float = CONCRETE_TEMPERATURE):
        super().__init__()
        self.p_logit = nn.Parameter(torch.logit(torch.tensor(float(p))))
        self.width = int(width)
        self.temperature = float(temperature)

    @property
    def p(self) -> torch.Tensor:
        return torch.sigmoid(self.p_logit)

    def forward(self, x):
        if not self.training:
            return x
        tiny = torch.finfo(x.dtype).eps
        u = torch.rand_like(x).clamp(tiny, 1.0 - tiny)
        drop = torch.sigmoid((self.p_logit + torch.logit(u)) / self.temperature)
        return x * (1.0 - drop) / (1.0 - self.p)


def _with_learned_dropout(net: nn.Sequential) -> nn.Sequential:
    """``net`` with each ``nn.Dropout`` replaced by a :class:`_LearnedDropout` starting at its
    rate (the other layers are shared, not copied)."""
    layers, width = [], None
    for layer in net:
        if isinstance(layer, nn.Linear):
            width = layer.out_features
        if isinstance(layer, nn.Dropout):
            layer = _LearnedDropout(layer.p, width).to(net[0].weight.dtype)
        layers.append(layer)
    return nn.Sequential(*layers)


def _with_bernoulli_dropout(trained: nn.Sequential, net: nn.Sequential) -> nn.Sequential:
    """``net`` (the network built for the fit) given the trained layers of ``trained`` (its
    :func:`_with_learned_dropout` form) and, for each ``nn.Dropout``, the learned rate."""
    for mine, theirs in zip(net, trained, strict=True):
        if isinstance(theirs, _LearnedDropout):
            mine.p = float(theirs.p.detach())
        else:
            mine.load_state_dict(theirs.state_dict())
    return net


def dropout_rates(net: nn.Sequential) -> list[float]:
    """The rate of every dropout layer of ``net``, input side first."""
    return [float(m.p) for m in net if isinstance(m, nn.Dropout)]


class _LearnedDropoutPenalty:
    """The terms of the KL of eq. 3.21 that depend on a learned rate, per training point.

    For each learned dropout layer feeding a ``Linear`` of weight ``W`` (``K`` inputs):
    ``lambda ||W||^2 / (2 N (1 - p)) - K H(p) / N``, with ``H(p) = -p log p - (1 - p) log(1 - p)``
    (Gal, Hron & Kendall 2017, eq. 3; ``W`` the weight applied to the inverted-dropout input
    ``x z / (1 - p)``, i.e. ``(1 - p)`` times Gal & Ghahramani's ``M``). ``lambda`` is 0 when a
    fixed ``weight_decay`` replaces the prior (Adam's decay then covers ``W``). The data term
    pulls p down (the mask's noise costs fit, the more so the more data there are), the entropy
    up towards 1/2 with a weight 1/N: the learned rate falls as the data grow.
    """

    def __init__(self, prior_precision: float, n_train: int):
        self.lam = float(prior_precision)
        self.n = int(n_train)

    def __call__(self, module) -> torch.Tensor:
        net = module if isinstance(module, nn.Sequential) else module.net
        total, pending = 0.0, None
        for layer in net:
            if isinstance(layer, _LearnedDropout):
                pending = layer
            elif isinstance(layer, nn.Linear) and pending is not None:
                p = pending.p
                log_p, log_q = F.logsigmoid(pending.p_logit), F.logsigmoid(-pending.p_logit)
                entropy = -(p * log_p + (1.0 - p) * log_q)
                total = total - pending.width * entropy / self.n
                if self.lam > 0:
                    total = total + self.lam * layer.weight.square().sum() / (
                        2 * self.n * (1.0 - p)
                    )
                pending = None
        return total


def draw_masks(net: nn.Sequential, prefix: tuple, generator: torch.Generator, like: torch.Tensor):
    """One scaled Bernoulli mask per dropout layer of ``net``, of shape ``(*prefix, width)``.

    Entries are ``z / (1 - p)`` with ``z ~ Bernoulli(1 - p)`` (inverted dropout), drawn from
    ``generator`` only (torch's global generator when it is None).
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


class _MCDropoutBase(TrainedEstimator):
    """Shared fit / predict machinery; subclasses define the likelihood."""

    _parameter_constraints: dict = {
        **TrainedEstimator._parameter_constraints,
        "dropout": [Interval(Real, 0, 1, closed="left"), StrOptions({"auto"})],
        "prior_precision": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left"), None],
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
        """skorch loss hook: the mean data term of a batch (eq. 3.20).

        In training the module's ``nn.Dropout`` layers draw one fresh mask per point; in
        validation skorch puts the module in eval mode, replacing dropout by its expectation.
        """
        return self._nll(y_pred, y_true, None).mean()

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
        """(parameter, coefficient) pairs of the KL term, eq. 3.21 (see the module docstring)."""
        if self.weight_decay is not None:
            return [(p, float(self.weight_decay)) for p in net.parameters()]
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
        X, y, device, dtype, seeds = self._begin_fit(X, y, **self._validate_kwargs())
        targets = self._prepare_targets(y)
        with seeded_torch(torch_seed(child(seeds, "network"))):
            net = self._build_net(dtype)
        stratify = targets if isinstance(self, ClassifierMixin) else None
        idx_train, idx_val = self._split_rows(len(X), seeds, stratify=stratify)
        Xt = torch.tensor(X, dtype=dtype, device=device)
        yt = self._targets_tensor(targets, device, dtype)
        learned = self._learns_dropout()
        module = self._training_module(_with_learned_dropout(net) if learned else net)
        module = module.to(device)
        decay = self._weight_decay_terms(net, len(idx_train))
        penalty = None
        if learned:
            lam = 0.0 if self.weight_decay is not None else float(self.prior_precision)
            penalty = _LearnedDropoutPenalty(lam, len(idx_train))
        # c ||p||^2 in the loss has gradient 2 c p: exactly Adam's (coupled, L2) weight decay
        # 2 c, which skips building the penalty into the graph at every step
        names = {id(p): name for name, p in module.named_parameters()}
        groups = [(names[id(p)], {"weight_decay": 2.0 * c}) for p, c in decay if c > 0]
        train = TensorData(Xt[idx_train], yt[idx_train])
        valid = None if idx_val is None else TensorData(Xt[idx_val], yt[idx_val])
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
        )
        self.loss_curve_, self.validation_loss_curve_ = history_curves(net_)
        self.n_iter_ = len(net_.history)
        tracked = self.validation_loss_curve_[self._n_warmup_epochs(self.max_iter) :]
        self.best_validation_loss_ = min(tracked) if self.early_stopping and tracked else None
        trained = self._finish(net_.module_)
        if learned:
            trained = _with_bernoulli_dropout(trained, net.to(device))
        self.module_ = trained.cpu().eval()
        self.dropout_ = dropout_rates(self.module_)
        self.mc_seed_ = torch_seed(child(seeds, "predict"))
        return self

    def _validate_kwargs(self) -> dict:
        """Options of ``validate_data`` for ``(X, y)`` at fit (the regressor's: multi-output)."""
        return {}

    # ---------------------------------------------------------------- predict
    def _net_output_samples(self, X, reduce=None) -> torch.Tensor:
        """Network outputs for ``n_predict_draws`` dropout draws: shape (n_predict_draws, n, n_out).

        Every draw uses one mask for all points (a draw of the weights ``M diag(z)`` from
        ``q(w)``), from a generator seeded at fit, so predictions are reproducible and do not
        depend on how ``X`` is ordered or split into batches. ``reduce`` maps each chunk of
        rows' float64 outputs (n_predict_draws, rows, n_out) to (rows, ...) before the chunks are
        joined, so the draws of all rows are never held at once.
        """
        X, device, (net,) = self._begin_predict(X, "module_")
        dtype = next(net.parameters()).dtype
        generator = torch.Generator(device).manual_seed(self.mc_seed_)
        Xt = torch.tensor(X, dtype=dtype, device=device)
        T = self.n_predict_draws
        with torch.no_grad():
            masks = draw_masks(net, (T, 1), generator, Xt)
            sizes = check_hidden_layer_sizes(self.hidden_layer_sizes)
            width = max([self.n_features_in_, self._n_net_outputs(), *sizes])
            rows = max(1, _PREDICT_CHUNK_ELEMENTS // (T * width))
            out = []
            for chunk in Xt.split(rows):
                f = forward_with_masks(net, chunk, masks).expand(T, len(chunk), -1)
                f = f.cpu().double()
                out.append(f if reduce is None else reduce(f))
        return torch.cat(out, dim=1 if reduce is None else 0)

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
        }
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


_COMMON_PARAMS_DOC = """
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
    weight_decay : float >= 0 or None, default=None
        If given, one coefficient ``c`` for every parameter (``c ||w||^2`` added to the
        per-point loss), overriding ``prior_precision``; it corresponds to a prior precision
        ``lambda = 2 N c (1 - dropout)``.
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
"""


@register
class MCDropoutClassifier(ClassifierMixin, _MCDropoutBase):
    __doc__ = f"""Classifier with Monte Carlo dropout (seeds/003, section 3.2.5).

    A softmax multilayer perceptron trained with dropout and weight decay; at prediction
    ``n_predict_draws`` networks are drawn from the dropout distribution ``q(w)`` and their class
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
    mc_seed_ : int
        Seed of the dropout masks used at prediction.

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

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        dropout="auto",
        prior_precision=1.0,
        weight_decay=None,
        n_predict_draws=100,
        max_iter=200,
        batch_size=128,
        learning_rate_init=1e-3,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        class_weight=None,
        callbacks=None,
        device="cpu",
        dtype="float32",
        verbose=False,
        random_state=None,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.dropout = dropout
        self.prior_precision = prior_precision
        self.weight_decay = weight_decay
        self.n_predict_draws = n_predict_draws
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.class_weight = class_weight
        self.callbacks = callbacks
        self.device = device
        self.dtype = dtype
        self.verbose = verbose
        self.random_state = random_state

    _parameter_constraints: dict = {
        **_MCDropoutBase._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }

    def _prepare_targets(self, y):
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                f"but the data contain only one class: {self.classes_[0]!r}."
            )
        if isinstance(self.class_weight, dict):
            bad = {k: v for k, v in self.class_weight.items() if not (np.isfinite(v) and v >= 0)}
            if bad:
                raise ValueError(
                    f"class_weight must map classes to finite weights >= 0, got {bad!r}."
                )
        self.class_weight_ = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
        self._unweighted = bool(np.all(self.class_weight_ == 1.0))
        return encoded

    def _targets_tensor(self, targets, device, dtype):
        return torch.as_tensor(targets, device=device)

    def _n_net_outputs(self):
        return len(self.classes_)

    def _loss(self, net, y_pred, y_true, X, training):
        """skorch loss hook: mean (weighted) cross-entropy of a batch."""
        if self._unweighted:
            return F.cross_entropy(y_pred, y_true)
        return self._nll(y_pred, y_true, None).mean()

    def _nll(self, out, yb, log_tau):
        """Weighted cross-entropy ``-alpha_y log softmax(out)_y`` (eq. 4.12)."""
        alpha = torch.as_tensor(self.class_weight_, dtype=out.dtype, device=out.device)
        return alpha[yb] * F.cross_entropy(out, yb, reduction="none")

    def predict_samples(self, X) -> np.ndarray:
        """Class probabilities of every dropout draw (float64).

        Returns
        -------
        ndarray of shape (n_predict_draws, n_samples, n_classes)
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

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        dropout="auto",
        prior_precision=1.0,
        weight_decay=None,
        n_predict_draws=100,
        max_iter=200,
        batch_size=128,
        learning_rate_init=1e-3,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        noise_precision=None,
        callbacks=None,
        device="cpu",
        dtype="float32",
        verbose=False,
        random_state=None,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.dropout = dropout
        self.prior_precision = prior_precision
        self.weight_decay = weight_decay
        self.n_predict_draws = n_predict_draws
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.noise_precision = noise_precision
        self.callbacks = callbacks
        self.device = device
        self.dtype = dtype
        self.verbose = verbose
        self.random_state = random_state

    _parameter_constraints: dict = {
        **_MCDropoutBase._parameter_constraints,
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
        return standardize_targets(self, y2)

    def _targets_tensor(self, targets, device, dtype):
        return torch.as_tensor(targets, dtype=dtype, device=device)

    def _n_net_outputs(self):
        return self.n_outputs_

    def _training_module(self, net):
        if self.noise_precision is None:
            tau = np.ones(self.n_outputs_)  # noise sd = sd of y; set from residuals each epoch
        else:
            tau = float(self.noise_precision) * self.y_scale_**2  # in standardised units
        return _WithNoise(net, np.log(tau))

    def _extra_callbacks(self):
        return [("noise_update", _NoiseFromResiduals())] if self.noise_precision is None else []

    def _loss(self, net, y_pred, y_true, X, training):
        """Gaussian data term; in training also accumulates the residuals for the noise update."""
        module = net.module_
        sq = (y_true - y_pred).pow(2)
        if training and self.noise_precision is None:
            module.record(sq.detach())
        return self._gaussian_nll(sq, module.log_tau).mean()

    def _nll(self, out, yb, log_tau):
        """Gaussian ``-log N(y; f, tau^-1)`` summed over outputs (standardised units)."""
        return self._gaussian_nll((yb - out).pow(2), log_tau)

    @staticmethod
    def _gaussian_nll(sq, log_tau):
        return 0.5 * (log_tau.exp() * sq - log_tau + math.log(2 * math.pi)).sum(-1)

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
        f = to_numpy(self._net_output_samples(X))
        f *= self.y_scale_
        f += self.y_mean_
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
        check_is_fitted(self)
        scale = torch.as_tensor(self.y_scale_, dtype=torch.float64)
        loc = torch.as_tensor(self.y_mean_, dtype=torch.float64)

        def moments(f):  # (T, rows, n_out) -> (rows, 2, n_out), in the units of y
            f = f * scale + loc
            return torch.stack([f.mean(0), f.var(0, unbiased=False)], 1)

        both = to_numpy(self._net_output_samples(X, reduce=moments))
        mean, var = both[:, 0], both[:, 1]
        if self.n_outputs_ == 1:
            mean, var = mean[:, 0], var[:, 0]
        if not return_std:
            return mean
        noise_var = 1.0 / np.asarray(self.noise_precision_, dtype=np.float64)
        if self.n_outputs_ == 1:
            noise_var = noise_var[0]
        return mean, np.sqrt(noise_var + var)


class _WithNoise(nn.Module):
    """The regression network plus its log noise precision (standardised units) as a buffer.

    ``record`` accumulates squared training residuals (non-persistent buffers, left out of the
    state dict) for :class:`_NoiseFromResiduals`.
    """

    def __init__(self, net: nn.Sequential, log_tau):
        super().__init__()
        self.net = net
        dtype = next(net.parameters()).dtype
        self.register_buffer("log_tau", torch.as_tensor(log_tau, dtype=dtype))
        self.register_buffer("sq_sum", torch.zeros_like(self.log_tau), persistent=False)
        self.register_buffer("count", torch.zeros((), dtype=dtype), persistent=False)

    def forward(self, x):
        return self.net(x)

    @torch.no_grad()
    def record(self, sq) -> None:
        # in-place (``+=`` on a module attribute would go through Module.__setattr__)
        self.sq_sum.add_(sq.sum(0))
        self.count.add_(len(sq))


class _NoiseFromResiduals(Callback):
    """Sets the noise precision to ``1 / mean squared residual`` of the previous epoch.

    For a Gaussian likelihood with one precision per output, this is the exact maximiser of the
    data term in ``tau`` given the network (the KL term does not involve ``tau``): a coordinate
    step on the same objective, taken before each epoch.
    """

    def on_epoch_begin(self, net, **kwargs):
        module = net.module_
        if float(module.count) > 0:
            mse = (module.sq_sum / module.count).clamp_min(1e-10)
            module.log_tau.copy_(-mse.log())
        module.sq_sum.zero_()
        module.count.zero_()
