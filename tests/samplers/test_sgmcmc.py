"""Stochastic-gradient samplers (seeds/004): exact-gradient moments, Metropolis corrections under
gradient noise, reversibility of the integrators their tests rely on, schedule, validation."""

import math

import numpy as np
import pytest
import torch
from _sg_synthetic import NoisyGaussianTarget, random_gaussian_problem
from conftest import assert_draws_match_gaussian, blr_posterior

from sklearn_bnn.likelihoods import Categorical, Gaussian
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import AMAGOLD, GSGHMC, HTE, SGHMC, SGLD, sample
from sklearn_bnn.samplers.stochastic_gradient.sg_integrators import (
    bab,
    cosine_step_size,
    skew_noise_variance,
)
from sklearn_bnn.samplers.stochastic_gradient.sgmcmc import amagold_trajectory
from sklearn_bnn.targets import FunctionalNetwork, MinibatchTarget

D = 10
MEAN = np.linspace(-1.0, 2.0, D)
VAR = np.linspace(0.5, 2.0, D)


def _run(target, sampler, n_draws=1200, n_chains=4, seed=0, n_warmup=200):
    start = torch.as_tensor(np.asarray(target.mean), dtype=torch.float64)
    return sample(
        target,
        start,
        sampler,
        n_warmup=n_warmup,
        n_draws=n_draws,
        n_chains=n_chains,
        random_state=seed,
    )


EXACT = {
    "sgld": SGLD(step_size=0.01, n_steps=10),
    "sghmc-euler": SGHMC(step_size=0.03, momentum=0.9, n_steps=10),
    "sghmc-obabo": SGHMC(step_size=0.1, momentum=0.9, integrator="obabo", n_steps=5),
    "sghmc-skew": SGHMC(step_size=0.05, momentum=0.9, integrator="skew", n_steps=10),
}


@pytest.mark.parametrize("name", list(EXACT))
def test_exact_gradients_sample_the_gaussian(name):
    """Small steps on exact gradients: every mean and variance within 4 MC errors of N(mu, S)."""
    result = _run(NoisyGaussianTarget(MEAN, VAR), EXACT[name])
    assert_draws_match_gaussian(result.draws.numpy(), MEAN, np.diag(VAR))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sghmc-obabo"])
