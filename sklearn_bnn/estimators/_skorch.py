"""Training through skorch, shared by the gradient-trained estimators.

:class:`MCDropoutClassifier`, :class:`MCDropoutRegressor`, :class:`LossCalibratedBNN` and
:class:`PlanNetRegressor` train their networks with a :class:`skorch.NeuralNet` built here at
``fit``: skorch runs the epochs, the callbacks (early stopping, learning-rate schedules, a user's
own) and the device; our estimators supply the loss through the :meth:`BNNNet.get_loss` hook and
the regulariser (the KL term of the ELBO) through :meth:`BNNNet.train_step_single`.

Everything random in training (initial weights, shuffling, dropout masks) draws from torch's
global generator, as skorch and ``nn.Dropout`` expect; :func:`isolated_rng` forks that generator,
seeds it from ``random_state`` and restores it afterwards, so a fit is reproducible and the
user's global random state (torch's and numpy's) is the same after it as before.

The other shared pieces live here too: target standardisation (:func:`standardize_targets`),
the validation split (:func:`validation_split`), the prediction device and the
parameter-constraint helpers.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from sklearn.utils._param_validation import Interval, StrOptions
from skorch import NeuralNet
from skorch.callbacks import Callback, EarlyStopping, EpochTimer, PassthroughScoring, PrintLog
from skorch.dataset import unpack_data
from skorch.helper import predefined_split
from skorch.utils import TeeGenerator
from tqdm.auto import tqdm

from .._threads import module_work, sampling_threads
from .._utils import predict_device
from .._warnings import warn
from ..exceptions import ConvergenceWarning

__all__ = [
    "BNNNet",
    "DelayedEarlyStopping",
    "EpochProgress",
    "TensorBatches",
    "TensorData",
    "check_callbacks",
    "isolated_rng",
    "predict_device",
    "standardize_targets",
    "train_net",
    "validation_split",
]

# The training-loop parameters every gradient-trained estimator shares.
TRAINING_CONSTRAINTS = {
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "batch_size": [Interval(Integral, 1, None, closed="left")],
    "learning_rate_init": [Interval(Real, 0, None, closed="neither")],
    "early_stopping": ["boolean"],
    "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
    "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
    "callbacks": [list, None],
    "device": [str, torch.device],
    "dtype": [StrOptions({"float32", "float64"})],
    "verbose": ["verbose"],
    "random_state": ["random_state"],
}


# skorch's own parameters, taken as skorch takes them: ``optimizer__<setting>`` goes to the
# optimiser (Adam), ``callbacks__<name>=None`` removes a named callback and
# ``callbacks__<name>__<setting>`` sets one of its settings.
SKORCH_PREFIXES = ("optimizer__", "callbacks__")

# skorch's names of what these estimators call otherwise, for the refusal of the former.
SKORCH_EQUIVALENTS = {
    "lr": "learning_rate_init",
    "max_epochs": "max_iter",
    "optimizer": "nothing: the optimiser is Adam, configured by optimizer__<setting>",
    "criterion": "nothing: the loss is the model's likelihood and KL term",
    "module": "hidden_layer_sizes and activation",
    "train_split": "validation_fraction with early_stopping=True",
    "iterator_train": "batch_size",
    "iterator_valid": "batch_size",
    "warm_start": "nothing: each fit trains afresh",
}


def refuse_unknown(cls, name: str) -> str:
    """The message refusing keyword ``name`` on the trained estimator ``cls``."""
    hint = SKORCH_EQUIVALENTS.get(name)
    where = f": skorch's {name!r} is {hint} here" if hint else ""
    return (
        f"{cls.__name__} has no parameter {name!r}{where} (skorch's optimizer__<setting> and "
        "callbacks__<name>[__<setting>] are taken)."
    )


def skorch_params(cls, kwargs: dict) -> dict:
    """The keywords an ``__init__`` got beyond its signature, kept as they are (scikit-learn's
    contract: nothing raises in ``__init__``): ``optimizer__*`` / ``callbacks__*`` go to
    skorch, any other is refused by ``fit`` naming the parameter that takes its place."""
    return dict(kwargs)


class SkorchParamsMixin:
    """``optimizer__*`` and ``callbacks__*`` beside an estimator's own parameters: listed by
    ``get_params`` (so ``clone`` and ``GridSearchCV`` keep and set them), set by
    ``set_params``, passed to skorch's ``NeuralNet`` at fit (:func:`train_net`)."""

    #: the keyword prefixes taken (read by the package's loader too)
    skorch_prefixes = SKORCH_PREFIXES

    def get_params(self, deep=True):
        params = super().get_params(deep=deep)
        params.update(getattr(self, "_skorch_params", {}))
        return params

    def _validate_params(self):
        """scikit-learn's parameter validation, after refusing a keyword ``__init__`` got that
        is neither a parameter nor skorch's ``optimizer__*`` / ``callbacks__*``."""
        for name in getattr(self, "_skorch_params", {}):
            if not name.startswith(SKORCH_PREFIXES):
                raise ValueError(refuse_unknown(type(self), name))
        super()._validate_params()

    def set_params(self, **params):
        """Set parameters; ``optimizer__*`` and ``callbacks__*`` as skorch takes them, a name
        skorch has and these estimators call otherwise (``lr``) a ValueError naming it."""
        valid = set(super().get_params(deep=True))
        kept = vars(self).setdefault("_skorch_params", {})
        own = {}
        for name, value in params.items():
            if name.startswith(SKORCH_PREFIXES) or name in kept:
                kept[name] = value
            elif name not in valid and name in SKORCH_EQUIVALENTS:
                raise ValueError(refuse_unknown(type(self), name))
            else:
                own[name] = value
        return super().set_params(**own) if own else self


