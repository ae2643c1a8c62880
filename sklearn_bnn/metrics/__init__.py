"""Calibration, uncertainty and utility metrics, scorers and a one-call report.

Classification metrics take true labels and predictive probabilities ``(n_samples,
n_classes)`` with columns in the order of the sorted labels (``classes_``); uncertainty
metrics take per-draw probabilities ``(n_draws, n_samples, n_classes)`` as returned by
``predict_samples``; regression metrics take a Gaussian mean and standard deviation.
:func:`predict_samples` reads per-draw predictions through a ``Pipeline``. See
``docs/metrics.md``.
"""

from ._classification import (
    brier_score,
    expected_calibration_error,
    maximum_calibration_error,
    negative_log_likelihood,
    top_label_calibration_curve,
)
from ._predict_samples import predict_samples
from ._regression import (
    gaussian_crps,
    gaussian_nll,
    interval_coverage,
    interval_coverage_error,
    regression_calibration_curve,
)
from ._report import uncertainty_report
from ._scorer import (
    GaussianScorer,
    ProbaScorer,
    get_scorer,
    get_scorer_names,
    make_gaussian_scorer,
    make_proba_scorer,
)
from ._selective import accuracy_coverage_curve
from ._uncertainty import (
    cumulative_accuracy,
    expected_utility_score,
    mean_utility,
    mutual_information,
    mutual_information_matrix,
    predictive_entropy,
)

__all__ = [
    "GaussianScorer",
    "ProbaScorer",
    "accuracy_coverage_curve",
    "brier_score",
    "cumulative_accuracy",
    "expected_calibration_error",
    "expected_utility_score",
    "gaussian_crps",
    "gaussian_nll",
    "get_scorer",
    "get_scorer_names",
    "interval_coverage",
    "interval_coverage_error",
    "make_gaussian_scorer",
    "make_proba_scorer",
    "maximum_calibration_error",
    "mean_utility",
    "mutual_information",
    "mutual_information_matrix",
    "negative_log_likelihood",
    "predict_samples",
    "predictive_entropy",
    "regression_calibration_curve",
    "top_label_calibration_curve",
    "uncertainty_report",
]