def test_exact_gradients_sample_the_blr_posterior(name):
    """Minibatch target with one batch of all rows: the closed-form BLR posterior."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    y = X @ np.array([1.0, -0.5]) + 0.3 + rng.normal(0, 0.5, 50)
    alpha, beta = 1.0, 4.0
    mean, cov = blr_posterior(X, y, alpha, beta)
    net = FunctionalNetwork(torch.nn.Linear(2, 1), dtype=torch.float64)
    target = MinibatchTarget(
        net, X, y[:, None], Gaussian(beta), GaussianPrior(alpha), batch_size=50
    )
    sampler = {
        "sgld": SGLD(step_size=2e-4, n_steps=20),
        "sghmc-euler": SGHMC(step_size=0.01, n_steps=10),
        "sghmc-obabo": SGHMC(step_size=0.03, integrator="obabo", n_steps=5),
    }[name]
    start = torch.as_tensor(mean, dtype=torch.float64)[[0, 1, 2]]  # weight (1x2) then bias
    result = sample(target, start, sampler, n_warmup=50, n_draws=600, n_chains=4, random_state=1)
    assert_draws_match_gaussian(result.draws.numpy(), mean, cov)


def _variance_ratio(sampler, seed=0):
    target = NoisyGaussianTarget(np.zeros(D), np.ones(D), grad_noise=1.0, seed=seed)
    result = _run(target, sampler, n_draws=1500, seed=seed)
    return float(result.draws.reshape(-1, D).var(0).mean())


@pytest.mark.slow
def test_metropolis_corrected_samplers_remove_the_noisy_gradient_bias():
    """N(0, I_10), gradient noise N(0, 1), step size 0.3: the uncorrected samplers inflate the
    variance by over 15 % (discretisation and gradient noise); AMAGOLD and GSGHMC, whose tests
    use the exact log density, stay within 10 % of it."""
    for sampler in (AMAGOLD(step_size=0.3, n_steps=5), GSGHMC(step_size=0.3, n_steps=5)):
        assert abs(_variance_ratio(sampler) - 1.0) < 0.1, sampler
    for sampler in (SGLD(step_size=0.3, n_steps=5), SGHMC(step_size=0.3, n_steps=5)):
        assert _variance_ratio(sampler) - 1.0 > 0.15, sampler


def _banana(theta, weight):
    """A 2-D non-Gaussian log density, scaled by a batch weight (a stand-in for a batch)."""
    x, y = theta[..., 0], theta[..., 1]
    return -weight * (0.5 * x**2 + 0.25 * y**4 + 0.3 * x * y + 0.1 * torch.sin(3 * x))


def _value_and_grad(weight):
    def fn(theta):
        theta = theta.detach().requires_grad_(True)
        value = _banana(theta, weight)
        (grad,) = torch.autograd.grad(value.sum(), theta)
        return value.detach(), grad

    return fn


def test_bab_is_a_volume_preserving_involution_with_attached_batches():
    """GSGHMC's test needs the B-A-B move with the batch travelling with the position to be its
    own inverse after a momentum flip, and volume preserving (float64, 2-D)."""
    g = torch.Generator().manual_seed(0)
    theta0 = torch.randn(1, 2, generator=g, dtype=torch.float64)
    m0 = torch.randn(1, 2, generator=g, dtype=torch.float64)
    inv_mass = torch.tensor([1.0, 0.5], dtype=torch.float64)
    eps = 0.3
    f0, f1 = _value_and_grad(1.3), _value_and_grad(0.7)  # the batches of theta0 and theta_p
    _, g0 = f0(theta0)
    theta_p, m_p, _, g_p = bab(theta0, m0, g0, eps, inv_mass, f1)
    theta_b, m_b, _, _ = bab(theta_p, -m_p, g_p, eps, inv_mass, f0)
    torch.testing.assert_close(theta_b, theta0, rtol=0, atol=1e-13)
    torch.testing.assert_close(-m_b, m0, rtol=0, atol=1e-13)

    def flow(z):
        th, m = z[:2][None], z[2:][None]
        _, gg = _value_and_grad_graph(th, 1.3)
        th1, m1, _, _ = bab(th, m, gg, eps, inv_mass, lambda t: _value_and_grad_graph(t, 0.7))
        return torch.cat([th1[0], m1[0]])

    jac = torch.autograd.functional.jacobian(flow, torch.cat([theta0[0], m0[0]]))
    assert abs(torch.linalg.det(jac).item() - 1.0) < 1e-12
    # and the map is not trivially the identity
    assert (theta_p - theta0).abs().max() > 0.05


def _value_and_grad_graph(theta, weight):
    value = _banana(theta, weight)
    (grad,) = torch.autograd.grad(value.sum(), theta, create_graph=True)
    return value, grad


def _gauss_log_density(x, var):
    return float((-0.5 * x**2 / var - 0.5 * torch.log(2 * math.pi * var)).sum())


def test_amagold_accumulated_ratio_equals_the_backward_proposal_density():
    """seeds/004 Algorithm 2 in float64 on a 2-D target with a different batch at every step:
    the reverse trajectory from (theta_L, -r_L) with the batches reversed returns to
    (theta_0, -r_0) with noises we solve for, and log q_back - log q_fwd of those Gaussian noise
    densities equals K(r_L) - K(r_0) + rho, the quantity the acceptance test uses."""
    g = torch.Generator().manual_seed(3)
    dt = torch.float64
    theta0 = torch.randn(1, 2, generator=g, dtype=dt)
    r0 = torch.randn(1, 2, generator=g, dtype=dt)
    inv_mass = torch.tensor([1.0, 2.0], dtype=dt)
    eps, alpha, L = 0.2, 0.8, 6
    weights = [0.5 + 0.2 * t for t in range(L)]
    noise_var = skew_noise_variance(alpha) / inv_mass  # cov 4 beta M
    xis = [torch.randn(1, 2, generator=g, dtype=dt) * noise_var.sqrt() for _ in range(L)]
    theta_L, r_L, rho = amagold_trajectory(
        theta0,
        r0,
        eps,
        alpha,
        inv_mass,
        lambda x, t: _value_and_grad(weights[t])(x),
        lambda t: xis[t],
        L,
    )
    # reverse: same integrator from (theta_L, -r_L), batches reversed; solve for its noises
    beta = (1 - alpha) / (1 + alpha)
    half = theta_L + 0.5 * eps * inv_mass * (-r_L)
    r, back_xis = -r_L, []
    forward_r = [r0]
    # forward momenta, recomputed for the targets of the reverse steps
    h = theta0 + 0.5 * eps * inv_mass * r0
    rr = r0
    for t in range(L):
        _, gg = _value_and_grad(weights[t])(h)
        rr = ((1 - beta) * rr + eps * gg + xis[t]) / (1 + beta)
        forward_r.append(rr)
        h = h + (eps if t < L - 1 else 0.5 * eps) * inv_mass * rr
    for k, t in enumerate(reversed(range(L))):
        _, gg = _value_and_grad(weights[t])(half)
        wanted = -forward_r[t]
        xi_b = (1 + beta) * wanted - (1 - beta) * r - eps * gg
        back_xis.append(xi_b)
        r = wanted
        half = half + (eps if k < L - 1 else 0.5 * eps) * inv_mass * r
    torch.testing.assert_close(half, theta0, rtol=0, atol=1e-12)
    torch.testing.assert_close(r, -r0, rtol=0, atol=1e-12)
    log_fwd = sum(_gauss_log_density(x[0], noise_var) for x in xis)
    log_back = sum(_gauss_log_density(x[0], noise_var) for x in back_xis)
    kinetic = 0.5 * float((r_L**2 * inv_mass).sum() - (r0**2 * inv_mass).sum())
    assert abs((log_back - log_fwd) - (kinetic + float(rho[0]))) < 1e-10


def test_hte_without_momentum_decay_is_hmc_and_samples_exactly():
    """alpha = 1, exact gradients, one try per draw: leapfrog HMC, so its draws are exact."""
    sampler = HTE(step_size=0.3, momentum=1.0, n_steps=5, max_tries=1)
    result = _run(NoisyGaussianTarget(MEAN, VAR), sampler, n_draws=800)
    assert_draws_match_gaussian(result.draws.numpy(), MEAN, np.diag(VAR))


def test_hte_with_decay_rejects_some_trajectories_and_stays_finite():
    target = NoisyGaussianTarget(np.zeros(D), np.ones(D), grad_noise=1.0)
    result = _run(target, HTE(step_size=0.5, momentum=0.8, n_steps=20, max_tries=1), n_draws=200)
    rate = float(result.info["acceptance_rate"].mean())
    assert 0.0 < rate < 1.0
    assert torch.isfinite(result.draws).all()


def test_hte_drops_rejected_trajectories_as_in_algorithm_1():
    """Algorithm 1 adds only accepted trajectories: with retries every kept draw is a new,
    accepted point (no repeats), some draws needed more than one trajectory, and the gradient
    count follows the tries."""
    target = NoisyGaussianTarget(np.zeros(D), np.ones(D), grad_noise=1.0)
    result = _run(target, HTE(step_size=0.5, momentum=0.8, n_steps=20), n_draws=100)
    tries = result.stats["n_tries"]
    assert float(tries.max()) > 1 and float(tries.min()) >= 1
    assert bool((result.stats["accept_prob"] > 0).all())
    repeats = (result.draws[:, 1:] == result.draws[:, :-1]).all(-1)
    assert not bool(repeats.any())


def test_gsghmc_reports_per_step_acceptance():
    target = NoisyGaussianTarget(np.zeros(D), np.ones(D), grad_noise=1.0)
    result = _run(target, GSGHMC(step_size=0.8, n_steps=10), n_draws=100)
    rate = result.stats["step_accept_rate"]
    assert rate.shape == (4, 100)
    assert 0.05 < float(rate.mean()) < 0.95


def test_cosine_schedule_goes_from_warmup_to_final_step_size():
    final = torch.tensor([[0.01]])
    assert torch.allclose(cosine_step_size(final, 0.1, 0.0), torch.tensor([[0.1]]))
    assert torch.allclose(cosine_step_size(final, 0.1, 0.5), torch.tensor([[0.055]]))
    assert torch.allclose(cosine_step_size(final, 0.1, 1.0), final)
    assert cosine_step_size(final, None, 0.0) is final


def test_warmup_schedule_is_applied_in_warmup_only():
    target = NoisyGaussianTarget(np.zeros(2), np.ones(2))
    kernel = SGHMC(step_size=0.01, warmup_step_size=0.1, n_steps=4).build(target)
    kernel.init(torch.zeros(1, 2, dtype=torch.float64), n_warmup=2)  # told by the loop
    eps = torch.tensor([0.01], dtype=torch.float64)
    assert float(kernel._eps(eps, 0)) == pytest.approx(0.1)
    kernel._transition = 2
    assert float(kernel._eps(eps, 0)) == pytest.approx(0.01)


def test_every_random_number_comes_from_the_generator():
    target = NoisyGaussianTarget(MEAN, VAR)
    for sampler in (
        SGLD(step_size=0.01, n_steps=3),
        SGHMC(step_size=1e-3, integrator="obabo", n_steps=3),
        AMAGOLD(step_size=1e-3, n_steps=3),
        GSGHMC(step_size=1e-3, n_steps=3),
        HTE(step_size=1e-3, n_steps=3),
    ):
        a = _run(target, sampler, n_draws=20, n_warmup=5, seed=5).draws
        torch.manual_seed(123)  # global state must not matter
        b = _run(target, sampler, n_draws=20, n_warmup=5, seed=5).draws
        assert torch.equal(a, b), sampler


def test_divergent_steps_are_undone_and_counted():
    target = NoisyGaussianTarget(np.zeros(3), np.full(3, 1e-4))
    result = _run(target, SGHMC(step_size=1.0, n_steps=5), n_draws=20, n_warmup=0)
    assert torch.isfinite(result.draws).all()
    assert result.stats["divergent_steps"].sum() > 0


@pytest.mark.parametrize(
    "sampler, name",
    [
        (SGLD(step_size=-1.0), "step_size"),
        # step_size="auto" (the default) is the SG-MCMC estimators' to choose from the data
        (SGLD(), "step_size"),
        (SGHMC(step_size=1e-3, momentum=1.5), "momentum"),
        (SGHMC(step_size=1e-3, integrator="rk4"), "integrator"),
        (GSGHMC(step_size=1e-3, n_steps=0), "n_steps"),
        (GSGHMC(step_size=1e-3, energy="exact"), "energy"),
        (SGLD(step_size=1e-3, temperature=-1), "temperature"),
        (HTE(step_size=1e-3, warmup_step_size=0.0), "warmup_step_size"),
    ],
)
def test_bad_parameters_raise_naming_them(sampler, name):
    with pytest.raises(ValueError, match=name):
        sampler.build(NoisyGaussianTarget(np.zeros(2), np.ones(2)))


def test_full_batch_target_is_refused_clearly():
    from sklearn_bnn.targets import FunctionTarget

    target = FunctionTarget(lambda x: -(x**2).sum(), dim=2)
    with pytest.raises(ValueError, match="minibatch target"):
        SGLD(step_size=1e-3).build(target)


def test_synthetic_problem_draws_as_seeds_004():
    mean, var = random_gaussian_problem(2000, np.random.default_rng(0))
    assert abs(mean.mean() - 10.0) < 1.0 and var.min() >= 0.1 and var.max() <= 1.0


def test_batch_log_prob_matches_the_value_of_batch_value_and_grad():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), rng.normal(size=(40, 1))
    net = FunctionalNetwork(torch.nn.Linear(3, 1), dtype=torch.float64)
    target = MinibatchTarget(net, X, y, Gaussian(2.0), GaussianPrior(0.5), batch_size=8)
    theta = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rows = np.arange(5, 13)
    value, _ = target.batch_value_and_grad(theta, rows)
    torch.testing.assert_close(target.batch_log_prob(theta, rows), value)


@pytest.mark.parametrize("name", ["sghmc-euler", "sghmc-obabo", "sghmc-skew"])
def test_non_unit_mass_keeps_the_target_invariant(name):
    """A diagonal mass M = diag(1/var): the injected momentum noise must scale with M^1/2
    (it used to scale with M^-1/2, invisible with the unit mass of every other test)."""
    target = NoisyGaussianTarget(MEAN, VAR)
    kernel = EXACT[name].build(target)
    g = torch.Generator().manual_seed(3)
    inv_mass = torch.as_tensor(VAR * 4.0, dtype=torch.float64)
    state = kernel.init(torch.as_tensor(MEAN, dtype=torch.float64).repeat(4, 1))
    eps = torch.full((4,), EXACT[name].step_size, dtype=torch.float64)
    draws = []
    for i in range(900):
        state, _ = kernel.step(state, g, step_size=eps, inv_mass=inv_mass)
        if i >= 100:
            draws.append(state.position)
    assert_draws_match_gaussian(torch.stack(draws, 1).numpy(), MEAN, np.diag(VAR))


def _classifier_target(y_as_tensor=True, batch_size=16, n=48):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 2))
    y = torch.as_tensor(y) if y_as_tensor else y
    net = FunctionalNetwork(module)
    return MinibatchTarget(net, X, y, Categorical(), GaussianPrior(0.7), batch_size=batch_size)


@pytest.mark.parametrize("y_as_tensor", [True, False])
def test_batch_gathers_the_rows_into_fresh_tensors(y_as_tensor):
    target = _classifier_target(y_as_tensor)
    rows = np.array([3, 7, 8, 30])
    X, y = target.batch(rows)
    assert torch.equal(X, torch.as_tensor(target.X[rows]))
    assert torch.equal(y, torch.as_tensor(np.asarray(target.y)[rows]))
    X.zero_()  # the batch owns its memory: the data are untouched
    assert np.abs(target.X[rows]).sum() > 0


@pytest.mark.parametrize("n_chains, temperature", [(1, 1.0), (1, 0.5), (3, 1.0)])
def test_likelihood_and_prior_sum_to_the_batch_value_bit_for_bit(n_chains, temperature):
    """The split that lets SGLD / SGHMC add the prior's value once per transition, and the
    scaling of one chain's gradient in the copy-out pass, change no bit of value or gradient."""
    target = _classifier_target()
    target.temperature = temperature
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(n_chains, target.dim, generator=g)
    rows = np.array([1, 4, 9, 16, 25, 36, 40, 47])
    log_lik, grad = target.batch_likelihood_and_grad(theta, rows)
    # the plain expressions: scale x (tempered likelihood and gradient) + untempered prior value
    X, y = target.batch(rows)
    scale = target.n_data / len(rows)
    plain_lik, plain_grad = target.log_likelihood_and_grad(theta, X, y, 1.0 / scale)
    plain_value = scale * plain_lik + target.prior_density.log_prob(theta)
    assert torch.equal(grad, plain_grad.mul_(scale))
    assert torch.equal(log_lik + target.log_prior(theta), plain_value)
    assert torch.equal(target.batch_value_and_grad(theta, rows)[0], plain_value)


