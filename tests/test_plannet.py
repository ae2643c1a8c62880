"""PlanNetRegressor and the loss of seeds/003 eq. 7.1; ensembles by eq. 7.7-7.8."""

import copy
import math

import joblib
import numpy as np
import pytest
import torch
from scipy import stats

import sklearn_bnn
from sklearn_bnn.estimators import PlanNetRegressor
from sklearn_bnn.estimators.plannet import combine_gaussians
from sklearn_bnn.losses import cholesky_factor, cholesky_gaussian_loss, n_offdiag


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small networks train faster, and steadier on a shared machine, on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------------------------- the loss


@pytest.mark.parametrize("d", [1, 2, 5])
def test_loss_is_twice_the_mvn_negative_log_density(d):
    g = torch.Generator().manual_seed(d)
    n = 10
    mean = torch.randn(n, d, generator=g, dtype=torch.float64)
    log_diag = 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)
    off = torch.randn(n, n_offdiag(d), generator=g, dtype=torch.float64)
    y = torch.randn(n, d, generator=g, dtype=torch.float64)
    L = cholesky_factor(log_diag, off)
    assert torch.equal(L, L.tril()) and torch.allclose(L.diagonal(dim1=-2, dim2=-1), log_diag.exp())
    mvn = torch.distributions.MultivariateNormal(mean, precision_matrix=L @ L.mT)
    expected = -2.0 * mvn.log_prob(y) - d * math.log(2 * math.pi)
    loss = cholesky_gaussian_loss(y, mean, log_diag, off, reduction="none")
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(cholesky_gaussian_loss(y, mean, log_diag, off), expected.mean())
    torch.testing.assert_close(
        cholesky_gaussian_loss(y, mean, log_diag, off, reduction="sum"), expected.sum()
    )


def test_diagonal_loss_is_the_heteroscedastic_loss():
    g = torch.Generator().manual_seed(0)
    y, mean, log_diag = torch.randn(3, 6, 4, generator=g, dtype=torch.float64)
    expected = ((y - mean) ** 2 * (2 * log_diag).exp() - 2 * log_diag).sum(-1)
    got = cholesky_gaussian_loss(y, mean, log_diag, None, reduction="none")
    torch.testing.assert_close(got, expected)
    zeros = torch.zeros(6, n_offdiag(4), dtype=torch.float64)
    torch.testing.assert_close(cholesky_gaussian_loss(y, mean, log_diag, zeros, "none"), expected)


def test_loss_is_finite_where_the_precision_overflows():
    # l_dd = e^50: L L^T would hold e^100, beyond float32, but the whitened residual is small
    d = 3
    log_diag = torch.full((1, d), 50.0, requires_grad=True)
    y = torch.full((1, d), 1e-22)
    loss = cholesky_gaussian_loss(y, torch.zeros(1, d), log_diag, torch.zeros(1, n_offdiag(d)))
    assert not torch.isfinite(cholesky_factor(log_diag, torch.zeros(1, 3)).square().sum())
    expected = d * (math.exp(50) * 1e-22) ** 2 - 2 * d * 50
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert torch.isfinite(log_diag.grad).all()


def test_loss_for_large_d_matches_float64():
    d = 120
    g = torch.Generator().manual_seed(0)
    args = [
        torch.randn(4, d, generator=g, dtype=torch.float64),
        torch.randn(4, d, generator=g, dtype=torch.float64),
        0.1 * torch.randn(4, d, generator=g, dtype=torch.float64),
        torch.randn(4, n_offdiag(d), generator=g, dtype=torch.float64) / d,
    ]
    ref = cholesky_gaussian_loss(*args, reduction="none")
    single = cholesky_gaussian_loss(*(a.float() for a in args), reduction="none")
    torch.testing.assert_close(single.double(), ref, rtol=1e-5, atol=1e-4)
    L = cholesky_factor(args[2], args[3])
    mvn = torch.distributions.MultivariateNormal(args[1], precision_matrix=L @ L.mT)
    torch.testing.assert_close(ref, -2 * mvn.log_prob(args[0]) - d * math.log(2 * math.pi))


def test_loss_rejects_unknown_reduction():
    x = torch.zeros(2, 1)
    with pytest.raises(ValueError, match="reduction"):
        cholesky_gaussian_loss(x, x, x, None, reduction="max")


# ---------------------------------------------------------------------------------- ensembles


