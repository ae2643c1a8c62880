"""Gaussian regression metrics and scorers, predict_samples through a Pipeline."""

import warnings

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import norm
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import BayesianRidge, LinearRegression
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from sklearn_bnn import HMCRegressor
from sklearn_bnn.metrics import (
    GaussianScorer,
    gaussian_crps,
    gaussian_nll,
    get_scorer,
    get_scorer_names,
    interval_coverage,
    interval_coverage_error,
    make_gaussian_scorer,
    predict_samples,
)

REGRESSION_SCORERS = [
    "neg_gaussian_nll",
    "neg_crps",
    "interval_coverage",
    "neg_interval_coverage_error",
]


def _data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [10.0, 1.0, 0.1] + [100.0, 0.0, 5.0]  # needs scaling
    y = 3.0 * np.sin((X[:, 0] - 100.0) / 10.0) + X[:, 1] + 0.3 * rng.normal(size=n)
    return X, y


def _tiny_hmc(**params):
    return HMCRegressor(
        hidden_layer_sizes=(5,), n_draws=20, n_warmup=20, normalize_y=True, random_state=0
    ).set_params(**params)


# --- metrics -----------------------------------------------------------------------------------


def test_crps_matches_its_defining_integral_and_limits():
    def integrand(t, y, mu, sd):
        return (norm.cdf(t, mu, sd) - (t >= y)) ** 2

    for y, mu, sd in [(1.3, 0.2, 0.7), (-2.0, 0.0, 3.0), (0.0, 0.0, 1.0)]:
        integral = quad(integrand, -60, 60, args=(y, mu, sd), points=[y])[0]
        assert gaussian_crps([y], [mu], [sd]) == pytest.approx(integral, rel=1e-6)
    # sigma -> 0: the absolute error; scaling y, mu and sigma scales the CRPS
    assert gaussian_crps([2.0, -1.0], [0.5, 0.0], 1e-9) == pytest.approx(1.25)
    assert gaussian_crps([3.0], [1.0], [2.0]) == pytest.approx(2 * gaussian_crps([1.5], [0.5], [1]))
    Y = np.c_[[0.0, 1.0], [2.0, 0.0]]
    raw = gaussian_crps(Y, np.zeros((2, 2)), 1.0, multioutput="raw_values")
    assert raw.shape == (2,) and gaussian_crps(Y, np.zeros((2, 2)), 1.0) == pytest.approx(
        raw.mean()
    )


def test_sample_weight_equals_repetition_for_crps_and_coverage():
    rng = np.random.default_rng(3)
    y, mu, sd = rng.normal(size=30), rng.normal(size=30), rng.uniform(0.3, 2.0, 30)
    w = rng.integers(0, 4, 30)
    w[0] = 1
    rep = np.repeat(np.arange(30), w)
    for func in (gaussian_crps, gaussian_nll, interval_coverage, interval_coverage_error):
        assert func(y, mu, sd, sample_weight=w) == pytest.approx(func(y[rep], mu[rep], sd[rep]))


def test_interval_coverage_error():
    y = [0.0, 1.0, 3.0]
    assert interval_coverage_error(y, [0.0] * 3, 1.0, level=0.95) == pytest.approx(0.95 - 2 / 3)
    np.testing.assert_allclose(
        interval_coverage_error(y, [0.0] * 3, 1.0, level=[0.5, 0.95]), [0.5 - 1 / 3, 0.95 - 2 / 3]
    )


# --- scorers -----------------------------------------------------------------------------------


def test_regression_scorers_by_name_equal_the_metrics():
    assert set(REGRESSION_SCORERS) <= set(get_scorer_names())
    X, y = _data()
    reg = BayesianRidge().fit(X, y)
    mean, std = reg.predict(X, return_std=True)
    expected = {
        "neg_gaussian_nll": -gaussian_nll(y, mean, std),
        "neg_crps": -gaussian_crps(y, mean, std),
        "interval_coverage": interval_coverage(y, mean, std),
        "neg_interval_coverage_error": -interval_coverage_error(y, mean, std),
    }
    for name, value in expected.items():
        scorer = get_scorer(name)
        assert isinstance(scorer, GaussianScorer)
        assert scorer(reg, X, y) == pytest.approx(value)
    assert get_scorer("interval_coverage", level=0.5)(reg, X, y) == pytest.approx(
        interval_coverage(y, mean, std, level=0.5)
    )
    w = np.arange(len(y)) % 3
    assert get_scorer("neg_crps")(reg, X, y, sample_weight=w) == pytest.approx(
        -gaussian_crps(y, mean, std, sample_weight=w)
    )
    assert (
        repr(get_scorer("neg_crps"))
        == "make_gaussian_scorer(gaussian_crps, greater_is_better=False)"
    )


