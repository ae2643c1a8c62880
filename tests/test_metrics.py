import warnings

import numpy as np
import pytest
from _stand_ins import BootstrapEnsemble
from scipy.stats import norm
from sklearn.calibration import calibration_curve
from sklearn.datasets import load_iris, make_classification
from sklearn.inspection import permutation_importance
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, brier_score_loss, confusion_matrix, log_loss
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_validate

from sklearn_bnn import uncertainty_report
from sklearn_bnn.metrics import (
    brier_score,
    cumulative_accuracy,
    expected_calibration_error,
    expected_utility_score,
    gaussian_nll,
    get_scorer,
    get_scorer_names,
    interval_coverage,
    make_proba_scorer,
    maximum_calibration_error,
    mean_utility,
    mutual_information,
    mutual_information_matrix,
    negative_log_likelihood,
    predictive_entropy,
    regression_calibration_curve,
    top_label_calibration_curve,
)

# --- calibration -------------------------------------------------------------------------------


def test_ece_and_mce_hand_computed():
    # confidences 0.4 (wrong), 0.9 (right), 0.95 (wrong); bins [0, 0.5], (0.5, 1]
    y_prob = [[0.4, 0.3, 0.3], [0.05, 0.9, 0.05], [0.95, 0.03, 0.02]]
    y_true = [1, 1, 2]
    # bin 1: acc 0, conf 0.4 -> gap 0.4 (1 point); bin 2: acc 0.5, conf 0.925 -> gap 0.425 (2)
    kw = {"n_bins": 2, "labels": [0, 1, 2]}
    assert expected_calibration_error(y_true, y_prob, **kw) == pytest.approx((0.4 + 2 * 0.425) / 3)
    assert maximum_calibration_error(y_true, y_prob, **kw) == pytest.approx(0.425)
    acc, conf, weight = top_label_calibration_curve(y_true, y_prob, **kw)
    np.testing.assert_allclose(acc, [0.0, 0.5])
    np.testing.assert_allclose(conf, [0.4, 0.925])
    np.testing.assert_allclose(weight, [1, 2])


def test_ece_zero_for_exactly_calibrated_predictor():
    # confidence 0.8 on every point, right on exactly 80 % of them, in both bins strategies
    y_prob = np.tile([0.8, 0.2], (1000, 1))
    y_true = np.r_[np.zeros(800, int), np.ones(200, int)]
    for strategy in ("uniform", "quantile"):
        assert expected_calibration_error(y_true, y_prob, strategy=strategy) == pytest.approx(
            0.0, abs=1e-12
        )


def test_ece_small_when_labels_drawn_from_predictions_large_when_over_confident():
    rng = np.random.default_rng(0)
    y_prob = rng.dirichlet(np.ones(4) * 0.7, size=20000)
    y_true = (rng.random(20000)[:, None] > np.cumsum(y_prob, axis=1)).sum(axis=1)
    assert expected_calibration_error(y_true, y_prob) < 0.015
    # sharpen the same predictions: right as often as before, far more confident
    sharp = y_prob**8 / (y_prob**8).sum(axis=1, keepdims=True)
    acc = np.mean(sharp.argmax(1) == y_true)
    ece_sharp = expected_calibration_error(y_true, sharp)
    assert ece_sharp > 0.15
    assert ece_sharp == pytest.approx(sharp.max(1).mean() - acc, abs=0.01)


def test_top_label_curve_matches_sklearn_calibration_curve_in_binary():
    rng = np.random.default_rng(1)
    p1 = rng.uniform(0.5, 1.0, 500)  # positive class is always the top label
    y = (rng.random(500) < p1).astype(int)
    acc, conf, _ = top_label_calibration_curve(y, p1, n_bins=10)
    prob_true, prob_pred = calibration_curve(y, p1, n_bins=10)
    np.testing.assert_allclose(acc, prob_true)
    np.testing.assert_allclose(conf, prob_pred)


