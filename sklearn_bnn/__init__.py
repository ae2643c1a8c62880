"""sklearn_bnn: Bayesian neural networks with the scikit-learn interface."""

from ._persistence import load, save

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "load",
    "save",
]
