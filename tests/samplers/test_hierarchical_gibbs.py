"""HMC with Gibbs blocks for a hierarchical prior's precision (and the noise) is exact.

Bayesian linear regression y = X w + e, w (d = 2, no bias: one precision group) with
w | tau ~ N(0, I/tau), tau ~ Gamma(a, b), e ~ N(0, 1/lambda). Given (tau, lambda) the weights
are Gaussian and y ~ N(0, X X^T/tau + I/lambda), so the marginal posterior of the precisions is
computed by quadrature on a grid of log tau (log lambda too when the noise is learned), and
the weights' posterior mean and variance are its average of the conditional Gaussian's. The
sampler's draws (HMC on w given the precisions, exact Gamma draws of the precisions) must match
within 4 Monte Carlo standard errors.
"""

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from torch import nn

from sklearn_bnn.diagnostics import ess
from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.priors import HierarchicalPrior
from sklearn_bnn.samplers import HMC, NUTS, RunConfig
from sklearn_bnn.samplers.driver._jobs import run_sampler
from sklearn_bnn.targets import FunctionalNetwork, Target

A, B = 2.0, 0.5  # Gamma hyperprior of the weight precision
NOISE_A, NOISE_B = 3.0, 1.0  # of the noise precision, when learned
LAMBDA = 4.0  # the noise precision, when fixed


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(12, 2))
    y = X @ np.array([0.8, -0.3]) + rng.normal(scale=0.5, size=12)
    return X, y


def _exact(X, y, learn_noise):
    """Posterior means E[tau], E[lambda], E[w] and variances Var[w] by quadrature."""
    eig, vec = np.linalg.eigh(X @ X.T)
    r2 = (vec.T @ y) ** 2
    log_tau = np.linspace(-7, 7, 1401)[:, None]
    log_lam = np.linspace(-5, 6, 441)[None, :] if learn_noise else np.log([[LAMBDA]])
    tau, lam = np.exp(log_tau), np.exp(log_lam)
    var = eig / tau[..., None] + 1 / lam[..., None]  # (T, L, n)
    log_post = -0.5 * (np.log(var).sum(-1) + (r2 / var).sum(-1)) + A * log_tau - B * tau
    if learn_noise:  # Gamma in log lambda: (a - 1) log lam - b lam + log lam
        log_post = log_post + NOISE_A * log_lam - NOISE_B * lam
    w = np.exp(log_post - logsumexp(log_post))
    XtX, Xty = X.T @ X, X.T @ y
    i, j = np.nonzero(w > 1e-12)
    t, la, wt = tau[i, 0], lam[0, j], w[i, j]
    cov = np.linalg.inv(t[:, None, None] * np.eye(2) + la[:, None, None] * XtX)  # (K, 2, 2)
    m = la[:, None] * (cov @ Xty)
    mean_w = wt @ m
    second_w = wt @ (np.diagonal(cov, axis1=1, axis2=2) + m**2)
    return (w * tau).sum(), (w * lam).sum(), mean_w, second_w - mean_w**2


def _sample(X, y, sampler, learn_noise, seed, n_draws=1000, interweave=0):
    net = FunctionalNetwork(nn.Linear(2, 1, bias=False), dtype=torch.float64)
    prior = HierarchicalPrior(
        alpha=A,
        beta=B,
        noise_alpha=NOISE_A,
        noise_beta=NOISE_B,
        learn_noise=learn_noise,
        interweave=interweave,
    )
    target = Target(net, X, torch.as_tensor(y)[:, None], Gaussian(LAMBDA), prior)
    run, _ = run_sampler(
        sampler,
        target,
        torch.zeros(4, 2, dtype=torch.float64),
        n_jobs=None,
        seed=seed,
        generator_states=None,
        start=None,
        config=RunConfig(n_warmup=300, n_draws=n_draws, step_size="auto"),
        desc="test",
        verbose=False,
    )
    assert run.hyperparameters == ["precision[weight]"] + (
        ["noise_precision"] if learn_noise else []
    )
    return run


def _close(draws, expected, what):
    draws = np.asarray(draws, dtype=np.float64)
    se = draws.std() / np.sqrt(ess(draws))
    assert abs(draws.mean() - expected) < 4 * se, (what, draws.mean(), expected, se)


@pytest.mark.slow
@pytest.mark.parametrize("learn_noise", [False, True])
def test_hmc_with_precision_gibbs_matches_the_exact_marginal(learn_noise):
    # margins checked over seeds 0-4 at 1,500 draws a chain: |z| at most 3.9 (tau, seed 3),
    # else below 3.2; at 1,000 (the suite's time), over seeds 0-2: at most 3.06 (seed 2)
    X, y = _data()
    e_tau, e_lam, mean_w, var_w = _exact(X, y, learn_noise)
    run = _sample(X, y, HMC(n_steps=5), learn_noise, seed=0)
    _close(run.draw_stats["precision[weight]"], e_tau, "tau")
    if learn_noise:
        _close(run.draw_stats["noise_precision"], e_lam, "lambda")
    w = run.draws.double().numpy()  # (chains, draws, 2)
    for k in range(2):
        _close(w[..., k], mean_w[k], f"E[w{k}]")
        _close((w[..., k] - mean_w[k]) ** 2, var_w[k], f"Var[w{k}]")


@pytest.mark.slow
def test_nuts_with_precision_and_noise_gibbs_matches_the_exact_marginal():
    # margins checked over seeds 0-4: |z| below 2.7; at 600 draws a chain (the suite's time),
    # over seeds 0-2: below 2.2 (every mean and variance), a Gamma(2, 1) hyperprior's answer
    # 25-29 MCSE away
    X, y = _data()
    e_tau, e_lam, mean_w, _ = _exact(X, y, True)
    run = _sample(X, y, NUTS(max_tree_depth=5), True, 1, n_draws=600)
    _close(run.draw_stats["precision[weight]"], e_tau, "tau")
    _close(run.draw_stats["noise_precision"], e_lam, "lambda")
    _close(run.draws[..., 0].double().numpy(), mean_w[0], "E[w0]")


@pytest.mark.slow
@pytest.mark.parametrize("learn_noise", [False, True])
def test_hmc_with_the_interweaving_move_matches_the_exact_marginal(learn_noise):
    """The precisions' draw followed by two rounds of the non-centred Metropolis move of
    (w, tau) (``HierarchicalPrior(interweave=2)``): the same posterior."""
    # margins checked over seeds 0-4 at 1,500 draws a chain: |z| at most 2.4, the move's
    # acceptance 0.39-0.41; at 1,000, over seeds 0-2: |z| at most 1.84; at 600 (the suite's
    # time), over seeds 0-2: at most 2.63 (E[w0^2], seed 0, fixed noise), the answer for a
    # Gamma(2, 1) hyperprior, not Gamma(2, 0.5), about 30 MCSE away
    X, y = _data()
    e_tau, e_lam, mean_w, var_w = _exact(X, y, learn_noise)
    run = _sample(X, y, HMC(n_steps=5), learn_noise, seed=0, n_draws=600, interweave=2)
    assert 0.1 < float(run.draw_stats["interweave_accept"].mean()) < 0.9
    _close(run.draw_stats["precision[weight]"], e_tau, "tau")
    if learn_noise:
        _close(run.draw_stats["noise_precision"], e_lam, "lambda")
    w = run.draws.double().numpy()
    for k in range(2):
        _close(w[..., k], mean_w[k], f"E[w{k}]")
        _close((w[..., k] - mean_w[k]) ** 2, var_w[k], f"Var[w{k}]")