def test_quantile_bins_hold_equal_counts():
    rng = np.random.default_rng(2)
    p1 = rng.uniform(0.5, 1.0, 1000)
    y = (rng.random(1000) < p1).astype(int)
    _, _, weight = top_label_calibration_curve(y, p1, n_bins=10, strategy="quantile")
    assert len(weight) == 10 and weight.min() >= 99 and weight.max() <= 101


def test_sample_weight_equals_repetition():
    rng = np.random.default_rng(3)
    y_prob = rng.dirichlet(np.ones(3), size=50)
    y = rng.integers(0, 3, 50)
    w = rng.integers(1, 4, 50)
    rep = np.repeat(np.arange(50), w)
    for func in (
        expected_calibration_error,
        maximum_calibration_error,
        brier_score,
        negative_log_likelihood,
    ):
        assert func(y, y_prob, sample_weight=w) == pytest.approx(func(y[rep], y_prob[rep]))


# --- proper scores: agree with scikit-learn ----------------------------------------------------


def test_brier_hand_computed_and_against_sklearn():
    assert brier_score([0, 2], [[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], labels=[0, 1, 2]) == (
        pytest.approx(((0.25 + 0.09 + 0.04) + (0.01 + 0.01 + 0.04)) / 2)
    )
    rng = np.random.default_rng(4)
    y_prob = rng.dirichlet(np.ones(5), size=200)
    y = rng.integers(0, 5, 200)
    assert brier_score(y, y_prob) == pytest.approx(
        brier_score_loss(y, y_prob, labels=np.arange(5), scale_by_half=False)
    )
    # binary: twice scikit-learn's default (positive-class) Brier score
    p1, yb = rng.random(100), rng.integers(0, 2, 100)
    assert brier_score(yb, p1) == pytest.approx(2 * brier_score_loss(yb, p1))
    assert brier_score(yb, np.c_[1 - p1, p1]) == pytest.approx(2 * brier_score_loss(yb, p1))


def test_nll_hand_computed_and_against_log_loss():
    assert negative_log_likelihood(["a", "b"], [[0.8, 0.2], [0.4, 0.6]]) == pytest.approx(
        -(np.log(0.8) + np.log(0.6)) / 2
    )
    rng = np.random.default_rng(5)
    y_prob = rng.dirichlet(np.ones(4), size=100)
    y = rng.integers(0, 4, 100)
    assert negative_log_likelihood(y, y_prob) == pytest.approx(log_loss(y, y_prob))
    p1, yb = rng.random(100), rng.integers(0, 2, 100)
    assert negative_log_likelihood(yb, p1) == pytest.approx(log_loss(yb, p1))


def test_nll_of_float32_probabilities_gives_no_warning():
    # float32 softmax rows sum to one only to ~1e-7: within our check, but not within
    # log_loss's float64 tolerance once converted, which used to warn on every call.
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 8)).astype(np.float32)
    y_prob = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = rng.integers(0, 8, 500)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = negative_log_likelihood(y, y_prob)
    expected = -np.mean(np.log(y_prob.astype(np.float64)[np.arange(500), y]))
    assert value == pytest.approx(expected, rel=1e-6)


# --- input validation --------------------------------------------------------------------------


