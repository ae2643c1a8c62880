"""Weights-only persistence: :func:`save` and :func:`load`.

``joblib.dump`` works on every estimator, but a pickle runs code when it is loaded. These two
functions write and read a file that holds only tensors, numbers, strings and containers, read
back with ``torch.load(weights_only=True)``; the estimator class is looked up in a registry of
this package's classes, never imported by name from the file.

An estimator takes part by being decorated with :func:`register` and by implementing
``_get_state() -> dict`` and ``_set_state(state)`` (the :class:`WeightsOnlyMixin` defaults store
every public fitted attribute, i.e. those ending in ``_``). Objects inside the state are encoded
by :func:`encode`: numbers, strings, None, lists, tuples, dicts with string keys, numpy arrays,
torch tensors and dtypes, and any registered class with ``to_state()``/``from_state()``.
"""

from __future__ import annotations

import os

import numpy as np
import torch

__all__ = ["save", "load", "register", "WeightsOnlyMixin"]

FORMAT = "sklearn_bnn.weights/1"
_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: allow ``cls`` to be rebuilt by :func:`load`."""
    _REGISTRY[cls.__name__] = cls
    return cls


class _Unsaveable(Exception):
    pass


def encode(obj, where: str = "value"):
    """Turn ``obj`` into tensors, numbers, strings and containers only."""
    if isinstance(obj, np.generic):  # first: np.float64 is also a float, but pickles as numpy
        return obj.item()
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, torch.dtype):
        return {"__dtype__": str(obj).removeprefix("torch.")}
    if isinstance(obj, torch.device):
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
    if type(obj).__name__ in _REGISTRY and hasattr(obj, "to_state"):
        return {"__object__": type(obj).__name__, "state": encode(obj.to_state(), where)}
    raise _Unsaveable(f"{where}: {type(obj).__name__}")


def decode(obj):
    """Inverse of :func:`encode`."""
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__ndarray__" in obj:
        return obj["__ndarray__"].numpy()
    if "__objarray__" in obj:
        values = [decode(v) for v in obj["__objarray__"]]
        return np.array(values, dtype=object if obj["kind"] == "O" else None)
    if "__tuple__" in obj:
        return tuple(decode(v) for v in obj["__tuple__"])
    if "__dict__" in obj:
        return {k: decode(v) for k, v in obj["__dict__"].items()}
    if "__dtype__" in obj:
        return getattr(torch, obj["__dtype__"])
    if "__device__" in obj:
        return torch.device(obj["__device__"])
    if "__object__" in obj:
        cls = _REGISTRY[obj["__object__"]]
        return cls.from_state(decode(obj["state"]))
    raise ValueError(f"unrecognised entry in a weights-only file: keys {sorted(obj)}")


class WeightsOnlyMixin:
    """Default ``_get_state``/``_set_state``: every public fitted attribute (ending in ``_``)."""

    def _get_state(self) -> dict:
        return {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")}

    def _set_state(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def save(estimator, path: str | os.PathLike) -> None:
    """Save a fitted estimator as weights and plain values only (no pickled code).

    Parameters
    ----------
    estimator : fitted sklearn_bnn estimator
    path : str or path-like

    Notes
    -----
    A parameter that holds Python code (a custom ``module`` class, factory or instance) cannot be
    stored this way; it is recorded as missing and must be passed again to :func:`load`.

    Examples
    --------
    >>> from sklearn_bnn import HMCClassifier, save, load  # doctest: +SKIP
    >>> save(clf, "model.pt"); clf2 = load("model.pt")  # doctest: +SKIP
    """
    from sklearn.utils.validation import check_is_fitted

    if type(estimator).__name__ not in _REGISTRY or not hasattr(estimator, "_get_state"):
        raise TypeError(
            f"{type(estimator).__name__} does not support weights-only saving; use joblib.dump."
        )
    check_is_fitted(estimator)
    params, missing = {}, []
    for name, value in estimator.get_params(deep=False).items():
        try:
            params[name] = encode(value, f"parameter {name!r}")
        except _Unsaveable:
            missing.append(name)
    try:
        state = encode(estimator._get_state(), "fitted state")
    except _Unsaveable as exc:
        raise TypeError(f"cannot save weights-only: {exc} is not a plain value") from None
    payload = {
        "format": FORMAT,
        "class": type(estimator).__name__,
        "params": params,
        "missing_params": missing,
        "state": state,
    }
    torch.save(payload, path)


def load(path: str | os.PathLike, **params):
    """Load an estimator written by :func:`save`, without unpickling any code.

    Parameters
    ----------
    path : str or path-like
    **params
        Parameters to set on the rebuilt estimator; required for any parameter that held code
        at save time (for example ``module=MyNet``).

    Returns
    -------
    estimator
        Fitted, on the CPU, giving the same predictions as the saved one.
    """
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{os.fspath(path)!r} is not a sklearn_bnn weights-only file.")
    cls_name = payload["class"]
    if cls_name not in _REGISTRY:
        raise ValueError(f"{os.fspath(path)!r} holds an unknown estimator class {cls_name!r}.")
    cls = _REGISTRY[cls_name]
    missing = [m for m in payload["missing_params"] if m not in params]
    if missing:
        raise ValueError(
            f"this file was saved from an estimator whose parameter(s) {missing} held Python code; "
            f"pass them again, e.g. load(path, {missing[0]}=...)."
        )
    init_params = {k: decode(v) for k, v in payload["params"].items()}
    init_params.update(params)
    estimator = cls(**init_params)
    estimator._set_state(decode(payload["state"]))
    return estimator
