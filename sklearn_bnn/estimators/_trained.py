"""What the gradient-trained estimators share: MC dropout, the loss-calibrated BNN, plan-net.

Their training goes through skorch (``_skorch.py``); this base holds the rest they repeated:
the shared parameters (declared once, as keyword-only dataclass fields: :func:`parameters`) and
their constraints, the start of ``fit`` (parameter checks, ``validate_data``,
device and dtype, the fit's seeds), the validation split and the start of prediction (checked
input, networks on the prediction device). Seeds follow the package's one scheme
(``_seeding.py``): one ``SeedSequence`` per fit from ``random_state``, children by purpose
(``"network"``, ``"training"``, ``"validation"``, ``"predict"``) and by member for ensembles.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, fields
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, is_classifier
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._persistence_registry import WeightsOnlyMixin
from .._seeding import child, root_seed
from .._utils import FitDeviceMixin, mlp_parameter_count, resolve_device, resolve_dtype
from .._warnings import one_warning_per_call
from ..nets import ACTIVATIONS, check_hidden_layer_sizes
from ._skorch import (
    TRAINING_CONSTRAINTS,
    SkorchParamsMixin,
    needs_validation,
    predict_device,
    skorch_params,
    validation_split,
)
from ._weights import sample_weights

__all__ = ["SKORCH_KWARGS_DOC", "TrainedEstimator", "parameters"]

# the numpydoc entry of the skorch keywords every trained estimator takes (indented for a class)
SKORCH_KWARGS_DOC = """\
    **kwargs
        skorch's ``optimizer__<setting>`` (to Adam; ``optimizer__weight_decay`` adds to the
        prior's decay) and ``callbacks__<name>=None`` / ``callbacks__<name>__<setting>``
        (remove or set a named callback: ``"progress"``, ``"early_stopping"``, a user's pair).
        Any other keyword is refused by ``fit`` (and ``set_params``) with a ValueError naming
        the parameter that takes its place (skorch's ``lr`` is ``learning_rate_init``,
        ``max_epochs`` ``max_iter``).
"""


def parameters(cls: type) -> type:
    """Declare the annotated class attributes of ``cls`` as its parameters, keyword-only.

    ``cls`` becomes a standard-library dataclass (``kw_only``; ``eq=False`` keeps identity
    equality and hashing, ``repr=False`` scikit-learn's repr): each parameter is written once,
    on the class that introduces it, and inherited by the subclasses, which redeclare one
    only to change its default. The ``__init__`` assigns every parameter unchanged
    (scikit-learn's contract) and keeps the keywords that are not parameters for skorch
    (:func:`~._skorch.skorch_params`: ``optimizer__*`` / ``callbacks__*``, any other refused
    by ``fit``); its signature lists the parameters and ``**kwargs``, as
    ``get_params`` reads it. Class attributes that are not parameters carry no annotation.
    """
    cls = dataclass(kw_only=True, eq=False, repr=False)(cls)
    assign = cls.__init__
    names = frozenset(f.name for f in fields(cls))

    def __init__(self, **kwargs):
        assign(self, **{name: kwargs.pop(name) for name in names & kwargs.keys()})
        self._skorch_params = skorch_params(type(self), kwargs)

    signature = inspect.signature(assign)
    extra = inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)
    __init__.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    cls.__init__ = __init__
    return cls


@parameters
class TrainedEstimator(SkorchParamsMixin, FitDeviceMixin, WeightsOnlyMixin, BaseEstimator):
    """Base of the gradient-trained estimators (see the module docstring).

    The parameters below are the family's, at the MC dropout estimators' defaults (plan-net
    redeclares the ones it sets otherwise). Subclasses, each under :func:`parameters`, add
    their own parameters as fields and to ``_parameter_constraints`` (``prior_precision``'s
    range is theirs), and call :meth:`_begin_fit` at the start of ``fit`` and
    :meth:`_begin_predict` at the start of prediction.
    """

    hidden_layer_sizes: object = (100,)
    activation: str = "relu"
    prior_precision: float = 1.0
    n_predict_draws: int = 100
    max_iter: int = 200
    batch_size: int = 128
    learning_rate_init: float = 1e-3
    early_stopping: bool = False
    validation_fraction: float = 0.1
    n_iter_no_change: int = 10
    callbacks: object = None
    device: object = "cpu"
    dtype: str = "float32"
    verbose: bool = False
    random_state: object = None

    _parameter_constraints = {
        **TRAINING_CONSTRAINTS,
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions(set(ACTIVATIONS))],
        "n_predict_draws": [Interval(Integral, 1, None, closed="left")],
    }

    @one_warning_per_call
    def fit(self, X, y, sample_weight=None):
        """Train on ``(X, y)``: the network, or plan-net's ``n_estimators`` networks.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row. The data term becomes the weighted mean
            ``sum_n w_n l_n / sum_n w_n`` (estimated on each batch with the weights scaled to
            mean 1) and ``N`` in the prior's terms (MC dropout's KL term, plan-net's
            regularisers) ``sum_n w_n``: the objective of the data with each row repeated by
            its (integer) weight; plan-net standardises ``X`` and ``y`` by the weighted
            moments. None: every row weighs 1.

        Returns
        -------
        self
        """
        X, y, device, dtype, seeds = self._begin_fit(X, y, **self._validate_kwargs())
        return self._fit_checked(X, y, sample_weights(sample_weight, X), device, dtype, seeds)

    def _fit_checked(self, X, y, weights, device, dtype, seeds):
        """The subclass's training on checked data, ``weights`` the checked ``sample_weight``
        (or None)."""
        raise NotImplementedError

    def _validate_kwargs(self) -> dict:
        """Options of ``validate_data`` for ``(X, y)`` at fit (a regressor's: multi-output)."""
        return {}

    def _begin_fit(self, X, y, **validate_kwargs):
        """Check the parameters and the data; return ``(X, y, device, dtype, seeds)``.

        ``seeds`` is the fit's one :class:`numpy.random.SeedSequence` (``_seeding.root_seed``
        of ``random_state``); ``validate_kwargs`` go to scikit-learn's ``validate_data``.
        """
        self._validate_params()
        check_hidden_layer_sizes(self.hidden_layer_sizes)
        X, y = validate_data(self, X, y, dtype=[np.float64, np.float32], **validate_kwargs)
        device = resolve_device(self.device, work=lambda: self._work_per_gradient(X, y))
        self._fit_device = str(device)  # where predictions run: "auto" is decided here, once
        return X, y, device, resolve_dtype(self.dtype), root_seed(self.random_state)

    def _work_per_gradient(self, X, y) -> float:
        """Forward multiply-adds of one training step, for ``device="auto"``: the rows of a
        batch times the parameters of the configured MLP (one output per class or target)."""
        if is_classifier(self):
            n_out = len(np.unique(y))
        else:
            n_out = 1 if np.ndim(y) < 2 else np.shape(y)[1]
        rows = min(int(getattr(self, "batch_size", X.shape[0])), X.shape[0])
        return rows * mlp_parameter_count(X.shape[1], self.hidden_layer_sizes, n_out)

    def _split_rows(self, n: int, seeds, stratify=None):
        """``(train, valid)`` row indices: a held-out part when early stopping (or a callback)
        needs one, drawn from the fit's ``"validation"`` child; else every row and None."""
        if not needs_validation(self):
            return np.arange(n), None
        state = child(seeds, "validation").generate_state(1)[0]
        rng = np.random.RandomState(int(state))  # scikit-learn's splitters take a RandomState
        return validation_split(n, self.validation_fraction, rng, stratify=stratify)

    def _begin_predict(self, X, attribute: str):
        """Checked ``X`` and the fitted modules on the prediction device (the fit's device, or
        the CPU where CUDA is missing; copies, so the fitted modules stay on the CPU).

        ``attribute`` names the fitted attribute holding the modules (one module or a list of
        them), read only after ``check_is_fitted``: a caller passing ``self.module_`` itself
        would raise ``AttributeError`` on an unfitted estimator instead of ``NotFittedError``.
        Returns ``(X, device, modules)`` with ``modules`` a list.
        """
        check_is_fitted(self)
        modules = getattr(self, attribute)
        modules = list(modules) if isinstance(modules, (list, tuple)) else [modules]
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        device = predict_device(getattr(self, "_fit_device", self.device))
        if device.type != "cpu":
            modules = [copy.deepcopy(m).to(device) for m in modules]
        return X, device, modules
