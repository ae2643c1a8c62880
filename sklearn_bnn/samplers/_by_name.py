"""Samplers by name: ``sampler="nuts"`` on an estimator or in :func:`.sample`.

A new sampler is one module defining a :class:`~._base.Sampler` subclass, registered with
:func:`register_sampler`; nothing else in the package names it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from .._persistence_registry import SAMPLERS, register_sampler_class
from ._base import Sampler

__all__ = [
    "SAMPLERS",
    "SETUPS",
    "register_sampler",
    "register_setup",
    "resolve_sampler",
    "sampler_names",
    "setup_sampler",
    "with_sampler_names",
]

# data access -> how an estimator prepares a sampler of that access for its run (register_setup)
SETUPS: dict[str, Callable] = {}


def register_sampler(name: str):
    """Class decorator: make a :class:`Sampler` subclass available as ``sampler=name``."""

    def decorate(cls):
        if not (isinstance(cls, type) and issubclass(cls, Sampler)):
            raise TypeError(f"{cls!r} is not a Sampler subclass.")
        register_sampler_class(name.lower(), cls)  # also storable by save/load under this name
        return cls

    return decorate


def sampler_names(data_access: str | None = None) -> list[str]:
    """The registered names, in the order of registration.

    Parameters
    ----------
    data_access : {"full", "minibatch"}, optional
        Only the samplers that read the data this way (their class's ``data_access``).
    """
    return [
        name
        for name, cls in SAMPLERS.items()
        if data_access is None or getattr(cls, "data_access", "full") == data_access
    ]


def with_sampler_names(doc: str | None) -> str | None:
    """``doc`` with ``{full_samplers}`` and ``{minibatch_samplers}`` replaced by the registered
    names of that data access, quoted and comma-separated, so that docstrings list the
    registry rather than a copy of it."""
    if doc is None:  # python -OO
        return doc
    for access in ("full", "minibatch"):
        names = ", ".join(f'"{name}"' for name in sampler_names(access))
        doc = doc.replace("{" + access + "_samplers}", names)
    return doc


def resolve_sampler(spec, **defaults) -> Sampler:
    """The sampler object that ``spec`` names.

    Parameters
    ----------
    spec : str or Sampler
        A registered name (built with those of ``defaults`` that its class takes) or a
        configured object with a ``build(target)`` method (returned as it is).
    **defaults
        Parameter values for a sampler given by name (the estimators' flat parameters, e.g.
        ``n_steps``, ``max_tree_depth``).
    """
    if isinstance(spec, str):
        cls = SAMPLERS.get(spec.lower())
        if cls is None:
            raise ValueError(
                f"sampler must be one of {sorted(SAMPLERS)} or a sampler object, got {spec!r}."
            )
        accepted = inspect.signature(cls.__init__).parameters
        return cls(**{k: v for k, v in defaults.items() if k in accepted})
    if callable(getattr(spec, "build", None)):
        return spec
    raise ValueError(
        f"sampler must be one of {sorted(SAMPLERS)} or a sampler object with a build(target) "
        f"method, got {spec!r}."
    )


def register_setup(data_access: str):
    """Decorator: ``setup(sampler, **options)`` prepares the samplers whose ``data_access`` is
    ``data_access`` for an estimator's run (the minibatch samplers: the MAP start by minibatch
    Adam and the step chosen from the data, :func:`.sg_step_size.estimator_setup`). The
    estimators call it through :func:`setup_sampler` and so never name a sampler class."""

    def decorate(setup):
        SETUPS[data_access] = setup
        return setup

    return decorate


def setup_sampler(sampler, data_access: str, **options):
    """``sampler`` as an estimator of the given ``data_access`` runs it: what the setup
    registered for that access (:func:`register_setup`) makes of it with the estimator's
    ``options``, or ``sampler`` itself where none is registered (the full-data samplers)."""
    setup = SETUPS.get(data_access)
    return sampler if setup is None else setup(sampler, **options)
