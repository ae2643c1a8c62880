import joblib
import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, load_iris
from sklearn.model_selection import train_test_split

import sklearn_bnn
from sklearn_bnn import LossCalibratedBNN, MCDropoutClassifier
from sklearn_bnn.decision import bayes_decision
from sklearn_bnn.estimators.lcbnn import loss_calibrated_penalty, transformed_utility

FAST = dict(
    hidden_layer_sizes=(16,),
    max_iter=30,
    learning_rate_init=1e-2,
    n_predict_draws=10,
    n_train_draws=4,
    random_state=0,
)


def table_4_3():
    u = np.eye(10)
    u[[3, 8]] = 0.3
    u[3, 3] = u[8, 8] = 1.0
    return u


def test_transformed_utility_is_u_plus_m():
    u = table_4_3()
    np.testing.assert_allclose(transformed_utility(u, 1e-4), u + 1e-4)
    shifted = transformed_utility([[2.0, -1.0], [0.0, 3.0]], 0.5)
    np.testing.assert_allclose(shifted, [[3.5, 0.5], [1.5, 4.5]])


def test_penalty_equals_hand_computation():
    p = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]], dtype=torch.float64)
    u_star = np.array([[1.0, 0.0], [0.3, 0.3], [0.0, 1.0]]) + 1e-4
    got = loss_calibrated_penalty(p.log(), [0, 1], u_star)
    # point 1, decision 0: 0.2 * 1.0001 + 0.3 * 0.3001 + 0.5 * 0.0001 = 0.2901
    # point 2, decision 1: 0.6 * 0.0001 + 0.1 * 0.3001 + 0.3 * 1.0001 = 0.33010
    np.testing.assert_allclose(got.numpy(), [-np.log(0.2901), -np.log(0.3301)], rtol=1e-12)


def test_penalty_gradient_moves_probability_to_high_utility_classes():
    """d penalty / d logit_k = p_k (1 - u*_k / G): descent raises the classes with u*_k > G."""
    logits = torch.tensor([[0.5, -0.2, 0.1, 1.0]], requires_grad=True)
    u_star = torch.tensor([[1.0], [0.6], [0.2], [1e-4]])  # one decision
    penalty = loss_calibrated_penalty(torch.log_softmax(logits, -1), [0], u_star)
    penalty.sum().backward()
    p = torch.softmax(logits, -1).detach()[0]
    gain = float(p @ u_star[:, 0])
    torch.testing.assert_close(logits.grad[0], p * (1 - u_star[:, 0] / gain))
    np.testing.assert_array_equal(
        np.sign(-logits.grad[0].numpy()), np.sign(u_star[:, 0].numpy() - gain)
    )
    stepped = torch.softmax(logits.detach() - 0.1 * logits.grad, -1)[0]
    assert float(stepped @ u_star[:, 0]) > gain
    assert stepped[0] > p[0] and stepped[3] < p[3]


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


def test_decisions_are_bayes_actions(iris):
    X, y = iris
    u = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.8], [0.0, 0.2, 1.0]])
    clf = LossCalibratedBNN(
        utility=u,
        hidden_layer_sizes=(16,),
        max_iter=40,
        learning_rate_init=1e-2,
        n_predict_draws=30,
        random_state=0,
    ).fit(X, y)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(clf.predict_expected_utility(X), proba @ u)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[bayes_decision(proba, u)])
    assert clf.score(X, y) == pytest.approx(u[y, bayes_decision(proba, u)].mean())
    # the preferences reach the decisions: class 1 is often decided as 2, never the reverse
    assert np.sum((y == 1) & (clf.predict(X) == 2)) >= np.sum((y == 2) & (clf.predict(X) == 1))


def test_non_square_utility_returns_decision_indices(iris):
    X, y = iris
    u = np.array([[1.0, 0.0, 0.0, 0.5], [0.0, 1.0, 0.0, 0.5], [0.0, 0.0, 1.0, 0.5]])
    clf = LossCalibratedBNN(utility=u, hidden_layer_sizes=(8,), max_iter=5, random_state=0)
    clf.fit(X, y)
    assert clf.predict_expected_utility(X).shape == (len(X), 4)
    assert set(clf.predict(X)) <= {0, 1, 2, 3}


