"""The scikit-learn estimator contract, checked by scikit-learn itself."""

import pytest
from sklearn.utils.estimator_checks import check_param_validation, parametrize_with_checks

from sklearn_bnn import (
    HMCClassifier,
    HMCRegressor,
    SGMCMCClassifier,
    SGMCMCRegressor,
    SplitHMCClassifier,
    SplitHMCRegressor,
)
from sklearn_bnn.samplers import NUTS, BridgedHMC

# float64 networks: scikit-learn compares predictions on permuted and sliced inputs to 1e-7, and
# float32 matrix products round differently with a row's position on some CPUs (5e-8 measured
# under MKL's AVX2 kernels); the contract is about the estimator, not float32 rounding.
PORTABLE = dict(dtype="float64")
FAST = dict(
    hidden_layer_sizes=(16,), n_draws=30, n_warmup=30, n_steps=5, random_state=0, **PORTABLE
)

ESTIMATORS = [
    HMCClassifier(**FAST),
    HMCRegressor(**FAST),
    SplitHMCClassifier(n_splits=2, n_init_steps=100, **FAST),
    SplitHMCRegressor(n_splits=2, n_init_steps=100, **FAST),
    HMCRegressor(sampler=NUTS(max_tree_depth=3), **FAST),
    SGMCMCClassifier(
        hidden_layer_sizes=(16,),
        batch_size=16,
        step_size=0.01,
        n_draws=10,
        n_warmup=10,
        random_state=0,
        **PORTABLE,
    ),
    SGMCMCRegressor(
        hidden_layer_sizes=(16,),
        batch_size=16,
        step_size=0.01,
        n_draws=10,
        n_warmup=10,
        random_state=0,
        **PORTABLE,
    ),
    HMCClassifier(**{**FAST, "sampler": BridgedHMC(n_split_params=1, n_steps=5)}),
]


def _expected_failures(estimator):
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failures)
def test_sklearn_contract(estimator, check):
    check(estimator)


def _every_estimator():
    from sklearn_bnn import (
        LossCalibratedBNN,
        MCDropoutClassifier,
        MCDropoutRegressor,
        PlanNetRegressor,
    )

    return [
        *ESTIMATORS[:4],
        ESTIMATORS[5],
        ESTIMATORS[6],
        MCDropoutClassifier(hidden_layer_sizes=(4,), max_iter=2),
        MCDropoutRegressor(hidden_layer_sizes=(4,), max_iter=2),
        LossCalibratedBNN(hidden_layer_sizes=(4,), max_iter=2),
        PlanNetRegressor(hidden_layer_sizes=(4,), max_iter=2, n_estimators=1),
    ]


@pytest.mark.parametrize("estimator", _every_estimator(), ids=lambda e: type(e).__name__)
def test_every_parameter_is_validated_the_scikit_learn_way(estimator):
    """scikit-learn's own check: each parameter has a constraint, and a value of the wrong
    type or range makes ``fit`` raise InvalidParameterError naming it, before any work."""
    check_param_validation(type(estimator).__name__, estimator)
