"""The two parts of a regression's predictive variance where they should differ: plan-net's
noise part follows input-dependent noise, an MCMC regressor's weight part grows away from the
data while its noise part stays the same everywhere. (That the parts add up to the predictive
standard deviation is checked beside each regressor's own fits: test_predict_chunks.py,
test_dropout.py, test_sgmcmc_estimators.py, test_plannet.py.)"""

import warnings

import numpy as np

from sklearn_bnn import HMCRegressor, PlanNetRegressor
from sklearn_bnn.samplers import HMC


def test_plannet_noise_part_follows_heteroscedastic_noise():
    # y = x + e, sd(e) = 0.05 + 0.25 (x + 1): from 0.1 to 0.5 over the queried points. Seeds
    # 0-3 measured noise parts within 42 % of the true sd, ratios 3.1-4.6 from end to end.
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 400)
    y = x + (0.05 + 0.25 * (x + 1)) * rng.normal(size=400)
    reg = PlanNetRegressor(
        hidden_layer_sizes=(16,),
        n_estimators=2,
        n_predict_draws=10,
        max_iter=40,
        batch_size=64,
        learning_rate_init=3e-3,
        random_state=0,
    ).fit(x[:, None], y)
    q = np.array([-0.8, -0.4, 0.0, 0.4, 0.8])
    parts = reg.predict_variance_parts(q[:, None])
    true_sd = 0.05 + 0.25 * (q + 1)
    np.testing.assert_allclose(parts.noise_std, true_sd, rtol=0.5)
    assert parts.noise_std[-1] > 2.5 * parts.noise_std[0]
    assert np.all(parts.weight_std < parts.noise_std)  # 400 points: the noise dominates
    np.testing.assert_allclose(parts.total_std, reg.predict(q[:, None], return_std=True)[1])


def test_mcmc_weight_part_grows_away_from_the_data():
    # training inputs in [-3, -1] and [1, 3]: a gap around 0, nothing beyond 3. Seeds 0-4
    # measured weight sds of 0.03-0.05 at +-2 against 0.15-0.73 in the gap and at +-5.
    rng = np.random.default_rng(0)
    x = np.r_[rng.uniform(-3, -1, 30), rng.uniform(1, 3, 30)]
    y = np.sin(x) + 0.1 * rng.normal(size=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 2 chains of 30 draws
        # 50 steps a trajectory: 30 + 30 transitions of the default 25 cross the gap's
        # functions too slowly for the ratio below to hold on every seed
        reg = HMCRegressor(
            hidden_layer_sizes=(10,), n_draws=30, n_warmup=30, n_chains=2, random_state=0,
            sampler=HMC(n_steps=50),
        ).fit(x[:, None], y)
    parts = reg.predict_variance_parts(np.array([[-2.0], [2.0], [0.0], [5.0], [-5.0]]))
    inside, away = parts.weight_std[:2], parts.weight_std[2:]
    assert away.min() > 2.5 * inside.max(), parts.weight_std
    # the Gaussian likelihood's noise is one number for every input (homoscedastic)
    np.testing.assert_allclose(parts.noise_std, float(reg.noise_std_))
    assert 0.05 < float(reg.noise_std_) < 0.2  # the true noise sd is 0.1
