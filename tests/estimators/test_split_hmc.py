"""SplitHMCClassifier / SplitHMCRegressor: posterior, subsets, parameters, persistence."""

import joblib
import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler
from torch import nn

import sklearn_bnn
from sklearn_bnn import HMCClassifier, SplitHMCClassifier, SplitHMCRegressor
from sklearn_bnn.diagnostics import ess
from sklearn_bnn.samplers import HMC
from sklearn_bnn.samplers.starts import MAPStart


def split_hmc(integrator="symmetric", **settings):
    """HMC with a split integrator (a split target's default: "symmetric")."""
    return HMC(integrator=integrator, **settings)


SMALL = dict(
    hidden_layer_sizes=(8,),
    n_draws=30,
    n_warmup=30,
    sampler=split_hmc(n_steps=4),
    init=MAPStart(n_steps=50),
    random_state=0,
)


@pytest.fixture(scope="module")
def iris_sorted():
    X, y = load_iris(return_X_y=True)  # sorted by class: contiguous subsets would be one class each
    return StandardScaler().fit_transform(X), y


def linear_module(n_in, n_out):
    return nn.Linear(n_in, n_out)


def test_split_regressor_reproduces_bayesian_linear_regression_posterior():
    rng = np.random.default_rng(0)
    n, d, alpha, beta = 40, 3, 2.0, 4.0
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 + rng.normal(scale=0.5, size=n)
    reg = SplitHMCRegressor(
        module=linear_module,
        prior_precision=alpha,
        noise_precision=beta,
        n_splits=3,
        n_draws=1000,
        n_warmup=150,
        sampler=split_hmc(n_steps=3),
        dtype="float64",
        random_state=0,
    ).fit(X, y)
    assert reg.n_splits_ == 3
    X1 = np.hstack([X, np.ones((n, 1))])
    cov = np.linalg.inv(alpha * np.eye(d + 1) + beta * X1.T @ X1)
    mean = beta * cov @ X1.T @ y
    draws = reg.samples_.draws.numpy()
    for k in range(d + 1):
        se = np.sqrt(cov[k, k] / ess(draws[..., k]))
        assert abs(draws[..., k].mean() - mean[k]) < 4 * se, (k, draws[..., k].mean(), mean[k])
    mu, std = reg.predict(X[:5], return_std=True)
    expected_std = np.sqrt(np.einsum("ij,jk,ik->i", X1[:5], cov, X1[:5]) + 1 / beta)
    np.testing.assert_allclose(mu, X1[:5] @ mean, atol=0.05)
    np.testing.assert_allclose(std, expected_std, rtol=0.1)


@pytest.mark.parametrize("integrator", ["symmetric", "randomised", "naive"])
def test_classifier_on_class_sorted_data(iris_sorted, integrator):
    X, y = iris_sorted
    clf = SplitHMCClassifier(
        hidden_layer_sizes=(8,),
        n_splits=3,
        sampler=split_hmc(integrator, n_steps=5),
        n_draws=60,
        n_warmup=60,
        random_state=0,
    ).fit(X, y)
    assert clf.n_splits_ == 3
    assert clf.score(X, y) > 0.9
    assert clf.acceptance_rate_ > 0.5


def test_split_size_sets_the_number_of_subsets(iris_sorted):
    X, y = iris_sorted
    quick = {**SMALL, "n_draws": 2, "n_warmup": 0, "init": "random"}
    quick["sampler"] = split_hmc(n_steps=4, step_size=0.01)
    clf = SplitHMCClassifier(split_size=40, n_splits=99, **quick).fit(X, y)
    assert clf.n_splits_ == 4  # ceil(150 / 40); split_size takes precedence
    clf = SplitHMCClassifier(n_splits=500, **quick).fit(X[::8], y[::8])
    assert clf.n_splits_ == len(X[::8])  # never more subsets than rows