@pytest.mark.parametrize(
    "params, match",
    [
        ({"utility": np.eye(4)}, "4 rows but the classifier has 3 classes"),
        ({"utility": [[1, 0, 0], [0, np.nan, 0], [0, 0, 1]]}, "finite"),
        ({"utility": [1, 0, 0]}, "2-D"),
        ({"utility_bound": 0.0}, "utility_bound"),
        ({"n_train_draws": 0}, "n_train_draws"),
        ({"warmup_fraction": 1.0}, "warmup_fraction"),
    ],
)
def test_bad_utility_and_parameters_raise_at_fit(iris, params, match):
    X, y = iris
    clf = LossCalibratedBNN(**params)
    with pytest.raises(ValueError, match=match):
        clf.fit(X, y)


@pytest.fixture
def one_thread():
    """Small networks train fastest on one thread, above all on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X / 16.0, y, test_size=0.5, stratify=y, random_state=0)


DIGITS = dict(
    hidden_layer_sizes=(50,), dropout=0.2, max_iter=60, learning_rate_init=3e-3, n_predict_draws=50
)


def test_identity_utility_behaves_like_mc_dropout(digits, one_thread):
    X_train, X_test, y_train, y_test = digits
    acc = {}
    for seed in (0, 1):
        lc = LossCalibratedBNN(utility=None, random_state=seed, **DIGITS).fit(X_train, y_train)
        mc = MCDropoutClassifier(random_state=seed, **DIGITS).fit(X_train, y_train)
        acc.setdefault("lc", []).append(lc.score(X_test, y_test))
        acc.setdefault("mc", []).append(mc.score(X_test, y_test))
    assert np.mean(acc["mc"]) > 0.93
    # the penalty sharpens the network on its own decisions: seen 0.5-1.5 points lower
    assert abs(np.mean(acc["lc"]) - np.mean(acc["mc"])) < 0.025


def test_label_noise_lcbnn_utility_at_least_mc_dropout(digits, one_thread):
    """seeds/003 section 4.3.1 at 40 % label noise: higher utility on clean test labels."""
    X_train, X_test, y_train, y_test = digits
    u = table_4_3()
    rng = np.random.default_rng(0)
    noisy = y_train.copy()
    flip = rng.random(len(noisy)) < 0.4
    noisy[flip] = rng.integers(0, 10, flip.sum())
    gain = {}
    for seed in (0, 1):
        lc = LossCalibratedBNN(utility=u, random_state=seed, **DIGITS).fit(X_train, noisy)
        mc = MCDropoutClassifier(random_state=seed, **DIGITS).fit(X_train, noisy)
        gain.setdefault("lc", []).append(lc.score(X_test, y_test))
        h = bayes_decision(mc.predict_proba(X_test), u)
        gain.setdefault("mc", []).append(u[y_test, h].mean())
    assert np.mean(gain["lc"]) >= np.mean(gain["mc"])


def test_reproducible_and_persistent(tmp_path, iris):
    X, y = iris
    kw = dict(utility=np.eye(3) + 0.1, hidden_layer_sizes=(8,), max_iter=10, n_predict_draws=20)
    a = LossCalibratedBNN(random_state=5, **kw).fit(X, y)
    b = LossCalibratedBNN(random_state=5, **kw).fit(X, y)
    expected = a.predict_expected_utility(X)
    np.testing.assert_array_equal(b.predict_expected_utility(X), expected)

    joblib.dump(a, tmp_path / "lc.joblib")
    np.testing.assert_array_equal(
        joblib.load(tmp_path / "lc.joblib").predict_expected_utility(X), expected
    )
    sklearn_bnn.save(a, tmp_path / "lc.pt")
    restored = sklearn_bnn.load(tmp_path / "lc.pt")
    np.testing.assert_array_equal(restored.utility_, a.utility_)
    np.testing.assert_array_equal(restored.predict_expected_utility(X), expected)
    np.testing.assert_array_equal(restored.predict(X), a.predict(X))