def plain_history(history) -> list[dict]:
    """A skorch History as a plain list of dicts (numbers, strings, lists, dicts), which
    pickles and saves without skorch: numpy and 0-d torch numbers become Python numbers."""

    def plain(value):
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return value.item()
        return value

    return [plain(dict(row)) for row in history]


def check_history(value, field: str) -> None:
    """A loaded ``history_``: a list of dicts with string keys (a row per epoch)."""
    if not isinstance(value, list) or not all(
        isinstance(row, dict) and all(isinstance(k, str) for k in row) for row in value
    ):
        raise ValueError(f"{field} must be a list of dicts with string keys.")


# ----------------------------------------------------------------------------- random state
@contextlib.contextmanager
def isolated_rng(seed: int, device: torch.device | None = None) -> Iterator[None]:
    """Run a block under torch's global generator seeded with ``seed``, then restore it.

    The CPU generator, and the CUDA generator of ``device`` when it is a GPU, are forked
    (:func:`torch.random.fork_rng`): what the block draws is fixed by ``seed`` and the caller's
    generators are left exactly as they were. numpy's global state is never used.
    """
    cuda = device is not None and torch.device(device).type == "cuda"
    index = torch.device(device).index if cuda else None
    if cuda and index is None:
        index = torch.cuda.current_device()
    with torch.random.fork_rng(devices=[index] if cuda else []):
        torch.default_generator.manual_seed(int(seed))
        if cuda:
            with torch.cuda.device(index):
                torch.cuda.manual_seed(int(seed))
        yield


# ----------------------------------------------------------------------------- parameters
def check_callbacks(callbacks) -> list:
    """Validate the ``callbacks`` parameter: skorch callbacks or ``(name, callback)`` pairs."""
    if callbacks is None:
        return []
    out = []
    for cb in callbacks:
        inner = cb[1] if isinstance(cb, tuple) and len(cb) == 2 else cb
        if not isinstance(inner, Callback) and not (
            isinstance(inner, type) and issubclass(inner, Callback)
        ):
            raise ValueError(
                "callbacks must be a list of skorch callbacks (skorch.callbacks.Callback) or "
                f"(name, callback) pairs, got {cb!r}."
            )
        out.append(cb)
    return out


def _monitors_validation(callbacks) -> bool:
    for cb in callbacks:
        inner = cb[1] if isinstance(cb, tuple) else cb
        monitor = getattr(inner, "monitor", None)
        if isinstance(monitor, str) and monitor.startswith("valid"):
            return True
    return False


# ----------------------------------------------------------------------------- data
def standardize_targets(est, Y: np.ndarray, weights=None) -> np.ndarray:
    """Set ``est.y_mean_`` and ``est.y_scale_`` (1 for a constant column); return the scaled Y.

    ``Y`` is 2-D, one column per output. Predictions are mapped back with
    ``f * y_scale_ + y_mean_``; a noise precision ``tau`` in standardised units is
    ``tau / y_scale_**2`` in the units of ``y``. With row ``weights``, the moments of the data
    with each row repeated by its weight.
    """
    Y = np.asarray(Y, dtype=np.float64)
    if weights is None:
        est.y_mean_ = Y.mean(axis=0)
        scale = Y.std(axis=0)
    else:
        est.y_mean_ = np.average(Y, axis=0, weights=weights)
        scale = np.sqrt(np.average((Y - est.y_mean_) ** 2, axis=0, weights=weights))
    est.y_scale_ = np.where(scale > 0, scale, 1.0)
    return (Y - est.y_mean_) / est.y_scale_