@pytest.mark.parametrize(
    "sampler",
    [SGLD(step_size=1e-3, n_steps=4), SGHMC(step_size=0.05, n_steps=4)],
    ids=["sgld", "sghmc"],
)
def test_unadjusted_state_is_the_batch_value_at_the_final_position(sampler):
    """One batch of all rows: the value and gradient a transition leaves in the state are the
    target's at the final position (the prior's value added at the end), and a chain whose every
    step diverges keeps its start, its value and its gradient."""
    target = _classifier_target(batch_size=48)
    kernel = sampler.build(target)
    start = target.network.initial_position().repeat(2, 1)
    state = kernel.init(start)
    eps = torch.tensor([sampler.step_size, 1e30])  # the second chain overflows at every step
    new, info = kernel.step(
        state, torch.Generator().manual_seed(2), step_size=eps, inv_mass=torch.ones(target.dim)
    )
    value, grad = target.batch_value_and_grad(new.position, np.arange(48))
    assert torch.equal(new.log_prob[0], value[0]) and torch.equal(new.grad[0], grad[0])
    assert info.extra["divergent_steps"].tolist() == [0.0, 4.0]
    assert torch.equal(new.position[1], state.position[1])
    assert torch.equal(new.log_prob[1], state.log_prob[1])
    assert torch.equal(new.grad[1], state.grad[1])


