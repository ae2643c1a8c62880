"""Checks of a decoded fitted state, for an estimator's ``_check_loaded_state``.

Each check is ``check(value, field)`` and raises ``ValueError`` naming the field; the helpers
build them (``is_int(1)``, ``list_of(is_float)``, ``is_tensor(ndim=3, floating=True)``) and
:func:`check_state` applies them to every entry of a state. See :mod:`sklearn_bnn._persistence`
for what ``load`` trusts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from ._persistence_registry import REGISTRY, is_estimator_class


def describe(value) -> str:
    if isinstance(value, torch.Tensor | np.ndarray):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, list | tuple | dict):
        return f"{type(value).__name__} of {len(value)} items"
    if value is not None and not isinstance(value, bool | int | float | str | torch.dtype):
        return type(value).__name__
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


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
    raise ValueError(f"{field} must be {expected}, got {describe(value)}.")


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
    cls = type(inner)
    if not is_estimator_class(cls) or REGISTRY.get(cls.__name__) is not cls:
        _fail(field, "a fitted sklearn_bnn estimator", value)
    try:
        check_is_fitted(inner)
    except Exception:
        _fail(field, "a fitted estimator", value)


def check_same_as_wrapped(state: dict) -> None:
    """A loaded meta-estimator's classes and features must be those of its ``estimator_``."""
    inner = state["estimator_"]
    if not np.array_equal(state["classes_"], inner.classes_):
        raise ValueError("classes_ differ from the wrapped estimator_'s classes_.")
    for name in ("n_features_in_", "feature_names_in_"):
        if (name in state) != hasattr(inner, name) or (
            name in state and not np.array_equal(state[name], getattr(inner, name))
        ):
            raise ValueError(f"{name} differs from the wrapped estimator_'s.")


def check_temperature(value, field):
    """A positive finite float: a classifier's ``calibration_temperature_``."""
    is_float(value, field)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{field} must be a positive finite float, got {value!r}.")


def check_temperature_posterior(value, field):
    """A classifier's ``calibration_posterior_``: temperatures (row 0, positive) and weights
    (row 1, non-negative, summing to one)."""
    ok = isinstance(value, np.ndarray) and value.ndim == 2 and value.shape[0] == 2
    ok = ok and value.shape[1] >= 1 and value.dtype.kind == "f" and np.all(np.isfinite(value))
    if not (ok and np.all(value[0] > 0) and np.all(value[1] >= 0)
            and abs(value[1].sum() - 1) < 1e-6):
        raise ValueError(f"{field} must hold positive temperatures and weights summing to 1.")


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
