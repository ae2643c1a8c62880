"""``sample_weight`` and ``class_weight``: a row's weight multiplies its log-likelihood (the
samplers) or its term of the loss (the trained family), so integer weights are repeated rows.

Deterministic checks first (the weighted densities equal the repeated data's, on every kind of
target), then the posterior of a Bayesian linear regression against the closed form of the
repeated data, fits with weights 2 against the duplicated rows, metadata routing through
``GridSearchCV`` and ``cross_validate``, the validation errors and ``class_weight``.
"""

import numpy as np
import pytest
import sklearn
import torch
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.utils.class_weight import compute_class_weight
from torch import nn

from sklearn_bnn import (
    HMCClassifier,
    HMCRegressor,
    MCDropoutClassifier,
    MCDropoutRegressor,
    PlanNetRegressor,
    SGMCMCClassifier,
)
from sklearn_bnn.diagnostics import ess
from sklearn_bnn.likelihoods import Bernoulli, Categorical, Gaussian, RowWeighted, weighted_targets
from sklearn_bnn.priors import GaussianPrior, HierarchicalPrior
from sklearn_bnn.samplers import HMC
from sklearn_bnn.samplers.starts import MAPStart
from sklearn_bnn.targets import FunctionalNetwork, MinibatchTarget, SplitTarget, Target

RNG = np.random.default_rng(0)
X = RNG.normal(size=(24, 3))
W = RNG.integers(0, 4, size=24).astype(float)  # zeros included
W[:3] = [1.0, 2.0, 3.0]


def _targets(kind):
    if kind == "categorical":
        return Categorical(), torch.as_tensor(RNG.integers(0, 3, size=24)), 3
    if kind == "bernoulli":
        return Bernoulli(), torch.as_tensor(RNG.integers(0, 2, size=(24, 1))).double(), 1
    return Gaussian(torch.tensor([2.0, 0.5])), torch.as_tensor(RNG.normal(size=(24, 2))), 2


@pytest.mark.parametrize("kind", ["categorical", "bernoulli", "gaussian"])
def test_weighted_densities_equal_the_repeated_rows_on_every_target(kind):
    """Value, gradient and (Gaussian) the residuals the noise's Gibbs step reads: a full-data,
    a split and a minibatch target with weights against the plain target of the rows repeated
    by their weights (one chain, the hand-written MLP path, and three chains)."""
    likelihood, y, n_out = _targets(kind)
    torch.manual_seed(0)
    net = FunctionalNetwork(nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, n_out)),
                            dtype=torch.float64)  # fmt: skip
    reps = torch.as_tensor(W.astype(int))
    repeated = Target(net, torch.as_tensor(X).repeat_interleave(reps, 0),
                      y.repeat_interleave(reps, 0), likelihood, GaussianPrior(1.0))  # fmt: skip
    packed = weighted_targets(y, W)
    weighted = RowWeighted(likelihood, W.sum())
    targets = [
        Target(net, X, packed, weighted, GaussianPrior(1.0)),
        SplitTarget(net, X, packed, weighted, GaussianPrior(1.0), n_splits=3),
        MinibatchTarget(net, X, packed, weighted, GaussianPrior(1.0), batch_size=5),
    ]
    for n_chains in (1, 3):
        theta = torch.randn(n_chains, net.dim, dtype=torch.float64)
        value, grad = repeated.value_and_grad(theta)
        for target in targets:
            v, g = target.value_and_grad(theta)
            torch.testing.assert_close(v, value, msg=type(target).__name__)
            torch.testing.assert_close(g, grad, msg=type(target).__name__)
            if kind == "gaussian":
                torch.testing.assert_close(
                    target._residual_sum_of_squares(theta),
                    repeated._residual_sum_of_squares(theta),
                )
    if kind == "gaussian":  # a hierarchical prior's learned noise keeps the weights
        prior = HierarchicalPrior(learn_noise=True)
        target = Target(net, X, packed, weighted, prior)
        assert isinstance(target.likelihood, RowWeighted) and target.likelihood.learns_precision
        plain = Target(net, repeated.X, repeated.y, likelihood, prior)
        tau = torch.tensor([[3.0, 0.5]], dtype=torch.float64)
        theta = theta[:1]
        torch.testing.assert_close(
            target.with_noise_precision(tau).value_and_grad(theta),
            plain.with_noise_precision(tau).value_and_grad(theta),
        )
    if kind == "gaussian":  # the conditional of the learned noise: n is the total weight
        learned = RowWeighted(Gaussian(1.0, prior=(2.0, 1.0)), W.sum())
        sum_sq = torch.ones(2, 1, dtype=torch.float64)
        draws = [
            lik.sample_precision(sum_sq, n, torch.Generator().manual_seed(0))
            for lik, n in ((learned, 24), (learned.base, W.sum()))
        ]
        torch.testing.assert_close(draws[0], draws[1])


