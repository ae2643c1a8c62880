"""NUTS: known targets within Monte Carlo error, exact invariance, a recursive reference."""

import math

import numpy as np
import pytest
import torch
from conftest import Funnel, GaussianTarget, correlated_gaussian
from scipy import stats
from test_hmc_kernel import _moments_within_mc_error
from torch import nn

from sklearn_bnn.diagnostics import ess
from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import NUTS, leapfrog, run_chains
from sklearn_bnn.samplers._base import sample_momentum
from sklearn_bnn.targets import FunctionalNetwork, Target

F64 = torch.float64


# -- known targets ----------------------------------------------------------------------------


def test_nuts_matches_correlated_gaussian_moments():
    target = correlated_gaussian(10, seed=3)
    kernel = NUTS().build(target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(4, 10, dtype=F64))
    run = run_chains(kernel, state, g, n_warmup=150, n_draws=500, step_size="auto")
    assert not run.divergent.any()
    _moments_within_mc_error(run.draws, target)


def test_nuts_reproduces_bayesian_linear_regression_posterior():
    rng = np.random.default_rng(0)
    n, d = 40, 3
    X = rng.normal(size=(n, d))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 + rng.normal(scale=0.5, size=n)
    alpha, beta = 2.0, 4.0  # prior precision, noise precision
    network = FunctionalNetwork(nn.Linear(d, 1), dtype=F64)
    target = Target(network, X, torch.tensor(y)[:, None], Gaussian(beta), GaussianPrior(alpha))
    kernel = NUTS().build(target)
    g = torch.Generator().manual_seed(1)
    state = kernel.init(torch.zeros(2, d + 1, dtype=F64))
    run = run_chains(kernel, state, g, n_warmup=150, n_draws=600, step_size="auto")
    # closed form: theta = [w (d), b]; prior N(0, I/alpha); likelihood N(X1 theta, 1/beta)
    X1 = np.hstack([X, np.ones((n, 1))])
    cov = np.linalg.inv(alpha * np.eye(d + 1) + beta * X1.T @ X1)
    mean = beta * cov @ X1.T @ y
    truth = GaussianTarget(torch.tensor(mean), torch.tensor(cov))
    _moments_within_mc_error(run.draws, truth)


def test_nuts_on_neals_funnel_stays_finite_and_counts_divergences():
    # REFERENCE §4: v ~ N(0, 3^2), x_i ~ N(0, e^v), 10 + 1 dimensions. The published NUTS figure is
    # KL(p(v) || q(v)) = 1.109 (benchmarks/samplers/nuts_funnel.py reports ours on long runs).
    target = Funnel(10)
    kernel = NUTS().build(target)
    g = torch.Generator().manual_seed(0)
    # four chains: one short chain's KL swings with the seed (1.55 with torch 2.13 here)
    start = torch.randn(4, 11, generator=g, dtype=F64)
    run = run_chains(kernel, kernel.init(start), g, n_warmup=100, n_draws=300, step_size="auto")
    assert torch.isfinite(run.draws).all() and torch.isfinite(run.log_prob).all()
    v = run.draws[..., 0]
    m, s2 = float(v.mean()), float(v.var())
    kl = 0.5 * math.log(s2 / 9.0) + (9.0 + m * m) / (2 * s2) - 0.5
    assert math.isfinite(kl) and kl < 1.5, kl
    # the neck makes trajectories diverge: they are counted, and a divergent transition's draw
    # is still a state of the chain
    assert int(run.divergent.sum() + run.warmup_divergent.sum()) > 0


# -- exact invariance and the standard normal ------------------------------------------------------


