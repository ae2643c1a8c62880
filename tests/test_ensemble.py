import joblib
import numpy as np
import pytest
from _stand_ins import BootstrapEnsemble
from sklearn.datasets import load_digits, make_classification
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.utils.estimator_checks import parametrize_with_checks
from threadpoolctl import threadpool_limits

from sklearn_bnn.ensemble import EnsembleReducer, greedy_member_selection
from sklearn_bnn.metrics import expected_calibration_error

GOOD = [[0.9, 0.1], [0.2, 0.8]]
BAD = [[0.6, 0.4], [0.55, 0.45]]  # wrong on the second point


def test_greedy_keeps_the_member_the_metric_needs():
    for seed in range(5):
        result = greedy_member_selection(np.array([BAD, GOOD]), [0, 1], random_state=seed)
        np.testing.assert_array_equal(result["kept"], [1])
        assert result["score_full"] == result["score_reduced"] == 1.0


def test_greedy_never_impairs_the_metric_beyond_tolerance():
    rng = np.random.default_rng(0)
    stack = rng.dirichlet(np.ones(3), size=(30, 200))
    y = rng.integers(0, 3, 200)
    for metric in ("accuracy", "nll", "brier", "ece"):
        for tolerance in (0.0, 0.02):
            res = greedy_member_selection(
                stack, y, metric=metric, tolerance=tolerance, n_repeats=3, random_state=0
            )
            sign = 1 if metric == "accuracy" else -1
            assert sign * (res["score_reduced"] - res["score_full"]) >= -tolerance - 1e-12
            assert len(res["n_kept_per_repeat"]) == 3
            assert len(res["kept"]) == res["n_kept_per_repeat"].min()
    # a huge tolerance lets everything but one member go
    res = greedy_member_selection(stack, y, tolerance=1.0, random_state=0)
    assert len(res["kept"]) == 1


def test_reported_scores_recomputed():
    rng = np.random.default_rng(1)
    stack = rng.dirichlet(np.ones(4) * 0.5, size=(20, 300))
    y = rng.integers(0, 4, 300)
    res = greedy_member_selection(stack, y, metric="ece", random_state=3)
    assert res["score_full"] == pytest.approx(expected_calibration_error(y, stack.mean(0)))
    assert res["score_reduced"] == pytest.approx(
        expected_calibration_error(y, stack[res["kept"]].mean(0))
    )
    again = greedy_member_selection(stack, y, metric="ece", random_state=3)
    np.testing.assert_array_equal(again["kept"], res["kept"])


@pytest.mark.parametrize(
    "params, match",
    [
        ({"metric": "f1"}, "'metric' parameter"),
        ({"method": "best"}, "'method' parameter"),
        ({"tolerance": -0.1}, "'tolerance' parameter"),
        ({"confidence_level": 1.0}, "'confidence_level' parameter"),
        ({"validation_fraction": 1.0}, "'validation_fraction' parameter"),
        ({"n_repeats": 0}, "'n_repeats' parameter"),
        ({"n_resamples": 0}, "'n_resamples' parameter"),
    ],
)
def test_bad_parameters_raise_at_fit(params, match):
    reducer = EnsembleReducer(BootstrapEnsemble(n_members=2), **params)
    X, y = make_classification(40, random_state=0)
    with pytest.raises(ValueError, match=match):
        reducer.fit(X, y)


@pytest.mark.parametrize("stack", [False, True])
def test_empty_data_is_refused_with_scikit_learns_message(stack):
    X, y = make_classification(40, random_state=0)
    reducer = EnsembleReducer(None if stack else BootstrapEnsemble(n_members=2))
    empty = np.zeros((3, 0, 2)) if stack else X[:0]
    with pytest.raises(ValueError, match="0 sample"):
        reducer.fit(empty, y[:0])


def test_estimator_without_predict_samples_rejected():
    X, y = make_classification(40, random_state=0)
    with pytest.raises(ValueError, match="predict_samples"):
        EnsembleReducer(LogisticRegression()).fit(X, y)