def _linear_posterior(X, y, w, alpha, beta):
    """The closed-form posterior (mean, cov) of the Bayesian linear regression of the data
    with row i repeated w_i times: precision alpha I + beta X1' W X1."""
    X1 = np.hstack([X, np.ones((len(X), 1))])
    cov = np.linalg.inv(alpha * np.eye(X1.shape[1]) + beta * X1.T @ (w[:, None] * X1))
    return beta * cov @ X1.T @ (w * y), cov


def test_integer_weights_give_the_closed_form_posterior_of_the_repeated_rows():
    """(The split and minibatch targets' weighted densities are the full target's, above.)"""
    rng = np.random.default_rng(1)
    n = 30
    Xl = rng.normal(size=(n, 2))
    y = Xl @ np.array([1.0, -2.0]) + 0.3 + rng.normal(scale=0.5, size=n)
    w = rng.integers(0, 4, size=n).astype(float)
    alpha, beta = 2.0, 4.0
    reg = HMCRegressor(
        module=lambda i, o: nn.Linear(i, o),
        prior_precision=alpha,
        noise_precision=beta,
        n_draws=200,
        n_warmup=60,
        sampler=HMC(trajectory_length=0.5),
        n_chains=2,
        dtype="float64",
        random_state=0,
    ).fit(Xl, y, sample_weight=w)
    mean, cov = _linear_posterior(Xl, y, w, alpha, beta)
    unweighted_mean = _linear_posterior(Xl, y, np.ones(n), alpha, beta)[0]
    draws = reg.samples_.draws.numpy()
    for k in range(3):
        x = draws[..., k]
        se = np.sqrt(cov[k, k] / ess(x))
        assert abs(x.mean() - mean[k]) < 4 * se, (k, x.mean(), mean[k], se)
        rel_se = np.sqrt(2.0 / ess((x - mean[k]) ** 2))
        assert abs(x.var() / cov[k, k] - 1) < 4 * rel_se, (k, x.var(), cov[k, k])
    # the weights matter here: the unweighted posterior mean is many standard errors away
    assert np.max(np.abs(unweighted_mean - mean) / np.sqrt(np.diag(cov))) > 0.5


REG = np.random.default_rng(2)
XS = REG.uniform(-2, 2, size=(20, 1))
YS = np.sin(2 * XS[:, 0]) + 0.1 * REG.normal(size=20)


@pytest.mark.parametrize(
    "make",
    [
        lambda: HMCRegressor(hidden_layer_sizes=(6,), noise_precision=25.0, n_draws=30,
                             n_warmup=30, n_chains=2, init=MAPStart(n_steps=150),
                             sampler=HMC(n_steps=8), random_state=0),
        lambda: MCDropoutRegressor(hidden_layer_sizes=(16,), dropout=0.1, max_iter=150,
                                   batch_size=40, learning_rate_init=1e-2, n_predict_draws=50,
                                   random_state=0),
    ],
    ids=["HMCRegressor", "MCDropoutRegressor"],
)  # fmt: skip
def test_weights_two_predict_as_the_duplicated_rows(make):
    """Weights 2 and each row given twice: the same posterior (objective), so predictive means
    within the predictive spread of each other (different draws, different minibatches)."""
    weighted = make().fit(XS, YS, sample_weight=np.full(20, 2.0))
    doubled = make().fit(np.vstack([XS, XS]), np.concatenate([YS, YS]))
    grid = np.linspace(-2, 2, 9)[:, None]
    m1, s1 = weighted.predict(grid, return_std=True)
    m2, s2 = doubled.predict(grid, return_std=True)
    assert np.all(np.abs(m1 - m2) < np.maximum(s1, s2)), (m1 - m2, s1, s2)
    assert np.all(np.abs(np.log(s1 / s2)) < np.log(2.0)), (s1, s2)


