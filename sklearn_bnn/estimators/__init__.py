"""scikit-learn estimators."""

from .hmc import HMCClassifier, HMCRegressor
from .plannet import PlanNetRegressor

__all__ = ["HMCClassifier", "HMCRegressor", "PlanNetRegressor"]