def test_holds_out_validation_data_and_predicts_with_kept_members(tmp_path):
    X, y = make_classification(200, n_classes=3, n_informative=4, random_state=0)
    reducer = EnsembleReducer(
        BootstrapEnsemble(n_members=12, random_state=0), metric="brier", random_state=0
    ).fit(X, y)
    assert reducer.n_members_full_ == 12
    assert reducer.n_members_ == len(reducer.kept_indices_) <= 12
    # the inner model was fitted on the 80 % not held out
    assert reducer.estimator_.members_[0].n_features_in_ == 20
    assert sum(len(m.classes_) for m in reducer.estimator_.members_) == 36
    all_draws = reducer.estimator_.predict_samples(X)
    np.testing.assert_allclose(reducer.predict_samples(X), all_draws[reducer.kept_indices_])
    np.testing.assert_allclose(reducer.predict_proba(X), all_draws[reducer.kept_indices_].mean(0))
    assert not hasattr(reducer, "transform")
    joblib.dump(reducer, tmp_path / "r.joblib")
    np.testing.assert_array_equal(joblib.load(tmp_path / "r.joblib").predict(X), reducer.predict(X))


def test_frozen_estimator_and_stack_mode_agree():
    X, y = make_classification(200, n_classes=3, n_informative=4, random_state=1)
    ens = BootstrapEnsemble(n_members=15, random_state=0).fit(X, y)
    frozen = EnsembleReducer(FrozenEstimator(ens), metric="nll", random_state=4).fit(X, y)
    stack = ens.predict_samples(X)
    stacked = EnsembleReducer(metric="nll", random_state=4).fit(stack, y)
    np.testing.assert_array_equal(frozen.kept_indices_, stacked.kept_indices_)
    assert frozen.estimator_.estimator is ens  # not refitted
    np.testing.assert_allclose(stacked.transform(stack), stack[stacked.kept_indices_])
    np.testing.assert_allclose(
        EnsembleReducer(metric="nll", random_state=4).fit_transform(stack, y),
        stack[stacked.kept_indices_],
    )
    with pytest.raises(ValueError, match="stack of 15"):
        stacked.transform(stack[:3])
    assert not hasattr(stacked, "predict")


@pytest.fixture(scope="module")
def digits_ensemble():
    """200 bootstrapped logistic regressions on digits, with validation and test splits."""
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    X_rest, X_test, y_rest, y_test = train_test_split(
        X, y, test_size=0.3, random_state=0, stratify=y
    )
    X_fit, X_val, y_fit, y_val = train_test_split(
        X_rest, y_rest, test_size=0.4, random_state=0, stratify=y_rest
    )
    with threadpool_limits(1):  # many tiny fits: BLAS threads only add overhead
        ens = BootstrapEnsemble(n_members=200, C=50.0, random_state=0).fit(X_fit, y_fit)
    return ens, (X_val, y_val), (X_test, y_test)


def test_digits_accuracy_needs_few_members_calibration_more(digits_ensemble):
    ens, (X_val, y_val), (X_test, y_test) = digits_ensemble
    kw = {"method": "greedy", "tolerance": 0.0, "n_repeats": 5, "random_state": 0}
    by_acc = EnsembleReducer(FrozenEstimator(ens), metric="accuracy", **kw).fit(X_val, y_val)
    by_ece = EnsembleReducer(FrozenEstimator(ens), metric="ece", **kw).fit(X_val, y_val)
    # accuracy is kept with under half of the members, on validation and (nearly) on test data
    assert by_acc.n_members_ < 100
    assert by_acc.metric_reduced_ >= by_acc.metric_full_
    assert by_acc.score(X_test, y_test) >= ens.score(X_test, y_test) - 0.015
    # calibration needs more members (seeds/004 Fig. 5), in every greedy pass on average
    assert by_ece.n_members_ > by_acc.n_members_
    assert by_ece.n_members_per_repeat_.mean() > 1.5 * by_acc.n_members_per_repeat_.mean()
    assert by_ece.metric_reduced_ <= by_ece.metric_full_


@parametrize_with_checks(
    [EnsembleReducer(BootstrapEnsemble(n_members=3, random_state=0), n_repeats=2, random_state=0)]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
