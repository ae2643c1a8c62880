"""scikit-learn estimators."""

from ._variance_parts import PredictiveCovarianceParts, PredictiveVarianceParts
from .dropout import MCDropoutClassifier, MCDropoutRegressor
from .hmc import HMCClassifier, HMCRegressor
from .lcbnn import LossCalibratedBNN
from .plannet import PlanNetRegressor
from .sgmcmc import SGMCMCClassifier, SGMCMCRegressor
from .split import SplitHMCClassifier, SplitHMCRegressor

__all__ = [
    "HMCClassifier",
    "HMCRegressor",
    "LossCalibratedBNN",
    "MCDropoutClassifier",
    "MCDropoutRegressor",
    "PlanNetRegressor",
    "PredictiveCovarianceParts",
    "PredictiveVarianceParts",
    "SGMCMCClassifier",
    "SGMCMCRegressor",
    "SplitHMCClassifier",
    "SplitHMCRegressor",
]