def validation_split(n: int, fraction: float, rng, stratify=None):
    """Indices ``(train, valid)`` holding out ``fraction`` of ``n`` points.

    Stratified on ``stratify`` when given. A split that leaves either part empty (or, stratified,
    without every class) raises a ``ValueError`` naming ``validation_fraction``.
    """
    idx = np.arange(n)
    n_valid = int(np.ceil(fraction * n))
    n_classes = 1 if stratify is None else len(np.unique(stratify))
    if n_valid < n_classes or n - n_valid < n_classes:
        need = "at least one point" if stratify is None else "every class"
        raise ValueError(
            f"validation_fraction={fraction} on {n} samples leaves {n - n_valid} for training "
            f"and {n_valid} for validation; both need {need}. Change validation_fraction or "
            "set early_stopping=False."
        )
    try:
        return train_test_split(idx, test_size=n_valid, stratify=stratify, random_state=rng)
    except ValueError as exc:  # e.g. a class with a single member when stratifying
        raise ValueError(
            f"could not hold out validation_fraction={fraction} of the data: {exc} Change "
            "validation_fraction or set early_stopping=False."
        ) from exc


class TensorData(torch.utils.data.Dataset):
    """Inputs and targets as two tensors of equal length (already on the training device).

    With ``weights`` (one per row), the targets of a row or batch come as the pair
    ``(y, weights)``, which the loss hooks split with :func:`split_weights`.
    """

    def __init__(self, X: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None = None):
        self.X, self.y, self.weights = X, y, weights

    def __len__(self) -> int:
        return len(self.X)

    def __getitem__(self, i):
        if self.weights is None:
            return self.X[i], self.y[i]
        return self.X[i], (self.y[i], self.weights[i])


def row_weight_tensor(weights, rows, like: torch.Tensor) -> torch.Tensor | None:
    """The weights of ``rows`` scaled to mean 1 over them (so that the weighted mean loss
    estimates ``sum w l / sum w``), as a tensor of ``like``'s dtype and device; None for
    None. A part whose weights are all zero is refused."""
    if weights is None or rows is None:
        return None
    part = np.asarray(weights)[rows]
    if not part.sum() > 0:
        raise ValueError(
            "sample_weight is zero on every row of the training (or validation) part; give "
            "more rows a positive weight, or set early_stopping=False."
        )
    return torch.as_tensor(part / part.mean(), dtype=like.dtype, device=like.device)


def split_weights(y_true):
    """``(targets, weights or None)`` of a batch's targets (see :class:`TensorData`)."""
    if isinstance(y_true, (tuple, list)):
        return y_true[0], y_true[1]
    return y_true, None


def weighted_mean(values: torch.Tensor, weights) -> torch.Tensor:
    """The mean of the per-row ``values``, each times its row's weight (the plain mean when
    ``weights`` is None)."""
    return values.mean() if weights is None else (values * weights).mean()


class TensorBatches:
    """Minibatches of a :class:`TensorData` by slicing, shuffled with torch's global generator.

    Used as skorch's ``iterator_train`` / ``iterator_valid``: a :class:`torch.utils.data.DataLoader`
    would fetch and collate one row at a time, which costs more than the small networks' steps.
    """

    def __init__(self, dataset: TensorData, batch_size: int = 128, shuffle: bool = False):
        self.dataset, self.batch_size, self.shuffle = dataset, int(batch_size), shuffle

    def __len__(self) -> int:
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self):
        X, y = self.dataset.X, self.dataset.y
        w = getattr(self.dataset, "weights", None)
        if w is not None:
            yield from self._weighted(X, y, w)
            return
        if not self.shuffle:
            yield from zip(X.split(self.batch_size), y.split(self.batch_size), strict=True)
            return
        order = torch.randperm(len(X), device=X.device)
        for idx in order.split(self.batch_size):
            yield X[idx], y[idx]

    def _weighted(self, X, y, w):
        """Batches whose targets are ``(y, weights)``, in the order of the unweighted ones."""
        if not self.shuffle:
            order = torch.arange(len(X), device=X.device)
        else:
            order = torch.randperm(len(X), device=X.device)
        for idx in order.split(self.batch_size):
            yield X[idx], (y[idx], w[idx])