def test_fit_never_evaluates_the_network_on_more_than_one_subset():
    seen = []

    class Recording(nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.linear = nn.Linear(n_in, n_out)

        def forward(self, x):
            seen.append(x.shape[0])
            return self.linear(x)

    X = np.random.default_rng(0).normal(size=(120, 2))
    y = X[:, 0] - X[:, 1]
    reg = SplitHMCRegressor(module=Recording, n_splits=4, n_chains=2, **SMALL).fit(X, y)
    # MAP initialisation, step-size search and sampling all go by subset (30 rows); the only
    # larger call is the no-gradient prediction on 64 reference rows for the diagnostics.
    assert sorted(set(seen)) == [30, 64]
    seen.clear()
    reg.predict(X)
    assert max(seen) == 120


def test_same_seed_same_draws(iris_sorted):
    X, y = iris_sorted
    randomised = {**SMALL, "sampler": split_hmc("randomised", n_steps=4)}
    a = SplitHMCClassifier(**randomised).fit(X, y)
    b = SplitHMCClassifier(**randomised).fit(X, y)
    c = SplitHMCClassifier(**{**randomised, "random_state": 1}).fit(X, y)
    assert torch.equal(a.samples_.draws, b.samples_.draws)
    assert not torch.equal(a.samples_.draws, c.samples_.draws)


def test_joblib_and_weights_only_round_trips(tmp_path, iris_sorted):
    X, y = iris_sorted
    randomised = {**SMALL, "sampler": split_hmc("randomised", n_steps=4)}
    clf = SplitHMCClassifier(n_splits=3, **randomised).fit(X, y)
    joblib.dump(clf, tmp_path / "m.joblib")
    sklearn_bnn.save(clf, tmp_path / "m.pt")
    torch.load(tmp_path / "m.pt", weights_only=True)
    for loaded in (joblib.load(tmp_path / "m.joblib"), sklearn_bnn.load(tmp_path / "m.pt")):
        assert type(loaded) is SplitHMCClassifier
        # equal parameters: the sampler object a copy, its settings (sampler__*) the same
        params, loaded_params = clf.get_params(), loaded.get_params()
        for obj in ("sampler", "init"):  # objects: equal by their settings
            assert repr(loaded_params.pop(obj)) == repr(params.pop(obj))
        assert loaded_params == params
        assert loaded.n_splits_ == 3
        np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))


def test_regressor_weights_only_round_trip(tmp_path):
    X = np.linspace(-1, 1, 30)[:, None]
    y = np.sin(3 * X[:, 0])
    reg = SplitHMCRegressor(noise_precision=50.0, normalize_y=True, split_size=10, **SMALL)
    reg.fit(X, y)
    sklearn_bnn.save(reg, tmp_path / "r.pt")
    loaded = sklearn_bnn.load(tmp_path / "r.pt")
    assert loaded.n_splits_ == 3 and loaded.split_size == 10
    for a, b in zip(
        loaded.predict(X, return_std=True), reg.predict(X, return_std=True), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def test_warm_start_continues(iris_sorted):
    X, y = iris_sorted
    clf = SplitHMCClassifier(warm_start=True, **SMALL).fit(X, y)
    clf.fit(X, y)
    assert len(clf.samples_) == 60


def test_is_a_sibling_of_the_hmc_estimator_with_its_parameters_and_the_split_ones():
    from sklearn_bnn.estimators._base import BaseSamplingEstimator

    assert not issubclass(SplitHMCClassifier, HMCClassifier)
    assert issubclass(SplitHMCClassifier, BaseSamplingEstimator)
    hmc, split = set(HMCClassifier().get_params()), set(SplitHMCClassifier().get_params())
    assert split - hmc == {"n_splits", "split_size", "data_device"}
    assert hmc <= split
    # the integrator is the sampler's setting (None: a split target's symmetric split leapfrog)
    assert SplitHMCClassifier().get_params()["sampler__integrator"] is None
    assert "integrator" not in SplitHMCClassifier().get_params(deep=False)


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("n_splits", 0),
        ("n_splits", 2.5),
        ("split_size", 0),
        ("data_device", "tpu"),
    ],
)
def test_invalid_parameters_raise_valueerror_naming_them(iris_sorted, param, value):
    X, y = iris_sorted
    with pytest.raises(ValueError, match=param):
        SplitHMCClassifier(**{**SMALL, param: value}).fit(X, y)


def test_an_unknown_integrator_on_the_sampler_raises_valueerror_naming_it(iris_sorted):
    X, y = iris_sorted
    with pytest.raises(ValueError, match="integrator"):
        SplitHMCClassifier(**{**SMALL, "sampler": split_hmc("rk4")}).fit(X, y)
    with pytest.raises(ValueError, match="integrator"):
        by_name = SplitHMCClassifier(**{**SMALL, "sampler": "hmc"})
        by_name.set_params(sampler__integrator="rk4").fit(X, y)
    with pytest.raises(TypeError, match="integrator"):  # the sampler's, not the estimator's
        SplitHMCClassifier(**SMALL, integrator="naive")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_streaming_from_cpu_gives_the_same_draws_as_data_on_the_gpu(iris_sorted):
    X, y = iris_sorted
    params = dict(SMALL, device="cuda", dtype="float64")
    on_gpu = SplitHMCClassifier(**params).fit(X, y)
    streamed = SplitHMCClassifier(data_device="cpu", **params).fit(X, y)
    torch.testing.assert_close(streamed.samples_.draws, on_gpu.samples_.draws)


def test_split_estimators_expose_every_parameter_of_their_base():
    from sklearn_bnn import HMCClassifier, HMCRegressor

    for split, base in ((SplitHMCClassifier, HMCClassifier), (SplitHMCRegressor, HMCRegressor)):
        assert set(base().get_params()) <= set(split().get_params())
