"""sklearn_bnn: Bayesian neural networks with the scikit-learn interface."""

from ._persistence import load, save
from .estimators import PlanNetRegressor

__version__ = "0.1.0"

__all__ = [
    "PlanNetRegressor",
    "__version__",
    "load",
    "save",
]
