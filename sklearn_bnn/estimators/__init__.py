"""scikit-learn estimators."""

from .hmc import HMCClassifier, HMCRegressor
from .split import SplitHMCClassifier, SplitHMCRegressor

__all__ = ["HMCClassifier", "HMCRegressor", "SplitHMCClassifier", "SplitHMCRegressor"]
