"""sklearn_bnn: Bayesian neural networks with the scikit-learn interface."""

from ._persistence import load, save
from .decision import BayesDecisionClassifier
from .ensemble import EnsembleReducer
from .metrics import uncertainty_report

__version__ = "0.1.0"

__all__ = [
    "BayesDecisionClassifier",
    "EnsembleReducer",
    "__version__",
    "load",
    "save",
    "uncertainty_report",
]
