"""scikit-learn estimators."""

from .plannet import PlanNetRegressor

__all__ = ["PlanNetRegressor"]
