"""Persistence of the MCMC estimators: the fitted state that ``save`` writes, and its checks.

:class:`~._base.BaseSamplingEstimator`'s three hooks of ``sklearn_bnn.save`` / ``load``
(``_get_state``, ``_check_loaded_state``, ``_set_state``) call the functions here: the
network's constants and dtype, the draws and the chains' private state (last position, step
sizes, inverse mass, generator states) go into the file; on loading every attribute's type and
every size is checked against the stored draws, the network being built on the ``meta`` device
only, so no size in a file allocates memory.
"""

from __future__ import annotations

import numpy as np
import torch

from .._persistence_registry import fitted_attributes
from .._state_checks import (
    check_classes,
    check_depth,
    check_feature_names,
    check_named_shapes,
    check_state,
    check_temperature,
    check_temperature_posterior,
    dict_of,
    is_any,
    is_array,
    is_bool,
    is_float,
    is_instance,
    is_int,
    is_tensor,
    list_of,
    meta_module,
    optional,
)
from ..samples import PosteriorSamples
from ..targets import FunctionalNetwork

#: The chains' private state that a file keeps beside the public fitted attributes.
PRIVATE_STATE = (
    "_last_position",
    "_step_size_per_chain",
    "_inv_mass",
    "_generator_states",
)


def get_state(estimator) -> dict:
    """The fitted state ``save`` writes: the public fitted attributes, the network's constants
    and dtype, and the chains' private state (``estimator._private_state``)."""
    state = fitted_attributes(estimator)
    state["network_"] = {
        "constants": dict(estimator.network_._constants),
        "dtype": estimator.network_.dtype,
    }
    state.update({name: getattr(estimator, name) for name in estimator._private_state})
    return state


def loaded_state_spec(estimator) -> tuple[dict, dict]:
    """(required, optional) checks of the fitted state, by attribute name."""
    required = {
        "n_features_in_": is_int(1),
        "n_outputs_": is_int(1),
        "network_": dict_of(is_any),
        "samples_": is_instance(PosteriorSamples),
        "diagnostics_": dict_of(is_any),
        "acceptance_rate_": is_float,
        "_last_position": is_tensor(ndim=2, floating=True),
        "_step_size_per_chain": is_tensor(ndim=1, floating=True),
        "_inv_mass": optional(is_tensor(floating=True)),
        "_generator_states": optional(list_of(is_tensor(ndim=1))),
    }
    if estimator._is_classifier():
        required["classes_"] = check_classes
    else:
        required.update(_y_2d=is_bool, y_mean_=is_any, y_scale_=is_any)
    optional_entries = {"feature_names_in_": is_array(ndim=1, kinds="UO")}
    if estimator._is_classifier():  # absent from files written before calibration existed
        optional_entries.update(
            calibration_temperature_=check_temperature,
            calibration_posterior_=check_temperature_posterior,
        )
    if not estimator._is_classifier():  # the learned (or fixed) noise, in y units
        optional_entries.update(_y_var=is_any, noise_precision_=is_any, noise_std_=is_any)
    # S3HMC's sampled precisions
    optional_entries.update(precisions_=is_tensor(ndim=3), precision_names_=is_any)
    return required, optional_entries


