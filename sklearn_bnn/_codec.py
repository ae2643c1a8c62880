"""The encoder and the allow-list decoder of weights-only files (see :mod:`._persistence`).

:func:`encode` turns an estimator into tensors, numbers, strings and containers only;
:func:`decode` turns what ``torch.load(weights_only=True)`` read back into values, accepting
only the allow-list of :mod:`sklearn_bnn._persistence` and classes, factories and samplers from
the in-process registries of :mod:`._registry`.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from ._persistence_registry import (
    NETWORKS,
    REGISTRY,
    SAMPLERS,
    is_estimator_class,
    registered_sampler_name,
)
from ._state_checks import describe

FORMAT = "sklearn_bnn.weights/1"
_MAX_DEPTH = 64

# The only dtypes a file may name (torch.float32 is saved as {"__dtype__": "float32"}).
DTYPES = {
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

class Unsaveable(Exception):
    pass


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
        if name not in DTYPES:  # load would refuse it: record it as unsaveable now
            raise Unsaveable(f"{where}: dtype {obj}")
        return {"__dtype__": name}
    if isinstance(obj, torch.device):
        if not _DEVICE_RE.fullmatch(str(obj)):
            raise Unsaveable(f"{where}: device {obj}")
        return {"__device__": str(obj)}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "biuf":
            return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(obj)).clone()}
        if obj.dtype.kind in "UO" and all(
            isinstance(v, str | int | float | bool) for v in obj.flat
        ):
            return {"__objarray__": [encode(v) for v in obj.tolist()], "kind": obj.dtype.kind}
        raise Unsaveable(f"{where}: numpy array of dtype {obj.dtype}")
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise Unsaveable(f"{where}: dict with non-string keys")
        return {"__dict__": {k: encode(v, f"{where}[{k!r}]") for k, v in obj.items()}}
    for key, factory in NETWORKS.items():
        if obj is factory:
            return {"__network__": key}
    if type(obj).__name__ == "FrozenEstimator" and type(obj).__module__.startswith("sklearn."):
        return {"__frozen__": encode(obj.estimator, f"{where}.estimator")}
    sampler_name = registered_sampler_name(obj)
    if sampler_name is not None:
        params = obj.get_params(deep=False)
        return {"__sampler__": sampler_name, "params": encode(params, f"{where}.params")}
    cls = type(obj)
    if REGISTRY.get(cls.__name__) is cls:
        if is_estimator_class(cls):
            return {"__estimator__": encode_estimator(obj, where, nested=True)}
        if hasattr(obj, "to_state"):
            return {"__object__": cls.__name__, "state": encode(obj.to_state(), where)}
    raise Unsaveable(f"{where}: {type(obj).__name__}")


def _decode_sampler(obj: dict, where: str, depth: int):
    name = obj["__sampler__"]
    cls = SAMPLERS.get(name) if type(name) is str else None
    if cls is None or set(obj) != {"__sampler__", "params"}:
        raise ValueError(f"{where}: sampler {describe(name)} is not registered in this process.")
    params = decode(obj["params"], f"{where}.params", depth + 1)
    if type(params) is not dict or set(params) - set(cls._get_param_names()):
        raise ValueError(f"{where}: the parameters of sampler {name!r} do not match its class.")
    return cls(**params)


def encode_estimator(estimator, where: str, nested: bool) -> dict:
    """The payload of an estimator: class name, parameters and (when fitted) state."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    params, missing = {}, []
    for name, value in estimator.get_params(deep=False).items():
        try:
            params[name] = encode(value, f"{where}: parameter {name!r}")
        except Unsaveable:
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
    """Inverse of :func:`encode`, accepting only the allow-list of :mod:`sklearn_bnn._persistence`.

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
    tag = _entry_tag(obj, where)
    if tag not in _TAGGED:
        raise ValueError(f"{where}: unrecognised entry {tag!r}.")
    return _TAGGED[tag](obj, obj[tag], where, _depth)


def _entry_tag(obj: dict, where: str) -> str:
    """The one ``__tag__`` key of a tagged entry, checked with the keys allowed beside it."""
    tags = [k for k in obj if isinstance(k, str) and k.startswith("__") and k.endswith("__")]
    if len(tags) != 1:
        raise ValueError(f"{where}: unrecognised entry with keys {sorted(map(str, obj))[:8]}.")
    tag = tags[0]
    extra = set(obj) - {tag}
    allowed_extra = {"__objarray__": {"kind"}, "__object__": {"state"}, "__sampler__": {"params"}}
    allowed_extra = allowed_extra.get(tag, set())
    if extra - allowed_extra or (
        tag in ("__objarray__", "__object__", "__sampler__") and extra != allowed_extra
    ):
        raise ValueError(f"{where}: unrecognised entry with keys {sorted(map(str, obj))[:8]}.")
    return tag


# The decoders of tagged entries: (entry, the tag's value, where, depth) -> value.
def _decode_ndarray(obj, value, where, depth):
    if type(value) is not torch.Tensor or value.dtype not in _NDARRAY_DTYPES:
        raise ValueError(f"{where}: an array must be a numeric tensor, got {describe(value)}.")
    return _check_plain_tensor(value, where).numpy()


def _decode_objarray(obj, value, where, depth):
    if obj["kind"] not in ("U", "O") or type(value) is not list:
        raise ValueError(f"{where}: malformed string array.")
    for i, v in enumerate(value):
        if type(v) not in (bool, int, float, str):
            raise ValueError(f"{where}[{i}]: a string array holds {describe(v)}.")
    return np.array(value, dtype=object if obj["kind"] == "O" else None)


def _decode_tuple(obj, value, where, depth):
    if type(value) is not list:
        raise ValueError(f"{where}: malformed tuple.")
    return tuple(decode(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))


def _decode_dict(obj, value, where, depth):
    if type(value) is not dict or not all(type(k) is str for k in value):
        raise ValueError(f"{where}: a dict must have string keys.")
    return {k: decode(v, f"{where}[{k!r}]", depth + 1) for k, v in value.items()}


def _decode_dtype(obj, value, where, depth):
    if type(value) is not str or value not in DTYPES:
        raise ValueError(f"{where}: dtype {describe(value)} is not one of {sorted(DTYPES)}.")
    return DTYPES[value]


def _decode_device(obj, value, where, depth):
    if type(value) is not str or not _DEVICE_RE.fullmatch(value):
        raise ValueError(f"{where}: {describe(value)} is not a device name.")
    return torch.device(value)


def _decode_network(obj, value, where, depth):
    if type(value) is not str or value not in NETWORKS:
        raise ValueError(
            f"{where}: network factory {describe(value)} is not registered in this "
            "process (sklearn_bnn._persistence.register_network); pass module=... to load."
        )
    return NETWORKS[value]


def _decode_object(obj, value, where, depth):
    cls = REGISTRY.get(value) if type(value) is str else None
    if cls is None or is_estimator_class(cls) or not hasattr(cls, "_check_state"):
        raise ValueError(f"{where}: class {describe(value)} is not a registered value class.")
    state = decode(obj["state"], f"{where}.state", depth + 1)
    try:
        cls._check_state(state)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return cls.from_state(state)


def _decode_frozen(obj, value, where, depth):
    from sklearn.frozen import FrozenEstimator

    inner = decode(value, f"{where}.estimator", depth + 1)
    if not is_estimator_class(type(inner)):
        raise ValueError(f"{where}: a FrozenEstimator must wrap a registered estimator.")
    return FrozenEstimator(inner)


_TAGGED = {
    "__ndarray__": _decode_ndarray,
    "__objarray__": _decode_objarray,
    "__tuple__": _decode_tuple,
    "__dict__": _decode_dict,
    "__dtype__": _decode_dtype,
    "__device__": _decode_device,
    "__network__": _decode_network,
    "__object__": _decode_object,
    "__sampler__": lambda obj, value, where, depth: _decode_sampler(obj, where, depth),
    "__estimator__": lambda obj, value, where, depth: rebuild(value, {}, where, depth + 1),
    "__frozen__": _decode_frozen,
}


def _check_plain_tensor(t: torch.Tensor, where: str) -> torch.Tensor:
    if t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
        raise ValueError(
            f"{where}: only dense CPU tensors are allowed, got {t.layout} on {t.device}."
        )
    return t.detach()


def rebuild(payload, overrides: dict, where: str, depth: int = 0):
    """Construct, check and fill an estimator from its (undecoded) payload."""
    if type(payload) is not dict or set(payload) != _PAYLOAD_KEYS:
        keys = sorted(map(str, payload)) if type(payload) is dict else describe(payload)
        raise ValueError(
            f"{where}: expected an estimator record {sorted(_PAYLOAD_KEYS)}, got {keys}."
        )
    if payload["format"] != FORMAT:
        raise ValueError(f"{where}: format {describe(payload['format'])} is not {FORMAT!r}.")
    name = payload["class"]
    cls = REGISTRY.get(name) if type(name) is str else None
    if cls is None or not is_estimator_class(cls):
        raise ValueError(
            f"{where}: class {describe(name)} is not a registered sklearn_bnn estimator."
        )
    params, missing = payload["params"], payload["missing_params"]
    if type(params) is not dict or type(missing) is not list:
        raise ValueError(f"{where}: malformed parameters.")
    known = set(cls._get_param_names())
    # the trained family's optimizer__* / callbacks__* (skorch's) are parameters too
    prefixes = getattr(cls, "skorch_prefixes", ())
    unknown = [
        str(k)
        for k in [*params, *missing]
        if k not in known and not (prefixes and type(k) is str and k.startswith(prefixes))
    ]
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
        raise ValueError(f"{where}: the fitted state must be a dict, got {describe(state)}.")
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


# -- pipelines ---------------------------------------------------------------------------------
# A Pipeline is stored as an estimator record of class "Pipeline" whose parameter "steps" lists
# [name, step] pairs; a step is "passthrough" or None, this package's estimator (an
# "__estimator__" record), a nested pipeline (the same), or one of the scikit-learn steps of
# sklearn_bnn._sklearn_steps ("__sklearn__": class name, parameters, fitted state). Only load
# and a pipeline's own steps read pipeline records: nowhere else can a file name one.
PIPELINE = "Pipeline"


def encode_pipeline(pipeline, where: str) -> dict:
    """The record of a fitted ``Pipeline`` (``TypeError`` for a step that cannot be stored)."""
    steps = [[name, _encode_step(step, f"{where}: step {name!r}")] for name, step in pipeline.steps]
    params = {
        k: encode(v, f"{where}: parameter {k!r}")
        for k, v in pipeline.get_params(deep=False).items()
        if k != "steps"
    }
    return {
        "format": FORMAT,
        "class": PIPELINE,
        "params": {"steps": steps, **params},
        "missing_params": [],
        "state": None,
    }


def _encode_step(step, where: str):
    from sklearn.pipeline import Pipeline
    from sklearn.utils.validation import check_is_fitted

    from ._sklearn_steps import SKLEARN_STEPS, check_step_state, step_state

    if step is None or (type(step) is str and step == "passthrough"):
        return step
    cls = type(step)
    if cls is Pipeline:
        return {"__estimator__": encode_pipeline(step, where)}
    if REGISTRY.get(cls.__name__) is cls and is_estimator_class(cls):
        return {"__estimator__": encode_estimator(step, where, nested=False)}
    entry = SKLEARN_STEPS.get(cls.__name__)
    if entry is None or entry[0] is not cls:
        raise TypeError(
            f"cannot save weights-only: {where} is a {cls.__name__}, which a weights-only file "
            "does not hold. A pipeline's steps must be this package's estimators or the "
            f"scikit-learn steps {', '.join(sorted(SKLEARN_STEPS))}, whose fitted state is "
            "plain numbers (a FunctionTransformer, for one, holds code); use joblib.dump."
        )
    check_is_fitted(step)
    params, state = step.get_params(deep=False), step_state(step)
    try:
        check_step_state(cls(**params), state)
    except ValueError as exc:  # a state this version does not know: it could not be loaded
        raise TypeError(f"cannot save weights-only: {where}: {cls.__name__}: {exc}") from None
    return {
        "__sklearn__": {
            "class": cls.__name__,
            "params": encode(params, f"{where}: parameters"),
            "state": encode(state, f"{where}: fitted state"),
        }
    }


def rebuild_pipeline(payload, overrides: dict, where: str, depth: int = 0):
    """Construct a fitted ``Pipeline`` from its record, each step checked as it is rebuilt.

    ``overrides`` are ``<step>__<parameter>`` values for steps' parameters that held code.
    """
    from sklearn.pipeline import Pipeline

    if depth > _MAX_DEPTH:
        raise ValueError(f"{where}: nested more than {_MAX_DEPTH} levels deep.")
    if type(payload) is not dict or set(payload) != _PAYLOAD_KEYS:
        raise ValueError(f"{where}: expected a pipeline record {sorted(_PAYLOAD_KEYS)}.")
    params = payload["params"]
    if (
        payload["format"] != FORMAT
        or payload["class"] != PIPELINE
        or payload["missing_params"] != []
        or payload["state"] is not None
        or type(params) is not dict
        or type(params.get("steps")) is not list
        or not params["steps"]
    ):
        raise ValueError(f"{where}: malformed pipeline record.")
    unknown = sorted(str(k) for k in set(params) - set(Pipeline._get_param_names()))
    if unknown:
        raise ValueError(f"{where}: Pipeline has no parameter(s) {unknown[:5]}.")
    names = []
    for i, item in enumerate(params["steps"]):
        if type(item) is not list or len(item) != 2 or type(item[0]) is not str:
            raise ValueError(f"{where}: steps[{i}] must be a [name, step] pair.")
        names.append(item[0])
    routed: dict[str, dict] = {}
    for key, value in overrides.items():
        step, _, rest = key.partition("__")
        if not rest or step not in names:
            raise ValueError(
                f"load(..., {key}=...): a pipeline's parameters are passed as "
                f"<step>__<parameter>, with a step among {names}."
            )
        routed.setdefault(step, {})[rest] = value
    steps = [
        (name, _rebuild_step(entry, routed.get(name, {}), f"{where}: step {name!r}", depth + 1))
        for name, entry in params["steps"]
    ]
    others = {
        k: decode(v, f"{where}: parameter {k!r}", depth + 1)
        for k, v in params.items()
        if k != "steps"
    }
    pipeline = Pipeline(steps, **others)
    try:
        pipeline._validate_params()
        pipeline._validate_steps()
    except Exception as exc:
        raise ValueError(f"{where}: invalid pipeline ({exc})") from None
    _check_step_widths(pipeline, where)
    return pipeline


def _rebuild_step(entry, overrides: dict, where: str, depth: int):
    from ._sklearn_steps import SKLEARN_STEPS

    if entry is None or (type(entry) is str and entry == "passthrough"):
        if overrides:
            raise ValueError(f"{where}: a passthrough step takes no parameters.")
        return entry
    if type(entry) is not dict or len(entry) != 1:
        raise ValueError(f"{where}: unrecognised step {describe(entry)}.")
    if "__estimator__" in entry:
        record = entry["__estimator__"]
        if type(record) is dict and record.get("class") == PIPELINE:
            return rebuild_pipeline(record, overrides, where, depth)
        if type(record) is not dict or record.get("state") is None:
            raise ValueError(f"{where}: the step holds no fitted state.")
        missing = record.get("missing_params")
        missing = [m for m in missing if m not in overrides] if type(missing) is list else []
        if missing:
            raise ValueError(
                f"{where}: this step's parameter(s) {missing} held Python code; pass them "
                f"again, e.g. load(path, <step>__{missing[0]}=...)."
            )
        return rebuild(record, overrides, where, depth)
    if "__sklearn__" in entry:
        if overrides:
            raise ValueError(f"{where}: a scikit-learn step's parameters are all in the file.")
        return _decode_sklearn_step(entry["__sklearn__"], where, depth, SKLEARN_STEPS)
    raise ValueError(f"{where}: unrecognised step entry {sorted(map(str, entry))}.")


def _decode_sklearn_step(record, where: str, depth: int, allowed: dict):
    from ._sklearn_steps import check_step_state

    if type(record) is not dict or set(record) != {"class", "params", "state"}:
        raise ValueError(f"{where}: malformed scikit-learn step.")
    name = record["class"]
    entry = allowed.get(name) if type(name) is str else None
    if entry is None:
        shown = repr(name) if type(name) is str else describe(name)
        raise ValueError(
            f"{where}: class {shown} is not one of the scikit-learn steps a "
            f"weights-only file may hold ({', '.join(sorted(allowed))})."
        )
    cls = entry[0]
    params = decode(record["params"], f"{where}: parameters", depth + 1)
    if type(params) is not dict or set(params) - set(cls._get_param_names()):
        raise ValueError(f"{where}: the parameters do not match {name}.")
    step = cls(**params)
    try:
        step._validate_params()
    except Exception as exc:  # scikit-learn's InvalidParameterError is a ValueError
        raise ValueError(f"{where}: {name}: {exc}") from None
    state = decode(record["state"], f"{where}: fitted state", depth + 1)
    if type(state) is not dict:
        raise ValueError(f"{where}: the fitted state must be a dict, got {describe(state)}.")
    try:
        check_step_state(step, state)
    except ValueError as exc:
        raise ValueError(f"{where}: {name}: {exc}") from None
    for key, value in state.items():
        setattr(step, key, value)
    return step


def _check_step_widths(pipeline, where: str) -> None:
    """Each step takes as many columns as the step before it gives, where both are known."""
    from ._sklearn_steps import n_features_out

    width, previous = None, None
    for name, step in pipeline.steps:
        if step is None or step == "passthrough":
            continue
        takes = getattr(step, "n_features_in_", None)
        if width is not None and takes is not None and takes != width:
            raise ValueError(
                f"{where}: step {name!r} takes {takes} features, but step {previous!r} gives "
                f"{width}."
            )
        width, previous = n_features_out(step), name