def test_make_gaussian_scorer_validation_and_errors():
    with pytest.raises(TypeError, match="levle"):
        make_gaussian_scorer(interval_coverage, levle=0.9)
    X, y = _data()
    with pytest.raises(TypeError, match="return_std"):
        get_scorer("neg_gaussian_nll")(LinearRegression().fit(X, y), X, y)


def test_scorers_through_a_pipeline_of_hmc_in_grid_search_and_cross_validate():
    X, y = _data()
    pipe = make_pipeline(StandardScaler(), _tiny_hmc())
    cv = KFold(2, shuffle=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # 20 draws do not converge
        grid = GridSearchCV(
            pipe,
            {"hmcregressor__noise_precision": [0.01, 10.0]},
            scoring={
                "nll": get_scorer("neg_gaussian_nll"),
                "crps": get_scorer("neg_crps"),
                "r2": "r2",
            },
            refit="nll",
            cv=cv,
            error_score="raise",
        ).fit(X, y)
        scores = cross_validate(
            pipe,
            X,
            y,
            cv=cv,
            scoring=get_scorer("neg_interval_coverage_error"),
            error_score="raise",
        )
    nll = grid.cv_results_["mean_test_nll"]
    assert np.all(np.isfinite(nll)) and np.all(np.isfinite(grid.cv_results_["mean_test_crps"]))
    # noise precision 0.01 means a noise std of 10 standardised units: a far worse likelihood
    assert grid.best_params_ == {"hmcregressor__noise_precision": 10.0}
    assert nll[1] > nll[0] + 1.0
    # the scorer calls predict(X, return_std=True) on the pipeline, which forwards return_std
    best = grid.best_estimator_
    mean, std = best.predict(X, return_std=True)
    Xt = best[0].transform(X)
    np.testing.assert_allclose(std, best[-1].predict(Xt, return_std=True)[1])
    assert grid.score(X, y) == pytest.approx(-gaussian_nll(y, mean, std))
    assert np.all(scores["test_score"] <= 0)


def test_gaussian_scorers_on_a_pipeline_under_metadata_routing():
    # Pipeline.predict routes return_std as metadata when routing is on, and refused it (the
    # fold scored NaN with a "Scoring failed" warning); the scorer asks the last step itself
    import sklearn

    X, y = _data(80, seed=5)
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(y))
    cv = KFold(2, shuffle=True, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(
            StandardScaler().set_fit_request(sample_weight=False),
            BayesianRidge().set_fit_request(sample_weight=True),
        )
        scoring = {
            name: get_scorer(name).set_score_request(sample_weight=True)
            for name in REGRESSION_SCORERS
        }
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "Scoring failed" warning
            res = cross_validate(
                pipe, X, y, cv=cv, scoring=scoring, params={"sample_weight": w},
                return_estimator=True,
            )  # fmt: skip
        for k, (_, test) in enumerate(cv.split(X)):
            fitted = res["estimator"][k]
            mean, std = fitted[-1].predict(fitted[0].transform(X[test]), return_std=True)
            assert res["test_neg_gaussian_nll"][k] == pytest.approx(
                -gaussian_nll(y[test], mean, std, sample_weight=w[test])
            )
            assert res["test_neg_crps"][k] == pytest.approx(
                -gaussian_crps(y[test], mean, std, sample_weight=w[test])
            )
            assert res["test_interval_coverage"][k] == pytest.approx(
                interval_coverage(y[test], mean, std, sample_weight=w[test])
            )


class _OverconfidentRegressor:
    """Predicts 0 with a standard deviation so small that the log-likelihood overflows."""

    def predict(self, X, return_std=False):
        mean = np.zeros(len(X))
        return (mean, np.full(len(X), 1e-300)) if return_std else mean


def test_a_scorer_raises_instead_of_returning_a_non_finite_score():
    X, y = _data(10)
    with pytest.raises(ValueError, match="gaussian_nll gave -?inf"), np.errstate(over="ignore"):
        get_scorer("neg_gaussian_nll")(_OverconfidentRegressor(), X, y)


def test_predict_samples_through_pipelines():
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipe = make_pipeline(StandardScaler(), _tiny_hmc()).fit(X, y)
    draws = predict_samples(pipe, X[:7])
    assert pipe[-1].samples_.n_chains == 4  # the regressors' default
    assert draws.shape == (4 * 20, 7)  # every chain's draws, pooled
    np.testing.assert_allclose(draws, pipe[-1].predict_samples(pipe[0].transform(X[:7])))
    np.testing.assert_allclose(predict_samples(pipe[-1], pipe[0].transform(X[:7])), draws)
    nested = make_pipeline(FunctionTransformer().fit(X), pipe)  # fitted steps, not refitted
    np.testing.assert_allclose(predict_samples(nested, X[:7]), draws)
    np.testing.assert_allclose(draws.mean(axis=0), pipe.predict(X[:7]))
    with pytest.raises(TypeError, match="LinearRegression has no predict_samples"):
        predict_samples(make_pipeline(StandardScaler(), LinearRegression()).fit(X, y), X)
