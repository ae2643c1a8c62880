"""scikit-learn estimators."""

from .dropout import MCDropoutClassifier, MCDropoutRegressor
from .lcbnn import LossCalibratedBNN

__all__ = ["LossCalibratedBNN", "MCDropoutClassifier", "MCDropoutRegressor"]