@pytest.mark.parametrize("step_size", [0.3, 1.1, 1.9])
def test_one_transition_leaves_the_standard_normal_invariant(step_size):
    # 4000 independent chains started from exact draws: after NUTS transitions they must still be
    # N(0, 1) draws, which a Kolmogorov-Smirnov test can check (the chains are independent).
    target = GaussianTarget(torch.zeros(1), torch.eye(1))
    kernel = NUTS(step_size=step_size).build(target)
    g = torch.Generator().manual_seed(4)
    state = kernel.init(torch.randn(4000, 1, generator=g, dtype=F64))
    depths = set()
    for _ in range(3):
        state, info = kernel.step(state, g)
        x = state.position[:, 0].numpy()
        assert stats.kstest(x, "norm").pvalue > 1e-3
        depths |= set(info.extra["tree_depth"].tolist())
    if step_size < 1:
        assert len(depths) > 1  # chains of different lengths were masked out in lockstep


def test_invariance_check_detects_a_wrong_target():
    # The same check has power: chains targeting N(0, 1.3^2) drift away from N(0, 1).
    target = GaussianTarget(torch.zeros(1), 1.69 * torch.eye(1))
    kernel = NUTS(step_size=0.5).build(target)
    g = torch.Generator().manual_seed(4)
    state = kernel.init(torch.randn(4000, 1, generator=g, dtype=F64))
    for _ in range(3):
        state, _ = kernel.step(state, g)
    assert stats.kstest(state.position[:, 0].numpy(), "norm").pvalue < 1e-6


def test_invariance_with_per_chain_mass_matrix():
    # 2-D Gaussian with scales 2 and 0.5; each chain has its own (mis-scaled) diagonal metric.
    cov = torch.diag(torch.tensor([4.0, 0.25], dtype=F64))
    target = GaussianTarget(torch.zeros(2), cov)
    g = torch.Generator().manual_seed(5)
    C = 3000
    inv_mass = torch.rand(C, 2, generator=g, dtype=F64) * 3 + 0.2
    kernel = NUTS(step_size=0.4).build(target)
    state = kernel.init(torch.randn(C, 2, generator=g, dtype=F64) * cov.diagonal().sqrt())
    for _ in range(3):
        state, _ = kernel.step(state, g, inv_mass=inv_mass)
    for d in range(2):
        z = state.position[:, d].numpy() / math.sqrt(cov[d, d])
        assert stats.kstest(z, "norm").pvalue > 1e-3


def test_standard_normal_mean_variance_and_quantiles():
    target = GaussianTarget(torch.zeros(1), torch.eye(1))
    kernel = NUTS(step_size=0.8).build(target)
    g = torch.Generator().manual_seed(6)
    run = run_chains(
        kernel, kernel.init(torch.zeros(4, 1, dtype=F64)), g, n_warmup=20, n_draws=800,
        step_size=0.8,
    )  # fmt: skip
    x = run.draws[..., 0].numpy()
    checks = {"mean": (x, 0.0), "variance": (x**2, 1.0)}
    for q in (0.05, 0.25, 0.5, 0.75, 0.95):
        checks[f"P(x < q{q})"] = ((x < stats.norm.ppf(q)).astype(float), q)
    for name, (f, expected) in checks.items():
        se = f.std() / math.sqrt(ess(f))
        assert abs(f.mean() - expected) < 4 * se, (name, f.mean(), expected, se)


# -- the tree, against a recursive reference ------------------------------------------------------


