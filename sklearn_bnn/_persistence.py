"""Weights-only persistence: :func:`save` and :func:`load`.

``joblib.dump`` works on every estimator, but a pickle runs code when it is loaded. These two
functions write and read a file that holds only tensors, numbers, strings and containers, read
back with ``torch.load(weights_only=True)``. What comes out of ``torch.load`` is then walked by an
allow-list decoder (:func:`decode`) that can only produce:

- ``None``, bools, ints, floats, strings, and lists, tuples and string-keyed dicts of these;
- plain dense CPU tensors, and numpy arrays of booleans, numbers or strings;
- the torch dtypes of :data:`_DTYPES` and devices named ``cpu``, ``cuda[:N]`` or ``mps[:N]``;
- instances of the classes registered with :func:`register` (this package's estimators and
  :class:`~sklearn_bnn.PosteriorSamples`), rebuilt from checked plain values, and
  :class:`sklearn.frozen.FrozenEstimator` around one of them;
- network factories registered with :func:`register_network`, by their registered name;
- sampler objects of the classes registered with
  :func:`~sklearn_bnn.samplers.register_sampler`, by that name, rebuilt from their parameters
  (plain values or other registered samplers).

Any other entry is a ``ValueError`` naming the field. A class or factory is never imported or
looked up by a name taken from the file: names are matched against in-process registries.

An estimator takes part by being decorated with :func:`register` and by implementing
``_get_state() -> dict``, ``_check_loaded_state(state)`` and ``_set_state(state)`` (the
:class:`WeightsOnlyMixin` defaults get and set every public fitted attribute). ``load`` calls
``_check_loaded_state`` on the freshly constructed estimator before ``_set_state``: it must
check the type of every entry and that every size agrees with the stored tensors, before any
network is built. The ``check_*`` helpers below make that short.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["save", "load", "register", "register_network", "WeightsOnlyMixin"]

FORMAT = "sklearn_bnn.weights/1"
_REGISTRY: dict[str, type] = {}
_NETWORKS: dict[str, Callable] = {}
_SAMPLERS: dict[str, type] = {}  # filled by sklearn_bnn.samplers.register_sampler
_MAX_DEPTH = 64

# The only dtypes a file may name (torch.float32 is saved as {"__dtype__": "float32"}).
_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
# Tensor dtypes that may be stored as a numpy array (numpy has no bfloat16).
_NDARRAY_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
)
_DEVICE_RE = re.compile(r"(cpu|cuda|mps)(:\d{1,3})?")
_PAYLOAD_KEYS = {"format", "class", "params", "missing_params", "state"}

# Files saved before the parameter names were unified (0.1.0, docs/architecture.md "Vocabulary")
# store the old names: they are read under the new ones. Only names that were renamed, never
# removed parameters, appear here.
_RENAMED_PARAMS = {
    "n_samples": "n_draws",
    "n_leapfrog": "n_steps",
    "max_n_leapfrog": "max_steps",
    "burnin_step_size": "warmup_step_size",
    "max_fixed_point": "max_iter",
    "n_mc_samples": "n_predict_draws",
    "n_decision_samples": "n_train_draws",
    "learning_rate": "learning_rate_init",
}


def _renamed(params: dict, known) -> dict:
    """``params`` with old parameter names (:data:`_RENAMED_PARAMS`) read as the new ones,
    where the class has the new name and not the old one."""
    return {
        _RENAMED_PARAMS.get(k, k) if type(k) is str and k not in known else k: v
        for k, v in params.items()
    }


def register(cls: type) -> type:
    """Class decorator: allow ``cls`` to be rebuilt by :func:`load`.

    Estimators (classes with ``_get_state``) are rebuilt from parameters and a checked fitted
    state; other classes from ``cls.from_state(state)`` after ``cls._check_state(state)``.
    """
    _REGISTRY[cls.__name__] = cls
    return cls


def register_network(factory: Callable, name: str | None = None) -> Callable:
    """Allow a network factory (or ``nn.Module`` subclass) passed as ``module`` to be saved.

    A registered factory is written to the file by name and looked up by that name in this
    process's registry at :func:`load`; any other ``module`` holds code and has to be passed
    again to :func:`load`. Register it in the code that loads the file too.

    Parameters
    ----------
    factory : callable
        Called as ``factory(n_features_in, n_outputs)``.
    name : str, optional
        Defaults to ``factory.__module__ + "." + factory.__qualname__``.

    Returns
    -------
    factory
        Unchanged, so that this works as a decorator.
    """
    key = name or f"{factory.__module__}.{factory.__qualname__}"
    _NETWORKS[key] = factory
    return factory


class _Unsaveable(Exception):
    pass


def _is_estimator(cls) -> bool:
    return hasattr(cls, "_get_state") and hasattr(cls, "get_params")


def _describe(value) -> str:
    if isinstance(value, torch.Tensor | np.ndarray):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, list | tuple | dict):
        return f"{type(value).__name__} of {len(value)} items"
    if value is not None and not isinstance(value, bool | int | float | str | torch.dtype):
        return type(value).__name__
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


# -- encoding ----------------------------------------------------------------------------------
def encode(obj, where: str = "value"):
    """Turn ``obj`` into tensors, numbers, strings and containers only."""
    if isinstance(obj, np.generic):  # first: np.float64 is also a float, but pickles as numpy
        return obj.item()
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, torch.dtype):
        name = str(obj).removeprefix("torch.")
        if name not in _DTYPES:  # load would refuse it: record it as unsaveable now
            raise _Unsaveable(f"{where}: dtype {obj}")
        return {"__dtype__": name}
    if isinstance(obj, torch.device):
        if not _DEVICE_RE.fullmatch(str(obj)):
            raise _Unsaveable(f"{where}: device {obj}")
        return {"__device__": str(obj)}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biuf":
            return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(obj)).clone()}
        if obj.dtype.kind in "UO" and all(
            isinstance(v, str | int | float | bool) for v in obj.flat
        ):
            return {"__objarray__": [encode(v) for v in obj.tolist()], "kind": obj.dtype.kind}
        raise _Unsaveable(f"{where}: numpy array of dtype {obj.dtype}")
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise _Unsaveable(f"{where}: dict with non-string keys")
        return {"__dict__": {k: encode(v, f"{where}[{k!r}]") for k, v in obj.items()}}
    for key, factory in _NETWORKS.items():
        if obj is factory:
            return {"__network__": key}
    if type(obj).__name__ == "FrozenEstimator" and type(obj).__module__.startswith("sklearn."):
        return {"__frozen__": encode(obj.estimator, f"{where}.estimator")}
    sampler_name = _registered_sampler_name(obj)
    if sampler_name is not None:
        params = obj.get_params(deep=False)
        return {"__sampler__": sampler_name, "params": encode(params, f"{where}.params")}
    cls = type(obj)
    if _REGISTRY.get(cls.__name__) is cls:
        if _is_estimator(cls):
            return {"__estimator__": _encode_estimator(obj, where, nested=True)}
        if hasattr(obj, "to_state"):
            return {"__object__": cls.__name__, "state": encode(obj.to_state(), where)}
    raise _Unsaveable(f"{where}: {type(obj).__name__}")


def register_sampler_class(name: str, cls: type) -> None:
    """Make sampler objects of ``cls`` storable by ``name`` (called by
    :func:`sklearn_bnn.samplers.register_sampler`, so that this module imports no sampler)."""
    _SAMPLERS[name] = cls


def _registered_sampler_name(obj) -> str | None:
    """The name ``obj``'s class is registered under as a sampler, or None."""
    for name, cls in _SAMPLERS.items():
        if type(obj) is cls:
            return name
    return None


