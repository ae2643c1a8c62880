"""The registries of weights-only persistence, and the mixin an estimator takes part with.

A leaf module (standard library only): the classes, network factories and samplers that
:func:`sklearn_bnn.load` may rebuild are recorded here, by the modules that define them, without
importing the encoder, the decoder or their checks (:mod:`._codec`, :mod:`._state_checks`;
:mod:`._persistence` holds :func:`~sklearn_bnn.save` and :func:`~sklearn_bnn.load`).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "SAMPLERS",
    "WeightsOnlyMixin",
    "fitted_attributes",
    "register",
    "register_network",
    "register_sampler_class",
]

REGISTRY: dict[str, type] = {}
NETWORKS: dict[str, Callable] = {}
# the one registry of samplers by name: sampler="nuts" on an estimator, sample() and load all
# read it; filled by sklearn_bnn.samplers.register_sampler
SAMPLERS: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: allow ``cls`` to be rebuilt by :func:`load`.

    Estimators (classes with ``_get_state``) are rebuilt from parameters and a checked fitted
    state; other classes from ``cls.from_state(state)`` after ``cls._check_state(state)``.
    """
    REGISTRY[cls.__name__] = cls
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
    NETWORKS[key] = factory
    return factory


def register_sampler_class(name: str, cls: type) -> None:
    """Make sampler objects of ``cls`` storable by ``name`` (called by
    :func:`sklearn_bnn.samplers.register_sampler`, so that this module imports no sampler)."""
    SAMPLERS[name] = cls


def registered_sampler_name(obj) -> str | None:
    """The name ``obj``'s class is registered under as a sampler, or None."""
    for name, cls in SAMPLERS.items():
        if type(obj) is cls:
            return name
    return None


def is_estimator_class(cls) -> bool:
    """Whether ``cls`` is rebuilt as an estimator (parameters and a fitted state)."""
    return hasattr(cls, "_get_state") and hasattr(cls, "get_params")


def fitted_attributes(estimator) -> dict:
    """The public fitted attributes of ``estimator``: those ending in ``_``."""
    return {k: v for k, v in vars(estimator).items() if k.endswith("_") and not k.startswith("_")}


class WeightsOnlyMixin:
    """Default ``_get_state``/``_set_state``: every public fitted attribute (ending in ``_``).

    Subclasses that are registered must also implement ``_check_loaded_state(state)``.
    """

    def _get_state(self) -> dict:
        return fitted_attributes(self)

    def _check_loaded_state(self, state: dict) -> None:
        raise ValueError(f"{type(self).__name__} does not check a loaded state; use joblib.")

    def _set_state(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)