def check_loaded_state(estimator, state: dict) -> None:
    """Check a decoded fitted state before :meth:`_set_state` (see ``sklearn_bnn.load``):
    the type of every attribute, and that every size agrees with the stored draws. The
    network is built on the ``meta`` device only, so no size in the file allocates memory."""
    estimator._check_params()
    check_state(state, *estimator._loaded_state_spec())
    n_in, n_out, samples = state["n_features_in_"], state["n_outputs_"], state["samples_"]
    check_feature_names(state)
    _check_diagnostics(state["diagnostics_"], samples.n_chains, samples.dim)
    if estimator._is_classifier():
        n_classes = len(state["classes_"])
        if n_out != (1 if n_classes == 2 else n_classes):
            raise ValueError(f"n_outputs_={n_out} does not fit {n_classes} classes_.")
    else:
        if not state["_y_2d"] and n_out != 1:
            raise ValueError(f"n_outputs_={n_out} for a single-output regressor.")
        for name in ("y_mean_", "y_scale_"):
            value = np.asarray(state[name])
            if value.dtype.kind not in "iuf" or value.size != n_out:
                raise ValueError(f"{name} must hold n_outputs_={n_out} numbers.")
    net_state = state["network_"]
    check_state(
        net_state,
        {
            "constants": dict_of(is_tensor()),
            "dtype": lambda v, f: v in (torch.float32, torch.float64) or _not_dtype(f, v),
        },
    )
    if estimator.module is None:
        check_depth(estimator.hidden_layer_sizes, len(samples.names), "samples_")
    net = meta_module(lambda: estimator._build_network(0, n_in, n_out))
    net = FunctionalNetwork(net, device="meta", dtype=net_state["dtype"])
    what = f"the network of n_features_in_={n_in}, n_outputs_={n_out} and these parameters"
    check_named_shapes(
        "samples_",
        dict(zip(samples.names, samples.shapes, strict=True)),
        dict(zip(net.names, net.shapes, strict=True)),
        what,
    )
    check_named_shapes("network_ constants", net_state["constants"], net._constants, what)
    chains, dim = samples.n_chains, samples.dim
    if state.get("precisions_") is not None:  # sampled precisions (S3HMC or Gibbs)
        names = state.get("precision_names_")
        n_hyper = len(names) if isinstance(names, list | tuple) else -1
        if tuple(state["precisions_"].shape) != (chains, samples.n_draws, n_hyper):
            raise ValueError(
                f"precisions_ does not have the shape ({chains}, {samples.n_draws}, "
                "len(precision_names_))."
            )
        # S3HMC's chains also move the log-precisions; Gibbs blocks keep them aside
        if state["_last_position"].shape[-1] == dim + n_hyper:
            dim += n_hyper
    if tuple(state["_last_position"].shape) != (chains, dim):
        raise ValueError(f"_last_position does not have the shape ({chains}, {dim}).")
    if len(state["_step_size_per_chain"]) != chains:
        raise ValueError(f"_step_size_per_chain does not have {chains} entries.")
    if state["_inv_mass"] is not None and state["_inv_mass"].shape[-1] != dim:
        raise ValueError(f"_inv_mass does not have {dim} columns.")


def set_state(estimator, state: dict) -> None:
    """Set a checked fitted state and rebuild the network its constants belong to."""
    net_state = state.pop("network_")
    for name, value in state.items():
        setattr(estimator, name, value)
    net = estimator._build_network(0, estimator.n_features_in_, estimator.n_outputs_)
    net.load_state_dict(net_state["constants"], strict=False)
    estimator.network_ = FunctionalNetwork(net, dtype=net_state["dtype"])


def _check_diagnostics(diag: dict, n_chains: int, dim: int) -> None:
    """``diagnostics_`` of a loaded model: numbers, or arrays with one row per chain (the
    adapted inverse mass: (dim,) or (n_chains, dim)), or dicts of numbers by name (the
    hyperparameters' ESS and R-hat)."""
    for key, value in diag.items():
        if isinstance(value, dict):
            if not all(isinstance(v, bool | int | float) for v in value.values()):
                raise ValueError(f"diagnostics_[{key!r}] must map names to numbers.")
        elif isinstance(value, np.ndarray):
            shapes = [(dim,), (n_chains, dim)] if key == "inv_mass" else [(n_chains,)]
            if value.dtype.kind not in "biuf" or value.shape not in shapes:
                raise ValueError(f"diagnostics_[{key!r}] must have a shape in {shapes}.")
        elif value is not None and not isinstance(value, bool | int | float):
            raise ValueError(f"diagnostics_[{key!r}] must be a number or an array.")
    if diag.get("n_chains", n_chains) != n_chains:
        raise ValueError(f"diagnostics_['n_chains'] is not the {n_chains} chains of samples_.")


def _not_dtype(field, value):
    raise ValueError(f"{field} must be torch.float32 or torch.float64, got {value!r}.")
