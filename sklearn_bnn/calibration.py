"""Calibration of the classifiers' predictive: a temperature learned from held-out rows.

:class:`TemperatureCalibration` is what a classifier's ``calibration="temperature"`` stands
for; its ``validation_fraction`` is the share of the training rows held out, stratified by
class, to learn the temperature T of the predictive ``p^(1/T)`` (renormalised) from the
held-out labels (docs/hmc.md, "Calibration"; temperature scaling, Guo et al. 2017).
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.utils.validation import column_or_1d

from ._persistence_registry import register
from ._seeding import child, root_seed
from ._utils import SettingsObject, check_scalar_param

__all__ = ["MIN_VALIDATION_ROWS", "TemperatureCalibration", "held_out_rows"]

# fewer held-out rows than this and the temperature is left at 1 (its prior mode)
MIN_VALIDATION_ROWS = 20


def held_out_rows(y: np.ndarray, fraction: float, seed) -> tuple[np.ndarray, np.ndarray] | None:
    """Row indices ``(fit, held_out)`` of a stratified split, or None when the held-out part
    would have fewer than :data:`MIN_VALIDATION_ROWS` rows or a class too small to split.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Encoded classes.
    fraction : float
        Share of the rows held out, in (0, 1).
    seed : int
        Seed of the split.
    """
    n = len(y)
    n_held = int(math.ceil(fraction * n))
    counts = np.bincount(y)
    if n_held < MIN_VALIDATION_ROWS or n - n_held < 2 * len(counts) or counts.min() < 2:
        return None
    rows = np.arange(n)
    fit_rows, held = train_test_split(rows, test_size=n_held, stratify=y, random_state=seed)
    return np.sort(fit_rows), np.sort(held)


@register
class TemperatureCalibration(SettingsObject):
    """A temperature of the predictive learned on held-out rows (docs/hmc.md, "Calibration").

    The classifiers' ``calibration="temperature"`` is ``TemperatureCalibration()``;
    ``calibration=TemperatureCalibration(validation_fraction=0.3)`` or
    ``set_params(calibration__validation_fraction=0.3)`` holds out another share.

    Parameters
    ----------
    validation_fraction : float in (0, 1), default=0.2
        Share of the training rows held out (stratified) to learn the temperature.

    Examples
    --------
    >>> from sklearn_bnn import HMCClassifier
    >>> HMCClassifier().set_params(calibration__validation_fraction=0.3).calibration
    TemperatureCalibration(validation_fraction=0.3)
    """

    def __init__(self, validation_fraction=0.2):
        self.validation_fraction = validation_fraction

    def _check_params(self) -> None:
        check_scalar_param(
            self.validation_fraction,
            "validation_fraction",
            low=0,
            high=1,
            low_inclusive=False,
            high_inclusive=False,
        )

    def held_out_split(self, y, random_state):
        """``(fit_rows, held_rows)`` of the labels ``y``, stratified, drawn from the
        "calibration" child of ``random_state``'s seed sequence; None when fewer than 20 rows
        would be held out (see :func:`held_out_rows`)."""
        self._check_params()
        codes = np.unique(column_or_1d(y, warn=True), return_inverse=True)[1]
        seed = int(child(root_seed(random_state), "calibration").generate_state(1)[0])
        return held_out_rows(codes, self.validation_fraction, seed)
