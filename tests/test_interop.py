"""The package's estimators inside other libraries: MAPIE, scikit-activeml, Ray (docs/interop.md).

MAPIE and scikit-activeml come with the ``interop`` extra that ``dev`` includes, so their
tests run in CI; Ray is heavy and is tested where it is installed (docs/interop.md says why).
"""

import tomllib
from pathlib import Path

import joblib
import numpy as np
import pytest
import torch

from sklearn_bnn import HMCClassifier, HMCRegressor
from sklearn_bnn.metrics import mutual_information
from sklearn_bnn.samplers import HMC

pytestmark = pytest.mark.filterwarnings("ignore:R-hat")  # tiny budgets, on purpose

TINY = dict(hidden_layer_sizes=(8,), n_warmup=30, n_draws=30, sampler=HMC(n_steps=5))
N_CAL, N_TEST = 1000, 2000


def test_dev_installs_the_interop_extra_and_the_package_needs_none_of_it():
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(extras["interop"]) <= set(extras["dev"])  # so these tests run in CI
    names = {req.split(">")[0].split("=")[0] for req in extras["interop"] + extras["ray"]}
    assert not names & {req.split(">")[0] for req in project["dependencies"]}


def _coverage_margin(n_cal, n_test, alpha):
    """Four standard deviations of split-conformal test coverage about its mean.

    Given the calibration set, coverage is Beta(k, n_cal + 1 - k), k = ceil((n_cal + 1)(1 -
    alpha)) (Vovk 2012; Angelopoulos & Bates 2021), and the test rows add a binomial error on
    top: variance alpha (1 - alpha) (1 / (n_cal + 2) + 1 / n_test) to first order.
    """
    return 4 * np.sqrt(alpha * (1 - alpha) * (1 / (n_cal + 2) + 1 / n_test))


def _regression_data(seed, n):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + rng.normal(scale=0.3, size=n)
    return X, y


def _classification_data(seed, n):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [1.5, 0.0], [0.75, 1.3]])
    y = rng.integers(0, 3, size=n)
    return centres[y] + rng.normal(size=(n, 2)), y


def test_mapie_std_normalised_split_conformal_intervals_on_hmc_regressor():
    from mapie.regression import SplitConformalRegressor

    alpha, seed = 0.1, 0
    X, y = _regression_data(seed, 100 + N_CAL + N_TEST)
    reg = HMCRegressor(**TINY, n_chains=1, random_state=seed).fit(X[:100], y[:100])
    mapie = SplitConformalRegressor(
        reg, confidence_level=1 - alpha, conformity_score="std_normalized", prefit=True
    )
    mapie.conformalize(X[100 : 100 + N_CAL], y[100 : 100 + N_CAL])
    X_test, y_test = X[100 + N_CAL :], y[100 + N_CAL :]
    point, bounds = mapie.predict_interval(X_test)
    low, high = bounds[:, 0, 0], bounds[:, 1, 0]
    mean, std = reg.predict(X_test, return_std=True)
    np.testing.assert_allclose(point, mean)
    # The score is |y - mean| / std: each bound is the mean -/+ a quantile of the scores (the
    # two sides take neighbouring order statistics) times our std, the same for every input.
    for side in (mean - low, high - mean):
        np.testing.assert_allclose(side / std, np.median(side / std), rtol=1e-6)
    assert std.max() > 1.05 * std.min()  # so the widths do vary with the input
    coverage = np.mean((y_test >= low) & (y_test <= high))
    # Seeds 0-9: 0.882-0.915 (margin 0.046); the widths' max / min 1.09-1.25.
    assert abs(coverage - (1 - alpha)) < _coverage_margin(N_CAL, N_TEST, alpha)


@pytest.fixture(scope="module")
def three_classes():
    X, y = _classification_data(1, 150 + N_CAL + N_TEST)
    clf = HMCClassifier(**TINY, random_state=1).fit(X[:150], y[:150])
    return clf, X[150:], y[150:]