class _RecursiveNUTS:
    """Stan's recursive tree building (base_nuts), for one chain, written independently.

    It records the trajectory; the test feeds it the directions the kernel draws.
    """

    def __init__(self, target, eps, inv_mass, threshold=1000.0):
        self.target, self.eps, self.inv_mass, self.threshold = target, eps, inv_mass, threshold

    def leaf(self, z, sign):
        q, p, g = z
        p = p + 0.5 * sign * self.eps * g
        q = q + sign * self.eps * self.inv_mass * p
        lp, g = self.target.value_and_grad(q[None])
        lp, g = lp[0], g[0]
        p = p + 0.5 * sign * self.eps * g
        self.n_steps += 1
        self.positions.append(q)
        h = float(-lp + 0.5 * (p * p * self.inv_mass).sum())
        h = h if math.isfinite(h) else math.inf
        if h - self.h0 > self.threshold:
            self.divergent = True
        return (q, p, g)

    @staticmethod
    def criterion(sharp_minus, sharp_plus, rho):
        return bool(sharp_plus @ rho > 0) and bool(sharp_minus @ rho > 0)

    def build(self, z, depth, sign):
        """(valid, z_end, rho, p_beg, sharp_beg, p_end, sharp_end) in building order."""
        if depth == 0:
            z = self.leaf(z, sign)
            p, sharp = z[1], self.inv_mass * z[1]
            return not self.divergent, z, p, p, sharp, p, sharp
        valid, z, rho_init, p_beg, s_beg, p_init_end, s_init_end = self.build(z, depth - 1, sign)
        if not valid:
            return (False, z) + (None,) * 5
        valid, z, rho_final, p_final_beg, s_final_beg, p_end, s_end = self.build(z, depth - 1, sign)
        if not valid:
            return (False, z) + (None,) * 5
        rho = rho_init + rho_final
        ok = self.criterion(s_beg, s_end, rho)
        ok &= self.criterion(s_beg, s_final_beg, rho_init + p_final_beg)
        ok &= self.criterion(s_init_end, s_end, rho_final + p_init_end)
        return ok, z, rho, p_beg, s_beg, p_end, s_end

    def transition(self, q0, p0, directions, max_depth):
        lp0, g0 = self.target.value_and_grad(q0[None])
        self.h0 = float(-lp0[0] + 0.5 * (p0 * p0 * self.inv_mass).sum())
        self.n_steps, self.divergent, self.positions = 0, False, [q0]
        z_fwd = z_bck = (q0, p0, g0[0])
        s0 = self.inv_mass * p0
        p_fwd_bck = p_fwd_fwd = p_bck_fwd = p_bck_bck = p0
        s_fwd_bck = s_fwd_fwd = s_bck_fwd = s_bck_bck = s0
        rho, depth = p0, 0
        while depth < max_depth:
            if next(directions):
                rho_bck = rho
                p_bck_fwd, s_bck_fwd = p_fwd_fwd, s_fwd_fwd
                valid, z_fwd, rho_fwd, p_fwd_bck, s_fwd_bck, p_fwd_fwd, s_fwd_fwd = self.build(
                    z_fwd, depth, +1
                )
            else:
                rho_fwd = rho
                p_fwd_bck, s_fwd_bck = p_bck_bck, s_bck_bck
                valid, z_bck, rho_bck, p_bck_fwd, s_bck_fwd, p_bck_bck, s_bck_bck = self.build(
                    z_bck, depth, -1
                )
            if not valid:
                break
            depth += 1
            rho = rho_bck + rho_fwd
            ok = self.criterion(s_bck_bck, s_fwd_fwd, rho)
            ok &= self.criterion(s_bck_bck, s_fwd_bck, rho_bck + p_fwd_bck)
            ok &= self.criterion(s_bck_fwd, s_fwd_fwd, rho_fwd + p_bck_fwd)
            if not ok:
                break
        return depth


