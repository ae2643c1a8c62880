"""The scikit-learn estimator contract, checked by scikit-learn itself."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_bnn import HMCClassifier, HMCRegressor, SplitHMCClassifier, SplitHMCRegressor
from sklearn_bnn.samplers import BridgedHMC

FAST = dict(hidden_layer_sizes=(16,), n_samples=30, n_warmup=30, n_leapfrog=5, random_state=0)

ESTIMATORS = [
    HMCClassifier(**FAST),
    HMCRegressor(**FAST),
    SplitHMCClassifier(n_splits=2, n_init_steps=100, **FAST),
    SplitHMCRegressor(n_splits=2, n_init_steps=100, **FAST),
    HMCClassifier(**{**FAST, "sampler": BridgedHMC(n_split_params=1, n_leapfrog=5)}),
]


def _expected_failures(estimator):
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failures)
def test_sklearn_contract(estimator, check):
    check(estimator)