def test_labels_needed_when_a_class_is_absent():
    y_prob = [[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]
    with pytest.raises(ValueError, match="labels"):
        expected_calibration_error([0, 2], y_prob)
    assert brier_score([0, 2], y_prob, labels=[0, 1, 2]) == pytest.approx(0.22)
    with pytest.raises(ValueError, match=r"not in labels: \[7\]"):
        brier_score([0, 7], y_prob, labels=[0, 1, 2])


@pytest.mark.parametrize(
    "y_prob, match",
    [
        ([[2.0, -1.0], [0.5, 0.5]], "outside \\[0, 1\\]"),
        ([[0.7, 0.7], [0.5, 0.5]], "do not sum to one"),
        ([[np.nan, 0.5], [0.5, 0.5]], "NaN"),
    ],
)
def test_bad_probabilities_rejected(y_prob, match):
    with pytest.raises(ValueError, match=match):
        expected_calibration_error([0, 1], y_prob)


def test_inconsistent_lengths_and_bad_params_rejected():
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        brier_score([0, 1, 1], [[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error([0, 1], [[0.5, 0.5], [0.5, 0.5]], n_bins=0)
    with pytest.raises(ValueError, match="strategy"):
        expected_calibration_error([0, 1], [[0.5, 0.5], [0.5, 0.5]], strategy="kmeans")


# --- uncertainty from draws --------------------------------------------------------------------


def _reference_entropy(p):
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)


def test_predictive_entropy_bounds_and_draw_average():
    np.testing.assert_allclose(predictive_entropy([[0.25] * 4, [1, 0, 0, 0]]), [np.log(4), 0.0])
    rng = np.random.default_rng(6)
    draws = rng.dirichlet(np.ones(3), size=(7, 20))
    np.testing.assert_allclose(
        predictive_entropy(draws), _reference_entropy(draws.mean(axis=0)), rtol=1e-12
    )


def test_mutual_information_hand_computed():
    draws = np.array([[[0.9, 0.1]], [[0.5, 0.5]]])
    h_mean = -(0.7 * np.log(0.7) + 0.3 * np.log(0.3))
    h_each = (-(0.9 * np.log(0.9) + 0.1 * np.log(0.1)) + np.log(2)) / 2
    np.testing.assert_allclose(mutual_information(draws), [h_mean - h_each])
    # identical draws: no model uncertainty; opposite one-hot draws: log 2
    same = np.repeat([[[0.3, 0.7]]], 5, axis=0)
    np.testing.assert_allclose(mutual_information(same), [0.0], atol=1e-15)
    np.testing.assert_allclose(mutual_information([[[1, 0]], [[0, 1]]]), [np.log(2)])
    with pytest.raises(ValueError, match="3 dimensions"):
        mutual_information([[0.5, 0.5]])


def test_mutual_information_matrix_cells_and_counts():
    rng = np.random.default_rng(7)
    draws = rng.dirichlet(np.ones(3) * 0.5, size=(10, 300))
    y = rng.integers(0, 3, 300)
    matrix, counts = mutual_information_matrix(y, draws)
    pred = draws.mean(0).argmax(1)
    np.testing.assert_array_equal(counts, confusion_matrix(y, pred, labels=[0, 1, 2]))
    mi = mutual_information(draws)
    for i in range(3):
        for j in range(3):
            cell = (y == i) & (pred == j)
            if cell.any():
                assert matrix[i, j] == pytest.approx(mi[cell].mean())
            else:
                assert np.isnan(matrix[i, j])


def test_cumulative_accuracy_matches_loop():
    rng = np.random.default_rng(8)
    draws = rng.dirichlet(np.ones(4), size=(12, 80))
    y = rng.integers(0, 4, 80)
    expected = [np.mean(draws[: s + 1].mean(0).argmax(1) == y) for s in range(12)]
    np.testing.assert_allclose(cumulative_accuracy(y, draws), expected)


# --- utility -----------------------------------------------------------------------------------


def test_mean_utility_and_expected_utility_score():
    U = [[1.0, 0.0], [0.3, 1.0]]
    assert mean_utility([0, 1, 1], [0, 0, 1], U) == pytest.approx((1.0 + 0.3 + 1.0) / 3)
    assert mean_utility(["a", "b"], [1, 1], U, sample_weight=[3, 1]) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="column indices"):
        mean_utility([0, 1], [0, 2], U)
    rng = np.random.default_rng(9)
    y_prob = rng.dirichlet(np.ones(3), size=60)
    y = rng.integers(0, 3, 60)
    assert expected_utility_score(y, y_prob, np.eye(3)) == pytest.approx(
        accuracy_score(y, y_prob.argmax(1))
    )
    # utility that pays only for deciding class 2: the Bayes action is always 2
    always_2 = [[0, 0, 1], [0, 0, 1], [0, 0, 1]]
    assert expected_utility_score(y, y_prob, always_2) == pytest.approx(1.0)


# --- regression --------------------------------------------------------------------------------


def test_gaussian_nll_closed_form_and_multioutput():
    y, mu, sd = np.array([1.0, 2.0]), np.array([0.0, 2.5]), np.array([2.0, 0.5])
    expected = np.mean(0.5 * np.log(2 * np.pi * sd**2) + (y - mu) ** 2 / (2 * sd**2))
    assert gaussian_nll(y, mu, sd) == pytest.approx(expected)
    Y = np.c_[y, 2 * y]
    raw = gaussian_nll(Y, np.c_[mu, mu], 1.0, multioutput="raw_values")
    np.testing.assert_allclose(raw, -norm.logpdf(Y, np.c_[mu, mu], 1.0).mean(axis=0))
    with pytest.raises(ValueError, match="strictly positive"):
        gaussian_nll(y, mu, [1.0, 0.0])


def test_interval_coverage_calibrated_and_over_confident():
    rng = np.random.default_rng(10)
    mu, sd = rng.normal(size=100_000), rng.uniform(0.5, 2.0, 100_000)
    y = mu + sd * rng.normal(size=100_000)
    levels = np.array([0.5, 0.9, 0.95])
    np.testing.assert_allclose(interval_coverage(y, mu, sd, level=levels), levels, atol=0.005)
    assert interval_coverage(y, mu, sd / 2, level=0.95) < 0.75  # too narrow
    lv, cov = regression_calibration_curve(y, mu, sd)
    assert len(lv) == 19 and np.all(np.abs(cov - lv) < 0.01)
    with pytest.raises(ValueError, match="level"):
        interval_coverage(y, mu, sd, level=1.0)


# --- scorers -----------------------------------------------------------------------------------


def _logistic_data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    p = 1 / (1 + np.exp(-(2.5 * X[:, 0])))  # feature 1 is noise
    return X, (rng.random(n) < p).astype(int)


def test_get_scorer_names_signs_and_fallback():
    names = get_scorer_names()
    assert {"neg_expected_calibration_error", "neg_summed_brier_score", "expected_utility"} <= set(
        names
    )
    assert "roc_auc" in names
    X, y = _logistic_data(300)
    clf = LogisticRegression().fit(X, y)
    proba = clf.predict_proba(X)
    assert get_scorer("neg_summed_brier_score")(clf, X, y) == pytest.approx(
        -brier_score(y, proba)
    )
    assert get_scorer("neg_expected_calibration_error", n_bins=5)(clf, X, y) == pytest.approx(
        -expected_calibration_error(y, proba, n_bins=5)
    )
    assert get_scorer("accuracy")(clf, X, y) == pytest.approx(clf.score(X, y))
    with pytest.raises(ValueError, match="utility"):
        get_scorer("expected_utility")
    with pytest.raises(ValueError, match="only accepted"):
        get_scorer("accuracy", n_bins=3)
    with pytest.raises(TypeError, match="n_binz"):
        get_scorer("neg_expected_calibration_error", n_binz=3)
    with pytest.raises(ValueError, match="get_scorer_names"):
        get_scorer("nonsense")


def test_no_scorer_name_means_something_else_than_in_scikit_learn():
    # the package's own names are not scikit-learn's, and a name scikit-learn has gives
    # scikit-learn's number: on a binary task the summed Brier is twice scikit-learn's
    from sklearn.metrics import get_scorer as sk_get_scorer
    from sklearn.metrics import get_scorer_names as sk_names

    from sklearn_bnn.metrics._scorer import _GAUSSIAN_SCORERS, _SCORERS

    assert not (set(_SCORERS) | set(_GAUSSIAN_SCORERS)) & set(sk_names())
    X, y = _logistic_data(300)
    clf = LogisticRegression().fit(X, y)
    for name in ("neg_brier_score", "neg_log_loss", "accuracy", "roc_auc"):
        assert get_scorer(name)(clf, X, y) == pytest.approx(sk_get_scorer(name)(clf, X, y))
    res = cross_validate(
        clf, X, y, cv=2, scoring={"ours": get_scorer("neg_brier_score"), "sk": "neg_brier_score"}
    )
    np.testing.assert_allclose(res["test_ours"], res["test_sk"])
    summed = get_scorer("neg_summed_brier_score")(clf, X, y)
    assert summed == pytest.approx(2 * sk_get_scorer("neg_brier_score")(clf, X, y))
    # on three classes scikit-learn's Brier is summed too (brier_score_loss's "auto" halves
    # binary problems only): the two names agree there
    X3, y3 = load_iris(return_X_y=True)
    clf3 = LogisticRegression(max_iter=500).fit(X3, y3)
    assert get_scorer("neg_summed_brier_score")(clf3, X3, y3) == pytest.approx(
        sk_get_scorer("neg_brier_score")(clf3, X3, y3)
    )


def test_scorers_take_sample_weight_through_metadata_routing():
    import sklearn
    from sklearn.exceptions import UnsetMetadataPassedError
    from sklearn.model_selection import KFold

    X, y = _logistic_data(300, seed=4)
    w = np.random.default_rng(0).uniform(0.0, 3.0, len(y))
    cv = KFold(3, shuffle=True, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        scoring = {
            "ece": get_scorer("neg_expected_calibration_error", n_bins=5).set_score_request(
                sample_weight=True
            ),
            "brier": get_scorer("neg_summed_brier_score").set_score_request(sample_weight=True),
            "sk_brier": sklearn.metrics.get_scorer("neg_brier_score").set_score_request(
                sample_weight=True
            ),
        }
        res = cross_validate(
            LogisticRegression().set_fit_request(sample_weight=True),
            X, y, cv=cv, scoring=scoring, params={"sample_weight": w}, return_estimator=True,
        )  # fmt: skip
        for k, (_, test) in enumerate(cv.split(X)):
            proba = res["estimator"][k].predict_proba(X[test])
            assert res["test_ece"][k] == pytest.approx(
                -expected_calibration_error(y[test], proba, n_bins=5, sample_weight=w[test])
            )
            assert res["test_brier"][k] == pytest.approx(
                -brier_score(y[test], proba, sample_weight=w[test])
            )
            assert res["test_brier"][k] != pytest.approx(-brier_score(y[test], proba), rel=1e-3)
        np.testing.assert_allclose(res["test_brier"], 2 * res["test_sk_brier"])
        # as with scikit-learn's scorers, weights a scorer has not asked for are an error
        with pytest.raises(UnsetMetadataPassedError, match="sample_weight"):
            cross_validate(
                LogisticRegression().set_fit_request(sample_weight=True),
                X, y, cv=cv, scoring=get_scorer("neg_summed_brier_score"),
                params={"sample_weight": w}, error_score="raise",
            )  # fmt: skip
    with pytest.raises(RuntimeError, match="enable_metadata_routing"):
        get_scorer("neg_summed_brier_score").set_score_request(sample_weight=True)


def test_scorer_uses_classes_when_fold_lacks_a_class():
    X, y = load_iris(return_X_y=True)
    clf = LogisticRegression(max_iter=500).fit(X, y)
    part = y != 1
    score = get_scorer("neg_maximum_calibration_error")(clf, X[part], y[part])
    proba = clf.predict_proba(X[part])
    assert score == pytest.approx(-maximum_calibration_error(y[part], proba, labels=[0, 1, 2]))


def test_grid_search_on_ece_picks_the_unregularised_model():
    # the data follow a logistic model exactly, so the least regularised fit is calibrated and
    # strong regularisation squeezes probabilities towards 1/2 (under-confident)
    X, y = _logistic_data()
    grid = GridSearchCV(
        LogisticRegression(),
        {"C": [1e-4, 1e-2, 100.0]},
        scoring=get_scorer("neg_expected_calibration_error"),
        cv=StratifiedKFold(5, shuffle=True, random_state=0),
    ).fit(X, y)
    assert grid.best_params_ == {"C": 100.0}
    assert grid.cv_results_["mean_test_score"][0] < -0.1
    assert grid.best_score_ > -0.05


def test_grid_search_on_expected_utility_matches_manual_cv():
    # a miss on class 1 costs 9 times a false alarm: the Bayes threshold is p(1) > 0.1
    U = np.array([[1.0, 0.0], [-8.0, 1.0]])
    X, y = _logistic_data(1000, seed=1)
    cv = StratifiedKFold(4, shuffle=True, random_state=0)
    params = [None, {0: 1.0, 1: 20.0}]
    grid = GridSearchCV(
        LogisticRegression(),
        {"class_weight": params},
        scoring=get_scorer("expected_utility", utility=U),
        cv=cv,
    ).fit(X, y)
    for k, weight in enumerate(params):
        manual = []
        for tr, te in cv.split(X, y):
            clf = LogisticRegression(class_weight=weight).fit(X[tr], y[tr])
            manual.append(expected_utility_score(y[te], clf.predict_proba(X[te]), U))
        assert grid.cv_results_["mean_test_score"][k] == pytest.approx(np.mean(manual))
    # calibrated probabilities make the Bayes action optimal; re-weighting distorts them
    assert grid.best_params_ == {"class_weight": None}


def test_cross_validate_and_permutation_importance():
    X, y = _logistic_data(600, seed=2)
    scoring = {
        "ece": get_scorer("neg_expected_calibration_error"),
        "brier": get_scorer("neg_summed_brier_score"),
        "nll": "neg_log_loss",
    }
    res = cross_validate(LogisticRegression(), X, y, scoring=scoring, cv=3)
    assert np.all(res["test_ece"] <= 0) and np.all(res["test_brier"] < 0)
    clf = LogisticRegression().fit(X, y)
    imp = permutation_importance(
        clf, X, y, scoring=get_scorer("neg_summed_brier_score"), n_repeats=5, random_state=0
    )
    assert imp.importances_mean[0] > 0.2  # the informative feature
    assert abs(imp.importances_mean[1]) < 0.01  # the noise feature


def test_make_proba_scorer_repr_and_validation():
    scorer = make_proba_scorer(expected_calibration_error, greater_is_better=False, n_bins=10)
    assert "n_bins=10" in repr(scorer) and "greater_is_better=False" in repr(scorer)


# --- report ------------------------------------------------------------------------------------


def test_report_for_predict_proba_classifier():
    X, y = make_classification(300, n_classes=3, n_informative=4, random_state=0)
    clf = LogisticRegression(max_iter=500).fit(X, y)
    proba = clf.predict_proba(X)
    U = np.eye(3) + 0.5
    report = uncertainty_report(clf, X, y, utility=U)
    assert report["accuracy"] == pytest.approx(clf.score(X, y))
    assert report["nll"] == pytest.approx(log_loss(y, proba))
    assert report["brier"] == pytest.approx(brier_score(y, proba))
    assert report["ece"] == pytest.approx(expected_calibration_error(y, proba))
    assert report["mce"] == pytest.approx(maximum_calibration_error(y, proba))
    assert report["mean_entropy"] == pytest.approx(predictive_entropy(proba).mean())
    assert np.isnan(report["mean_mutual_information"])
    assert report["expected_utility"] == pytest.approx(expected_utility_score(y, proba, U))


def test_report_uses_predict_samples_for_mutual_information():
    X, y = make_classification(200, n_classes=3, n_informative=4, random_state=1)
    labels = np.array(["a", "b", "c"])[y]
    ens = BootstrapEnsemble(n_members=8, random_state=0).fit(X, labels)
    draws = ens.predict_samples(X)
    report = uncertainty_report(ens, X, labels)
    assert report["mean_mutual_information"] == pytest.approx(mutual_information(draws).mean())
    assert report["mean_mutual_information"] > 0
    assert report["accuracy"] == pytest.approx(ens.score(X, labels))


def test_report_reads_the_draws_through_a_pipeline():
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = make_classification(200, n_classes=3, n_informative=4, random_state=1)
    pipe = make_pipeline(StandardScaler(), BootstrapEnsemble(n_members=8, random_state=0))
    pipe.fit(X, y)
    report = uncertainty_report(pipe, X, y)
    draws = pipe[-1].predict_samples(pipe[0].transform(X))
    assert report["mean_mutual_information"] == pytest.approx(mutual_information(draws).mean())
    assert report["mean_mutual_information"] > 0
    assert report["accuracy"] == pytest.approx(pipe.score(X, y))