def test_combine_gaussians_two_members_by_hand():
    means = np.array([[0.0, 0.0], [2.0, 0.0]])
    covs = np.array([[[1.0, 0.0], [0.0, 2.0]], [[1.0, 0.5], [0.5, 1.0]]])
    mean, cov = combine_gaussians(means, covs)
    np.testing.assert_allclose(mean, [1.0, 0.0])
    # spread of the means diag(1, 0) plus the mean covariance [[1, .25], [.25, 1.5]]
    np.testing.assert_allclose(cov, [[2.0, 0.25], [0.25, 1.5]])
    # the same as the moments of a large sample of the mixture
    rng = np.random.default_rng(0)
    pick = rng.integers(0, 2, 400_000)
    draws = np.stack([rng.multivariate_normal(means[k], covs[k], 200_000) for k in (0, 1)])
    sample = draws[pick, np.arange(400_000) % 200_000]
    np.testing.assert_allclose(np.cov(sample.T), cov, atol=0.02)


# ---------------------------------------------------------------------------------- estimator


def _small(**kw):
    params = dict(
        hidden_layer_sizes=(16,),
        n_estimators=2,
        n_predict_draws=8,
        max_iter=40,
        batch_size=64,
        learning_rate_init=3e-3,
        random_state=0,
    )
    params.update(kw)
    return PlanNetRegressor(**params)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 3))
    Y = np.c_[X[:, 0] + X[:, 1], 10 * X[:, 2]] + 0.3 * rng.normal(size=(240, 2)) + [5.0, -50.0]
    return X, Y


@pytest.fixture(scope="module")
def fitted(data):
    return _small().fit(*data)


def test_shapes_and_original_units(fitted, data):
    X, Y = data
    mean, std = fitted.predict(X, return_std=True)
    _, cov = fitted.predict(X, return_cov=True)
    assert mean.shape == std.shape == (240, 2) and cov.shape == (240, 2, 2)
    np.testing.assert_allclose(std, np.sqrt(np.diagonal(cov, axis1=1, axis2=2)))
    np.testing.assert_allclose(cov, cov.transpose(0, 2, 1), atol=1e-9)
    assert np.all(np.linalg.eigvalsh(cov) > 0)
    assert fitted.score(X, Y) > 0.8
    assert fitted.sample_y(X[:3], 4).shape == (3, 2, 4)
    with pytest.raises(RuntimeError, match="At most one"):
        fitted.predict(X, return_std=True, return_cov=True)