def test_mapie_conformal_sets_on_hmc_classifier_cover_at_the_nominal_level(three_classes):
    from mapie.classification import SplitConformalClassifier

    clf, X, y = three_classes
    alpha = 0.1
    X_cal, y_cal, X_test, y_test = X[:N_CAL], y[:N_CAL], X[N_CAL:], y[N_CAL:]
    proba = clf.predict_proba(X_test)
    margin = _coverage_margin(N_CAL, N_TEST, alpha)

    lac = SplitConformalClassifier(clf, confidence_level=1 - alpha, conformity_score="lac")
    labels, sets = lac.conformalize(X_cal, y_cal).predict_set(X_test)
    sets = sets[:, :, 0]
    np.testing.assert_array_equal(labels, clf.predict(X_test))
    # LAC keeps the classes whose probability clears one threshold, the same for every row.
    assert proba[sets].min() >= proba[~sets].max()
    coverage = sets[np.arange(len(y_test)), y_test].mean()
    # Seeds 0-9: LAC 0.886-0.914, mean set size 1.87-2.05; APS 0.949-0.985.
    assert abs(coverage - (1 - alpha)) < margin
    assert 1 < sets.sum(1).mean() < 3  # informative: neither singletons only nor everything

    aps = SplitConformalClassifier(
        clf, confidence_level=1 - alpha, conformity_score="aps", random_state=0
    )
    _, aps_sets = aps.conformalize(X_cal, y_cal).predict_set(X_test)
    # APS with the last label included is conservative: at least nominal, up to the margin.
    assert aps_sets[np.arange(len(y_test)), y_test, 0].mean() > 1 - alpha - margin


def test_scikit_activeml_bald_queries_the_highest_mutual_information(three_classes):
    from skactiveml.classifier import SklearnClassifier
    from skactiveml.pool import GreedyBALD

    clf, X, y = three_classes
    pool = X[:300]
    labelled = np.arange(30)
    y_pool = np.full(len(pool), -1)
    y_pool[labelled] = y[labelled]
    model = SklearnClassifier(
        HMCClassifier(**TINY, random_state=2), classes=[0, 1, 2], missing_label=-1
    ).fit(pool, y_pool)
    bald = GreedyBALD(
        sample_predictions_method_name="predict_samples", missing_label=-1, random_state=0
    )
    chosen, utilities = bald.query(
        pool, y_pool, model, fit_ensemble=False, batch_size=5, return_utilities=True
    )
    mi = mutual_information(model.predict_samples(pool))
    unlabelled = np.setdiff1d(np.arange(len(pool)), labelled)
    # BALD's score for one point is its mutual information, from the draws we hand it.
    np.testing.assert_allclose(utilities[0, unlabelled], mi[unlabelled], rtol=1e-3, atol=1e-5)
    assert np.isnan(utilities[0, labelled]).all()
    assert not np.isin(chosen, labelled).any()
    # The five highest (up to float32 ties at the fifth); over seeds 0-9 they scored 2.3-4.1x
    # the pool's median.
    fifth = np.sort(mi[unlabelled])[-5]
    assert mi[chosen].min() >= fifth * (1 - 1e-3)
    assert mi[chosen].min() > 1.5 * np.median(mi[unlabelled])


def test_ray_joblib_backend_gives_the_same_draws_as_one_job(monkeypatch):
    # Ray binds to the machine's address unless told it is not a cluster; read at import.
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ray = pytest.importorskip("ray")
    from ray.util.joblib import register_ray

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    params = dict(TINY, n_chains=2, random_state=0)
    one = HMCClassifier(**params, n_jobs=1).fit(X, y)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        register_ray()
        with joblib.parallel_config(backend="ray"):
            on_ray = HMCClassifier(**params, n_jobs=2).fit(X, y)
    finally:
        ray.shutdown()
    assert torch.equal(one.samples_.draws, on_ray.samples_.draws)
    np.testing.assert_array_equal(one.predict_proba(X), on_ray.predict_proba(X))
