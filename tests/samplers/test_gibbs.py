"""Gibbs blocks composed with a kernel (samplers/gibbs.py): exactness and state handling.

The model: y_i ~ N(mu, 1/tau), i = 1..n, mu ~ N(0, 1/lambda0), tau ~ Gamma(a, b) (independent
priors, so the posterior is not in closed form). HMC moves mu given tau; tau | mu is
Gamma(a + n/2, b + S/2) with S = sum (y_i - mu)^2, drawn exactly by the block. The posterior
moments of mu and tau are computed by quadrature on a grid and compared within Monte Carlo
error.
"""

import numpy as np
import pytest
import torch
from _sg_synthetic import NoisyGaussianTarget
from scipy.special import logsumexp

from sklearn_bnn.diagnostics import ess
from sklearn_bnn.likelihoods import sample_gamma
from sklearn_bnn.samplers import HMC, NUTS, SGLD, GibbsKernel, GibbsState, State, sample
from sklearn_bnn.targets import FunctionTarget

F64 = torch.float64
Y = torch.tensor([0.3, 1.9, 1.1, 0.7, 1.6, 2.4, 0.9, 1.3], dtype=F64)
A, B, LAMBDA0 = 2.0, 1.0, 0.1


class MeanGivenPrecision:
    """log p(mu | tau, y) up to a constant, one tau per chain (C, 1) or the prior mean 1."""

    dim, dtype, device = 1, F64, torch.device("cpu")

    def __init__(self, tau=None):
        self.tau = tau

    def value_and_grad(self, theta):
        tau = torch.ones(theta.shape[0], 1, dtype=F64) if self.tau is None else self.tau
        r = Y - theta  # (C, n)
        value = -0.5 * (tau * r * r).sum(-1) - 0.5 * LAMBDA0 * theta[:, 0] ** 2
        grad = (tau * r).sum(-1, keepdim=True) - LAMBDA0 * theta
        return value, grad

    def gibbs_blocks(self):
        return [PrecisionBlock()]

    def select_chains(self, idx):  # NUTS evaluates the chains still growing their trees
        return self if self.tau is None else MeanGivenPrecision(self.tau[idx])


class PrecisionBlock:
    def update(self, target, state, generator):
        sq = ((Y - state.position) ** 2).sum(-1, keepdim=True)
        shape = torch.full_like(sq, A + 0.5 * len(Y))
        tau = sample_gamma(shape, generator) / (B + 0.5 * sq)
        value, grad = self.condition(target, tau).value_and_grad(state.position)
        return tau, State(state.position, value, grad)

    def condition(self, target, tau):
        return MeanGivenPrecision(tau)

    def stats(self, tau):
        return {"tau": tau[:, 0]}


def _exact_moments():
    mu = np.linspace(-3, 5, 801)[:, None]
    log_tau = np.linspace(-6, 4, 801)[None, :]
    tau = np.exp(log_tau)
    y = Y.numpy()
    sq = ((y[None, None, :] - mu[..., None]) ** 2).sum(-1)
    log_post = (
        0.5 * len(y) * log_tau
        - 0.5 * tau * sq
        - 0.5 * LAMBDA0 * mu**2
        + A * log_tau  # Gamma(a, b) in log tau: (a - 1) log tau - b tau + log tau
        - B * tau
    )
    w = np.exp(log_post - logsumexp(log_post))
    return (w * mu).sum(), (w * mu**2).sum() - (w * mu).sum() ** 2, (w * tau).sum()


@pytest.mark.parametrize(
    "inner", [HMC(n_steps=5, adapt_mass=True), NUTS(max_tree_depth=5, adapt_mass=True)]
)
def test_gibbs_kernel_samples_the_joint_posterior(inner):
    result = sample(
        MeanGivenPrecision(),
        torch.zeros(1, dtype=F64),
        inner,
        n_warmup=300,
        n_draws=2000,
        n_chains=2,
        random_state=0,
    )
    mean, var, e_tau = _exact_moments()
    mu = result.draws[..., 0].numpy()
    tau = result.stats["tau"].numpy()
    assert abs(mu.mean() - mean) < 4 * np.sqrt(var / ess(mu)), (mu.mean(), mean)
    assert abs(mu.var() / var - 1) < 4 * np.sqrt(2 / ess(mu)), (mu.var(), var)
    assert abs(tau.mean() - e_tau) < 4 * tau.std() / np.sqrt(ess(tau)), (tau.mean(), e_tau)


def test_gibbs_values_live_in_the_state_and_chains_do_not_share_them():
    """Each chain's block values come from its own generator: running chains together or one
    by one gives the same draws, and the target is never changed."""
    kw = dict(n_warmup=50, n_draws=50, n_chains=3, random_state=4)
    target = MeanGivenPrecision()
    inner = HMC(n_steps=4, adapt_mass=True)
    together = sample(target, torch.zeros(1, dtype=F64), inner, **kw)
    apart = sample(target, torch.zeros(1, dtype=F64), inner, n_jobs=1, **kw)
    assert target.tau is None
    assert together.stats["tau"].shape == (3, 50)
    assert torch.equal(apart.draws, sample(
        target, torch.zeros(1, dtype=F64), inner, n_jobs=2, **kw
    ).draws)  # fmt: skip
    kernel = GibbsKernel(HMC(n_steps=4).build(target), PrecisionBlock())
    state = kernel.init(torch.zeros(2, 1, dtype=F64), torch.Generator().manual_seed(0))
    assert isinstance(state, GibbsState) and state.values.shape == (2, 1)
    new, info = kernel.step(state, torch.Generator().manual_seed(1), step_size=0.1)
    assert new.values.shape == (2, 1) and info.extra["tau"].shape == (2,)
    assert info.n_grad == 4 + 1  # the inner trajectory, then the re-evaluation under tau


def _quadratic(center):
    return FunctionTarget(lambda x: -0.5 * ((x - center) ** 2).sum(), 2, dtype=F64)


@pytest.mark.parametrize("sampler", [HMC(n_steps=3), NUTS(max_tree_depth=3)])
def test_with_target_moves_on_the_new_target(sampler):
    """A kernel moved to another target (what a Gibbs block's conditional needs) steps exactly
    as one built on that target."""
    direct = sampler.build(_quadratic(1.0))
    moved = sampler.build(_quadratic(0.0)).with_target(_quadratic(1.0))
    state = direct.init(torch.zeros(2, 2, dtype=F64))
    a = direct.step(state, torch.Generator().manual_seed(0), step_size=0.3)[0]
    b = moved.step(state, torch.Generator().manual_seed(0), step_size=0.3)[0]
    assert torch.equal(a.position, b.position)


def test_with_target_of_a_stochastic_gradient_kernel_rebinds_its_batches():
    sampler = SGLD(step_size=1e-2, n_steps=4)
    new = NoisyGaussianTarget(np.ones(2), np.ones(2), grad_noise=0.0)
    direct = sampler.build(new)
    moved = sampler.build(NoisyGaussianTarget(np.zeros(2), np.ones(2), grad_noise=0.0))
    moved = moved.with_target(new)
    start = torch.zeros(1, 2, dtype=F64)
    state = direct.init(start, n_warmup=0)
    moved.init(start, n_warmup=0)
    inv_mass = torch.ones(2, dtype=F64)
    a = direct.step(state, torch.Generator().manual_seed(0), step_size=0.01, inv_mass=inv_mass)
    b = moved.step(state, torch.Generator().manual_seed(0), step_size=0.01, inv_mass=inv_mass)
    assert torch.equal(a[0].position, b[0].position)
