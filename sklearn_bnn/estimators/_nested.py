"""Parameters that a name or an object may give, reached as ``<parameter>__<setting>``.

An estimator's ``sampler`` ("hmc" or ``HMC(n_steps=30)``), ``init`` ("map" or
``MAPStart(n_steps=200)``) and ``calibration`` ("temperature" or
``TemperatureCalibration(validation_fraction=0.3)``) each stand for an object with settings of
its own. scikit-learn's nested parameters (``get_params(deep=True)``, ``set_params``, ``clone``,
``GridSearchCV``) reach an object's settings; the two functions here let them reach the
settings of a name too: a name given becomes its object at the object's defaults first. An
estimator lists such parameters in ``_NAMED_OBJECTS``, mapping each to the function that turns
a name into its object (None where the name stands for nothing to configure, as
``init="random"``), and calls the functions from its ``get_params`` and ``set_params``.
"""

from __future__ import annotations


def with_named_settings(estimator, params: dict) -> dict:
    """``params`` (a deep ``get_params``) with the settings of every object behind a name, as
    ``<parameter>__<setting>`` at that object's defaults."""
    params = dict(params)
    for name, resolve in estimator._NAMED_OBJECTS.items():
        value = getattr(estimator, name, None)
        if not isinstance(value, str):
            continue
        try:
            named = resolve(value)
        except ValueError:  # an unknown name: fit says so
            continue
        if named is not None:
            params.update({f"{name}__{k}": v for k, v in named.get_params(deep=False).items()})
    return params


def named_as_objects(estimator, params: dict) -> dict:
    """``params`` for ``set_params`` with each parameter given by name whose settings are set
    (``sampler__n_steps=20`` beside ``sampler="hmc"`` or the stored name) replaced by a new
    object of that name at its defaults, so that the settings apply to it; a name that
    stands for nothing to configure is a ValueError naming it."""
    for name, resolve in estimator._NAMED_OBJECTS.items():
        value = params.get(name, getattr(estimator, name, None))
        nested = sorted(k for k in params if k.startswith(f"{name}__"))
        if not (isinstance(value, str) and nested):
            continue
        named = resolve(value)
        if named is None:
            raise ValueError(
                f"{name}={value!r} has no settings, got {nested}: give {name} an object "
                "with those settings first."
            )
        params = {name: named, **{k: v for k, v in params.items() if k != name}}
    return params


class NestedSettingsMixin:
    """``get_params`` / ``set_params`` through :func:`with_named_settings` and
    :func:`named_as_objects`, for an estimator whose base does not call them itself."""

    _NAMED_OBJECTS: dict = {}

    def get_params(self, deep=True):
        """The parameters; with ``deep``, also the settings of every object behind a
        parameter, where a name gives it too."""
        params = super().get_params(deep=deep)
        return with_named_settings(self, params) if deep else params

    def set_params(self, **params):
        """Set parameters, an object's settings as ``<parameter>__<setting>``."""
        return super().set_params(**named_as_objects(self, params))