def test_standardisation_makes_predictions_equivariant(fitted, data):
    # rescaled inputs and targets train the same network; outputs come back in original units
    X, Y = data
    a, b = np.array([1e-3, 1e4]), np.array([7.0, -3e5])
    scaled = _small().fit(100 * X + 3, a * Y + b)
    mean, cov = fitted.predict(X, return_cov=True)
    mean2, cov2 = scaled.predict(100 * X + 3, return_cov=True)
    np.testing.assert_allclose((mean2 - b) / a, mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(cov2 / np.outer(a, a), cov, rtol=1e-6, atol=1e-12)


def test_one_dimensional_target(data):
    X, Y = data
    reg = _small(n_estimators=1).fit(X, Y[:, 1])
    mean, std = reg.predict(X, return_std=True)
    assert mean.shape == std.shape == (240,)
    assert reg.predict(X, return_cov=True)[1].shape == (240, 1, 1)
    assert reg.sample_y(X[:5], 3).shape == (5, 3)
    assert reg.score(X, Y[:, 1]) > 0.8
    parts = reg.predict_variance_parts(X[:5])
    assert all(field.shape == (5,) for field in parts)
    np.testing.assert_allclose(parts.total_std, std[:5])
    assert np.all(parts.weight_std == 0.0)  # one network, expectation: no disagreement
    assert reg.predict_variance_parts(X[:5], return_cov=True).noise_cov.shape == (5, 1, 1)


def test_predict_combines_members_by_total_variance(fitted, data):
    X = data[0][:20]
    means, covs = fitted._member_moments(X)
    assert means.shape[0] == 2
    mean, cov = combine_gaussians(means, covs)
    expected_mean, expected_cov = fitted._to_original_units(mean, cov)
    got_mean, got_cov = fitted.predict(X, return_cov=True)
    np.testing.assert_allclose(got_mean, expected_mean)
    np.testing.assert_allclose(got_cov, expected_cov)
    # the ensemble is wider than the average member: the spread of the means adds to it
    assert np.all(
        np.linalg.eigvalsh(got_cov - fitted._to_original_units(mean, covs.mean(0))[1]) > -1e-9
    )


@pytest.mark.parametrize("prediction", ["expectation", "sampling"])
def test_variance_parts_add_up_to_the_predictive(fitted, data, prediction):
    X = data[0][:20]
    reg = copy.deepcopy(fitted).set_params(prediction=prediction)
    mean, cov = reg.predict(X, return_cov=True)
    _, std = reg.predict(X, return_std=True)
    parts = reg.predict_variance_parts(X, return_cov=True)
    np.testing.assert_allclose(parts.mean, mean)
    np.testing.assert_allclose(parts.total_cov, cov, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(parts.noise_cov + parts.weight_cov, parts.total_cov)
    for part in (parts.noise_cov, parts.weight_cov):  # both are covariances
        np.testing.assert_allclose(part, part.transpose(0, 2, 1), atol=1e-12)
        assert np.all(np.linalg.eigvalsh(part) > -1e-10)
    stds = reg.predict_variance_parts(X)
    np.testing.assert_allclose(stds.total_std, std, rtol=1e-10)
    np.testing.assert_allclose(stds.noise_std**2 + stds.weight_std**2, std**2, rtol=1e-10)
    np.testing.assert_allclose(stds.noise_std**2, np.diagonal(parts.noise_cov, axis1=1, axis2=2))
    # the weight part is the members' disagreement, plus the dropout passes' spread when each
    # network predicts the mixture of its passes (eq. 7.6)
    members = reg._member_moments(X)[0].numpy() * reg.y_scale_ + reg.y_mean_  # (M, n, D)
    between = members.var(axis=0)
    if prediction == "expectation":
        np.testing.assert_allclose(stds.weight_std**2, between, rtol=1e-8, atol=1e-14)
    else:
        assert np.all(stds.weight_std**2 > between)


def _assert_moments(draws, mean, cov, tol):
    """Sample mean and covariance of ``draws`` (n, D, S) against ``mean``/``cov``, in units of
    the predictive standard deviations (Monte Carlo error about 1/sqrt(S))."""
    for x in range(len(draws)):
        sd = np.sqrt(np.diag(cov[x]))
        np.testing.assert_allclose(draws[x].mean(-1) / sd, mean[x] / sd, atol=tol)
        np.testing.assert_allclose(
            np.cov(draws[x]) / np.outer(sd, sd), cov[x] / np.outer(sd, sd), atol=tol
        )


def test_expectation_versus_sampling(fitted, data):
    X = data[0][:10]
    mean_e, cov_e = fitted.predict(X, return_cov=True)
    sampler = copy.deepcopy(fitted).set_params(prediction="sampling")
    mean_s, cov_s = sampler.predict(X, return_cov=True)
    # same passes, same mean (eq. 7.4 and 7.6 average the same mu's)
    np.testing.assert_allclose(mean_s, mean_e)
    assert not np.allclose(cov_s, cov_e)
    # eq. 7.6 draws, one dropout pass each: their moments approach the mixture's (whose moments
    # are estimated here from many passes too)
    sampler.set_params(n_predict_draws=4000)
    mean_s, cov_s = sampler.predict(X[:2], return_cov=True)
    draws = sampler.sample_y(X[:2], 4000, random_state=1)  # (2, 2, 4000)
    _assert_moments(draws, mean_s, cov_s, tol=0.08)


def test_sample_y_matches_predictive_moments(fitted, data):
    X = data[0][:2]
    mean, cov = fitted.predict(X, return_cov=True)
    draws = fitted.sample_y(X, 20_000, random_state=3)
    _assert_moments(draws, mean, cov, tol=0.03)
    np.testing.assert_array_equal(draws, fitted.sample_y(X, 20_000, random_state=3))


def test_random_state_reproducible_and_predict_deterministic(data):
    X, Y = data
    a = _small(n_estimators=1, max_iter=5).fit(X, Y)
    b = _small(n_estimators=1, max_iter=5).fit(X, Y)
    c = _small(n_estimators=1, max_iter=5, random_state=1).fit(X, Y)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    np.testing.assert_array_equal(a.predict(X), a.predict(X))
    assert not np.allclose(a.predict(X), c.predict(X))


def test_early_stopping_keeps_best_and_learns_dropout(data):
    X, Y = data
    reg = _small(n_estimators=1, max_iter=300, n_iter_no_change=5).fit(X, Y)
    assert reg.n_iter_[0] < 300
    assert np.isfinite(reg.validation_loss_[0])
    assert reg.dropout_rates_.shape == (1, 2)
    assert not np.allclose(reg.dropout_rates_, 0.1)  # the drop rates moved from their start
    no_es = _small(n_estimators=1, max_iter=3, early_stopping=False).fit(X, Y)
    assert no_es.n_iter_[0] == 3 and np.isnan(no_es.validation_loss_[0])


def test_joblib_and_weights_only_round_trips(fitted, data, tmp_path):
    X = data[0][:30]
    expected_mean, expected_cov = fitted.predict(X, return_cov=True)
    joblib.dump(fitted, tmp_path / "m.joblib")
    again = joblib.load(tmp_path / "m.joblib")
    np.testing.assert_array_equal(again.predict(X, return_cov=True)[1], expected_cov)
    sklearn_bnn.save(fitted, tmp_path / "m.pt")
    loaded = sklearn_bnn.load(tmp_path / "m.pt")
    mean, cov = loaded.predict(X, return_cov=True)
    np.testing.assert_array_equal(mean, expected_mean)
    np.testing.assert_array_equal(cov, expected_cov)
    np.testing.assert_array_equal(loaded.sample_y(X, 3), fitted.sample_y(X, 3))
    np.testing.assert_array_equal(loaded.dropout_rates_, fitted.dropout_rates_)


def test_verbose_progress_bar(data, capsys):
    X, Y = data
    _small(n_estimators=1, max_iter=2, verbose=1).fit(X, Y)
    assert "plan-net 1/1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "param, value",
    [
        ("covariance", "banded"),
        ("prediction", "mode"),
        ("n_estimators", 0),
        ("n_predict_draws", 1.5),
        ("init_dropout", 1.0),
        ("validation_fraction", 0.0),
        ("concrete_temperature", 0),
        ("learning_rate_init", -1.0),
        ("hidden_layer_sizes", (0,)),
        ("early_stopping", "yes"),
        ("dtype", "float16"),
        ("device", "tpu"),
    ],
)
def test_bad_parameters_raise_at_fit(param, value, data):
    reg = _small(**{param: value})
    with pytest.raises(ValueError, match=param):
        reg.fit(*data)


# ---------------------------------------------------------------------------------- statistics


def _correlated(n, seed):
    """y = (sin 3x, x^2) + noise with correlation 0.8 x and input-dependent scale."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 1))
    s1, s2, rho = 0.3, 0.2 + 0.2 * np.abs(x[:, 0]), 0.8 * x[:, 0]
    cov = np.empty((n, 2, 2))
    cov[:, 0, 0], cov[:, 1, 1] = s1**2, s2**2
    cov[:, 0, 1] = cov[:, 1, 0] = rho * s1 * s2
    noise = np.einsum("nij,nj->ni", np.linalg.cholesky(cov), rng.normal(size=(n, 2)))
    return x, np.c_[np.sin(3 * x[:, 0]), x[:, 0] ** 2] + noise


@pytest.fixture(scope="module")
def correlated_fits():
    X, Y = _correlated(3000, 0)
    kw = dict(
        hidden_layer_sizes=(64, 64),
        n_estimators=1,
        batch_size=256,
        max_iter=100,
        learning_rate_init=3e-3,
        n_predict_draws=20,
        random_state=0,
    )
    full = PlanNetRegressor(**kw).fit(X, Y)
    diagonal = PlanNetRegressor(covariance="diagonal", **kw).fit(X, Y)
    return full, diagonal


def _corr(cov):
    return cov[:, 0, 1] / np.sqrt(cov[:, 0, 0] * cov[:, 1, 1])


def test_full_covariance_recovers_input_dependent_correlation(correlated_fits):
    full, diagonal = correlated_fits
    x = np.array([[-0.8], [0.8]])  # true correlations -0.64 and +0.64
    corr = _corr(full.predict(x, return_cov=True)[1])
    assert corr[0] < -0.4 and corr[1] > 0.4
    np.testing.assert_allclose(corr, [-0.64, 0.64], atol=0.2)
    assert np.all(np.abs(_corr(diagonal.predict(x, return_cov=True)[1])) < 0.05)


def test_coverage_and_likelihood_on_fresh_data(correlated_fits):
    full, diagonal = correlated_fits
    X, Y = _correlated(2000, 1)
    nll = {}
    for name, reg in (("full", full), ("diagonal", diagonal)):
        mean, cov = reg.predict(X, return_cov=True)
        z = np.abs(Y - mean) / np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
        for level in (0.68, 0.95):
            coverage = (z < stats.norm.ppf(0.5 + level / 2)).mean(0)
            np.testing.assert_allclose(coverage, level, atol=0.05)
        nll[name] = -np.mean(
            [
                stats.multivariate_normal(m, c).logpdf(y)
                for m, c, y in zip(mean, cov, Y, strict=True)
            ]
        )
        if name == "full":
            r = Y - mean
            maha = np.einsum("ni,nij,nj->n", r, np.linalg.inv(cov), r)
            for level in (0.68, 0.95):
                joint = (maha < stats.chi2.ppf(level, 2)).mean()
                assert joint == pytest.approx(level, abs=0.05)
    # the correlation is worth a better held-out likelihood
    assert nll["full"] < nll["diagonal"] - 0.05
