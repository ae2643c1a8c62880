"""scikit-learn estimators."""

from .hmc import HMCClassifier, HMCRegressor

__all__ = ["HMCClassifier", "HMCRegressor"]
