"""sklearn_bnn: Bayesian neural networks with the scikit-learn interface."""

from ._config import config_context, get_config, set_config
from ._persistence import load, save
from ._threads import fit_threads
from .calibration import TemperatureCalibration
from .decision import BayesDecisionClassifier
from .ensemble import EnsembleReducer
from .estimators import (
    HMCClassifier,
    HMCRegressor,
    LossCalibratedBNN,
    MCDropoutClassifier,
    MCDropoutRegressor,
    PlanNetRegressor,
    SGMCMCClassifier,
    SGMCMCRegressor,
    SplitHMCClassifier,
    SplitHMCRegressor,
)
from .exceptions import ConvergenceWarning
from .metrics import uncertainty_report
from .samplers.starts import MAPStart
from .samples import PosteriorSamples

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "config_context",
    "get_config",
    "set_config",
    "BayesDecisionClassifier",
    "ConvergenceWarning",
    "EnsembleReducer",
    "HMCClassifier",
    "HMCRegressor",
    "LossCalibratedBNN",
    "MAPStart",
    "MCDropoutClassifier",
    "MCDropoutRegressor",
    "PlanNetRegressor",
    "PosteriorSamples",
    "SGMCMCClassifier",
    "SGMCMCRegressor",
    "SplitHMCClassifier",
    "SplitHMCRegressor",
    "TemperatureCalibration",
    "fit_threads",
    "load",
    "save",
    "uncertainty_report",
]