def _decode_sampler(obj: dict, where: str, depth: int):
    name = obj["__sampler__"]
    cls = _SAMPLERS.get(name) if type(name) is str else None
    if cls is None or set(obj) != {"__sampler__", "params"}:
        raise ValueError(f"{where}: sampler {_describe(name)} is not registered in this process.")
    params = decode(obj["params"], f"{where}.params", depth + 1)
    if type(params) is dict:
        params = _renamed(params, set(cls._get_param_names()))
    if type(params) is not dict or set(params) - set(cls._get_param_names()):
        raise ValueError(f"{where}: the parameters of sampler {name!r} do not match its class.")
    return cls(**params)


def _encode_estimator(estimator, where: str, nested: bool) -> dict:
    """The payload of an estimator: class name, parameters and (when fitted) state."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    params, missing = {}, []
    for name, value in estimator.get_params(deep=False).items():
        try:
            params[name] = encode(value, f"{where}: parameter {name!r}")
        except _Unsaveable:
            if nested:  # only the outer estimator's parameters can be passed again to load
                raise
            missing.append(name)
    try:
        check_is_fitted(estimator)
        state = encode(estimator._get_state(), f"{where}: fitted state")
    except NotFittedError:
        if not nested:
            raise
        state = None
    return {
        "format": FORMAT,
        "class": type(estimator).__name__,
        "params": params,
        "missing_params": missing,
        "state": state,
    }


# -- decoding ----------------------------------------------------------------------------------
def decode(obj, where: str = "value", _depth: int = 0):
    """Inverse of :func:`encode`, accepting only the allow-list of the module docstring.

    Raises
    ------
    ValueError
        Naming the field (``where``) of the first entry that is not allowed.
    """
    if _depth > _MAX_DEPTH:
        raise ValueError(f"{where}: nested more than {_MAX_DEPTH} levels deep.")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is torch.Tensor:
        return _check_plain_tensor(obj, where)
    if type(obj) is list:
        return [decode(v, f"{where}[{i}]", _depth + 1) for i, v in enumerate(obj)]
    if type(obj) is not dict:
        raise ValueError(f"{where}: a {type(obj).__name__} is not allowed in a weights-only file.")
    tags = [k for k in obj if isinstance(k, str) and k.startswith("__") and k.endswith("__")]
    if len(tags) != 1:
        raise ValueError(f"{where}: unrecognised entry with keys {sorted(map(str, obj))[:8]}.")
    tag, value = tags[0], obj[tags[0]]
    extra = set(obj) - {tag}
    allowed_extra = {"__objarray__": {"kind"}, "__object__": {"state"}, "__sampler__": {"params"}}
    allowed_extra = allowed_extra.get(tag, set())
    if extra - allowed_extra or (
        tag in ("__objarray__", "__object__", "__sampler__") and extra != allowed_extra
    ):
        raise ValueError(f"{where}: unrecognised entry with keys {sorted(map(str, obj))[:8]}.")
    if tag == "__ndarray__":
        if type(value) is not torch.Tensor or value.dtype not in _NDARRAY_DTYPES:
            raise ValueError(f"{where}: an array must be a numeric tensor, got {_describe(value)}.")
        return _check_plain_tensor(value, where).numpy()
    if tag == "__objarray__":
        if obj["kind"] not in ("U", "O") or type(value) is not list:
            raise ValueError(f"{where}: malformed string array.")
        for i, v in enumerate(value):
            if type(v) not in (bool, int, float, str):
                raise ValueError(f"{where}[{i}]: a string array holds {_describe(v)}.")
        return np.array(value, dtype=object if obj["kind"] == "O" else None)
    if tag == "__tuple__":
        if type(value) is not list:
            raise ValueError(f"{where}: malformed tuple.")
        return tuple(decode(v, f"{where}[{i}]", _depth + 1) for i, v in enumerate(value))
    if tag == "__dict__":
        if type(value) is not dict or not all(type(k) is str for k in value):
            raise ValueError(f"{where}: a dict must have string keys.")
        return {k: decode(v, f"{where}[{k!r}]", _depth + 1) for k, v in value.items()}
    if tag == "__dtype__":
        if type(value) is not str or value not in _DTYPES:
            raise ValueError(f"{where}: dtype {_describe(value)} is not one of {sorted(_DTYPES)}.")
        return _DTYPES[value]
    if tag == "__device__":
        if type(value) is not str or not _DEVICE_RE.fullmatch(value):
            raise ValueError(f"{where}: {_describe(value)} is not a device name.")
        return torch.device(value)
    if tag == "__network__":
        if type(value) is not str or value not in _NETWORKS:
            raise ValueError(
                f"{where}: network factory {_describe(value)} is not registered in this "
                "process (sklearn_bnn._persistence.register_network); pass module=... to load."
            )
        return _NETWORKS[value]
    if tag == "__object__":
        cls = _REGISTRY.get(value) if type(value) is str else None
        if cls is None or _is_estimator(cls) or not hasattr(cls, "_check_state"):
            raise ValueError(f"{where}: class {_describe(value)} is not a registered value class.")
        state = decode(obj["state"], f"{where}.state", _depth + 1)
        try:
            cls._check_state(state)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        return cls.from_state(state)
    if tag == "__sampler__":
        return _decode_sampler(obj, where, _depth)
    if tag == "__estimator__":
        return _rebuild(value, {}, where, _depth + 1)
    if tag == "__frozen__":
        from sklearn.frozen import FrozenEstimator

        inner = decode(value, f"{where}.estimator", _depth + 1)
        if not _is_estimator(type(inner)):
            raise ValueError(f"{where}: a FrozenEstimator must wrap a registered estimator.")
        return FrozenEstimator(inner)
    raise ValueError(f"{where}: unrecognised entry {tag!r}.")


def _check_plain_tensor(t: torch.Tensor, where: str) -> torch.Tensor:
    if t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
        raise ValueError(
            f"{where}: only dense CPU tensors are allowed, got {t.layout} on {t.device}."
        )
    return t.detach()


def _rebuild(payload, overrides: dict, where: str, depth: int = 0):
    """Construct, check and fill an estimator from its (undecoded) payload."""
    if type(payload) is not dict or set(payload) != _PAYLOAD_KEYS:
        keys = sorted(map(str, payload)) if type(payload) is dict else _describe(payload)
        raise ValueError(
            f"{where}: expected an estimator record {sorted(_PAYLOAD_KEYS)}, got {keys}."
        )
    if payload["format"] != FORMAT:
        raise ValueError(f"{where}: format {_describe(payload['format'])} is not {FORMAT!r}.")
    name = payload["class"]
    cls = _REGISTRY.get(name) if type(name) is str else None
    if cls is None or not _is_estimator(cls):
        raise ValueError(
            f"{where}: class {_describe(name)} is not a registered sklearn_bnn estimator."
        )
    params, missing = payload["params"], payload["missing_params"]
    if type(params) is not dict or type(missing) is not list:
        raise ValueError(f"{where}: malformed parameters.")
    known = set(cls._get_param_names())
    params = _renamed(params, known)
    missing = [
        _RENAMED_PARAMS.get(m, m) if type(m) is str and m not in known else m for m in missing
    ]
    unknown = [str(k) for k in [*params, *missing] if k not in known]
    if unknown:
        raise ValueError(f"{where}: {name} has no parameter(s) {unknown[:5]}.")
    missing = [m for m in missing if m not in overrides]
    if missing:
        raise ValueError(
            f"this file was saved from an estimator whose parameter(s) {missing} held Python code; "
            f"pass them again, e.g. load(path, {missing[0]}=...)."
        )
    init_params = {k: decode(v, f"{where}: parameter {k!r}", depth) for k, v in params.items()}
    init_params.update(overrides)
    estimator = cls(**init_params)
    if payload["state"] is None:
        if depth == 0:  # only a wrapped estimator's parameter may be unfitted
            raise ValueError(f"{where}: the file holds no fitted state.")
        return estimator
    state = decode(payload["state"], f"{where}: fitted state", depth)
    if type(state) is not dict:
        raise ValueError(f"{where}: the fitted state must be a dict, got {_describe(state)}.")
    try:
        estimator._check_loaded_state(state)
    except ValueError as exc:
        raise ValueError(f"{where}: {name}: {exc}") from None
    except Exception as exc:  # a check tripping over a malformed value is still a bad file
        raise ValueError(
            f"{where}: {name}: invalid fitted state ({type(exc).__name__}: {exc})"
        ) from exc
    try:
        estimator._set_state(state)
    except Exception as exc:  # the checks passed, so this is a gap in a _check_loaded_state
        raise ValueError(
            f"{where}: {name}: invalid fitted state ({type(exc).__name__}: {exc})"
        ) from exc
    return estimator


# -- checks for _check_loaded_state --------------------------------------------------------------
Check = Callable[[object, str], None]


def check_state(state: dict, required: dict[str, Check], optional: dict[str, Check] | None = None):
    """Check that ``state`` has exactly the ``required`` keys (plus any ``optional`` ones), each
    passing its check ``check(value, field)``."""
    optional = optional or {}
    absent = sorted(set(required) - set(state))
    if absent:
        raise ValueError(f"the fitted state lacks {absent}.")
    unknown = sorted(set(state) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"the fitted state has unexpected entries {unknown[:5]}.")
    for key, value in state.items():
        (required.get(key) or optional[key])(value, key)


def _fail(field: str, expected: str, value):
    raise ValueError(f"{field} must be {expected}, got {_describe(value)}.")


def is_int(low: int | None = None, high: int | None = None) -> Check:
    """An int (or numpy integer) in ``[low, high]``."""

    def check(value, field):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            _fail(field, "an int", value)
        if (low is not None and value < low) or (high is not None and value > high):
            _fail(field, f"an int in [{low}, {high}]", value)

    return check


is_seed = is_int(0, 2**63 - 1)


def check_feature_names(state: dict) -> None:
    """``feature_names_in_``, when present, has ``n_features_in_`` distinct strings."""
    if "feature_names_in_" not in state:
        return
    names = state["feature_names_in_"]
    is_array(ndim=1, kinds="UO")(names, "feature_names_in_")
    if len(names) != state.get("n_features_in_") or not all(isinstance(n, str) for n in names):
        raise ValueError("feature_names_in_ must hold n_features_in_ strings.")


def is_float(value, field):
    """A real number (int or float, not bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        _fail(field, "a number", value)


def is_bool(value, field):
    """A bool."""
    if not isinstance(value, bool | np.bool_):
        _fail(field, "a bool", value)


def is_any(value, field):
    """Any value the decoder produced (plain data only)."""


def optional(check: Check) -> Check:
    """None or a value passing ``check``."""

    def wrapped(value, field):
        if value is not None:
            check(value, field)

    return wrapped


def is_array(ndim: int | None = None, kinds: str = "biuf", shape: tuple | None = None) -> Check:
    """A numpy array of dtype kind in ``kinds``; ``shape`` entries of None are free."""

    def check(value, field):
        if not isinstance(value, np.ndarray) or value.dtype.kind not in kinds:
            _fail(field, f"an array of kind {kinds!r}", value)
        _check_shape(value, field, ndim, shape)

    return check


def is_tensor(ndim: int | None = None, floating: bool = False, shape: tuple | None = None) -> Check:
    """A torch tensor (floating point when ``floating``); ``shape`` entries of None are free."""

    def check(value, field):
        if not isinstance(value, torch.Tensor) or (floating and not value.is_floating_point()):
            _fail(field, "a floating-point tensor" if floating else "a tensor", value)
        _check_shape(value, field, ndim, shape)

    return check


def _check_shape(value, field, ndim, shape):
    if ndim is not None and value.ndim != ndim:
        _fail(field, f"{ndim}-dimensional", value)
    if shape is not None and (
        len(shape) != value.ndim
        or any(s is not None and s != v for s, v in zip(shape, value.shape, strict=True))
    ):
        _fail(field, f"of shape {tuple('*' if s is None else s for s in shape)}", value)


def list_of(check: Check, length: int | None = None) -> Check:
    """A list (or tuple) whose items pass ``check``."""

    def wrapped(value, field):
        if not isinstance(value, list | tuple):
            _fail(field, "a list", value)
        if length is not None and len(value) != length:
            _fail(field, f"a list of {length} items", value)
        for i, v in enumerate(value):
            check(v, f"{field}[{i}]")

    return wrapped


def dict_of(check: Check) -> Check:
    """A dict with string keys whose values pass ``check``."""

    def wrapped(value, field):
        if not isinstance(value, dict):
            _fail(field, "a dict", value)
        for k, v in value.items():
            check(v, f"{field}[{k!r}]")

    return wrapped


def is_instance(cls: type) -> Check:
    """An instance of ``cls``."""

    def check(value, field):
        if not isinstance(value, cls):
            _fail(field, f"a {cls.__name__}", value)

    return check


def check_classes(classes, field: str = "classes_", min_classes: int = 2) -> None:
    """Distinct sorted labels, at least ``min_classes``, as ``np.unique`` returns them."""
    is_array(ndim=1, kinds="biufUO")(classes, field)
    if len(classes) < min_classes:
        _fail(field, f"at least {min_classes} classes", classes)
    try:
        distinct = len(np.unique(classes)) == len(classes)
    except TypeError:
        distinct = False
    if not distinct:
        _fail(field, "distinct labels", classes)


def is_fitted_estimator(value, field):
    """A fitted estimator of a registered class, or a FrozenEstimator around one."""
    from sklearn.utils.validation import check_is_fitted

    inner = (
        getattr(value, "estimator", None) if type(value).__name__ == "FrozenEstimator" else value
    )
    if not _is_estimator(type(inner)) or _REGISTRY.get(type(inner).__name__) is not type(inner):
        _fail(field, "a fitted sklearn_bnn estimator", value)
    try:
        check_is_fitted(inner)
    except Exception:
        _fail(field, "a fitted estimator", value)


def check_depth(hidden_layer_sizes, n_tensors: int, field: str) -> None:
    """Each layer of a standard network stores at least one tensor: a file cannot make the
    meta-device build loop over more layers than it stores tensors for."""
    n_layers = len(hidden_layer_sizes) if isinstance(hidden_layer_sizes, list | tuple) else 1
    if n_layers >= n_tensors:
        raise ValueError(
            f"hidden_layer_sizes has {n_layers} layers, but {field} stores {n_tensors} tensors."
        )


def meta_module(build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """Build a network on the ``meta`` device: its layout, with no memory for its weights."""
    with torch.device("meta"):
        return build()


def check_named_shapes(field: str, found: dict, expected: dict, what: str) -> None:
    """Tensors named in ``found`` must have exactly the names and shapes of ``expected``
    (a mapping name -> shape built from the saved parameters: ``what``)."""
    if set(found) != set(expected):
        raise ValueError(
            f"{field} names the tensors {list(found)[:6]}, but {what} has {list(expected)[:6]}."
        )
    for name, want in expected.items():
        got, want = _shape_of(found[name]), _shape_of(want)
        if got != want:
            raise ValueError(f"{field}[{name!r}] has shape {got}, but {what} expects {want}.")


def _shape_of(value) -> tuple:
    return tuple(value.shape) if hasattr(value, "shape") else tuple(value)


def n_elements(shapes) -> int:
    """Total number of elements of tensors of the given shapes."""
    return sum(math.prod(s) for s in shapes)


class WeightsOnlyMixin:
    """Default ``_get_state``/``_set_state``: every public fitted attribute (ending in ``_``).

    Subclasses that are registered must also implement ``_check_loaded_state(state)``.
    """

    def _get_state(self) -> dict:
        return {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")}

    def _check_loaded_state(self, state: dict) -> None:
        raise ValueError(f"{type(self).__name__} does not check a loaded state; use joblib.")

    def _set_state(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def save(estimator, path: str | os.PathLike) -> None:
    """Save a fitted estimator as weights and plain values only (no pickled code).

    Parameters
    ----------
    estimator : fitted sklearn_bnn estimator
        One of this package's estimators, or :class:`~sklearn_bnn.BayesDecisionClassifier` /
        :class:`~sklearn_bnn.EnsembleReducer` around one of them.
    path : str or path-like

    Raises
    ------
    TypeError
        If the estimator, or a fitted estimator inside it, holds something other than plain
        values (for example a wrapped scikit-learn model): use ``joblib.dump`` for those.

    Notes
    -----
    A parameter of the outer estimator that holds Python code (a custom ``module`` class,
    factory or instance that was not registered with :func:`register_network`) cannot be stored
    this way; it is recorded as missing and must be passed again to :func:`load`.

    Examples
    --------
    >>> from sklearn_bnn import HMCClassifier, save, load  # doctest: +SKIP
    >>> save(clf, "model.pt"); clf2 = load("model.pt")  # doctest: +SKIP
    """
    from sklearn.utils.validation import check_is_fitted

    cls = type(estimator)
    if _REGISTRY.get(cls.__name__) is not cls or not _is_estimator(cls):
        raise TypeError(
            f"{type(estimator).__name__} does not support weights-only saving; use joblib.dump."
        )
    check_is_fitted(estimator)
    try:
        payload = _encode_estimator(estimator, "estimator", nested=False)
    except _Unsaveable as exc:
        raise TypeError(f"cannot save weights-only: {exc} is not a plain value") from None
    torch.save(payload, path)


def _check_container(path) -> None:
    """The file must be the uncompressed zip archive ``torch.save`` writes.

    Checked before ``torch.load`` sees it: a pickle or joblib file never reaches an unpickler,
    and a compressed entry (which could expand to gigabytes from a small file) is refused.
    """
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise ValueError(
            f"{_name(path)!r} is not a sklearn_bnn weights-only file (it may be a pickle or "
            f"joblib file, which load never unpickles, or truncated): {exc}"
        ) from None
    finally:
        if hasattr(path, "seek"):
            path.seek(0)
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED or entry.file_size != entry.compress_size:
            raise ValueError(
                f"{_name(path)!r} is not a sklearn_bnn weights-only file: entry "
                f"{entry.filename!r} is compressed (torch.save never compresses)."
            )


def _name(path) -> str:
    return os.fspath(path) if isinstance(path, str | os.PathLike) else f"<{type(path).__name__}>"


def load(path: str | os.PathLike, **params):
    """Load an estimator written by :func:`save`, without unpickling any code.

    The file is read with ``torch.load(weights_only=True)``; every value is then decoded through
    an allow-list (see the module docstring) and the fitted state is checked against the
    estimator class (types of every attribute; sizes against the stored tensors) before any
    network is built. A file that is not such a file, is truncated or edited, or names anything
    outside the allow-list raises ``ValueError``.

    Parameters
    ----------
    path : str or path-like
    **params
        Parameters to set on the rebuilt estimator; required for any parameter that held code
        at save time (for example ``module=MyNet``). These are trusted: they come from your code.

    Returns
    -------
    estimator
        Fitted, on the CPU, giving the same predictions as the saved one.

    Raises
    ------
    ValueError
        If the file is not a valid weights-only file of a registered estimator.
    """
    _check_container(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # torch raises several types for a file it cannot read safely
        raise ValueError(
            f"{_name(path)!r} is not a sklearn_bnn weights-only file (it may be a pickle or "
            f"joblib file, which load never unpickles, or truncated): {str(exc)[:200]}"
        ) from None
    if type(payload) is not dict or payload.get("format") != FORMAT:
        raise ValueError(f"{_name(path)!r} is not a sklearn_bnn weights-only file.")
    try:
        return _rebuild(payload, params, _name(path))
    except ValueError:
        raise
    except Exception as exc:  # whatever else a malformed file trips over is still a bad file
        raise ValueError(
            f"{_name(path)}: invalid weights-only file ({type(exc).__name__}: {exc})"
        ) from exc
