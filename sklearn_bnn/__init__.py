"""sklearn_bnn: Bayesian neural networks with the scikit-learn interface."""

from ._persistence import load, save
from .estimators import LossCalibratedBNN, MCDropoutClassifier, MCDropoutRegressor

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "LossCalibratedBNN",
    "MCDropoutClassifier",
    "MCDropoutRegressor",
    "load",
    "save",
]