# ----------------------------------------------------------------------------- skorch pieces
class NonFiniteLossError(FloatingPointError, ValueError):
    """Training reached a NaN or infinite loss."""


class BNNNet(NeuralNet):
    """A :class:`skorch.NeuralNet` whose loss and regulariser come from our estimators.

    Parameters
    ----------
    module : torch.nn.Module
        The network (an instance, used as it is).
    loss : callable
        ``loss(net, y_pred, y_true, X, training) -> Tensor``: the mean data term of a batch;
        called from :meth:`get_loss`, so training and validation use it alike.
    penalty : callable or None
        ``penalty(module) -> Tensor`` added to the training objective only (the KL term);
        ``train_loss`` in the history is the data term alone.
    **kwargs
        Passed to :class:`skorch.NeuralNet` (``optimizer``, ``lr``, ``max_epochs``,
        ``batch_size``, ``callbacks``, ``device``, ``train_split``, ``optimizer__*`` ...).
    """

    def __init__(self, module, *, loss, penalty=None, **kwargs):
        super().__init__(module, criterion=torch.nn.Identity, **kwargs)
        self.loss = loss
        self.penalty = penalty

    def get_loss(self, y_pred, y_true, X=None, training=False):
        """The estimator's loss on one batch (skorch's loss hook)."""
        return self.loss(self, y_pred, y_true, X, training)

    def train_step_single(self, batch, **fit_params):
        """Forward, loss plus regulariser, backward; ``loss`` returned is the data term."""
        self._set_training(True)
        Xi, yi = unpack_data(batch)
        y_pred = self.infer(Xi, **fit_params)
        loss = self.get_loss(y_pred, yi, X=Xi, training=True)
        objective = loss if self.penalty is None else loss + self.penalty(self.module_)
        objective.backward()
        return {"loss": loss.detach(), "y_pred": y_pred}

    def train_step(self, batch, **fit_params):
        """One optimizer step: as skorch's, without the closure (Adam evaluates it once)."""
        self._zero_grad_optimizer()
        step = self.train_step_single(batch, **fit_params)
        self.notify(
            "on_grad_computed",
            named_parameters=TeeGenerator(self.get_all_learnable_params()),
            batch=batch,
            training=True,
        )
        self._step_optimizer(None)
        return step

    def _set_training(self, training=True):
        # skorch sets the mode before every batch; walking the module tree each time costs
        # more than a small network's step, so switch only when the mode changes (the cache
        # is cleared at every epoch, in case a callback changed a module's mode itself)
        if getattr(self, "_training_mode", None) is not training:
            super()._set_training(training)
            self._training_mode = training

    def on_epoch_begin(self, net, **kwargs):
        self._training_mode = None
        super().on_epoch_begin(net, **kwargs)

    def on_epoch_end(self, net, **kwargs):
        """A NaN or infinite batch loss stops the fit with an error that says what to try."""
        super().on_epoch_end(net, **kwargs)
        for batch in _last_epoch(self.history)["batches"]:
            for key in ("train_loss", "valid_loss"):
                value = batch.get(key)
                if value is not None and not np.isfinite(value):
                    raise NonFiniteLossError(
                        f"{key} became {value} at epoch {len(self.history)}; the inputs may be "
                        "far too large or the learning rate too high. Scale X (e.g. with "
                        "sklearn.preprocessing.StandardScaler) or lower learning_rate_init."
                    )

    @property
    def _default_callbacks(self):
        return [
            ("epoch_timer", EpochTimer()),
            ("train_loss", EpochMeanLoss(name="train_loss", on_train=True)),
            ("valid_loss", EpochMeanLoss(name="valid_loss")),
            ("print_log", PrintLog()),
        ]

    @property
    def epoch(self) -> int:
        """Index of the epoch under way (0 for the first)."""
        return len(self.history) - 1


def _last_epoch(history) -> dict:
    """The last row of a skorch History as the plain dict it is (no fancy indexing)."""
    return list.__getitem__(history, -1)


