"""The scikit-learn steps a weights-only file may hold inside a ``Pipeline``.

A step's class is one of :data:`SKLEARN_STEPS`, imported here by the code (never looked up by a
name read from a file); its fitted state is plain arrays and numbers, checked against the class
before the step is rebuilt. Steps whose state holds code (``FunctionTransformer``'s ``func``,
``ColumnTransformer``'s transformers) are not on the list.
"""

from __future__ import annotations

import numpy as np
from sklearn.decomposition import PCA
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, RobustScaler, StandardScaler

from ._state_checks import (
    check_feature_names,
    check_state,
    describe,
    is_array,
    is_float,
    is_int,
    optional,
)

__all__ = ["SKLEARN_STEPS", "check_step_state", "n_features_out", "step_state"]


def _vector(n: int):
    """A float array of ``n`` entries."""
    return is_array(ndim=1, kinds="f", shape=(n,))


def _number_or_counts(n: int):
    """``n_samples_seen_``: a count, or one count per feature (when X had missing values)."""

    def check(value, field):
        if isinstance(value, np.ndarray):
            is_array(ndim=1, kinds="iuf", shape=(n,))(value, field)
        else:
            is_float(value, field)

    return check


def _need(state: dict, field: str, when: bool, parameter: str) -> None:
    if when and state.get(field) is None:
        raise ValueError(f"{field} is missing, but {parameter}=True needs it.")


def _standard_scaler(step, state: dict, n: int) -> dict:
    _need(state, "mean_", step.with_mean, "with_mean")
    _need(state, "scale_", step.with_std, "with_std")
    return {
        "n_samples_seen_": _number_or_counts(n),
        "mean_": optional(_vector(n)),
        "var_": optional(_vector(n)),
        "scale_": optional(_vector(n)),
    }


def _min_max_scaler(step, state: dict, n: int) -> dict:
    fields = ("scale_", "min_", "data_min_", "data_max_", "data_range_")
    return {"n_samples_seen_": is_int(0), **{f: _vector(n) for f in fields}}


def _robust_scaler(step, state: dict, n: int) -> dict:
    _need(state, "center_", step.with_centering, "with_centering")
    _need(state, "scale_", step.with_scaling, "with_scaling")
    return {"center_": optional(_vector(n)), "scale_": optional(_vector(n))}


def _max_abs_scaler(step, state: dict, n: int) -> dict:
    return {"n_samples_seen_": is_int(0), "max_abs_": _vector(n), "scale_": _vector(n)}


_PCA_SOLVERS = ("full", "arpack", "randomized", "covariance_eigh")


def _pca(step, state: dict, n: int) -> dict:
    k = state.get("n_components_")
    is_int(1, n)(k, "n_components_")
    solver = state.get("_fit_svd_solver")
    if solver not in _PCA_SOLVERS:
        raise ValueError(f"_fit_svd_solver must be one of {_PCA_SOLVERS}, got {describe(solver)}.")
    return {
        "n_components_": is_int(1, n),
        "_fit_svd_solver": lambda value, field: None,  # checked above
        "mean_": _vector(n),
        "noise_variance_": is_float,
        "n_samples_": is_int(1),
        "components_": is_array(ndim=2, kinds="f", shape=(k, n)),
        "explained_variance_": _vector(k),
        "explained_variance_ratio_": _vector(k),
        "singular_values_": _vector(k),
    }


#: Class name -> (class, the checks of its fitted state given the step and ``n_features_in_``).
SKLEARN_STEPS = {
    cls.__name__: (cls, spec)
    for cls, spec in (
        (StandardScaler, _standard_scaler),
        (MinMaxScaler, _min_max_scaler),
        (RobustScaler, _robust_scaler),
        (MaxAbsScaler, _max_abs_scaler),
        (PCA, _pca),
    )
}


def step_state(step) -> dict:
    """Every attribute of a fitted step that is not a parameter: its fitted state."""
    params = set(step.get_params(deep=False))
    return {k: v for k, v in vars(step).items() if k not in params}


def check_step_state(step, state: dict) -> None:
    """Check the fitted ``state`` of ``step`` (an unfitted instance of an allowed class).

    Raises
    ------
    ValueError
        Naming the first entry that is missing, unknown, of the wrong type or of a size that
        does not agree with ``n_features_in_``.
    """
    n = state.get("n_features_in_")
    is_int(1)(n, "n_features_in_")
    spec = SKLEARN_STEPS[type(step).__name__][1](step, state, n)
    # every attribute is present (None where a parameter turns it off); names are optional
    check_state(
        state,
        {"n_features_in_": is_int(1), **spec},
        {"feature_names_in_": lambda value, field: None},
    )
    check_feature_names(state)


def n_features_out(step) -> int | None:
    """Columns the fitted ``step`` transforms into, when it is an allowed scikit-learn step."""
    if type(step).__name__ not in SKLEARN_STEPS:
        return None
    return int(step.n_components_) if isinstance(step, PCA) else int(step.n_features_in_)