@pytest.mark.parametrize(
    "target, step_size, expected",
    [
        (correlated_gaussian(5, seed=2), 0.15, "capped"),  # long trajectories hit the cap
        (correlated_gaussian(5, seed=2), 0.7, "divergent"),  # above the stability limit
        (Funnel(4), 1.0, "divergent"),  # the neck
    ],
)
def test_tree_matches_a_recursive_reference(target, step_size, expected):
    D = target.dim
    g = torch.Generator().manual_seed(11)
    inv_mass = torch.rand(D, generator=g, dtype=F64) + 0.5
    kernel = NUTS(step_size=step_size, max_tree_depth=6).build(target)
    reference = _RecursiveNUTS(target, step_size, inv_mass)
    state = kernel.init(torch.randn(1, D, generator=g, dtype=F64))
    seen = set()
    for _ in range(60):
        # replay the kernel's draws: the momentum, then per doubling j a (2 + 2^j, 1) block whose
        # first row sets the direction
        replay = torch.Generator().set_state(g.get_state())
        p0 = sample_momentum((1, D), inv_mass, replay, dtype=F64, device="cpu")[0]

        def directions(replay=replay):
            j = 0
            while True:
                u = torch.rand((2 + (1 << j), 1), generator=replay, dtype=F64)
                yield bool(u[0, 0] > 0.5)
                j += 1

        depth = reference.transition(state.position[0], p0, directions(), max_depth=6)
        new_state, info = kernel.step(state, g, inv_mass=inv_mass)
        assert int(info.extra["tree_depth"][0]) == depth
        assert info.n_grad == reference.n_steps
        assert bool(info.divergent[0]) == reference.divergent
        # the new state is one of the trajectory's states
        dist = torch.stack(reference.positions).sub(new_state.position[0]).abs().amax(-1)
        assert float(dist.min()) < 1e-9
        seen |= {"divergent"} if reference.divergent else set()
        seen |= {"capped"} if depth == 6 else set()
        state = new_state
    assert expected in seen


# -- protocol ---------------------------------------------------------------------------------


def test_tree_depth_is_capped_and_each_leapfrog_costs_one_gradient():
    target = GaussianTarget(torch.zeros(2), torch.eye(2))
    kernel = NUTS(step_size=1e-3, max_tree_depth=4).build(target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.ones(3, 2, dtype=F64))
    target.n_evals = 0
    state, info = kernel.step(state, g)
    assert info.extra["tree_depth"].tolist() == [4, 4, 4]
    assert info.n_grad == 15 == target.n_evals
    assert info.accepted.all() and not info.divergent.any()


def test_divergent_transitions_are_flagged_and_keep_the_state():
    target = correlated_gaussian(5)
    kernel = NUTS(step_size=50.0).build(target)
    g = torch.Generator().manual_seed(0)
    start = torch.zeros(2, 5, dtype=F64)
    run = run_chains(kernel, kernel.init(start), g, n_warmup=0, n_draws=10, step_size=50.0)
    assert run.divergent.all() and not run.accepted.any()
    assert torch.equal(run.draws[:, -1], start)


def test_dual_averaging_reaches_target_acceptance():
    target = correlated_gaussian(10, seed=1)
    kernel = NUTS().build(target)
    g = torch.Generator().manual_seed(2)
    state = kernel.init(target.mean.repeat(3, 1))
    run = run_chains(kernel, state, g, n_warmup=200, n_draws=200, step_size="auto")
    mean_accept = float(run.accept_prob.mean())
    assert abs(mean_accept - 0.8) < 0.1, mean_accept


def test_sampling_is_reproducible_with_the_generator():
    target = correlated_gaussian(3)
    kernel = NUTS().build(target)
    draws = []
    for seed in (7, 7, 8):
        g = torch.Generator().manual_seed(seed)
        state = kernel.init(torch.zeros(2, 3, dtype=F64))
        draws.append(run_chains(kernel, state, g, n_warmup=10, n_draws=20).draws)
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])


def test_a_given_integrator_gives_the_fused_leapfrog_trajectory():
    target = correlated_gaussian(4)
    runs = []
    for integrator in (None, leapfrog):
        kernel = NUTS(step_size=0.3, integrator=integrator).build(target)
        g = torch.Generator().manual_seed(3)
        state = kernel.init(torch.zeros(3, 4, dtype=F64))
        runs.append(run_chains(kernel, state, g, n_warmup=0, n_draws=10, step_size=0.3))
    assert (runs[0].draws - runs[1].draws).abs().max() < 1e-12


@pytest.mark.parametrize("bad", [0, -1, 2.5, "deep"])
def test_bad_max_tree_depth_is_refused(bad):
    with pytest.raises(ValueError, match="max_tree_depth"):
        NUTS(max_tree_depth=bad).build(GaussianTarget(torch.zeros(1), torch.eye(1)))