class EpochMeanLoss(PassthroughScoring):
    """skorch's ``PassthroughScoring`` (epoch mean of the batch losses, weighted by batch size,
    and the ``*_best`` flag), reading the last epoch's batches directly: History's general
    indexing costs as much as a small network's step, once per epoch and loss.
    """

    def on_epoch_end(self, net, **kwargs):
        size_key = "train_batch_size" if self.on_train else "valid_batch_size"
        batches = _last_epoch(net.history)["batches"]
        pairs = [(b[size_key], b[self.name]) for b in batches if self.name in b]
        if not pairs:
            return
        score = sum(n * v for n, v in pairs) / sum(n for n, _ in pairs)
        is_best = self._is_best_score(score)
        if is_best:
            self.best_score_ = score
        net.history.record(self.name, score)
        if is_best is not None:
            net.history.record(self.name + "_best", bool(is_best))


class DelayedEarlyStopping(EarlyStopping):
    """skorch's :class:`~skorch.callbacks.EarlyStopping`, ignoring the first ``start`` epochs.

    Used where the monitored loss changes meaning after a warm-up (the loss-calibrated bound).
    """

    def __init__(self, *args, start: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.start = start

    def on_epoch_end(self, net, **kwargs):
        if len(net.history) > self.start:
            super().on_epoch_end(net, **kwargs)


class EpochProgress(Callback):
    """A tqdm bar over epochs, showing the training and validation losses."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc = total, desc

    def on_train_begin(self, net, **kwargs):
        self.bar_ = tqdm(total=self.total, desc=self.desc, leave=False)

    def on_epoch_end(self, net, **kwargs):
        row = net.history[-1]
        postfix = {"loss": f"{row['train_loss']:.4g}"}
        if "valid_loss" in row:
            postfix["val"] = f"{row['valid_loss']:.4g}"
        self.bar_.set_postfix(postfix)
        self.bar_.update()

    def on_train_end(self, net, **kwargs):
        self.bar_.close()


def train_net(
    est,
    module: torch.nn.Module,
    data: TensorData,
    valid: TensorData | None,
    *,
    loss,
    penalty=None,
    seed: int,
    device: torch.device,
    early_stopping: bool,
    patience: int,
    tol: float = 0.0,
    warmup: int = 0,
    desc: str | None = None,
    extra_callbacks=(),
    optimizer_params=None,
) -> BNNNet:
    """Train ``module`` on ``data`` with Adam through a :class:`BNNNet`; return the net.

    Reads ``learning_rate_init`` (skorch's ``lr``), ``max_iter`` (skorch's ``max_epochs``),
    ``batch_size``, ``verbose`` and ``callbacks`` from the estimator ``est``. Runs under
    :func:`isolated_rng` seeded with ``seed``. With ``early_stopping``, skorch's EarlyStopping
    watches ``valid_loss`` (after ``warmup`` epochs) with ``patience`` and absolute threshold
    ``tol``, and restores the best weights. ``optimizer_params`` are routed to Adam as
    skorch's ``optimizer__*`` (e.g. ``param_groups``). Trains in the torch intra-op threads
    that :mod:`sklearn_bnn._threads` gives one minibatch's forward pass, as the sampling fits.
    """
    max_iter = est.max_iter
    callbacks = list(extra_callbacks)
    if early_stopping:
        callbacks.append(
            (
                "early_stopping",
                DelayedEarlyStopping(
                    monitor="valid_loss",
                    patience=patience,
                    threshold=tol,
                    threshold_mode="abs",
                    load_best=True,
                    sink=lambda *a: None,
                    start=warmup,
                ),
            )
        )
    if est.verbose:
        callbacks.append(("progress", EpochProgress(max_iter, desc or type(est).__name__)))
    # copies of the user's callbacks: skorch initialises (mutates) the callbacks it runs, and
    # scikit-learn's contract is that fit leaves every parameter as it was (clone, caching,
    # one callback object shared by estimators fitted in parallel); what they record is in
    # the kept history_
    callbacks += copy.deepcopy(check_callbacks(est.callbacks))
    user = dict(getattr(est, "_skorch_params", {}))
    for key in [k for k in user if k.startswith("callbacks__") and k.count("__") == 1]:
        name = key[len("callbacks__") :]
        present = [cb for cb in callbacks if _callback_name(cb) == name]
        # callbacks__<name>=None removes that callback: here for the callbacks this function
        # adds or not (the bar, early stopping) and the user's; skorch's own defaults by skorch
        if user[key] is None and (present or name in ("progress", "early_stopping")):
            del user[key]
            callbacks = [cb for cb in callbacks if _callback_name(cb) != name]
    known = {_callback_name(cb) for cb in callbacks} | {
        name for name, _ in BNNNet._default_callbacks.fget(None)
    }
    for key in [k for k in user if k.startswith("callbacks__")]:
        name = key.split("__")[1]
        if name not in known:
            raise ValueError(
                f"{key}: {type(est).__name__}'s training has no callback named {name!r}; "
                f"it has {sorted(known)}."
            )
    groups = (optimizer_params or {}).get("param_groups")
    if groups and "optimizer__weight_decay" in user:
        # the user's decay is added to the prior's, not replaced by the groups' own
        extra = float(user["optimizer__weight_decay"])
        optimizer_params = {
            **optimizer_params,
            "param_groups": [
                (n, {**g, "weight_decay": g.get("weight_decay", 0.0) + extra}) for n, g in groups
            ],
        }
    # the torch threads of the sampling fits, by the work of one minibatch (_threads.py)
    work = module_work(module, min(len(data), int(est.batch_size)))
    with isolated_rng(seed, device), sampling_threads(work):
        net = BNNNet(
            module,
            loss=loss,
            penalty=penalty,
            optimizer=torch.optim.Adam,
            lr=est.learning_rate_init,  # skorch's name for it
            max_epochs=max_iter,
            batch_size=est.batch_size,
            iterator_train=TensorBatches,
            iterator_train__shuffle=True,
            iterator_valid=TensorBatches,
            train_split=None if valid is None else predefined_split(valid),
            callbacks=callbacks,
            callbacks__print_log=None,
            device=device,
            verbose=0,
            **{f"optimizer__{k}": v for k, v in (optimizer_params or {}).items()},
            **user,
        )
        net.fit(data, None)
    _warn_unless_converged(est, net, early_stopping, patience, tol, warmup)
    return net


def _callback_name(cb) -> str | None:
    """A callback's name: the first of a ``(name, callback)`` pair, or skorch's default name
    for a bare callback (its class's name)."""
    if isinstance(cb, tuple):
        return cb[0]
    return (cb if isinstance(cb, type) else type(cb)).__name__


def stopping_epoch(losses, patience: int, tol: float = 0.0) -> int | None:
    """The epoch (counted from 1) at which early stopping's rule is first met on ``losses``,
    or None if it never is: ``patience`` epochs in a row whose loss is not below the best so
    far minus ``tol`` (skorch's ``EarlyStopping`` with ``threshold_mode="abs"``; scikit-learn's
    ``MLPClassifier`` stops by the same rule on its ``tol`` and ``n_iter_no_change``)."""
    best, misses = np.inf, 0
    for epoch, loss in enumerate(losses, start=1):
        if loss < best - tol:
            best, misses = loss, 0
        else:
            misses += 1
            if misses >= patience:
                return epoch
    return None


def _warn_unless_converged(est, net, early_stopping, patience, tol, warmup) -> None:
    """A ConvergenceWarning when training ran all ``max_iter`` epochs without its stopping
    rule being met, as scikit-learn's ``MLPClassifier`` gives one.

    The rule is early stopping's (:func:`stopping_epoch`), counted from epoch ``warmup`` on:
    on the validation loss with ``early_stopping``, where it is what stops the training; on
    the training loss without, where the training always runs ``max_iter`` epochs and the
    rule asks whether the loss ever stopped improving (by ``tol``, for ``patience`` epochs).
    Training that ended sooner (early stopping, a user's callback, Ctrl-C) is not warned
    about.
    """
    max_iter = est.max_iter
    if len(net.history) < max_iter:
        return
    train, valid = history_curves(net)
    losses, which = (valid, "validation") if early_stopping else (train, "training")
    if stopping_epoch(losses[warmup:], patience, tol) is not None:
        return
    warn(
        f"{type(est).__name__} stopped at max_iter={max_iter} epochs before its {which} loss "
        f"stopped improving (every n_iter_no_change={patience} epochs in a row brought a new "
        f"lowest loss{f' by more than tol={tol:g}' if tol else ''}); raise max_iter to train "
        "longer.",
        ConvergenceWarning,
        kind="training",
    )


def needs_validation(est) -> bool:
    """Whether to hold out data: ``early_stopping``, or a user callback monitoring ``valid_*``."""
    return bool(est.early_stopping) or _monitors_validation(check_callbacks(est.callbacks))


def history_curves(net: BNNNet) -> tuple[list[float], list[float]]:
    """``(train_loss per epoch, valid_loss per epoch or [])`` from a trained net's history."""
    train = [float(v) for v in net.history[:, "train_loss"]]
    valid = [float(r["valid_loss"]) for r in net.history if "valid_loss" in r]
    return train, valid
