"""Parameters that a name or an object may give, reached as ``<parameter>__<setting>``.

An estimator's ``sampler`` ("hmc" or ``HMC(n_steps=30)``), ``init`` ("map" or
``MAPStart(n_steps=200)``) and ``calibration`` ("temperature" or
``TemperatureCalibration(validation_fraction=0.3)``) each stand for an object with settings of
its own. scikit-learn's nested parameters (``get_params(deep=True)``, ``set_params``, ``clone``,
``GridSearchCV``) reach an object's settings; :class:`NestedSettingsMixin` lets them reach the
settings of a name too: a name given becomes its object at the object's defaults first.
"""

from __future__ import annotations


class NestedSettingsMixin:
    """``get_params`` / ``set_params`` that reach the settings behind a name.

    ``_NAMED_OBJECTS`` maps each such parameter to the function that turns a name into its
    object (None where the name stands for nothing to configure, as ``init="random"``).
    """

    _NAMED_OBJECTS: dict = {}

    def get_params(self, deep=True):
        """The parameters; with ``deep``, the settings of every object behind a parameter as
        ``<parameter>__<setting>``, also where a name gives it (its object's defaults)."""
        params = super().get_params(deep=deep)
        if not deep:
            return params
        for name, resolve in self._NAMED_OBJECTS.items():
            value = getattr(self, name, None)
            if not isinstance(value, str):
                continue
            try:
                named = resolve(value)
            except ValueError:  # an unknown name: fit says so
                continue
            if named is not None:
                params.update(
                    {f"{name}__{k}": v for k, v in named.get_params(deep=False).items()}
                )
        return params

    def set_params(self, **params):
        """Set parameters, an object's own settings as ``<parameter>__<setting>`` (a setting
        the object does not take is a ValueError naming it). A parameter given by name becomes
        a new object of that name with its defaults first, so
        ``HMCClassifier().set_params(sampler__n_steps=20)`` and a ``GridSearchCV`` over
        ``sampler__n_steps``, ``init__n_steps`` or ``calibration__validation_fraction``
        change the fit."""
        for name, resolve in self._NAMED_OBJECTS.items():
            value = params.get(name, getattr(self, name, None))
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
        return super().set_params(**params)