@pytest.fixture
def routing():
    with sklearn.config_context(enable_metadata_routing=True):
        yield


def _small_dropout_regressor(**kw):
    return MCDropoutRegressor(hidden_layer_sizes=(4,), max_iter=5, batch_size=32,
                              n_predict_draws=4, random_state=0, **kw)  # fmt: skip


def test_weights_are_routed_by_cross_validate_and_grid_search(routing):
    """With routing on and ``set_fit_request(sample_weight=True)``, each fold's fit gets its
    rows' weights: the fold's estimator equals a fit on the fold with those weights."""
    Xr = np.random.default_rng(3).normal(size=(40, 2))
    yr = Xr[:, 0] - Xr[:, 1]
    w = np.random.default_rng(4).uniform(0.1, 3.0, size=40)
    cv = KFold(2)
    est = _small_dropout_regressor().set_fit_request(sample_weight=True)
    est.set_score_request(sample_weight=False)
    res = cross_validate(est, Xr, yr, cv=cv, params={"sample_weight": w}, return_estimator=True)
    train, test = next(cv.split(Xr))
    direct = _small_dropout_regressor().fit(Xr[train], yr[train], sample_weight=w[train])
    np.testing.assert_allclose(res["estimator"][0].predict(Xr[test]), direct.predict(Xr[test]))
    unweighted = _small_dropout_regressor().fit(Xr[train], yr[train])
    assert not np.allclose(unweighted.predict(Xr[test]), direct.predict(Xr[test]))

    search = GridSearchCV(est, {"prior_precision": [1.0, 2.0]}, cv=cv)
    search.fit(Xr, yr, sample_weight=w)
    refit = _small_dropout_regressor(prior_precision=search.best_params_["prior_precision"])
    refit.fit(Xr, yr, sample_weight=w)
    np.testing.assert_allclose(search.predict(Xr), refit.predict(Xr))

    # a sampling estimator through the same routing
    hmc = HMCClassifier(
        hidden_layer_sizes=(2,), n_draws=5, n_warmup=5, calibration=None,
        init=MAPStart(n_steps=5), sampler=HMC(n_steps=2), random_state=0,
    )  # fmt: skip
    hmc.set_fit_request(sample_weight=True).set_score_request(sample_weight=False)
    res = cross_validate(hmc, Xr, yr > 0, cv=cv,
                         params={"sample_weight": w}, return_estimator=True)  # fmt: skip
    hmc_direct = HMCClassifier(**hmc.get_params(deep=False)).fit(Xr[train], yr[train] > 0,
                                                      sample_weight=w[train])  # fmt: skip
    np.testing.assert_allclose(
        res["estimator"][0].samples_.draws.numpy(), hmc_direct.samples_.draws.numpy()
    )


@pytest.mark.parametrize(
    "est",
    [HMCRegressor(), SGMCMCClassifier(), MCDropoutClassifier(), PlanNetRegressor()],
    ids=lambda e: type(e).__name__,
)
def test_bad_weights_are_refused_with_scikit_learns_messages(est):
    y = (X[:, 0] > 0).astype(int)
    for bad, message in [
        (np.r_[-1.0, np.ones(23)], "Negative values in data passed to `sample_weight`"),
        (np.r_[np.nan, np.ones(23)], "Input sample_weight contains NaN"),
        (np.r_[np.inf, np.ones(23)], "sample_weight"),
        (np.ones(5), r"sample_weight.shape == \(5,\), expected \(24,\)"),
        (np.zeros(24), "Sample weights must contain at least one non-zero number"),
    ]:
        with pytest.raises(ValueError, match=message):
            est.fit(X, y, sample_weight=bad)


def test_weights_the_model_cannot_take_are_refused():
    y = X[:, 0]
    joint = HierarchicalPrior(scheme="joint")
    with pytest.raises(ValueError, match="takes no sample_weight .* hierarchical prior"):
        HMCRegressor(prior_precision=joint).fit(X, y, sample_weight=W)
    # weights that leave one class: an error naming the classes, for both families
    yc = (np.arange(24) % 2).astype(int)
    for est in (HMCClassifier(), MCDropoutClassifier()):
        with pytest.raises(ValueError, match="at least 2 classes with a positive weight"):
            est.fit(X, yc, sample_weight=yc.astype(float))