def test_one_chain_full_data_log_prob_matches_the_vmapped_one():
    target = _classifier_target()
    theta = torch.randn(2, target.dim, generator=torch.Generator().manual_seed(4))
    both = target.log_prob(theta)
    for c in range(2):
        torch.testing.assert_close(target.log_prob(theta[c : c + 1]), both[c : c + 1])


def test_sghmc_at_its_default_momentum_samples_the_gaussian():
    """momentum=0.99 (the default), carried across transitions: still N(mu, S) on exact
    gradients, within 4 MC errors."""
    result = _run(NoisyGaussianTarget(MEAN, VAR), SGHMC(step_size=0.03, n_steps=10))
    assert_draws_match_gaussian(result.draws.numpy(), MEAN, np.diag(VAR))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_momentum_is_carried_from_one_transition_to_the_next(seed):
    """One step per transition on a wide Gaussian: with the momentum carried, consecutive moves
    go the same way (lag-1 correlation of the increments near alpha); drawn afresh at every
    transition, as before, they would be uncorrelated."""
    target = NoisyGaussianTarget(np.zeros(D), np.full(D, 100.0))
    sampler = SGHMC(step_size=0.05, momentum=0.99, n_steps=1)
    draws = _run(target, sampler, n_draws=400, n_chains=2, seed=seed, n_warmup=0).draws
    moves = np.diff(draws.numpy(), axis=1).reshape(-1, D)
    a, b = moves[:-1], moves[1:]
    corr = float(np.mean([np.corrcoef(a[:, j], b[:, j])[0, 1] for j in range(D)]))
    assert corr > 0.8, corr
