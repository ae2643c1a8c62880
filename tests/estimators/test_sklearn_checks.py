"""The scikit-learn estimator contract, checked by scikit-learn itself."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_bnn import (
    HMCClassifier,
    HMCRegressor,
    SGMCMCClassifier,
    SGMCMCRegressor,
    SplitHMCClassifier,
    SplitHMCRegressor,
)
from sklearn_bnn.samplers import NUTS, BridgedHMC

FAST = dict(hidden_layer_sizes=(16,), n_samples=30, n_warmup=30, n_leapfrog=5, random_state=0)

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
        n_samples=10,
        n_warmup=10,
        random_state=0,
    ),
    SGMCMCRegressor(
        hidden_layer_sizes=(16,),
        batch_size=16,
        step_size=0.01,
        n_samples=10,
        n_warmup=10,
        random_state=0,
    ),
    HMCClassifier(**{**FAST, "sampler": BridgedHMC(n_split_params=1, n_leapfrog=5)}),
]


def _expected_failures(estimator):
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failures)
def test_sklearn_contract(estimator, check):
    check(estimator)