def test_balanced_class_weight_is_its_sample_weight():
    rng = np.random.default_rng(5)
    Xc = rng.normal(size=(40, 2))
    yc = (Xc[:, 0] + 0.8 > 0).astype(int)  # imbalanced
    per_class = compute_class_weight("balanced", classes=np.array([0, 1]), y=yc)
    sw = per_class[yc]
    hmc = dict(
        hidden_layer_sizes=(3,), n_draws=8, n_warmup=8, init=MAPStart(n_steps=20),
        sampler=HMC(n_steps=3), calibration=None, dtype="float64", random_state=0,
    )  # fmt: skip
    a = HMCClassifier(class_weight="balanced", **hmc).fit(Xc, yc)
    b = HMCClassifier(**hmc).fit(Xc, yc, sample_weight=sw)
    c = HMCClassifier(**hmc).fit(Xc, yc)
    np.testing.assert_array_equal(a.samples_.draws.numpy(), b.samples_.draws.numpy())
    assert not np.allclose(a.samples_.draws.numpy(), c.samples_.draws.numpy())
    # all-one weights are the unweighted fit, computed as it is
    ones = HMCClassifier(**hmc).fit(Xc, yc, sample_weight=np.ones(40))
    np.testing.assert_array_equal(ones.samples_.draws.numpy(), c.samples_.draws.numpy())
    # the same rows' weights, a dict's and sample_weight's, multiply
    d = HMCClassifier(class_weight={0: 2.0, 1: 1.0}, **hmc).fit(Xc, yc, sample_weight=sw)
    e = HMCClassifier(**hmc).fit(Xc, yc, sample_weight=sw * np.where(yc == 0, 2.0, 1.0))
    np.testing.assert_array_equal(d.samples_.draws.numpy(), e.samples_.draws.numpy())

    drop = dict(hidden_layer_sizes=(4,), max_iter=8, batch_size=16, n_predict_draws=4,
                dtype="float64", random_state=0)  # fmt: skip
    f = MCDropoutClassifier(class_weight="balanced", **drop).fit(Xc, yc)
    g = MCDropoutClassifier(**drop).fit(Xc, yc, sample_weight=sw)
    np.testing.assert_allclose(f.predict_proba(Xc), g.predict_proba(Xc), rtol=1e-6)


def test_meta_estimators_pass_weights_on(routing):
    """BayesDecisionClassifier and EnsembleReducer route ``sample_weight`` to the wrapped
    estimator's fit (the reducer on the rows it fits it on)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    from sklearn_bnn import BayesDecisionClassifier, EnsembleReducer

    rng = np.random.default_rng(6)
    Xm = rng.normal(size=(40, 2))
    ym = (Xm[:, 0] + 0.5 * rng.normal(size=40) > 0).astype(int)
    w = rng.uniform(0.1, 3.0, size=40)
    inner = LogisticRegression().set_fit_request(sample_weight=True)
    meta = BayesDecisionClassifier(inner).fit(Xm, ym, sample_weight=w)
    direct = LogisticRegression().fit(Xm, ym, sample_weight=w)
    np.testing.assert_allclose(meta.estimator_.coef_, direct.coef_)

    mc = dict(hidden_layer_sizes=(4,), max_iter=3, calibration=None, n_predict_draws=4,
              random_state=0)  # fmt: skip
    reducer = EnsembleReducer(
        MCDropoutClassifier(**mc).set_fit_request(sample_weight=True), n_repeats=2, random_state=0
    ).fit(Xm, ym, sample_weight=w)
    rows = train_test_split(
        np.arange(40), test_size=reducer.validation_fraction,
        random_state=np.random.RandomState(0), stratify=ym,
    )[0]  # fmt: skip
    fitted = MCDropoutClassifier(**mc).fit(Xm[rows], ym[rows], sample_weight=w[rows])
    np.testing.assert_allclose(
        reducer.estimator_.predict_samples(Xm), fitted.predict_samples(Xm)
    )
