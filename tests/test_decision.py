import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.dummy import DummyClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from sklearn_bnn.decision import (
    BayesDecisionClassifier,
    bayes_decision,
    check_utility,
    expected_utilities,
)
from sklearn_bnn.metrics import mean_utility

# seeds/003 Table 4.2, laid out as in the thesis: rows the true class, columns the decision,
# both in the order Healthy, Mild, Severe -- the library's convention utility[y_true, decision]
TABLE_4_2 = np.array([[100, 60, 55], [50, 100, 70], [0, 65, 100]])
CLASSES = np.array(["Healthy", "Mild", "Severe"])


def test_worked_example_of_seeds_003():
    eu = expected_utilities([0.1, 0.2, 0.7], TABLE_4_2)
    np.testing.assert_allclose(eu, [[20.0, 71.5, 89.5]])
    assert CLASSES[bayes_decision([[0.1, 0.2, 0.7]], TABLE_4_2)[0]] == "Severe"


def test_meta_estimator_on_the_worked_example():
    # a prior-only classifier fitted on labels in proportions 1:2:7 predicts [0.1, 0.2, 0.7]
    y = np.repeat(CLASSES, [1, 2, 7])
    X = np.zeros((10, 1))
    clf = BayesDecisionClassifier(DummyClassifier(strategy="prior"), utility=TABLE_4_2).fit(X, y)
    np.testing.assert_allclose(clf.predict_proba(X[:1]), [[0.1, 0.2, 0.7]])
    np.testing.assert_allclose(clf.predict_expected_utility(X[:1]), [[20.0, 71.5, 89.5]])
    assert clf.predict(X[:1])[0] == "Severe"


def test_bayes_action_differs_from_most_probable_class():
    # Healthy is most probable, but missing a severe case is so costly that Severe wins
    q = [[0.5, 0.2, 0.3]]
    np.testing.assert_allclose(expected_utilities(q, TABLE_4_2), [[60.0, 69.5, 71.5]])
    assert bayes_decision(q, TABLE_4_2)[0] == 2 and np.argmax(q) == 0


def test_decisions_invariant_to_shift_and_positive_scale():
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(3), size=500)
    base = bayes_decision(q, TABLE_4_2)
    np.testing.assert_array_equal(bayes_decision(q, 3.0 * TABLE_4_2 - 40.0), base)


def test_identity_utility_gives_argmax_and_accuracy_score():
    X, y = make_classification(200, n_classes=3, n_informative=4, random_state=0)
    lr = LogisticRegression(max_iter=500).fit(X, y)
    clf = BayesDecisionClassifier(LogisticRegression(max_iter=500)).fit(X, y)
    np.testing.assert_array_equal(clf.predict(X), lr.predict(X))
    assert clf.score(X, y) == pytest.approx(accuracy_score(y, lr.predict(X)))


def test_reject_option_with_non_square_utility():
    # decisions: say 0, say 1, abstain (a sure small gain)
    U = [[1.0, -2.0, 0.6], [-2.0, 1.0, 0.6]]
    X = np.linspace(-3, 3, 200)[:, None]
    y = (X[:, 0] + np.random.default_rng(1).normal(scale=1.0, size=200) > 0).astype(int)
    clf = BayesDecisionClassifier(LogisticRegression(), utility=U).fit(X, y)
    pred = clf.predict(X)
    assert set(pred) == {0, 1, 2}
    p1 = clf.predict_proba(X)[:, 1]
    # abstain exactly where neither class is sure enough: 1 - 3 p < 0.6 and 3 p - 2 < 0.6
    np.testing.assert_array_equal(pred == 2, (p1 > 0.4 / 3) & (p1 < 2.6 / 3))
    labelled = clone(clf).set_params(decision_labels=["no", "yes", "ask"]).fit(X, y)
    assert set(labelled.predict(X)) == {"no", "yes", "ask"}
    assert clf.score(X, y) == pytest.approx(mean_utility(y, clf.predict(X), U))


def test_validation_errors():
    X, y = make_classification(60, n_classes=3, n_informative=3, random_state=0)
    with pytest.raises(ValueError, match="2 rows but the classifier has 3 classes"):
        BayesDecisionClassifier(LogisticRegression(), utility=[[1, 0], [0, 1]]).fit(X, y)
    with pytest.raises(ValueError, match="finite"):
        BayesDecisionClassifier(LogisticRegression(), utility=np.diag([1, np.inf, 1])).fit(X, y)
    with pytest.raises(ValueError, match="2-D"):
        BayesDecisionClassifier(LogisticRegression(), utility=[1, 0, 0]).fit(X, y)
    with pytest.raises(ValueError, match="predict_proba"):
        BayesDecisionClassifier(SVC(), utility=np.eye(3)).fit(X, y)
    with pytest.raises(ValueError, match="decision_labels"):
        BayesDecisionClassifier(
            LogisticRegression(), utility=np.eye(3), decision_labels=["a"]
        ).fit(X, y)
    with pytest.raises(ValueError, match="numbers"):
        check_utility([["a", "b"]])


def test_grid_search_clone_pipeline_and_persistence(tmp_path):
    X, y = make_classification(300, n_classes=2, random_state=0)
    U = [[1.0, 0.0], [-5.0, 1.0]]
    model = BayesDecisionClassifier(
        make_pipeline(StandardScaler(), LogisticRegression()), utility=U
    )
    grid = GridSearchCV(model, {"estimator__logisticregression__C": [0.01, 1.0]}, cv=3)
    grid.fit(X, y)
    assert grid.best_estimator_.utility_.shape == (2, 2)
    assert "estimator__logisticregression__C" in model.get_params()
    fitted = clone(model).fit(X, y)
    joblib.dump(fitted, tmp_path / "m.joblib")
    again = joblib.load(tmp_path / "m.joblib")
    np.testing.assert_array_equal(again.predict(X), fitted.predict(X))
    np.testing.assert_array_equal(
        again.predict_expected_utility(X), fitted.predict_expected_utility(X)
    )
