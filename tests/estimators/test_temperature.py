"""Tempered posteriors p(w | D)^(1/T) on the MCMC estimators."""

import numpy as np
import pytest
from torch import nn

from sklearn_bnn import HMCClassifier, HMCRegressor
from sklearn_bnn.diagnostics import ess
from sklearn_bnn.estimators.split import SplitHMCClassifier, SplitHMCRegressor
from sklearn_bnn.samplers import HMC
from sklearn_bnn.samplers.starts import MAPStart

# Draws of these three fits (float64), first stored before `temperature` existed (commit
# 8431580) and stored again, unchanged otherwise, when the seeding became one SeedSequence per
# fit (`_seeding.py`): T = 1 must leave every number of the sampler as it was.
REFERENCE = {
    "classifier": [-0.9161984634832556, -0.0735487147081492, 0.4962046106208063,
                   0.6891019255949705, -0.2776318014605708, 0.5846262406165774],
    "regressor": [0.6088295303814639, 0.09725153234037116, 0.5088426169042898,
                  -0.2099219331985538, 0.4905275275343229, -0.2963336359025366],
    "split": [0.30143848717223837, -0.21168825412975759, 0.0811656914260702,
              -0.40277358133003927, 0.357462523045789, -0.07121421364533555],
}  # fmt: skip


def test_temperature_one_reproduces_the_untempered_draws():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    yc = (X[:, 0] > 0).astype(int)
    yr = X[:, 0] + 0.1 * rng.normal(size=30)
    kw = dict(
        hidden_layer_sizes=(4,), n_draws=4, n_warmup=10, init=MAPStart(n_steps=20),
        dtype="float64", random_state=0, temperature=1.0, rescale_moves=False,
        prior_precision=1.0,
    )  # fmt: skip
    reg_kw = dict(noise_precision=4.0, normalize_y=False)
    # The reference predates the step-size jitter (HMC's step_jitter=0.5 default since): the
    # fixed trajectory it drew with, on the split estimator with its own integrator too; and
    # the rescaling moves (rescale_moves=True default since), which these ReLU nets would take;
    # and the regressor's one chain (n_chains=4 default since); and the prior of precision 1
    # (prior_precision="auto" default since).
    fixed = HMC(n_steps=10, step_jitter=0.0)
    split_fixed = HMC(n_steps=10, step_jitter=0.0, integrator="symmetric")
    fits = {
        "classifier": HMCClassifier(**kw, sampler=fixed).fit(X, yc),
        "regressor": HMCRegressor(**reg_kw, **kw, sampler=fixed, n_chains=1).fit(X, yr),
        "split": SplitHMCRegressor(**reg_kw, n_splits=3, **kw, sampler=split_fixed).fit(X, yr),
    }
    # rtol 1e-6, not bit for bit: another CPU's BLAS rounds float64 products differently, and
    # 14 transitions carry that forward; a sampler that changed gives draws apart by O(0.1)
    for name, est in fits.items():
        np.testing.assert_allclose(
            est.samples_.draws[0, -1, :6].numpy(), REFERENCE[name], rtol=1e-6, err_msg=name
        )


@pytest.mark.slow
# a colder and a hotter posterior, one per estimator class (the temperature enters both the
# same way: the whole log posterior divided by T)
@pytest.mark.parametrize("cls, T", [(HMCRegressor, 3.0), (SplitHMCRegressor, 0.25)])
def test_tempered_bayesian_linear_regression_matches_its_closed_form(cls, T):
    rng = np.random.default_rng(0)
    n, d = 40, 2
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -2.0]) + 0.3 + rng.normal(scale=0.5, size=n)
    alpha, beta = 2.0, 4.0
    split = cls is SplitHMCRegressor
    extra = {"n_splits": 3} if split else {}
    reg = cls(
        module=lambda i, o: nn.Linear(i, o),
        prior_precision=alpha,
        noise_precision=beta,
        temperature=T,
        # the bounds are in units of the draws' own Monte Carlo error: at 400 draws a chain the
        # largest |z| over random_state 1-3, both T and both classes, was 0.9-2.7 against 4
        n_draws=400,
        n_warmup=200,
        # a jittered integration time of about 6 posterior sds (a fixed 10 steps happened to
        # be near-periodic at T = 0.25: ESS 30-80 of 1,200 draws)
        # (a split estimator's "hmc": the symmetric split leapfrog)
        sampler=HMC(trajectory_length=0.5 * np.sqrt(T), integrator="symmetric" if split else None),
        n_chains=2,
        dtype="float64",
        random_state=1,
        **extra,
    ).fit(X, y)
    # p(theta | D)^(1/T): the Gaussian posterior with its precision divided by T, same mean
    X1 = np.hstack([X, np.ones((n, 1))])
    cov_bayes = np.linalg.inv(alpha * np.eye(d + 1) + beta * X1.T @ X1)
    mean = beta * cov_bayes @ X1.T @ y
    cov = T * cov_bayes
    draws = reg.samples_.draws.numpy()
    for k in range(d + 1):
        x = draws[..., k]
        se = np.sqrt(cov[k, k] / ess(x))
        assert abs(x.mean() - mean[k]) < 4 * se, (k, x.mean(), mean[k], se)
        # variance: relative standard error about sqrt(2 / ess)
        rel_se = np.sqrt(2.0 / ess((x - mean[k]) ** 2))
        assert abs(x.var() / cov[k, k] - 1) < 4 * rel_se, (k, x.var(), cov[k, k])


def test_cold_classifier_draws_spread_by_the_square_root_of_the_temperature():
    """p^(1/T) shrinks a near-Gaussian posterior's spread by sqrt(T): the draws' predicted
    probabilities spread about sqrt(0.05) = 0.22 times as much. (The mean confidence moves by
    only 0.003 here, too little to test.) Seeds 0-7 gave ratios 0.18-0.31."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] + 0.5 * rng.normal(size=60) > 0).astype(int)
    split_hmc = HMC(n_steps=10, integrator="symmetric")
    kw = dict(hidden_layer_sizes=(8,), n_draws=60, n_warmup=60, sampler=split_hmc, random_state=0)
    warm = SplitHMCClassifier(n_splits=2, **kw).fit(X, y)
    cold = SplitHMCClassifier(n_splits=2, temperature=0.05, **kw).fit(X, y)
    spread_warm = warm.predict_samples(X)[..., 1].std(0).mean()
    spread_cold = cold.predict_samples(X)[..., 1].std(0).mean()
    assert 0.1 < spread_cold / spread_warm < 0.5


@pytest.mark.parametrize("bad", [0.0, -1.0, "cold"])
def test_bad_temperature(bad):
    with pytest.raises(ValueError, match="temperature"):
        HMCClassifier(temperature=bad).fit(np.zeros((4, 1)), [0, 1, 0, 1])
