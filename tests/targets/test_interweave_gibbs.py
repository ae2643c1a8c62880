"""The interweaving move of a hierarchical prior's precisions (InterweavedPrecisionGibbs).

At fixed z_l = w_l sqrt(tau_l), log tau_l' = log tau_l + delta, w_l' = w_l exp(-delta / 2), a
Metropolis step on the tempered joint [L(w) N(w | 0, 1/tau) Gamma(tau | alpha, beta)]^(1/T)
(Yu & Meng 2011). Checked here: from exact draws of the tempered joint prior (a constant
likelihood), the moves leave the joint invariant at T = 1 and T != 1, and the check fails when
the Jacobian or the temperature is left out of the acceptance; the target's forward-only
log-likelihood; the block in a sweep (state re-evaluated, the chain's noise precision read, the
scales adapted in warmup only); confined kernels take the plain draw.
"""

import types

import numpy as np
import pytest
import torch
from torch import nn

from sklearn_bnn.likelihoods import Gaussian, sample_gamma
from sklearn_bnn.nets import MLP
from sklearn_bnn.priors import HierarchicalPrior
from sklearn_bnn.samplers import HMC, ConstrainedHMC
from sklearn_bnn.samplers._base import State
from sklearn_bnn.samplers.gibbs import BlockSequence, GibbsKernel, kernel_for
from sklearn_bnn.targets import (
    FunctionalNetwork,
    InterweavedPrecisionGibbs,
    NoisePrecisionGibbs,
    PriorPrecisionGibbs,
    SplitTarget,
    Target,
)

SIZES = [3, 1, 6]
ALPHA, BETA = 2.0, 1.0


def _joint_prior_draws(n, temperature, g):
    """Exact draws of [N(w | 0, 1/tau) Gamma(tau | alpha, beta)]^(1/T) per tensor: tau ~
    Gamma((alpha - 1)/T + 1 + n_l (1/T - 1)/2, rate beta/T), w | tau ~ N(0, T/tau)."""
    sizes = torch.tensor(SIZES, dtype=torch.float64)
    shape = (ALPHA - 1) / temperature + 1 + 0.5 * sizes * (1 / temperature - 1)
    tau = sample_gamma(shape.expand(n, -1).contiguous(), g) * temperature / BETA
    per_weight = torch.cat([tau[:, [k]].expand(n, s) for k, s in enumerate(SIZES)], 1)
    w = torch.randn(n, sum(SIZES), generator=g, dtype=torch.float64)
    return w * (temperature / per_weight).sqrt(), tau


def _statistics(w, tau):
    """log tau_l, log |w_l|^2 and their squares, per chain (C, 4K)."""
    log_sq = torch.stack([x.square().sum(-1).log() for x in w.split(SIZES, -1)], -1)
    stats = torch.cat([tau.log(), log_sq], 1)
    return torch.cat([stats, stats.square()], 1)


def _invariance_z(temperature, block_cls=InterweavedPrecisionGibbs, told=None, n=20_000, seed=0):
    """|z| of the statistics' means after three rounds of moves (wide steps, s = 1.2) from
    exact joint draws, against fresh draws; the likelihood is constant."""
    g = torch.Generator().manual_seed(seed)
    block = block_cls(["a", "b", "c"], SIZES, ALPHA, BETA, rounds=3)
    target = types.SimpleNamespace(
        temperature=temperature if told is None else told,
        log_likelihood=lambda x: torch.zeros(x.shape[0], dtype=x.dtype),
    )
    w, tau = _joint_prior_draws(n, temperature, g)
    log_s = torch.full((n, len(SIZES)), np.log(1.2), dtype=torch.float64)
    w2, tau2, accept = block.interweave(target, w, tau, log_s, g)
    assert 0.1 < float(accept.mean()) < 0.95  # the moves do move
    after = _statistics(w2, tau2)
    fresh = _statistics(*_joint_prior_draws(n, temperature, g))
    se = ((after.var(0) + fresh.var(0)) / n).sqrt()
    return ((after.mean(0) - fresh.mean(0)) / se).abs()


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.5])
def test_the_move_leaves_the_tempered_joint_prior_invariant(temperature):
    # margins over seeds 0-4: the largest |z| of the 12 statistics 2.8 (left out: the
    # Jacobian, |z| 58-84; the temperature, 33-56)
    assert _invariance_z(temperature).max() < 4.5


class _WithoutJacobian(InterweavedPrecisionGibbs):
    def log_ratio(self, d_log_lik, log_tau, delta, n, temperature=1.0):
        return super().log_ratio(d_log_lik, log_tau, delta, n, temperature) + 0.5 * n * delta


@pytest.mark.parametrize("temperature", [1.0, 1.5])
def test_the_check_fails_without_the_jacobian(temperature):
    assert _invariance_z(temperature, _WithoutJacobian).max() > 8


def test_the_check_fails_without_the_temperature():
    assert _invariance_z(0.6, told=1.0).max() > 8
    assert _invariance_z(1.5, told=1.0).max() > 8


def test_the_acceptance_at_t1_is_the_likelihood_and_log_gamma_ratio():
    block = InterweavedPrecisionGibbs(["w"], [5], ALPHA, BETA)
    log_tau, delta = torch.tensor([0.3]), torch.tensor([-0.4])
    tau, tau2 = log_tau.exp(), (log_tau + delta).exp()
    expected = 0.7 + ALPHA * delta - BETA * (tau2 - tau)  # tau^alpha e^(-beta tau) in log tau
    torch.testing.assert_close(block.log_ratio(torch.tensor([0.7]), log_tau, delta, 5), expected)


# -- on a network target --------------------------------------------------------------------
def _target(dtype=torch.float64, cls=Target, interweave=2, **kwargs):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    y = torch.as_tensor(X @ np.array([0.5, -1.0, 0.3]) + 0.1 * rng.normal(size=30))[:, None]
    torch.manual_seed(0)
    net = FunctionalNetwork(MLP(3, (8,), 1, activation="tanh"), dtype=dtype)
    prior = HierarchicalPrior(interweave=interweave)
    return cls(net, X, y, Gaussian(25.0), prior, **kwargs)


@pytest.mark.parametrize("cls, kwargs", [(Target, {}), (SplitTarget, {"n_splits": 3})])
def test_the_log_likelihood_is_the_density_less_the_prior(cls, kwargs):
    target = _target(cls=cls, **kwargs)
    theta = 0.5 * torch.randn(3, target.dim, generator=torch.Generator().manual_seed(0)).double()
    expected = target.log_prob(theta) - target._log_prior(theta)
    torch.testing.assert_close(target.log_likelihood(theta), expected)
    tau = torch.tensor([[4.0], [9.0], [16.0]], dtype=torch.float64)  # each chain's noise
    noisy = target.with_noise_precision(tau)
    expected = noisy.log_prob(theta) - noisy._log_prior(theta)
    torch.testing.assert_close(noisy.log_likelihood(theta), expected)


def test_the_blocks_of_a_target_with_the_move():
    target = _target()  # HierarchicalPrior learns the noise
    assert [type(b) for b in target.gibbs_blocks()] == [
        InterweavedPrecisionGibbs,
        NoisePrecisionGibbs,
    ]
    plain = _target(interweave=0).gibbs_blocks()
    assert [type(b) for b in plain] == [PriorPrecisionGibbs, NoisePrecisionGibbs]
    confined = kernel_for(ConstrainedHMC(lower=[-5.0] * target.dim), target)
    assert isinstance(confined, GibbsKernel)
    assert [type(b) for b in confined.block.blocks] == [PriorPrecisionGibbs, NoisePrecisionGibbs]


def test_a_sweep_reevaluates_the_state_and_adapts_in_warmup_only():
    target = _target()
    kernel = kernel_for(HMC(n_steps=3), target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(0.3 * torch.randn(4, target.dim, generator=g).double(), g, n_warmup=5)
    K = len(target.network.sizes)
    assert kernel.block.widths == [2 * K + 2, 1]
    scales = []
    for _ in range(10):
        state, info = kernel.step(state, g, step_size=0.01)
        scales.append(state.values[:, K : 2 * K].clone())
        assert info.extra["interweave_accept"].shape == (4,)
    # the state is the density's at the position, under the chain's values
    log_prob, grad = kernel.local_target(state).value_and_grad(state.position)
    torch.testing.assert_close(state.log_prob, log_prob)
    torch.testing.assert_close(state.grad, grad)
    assert torch.equal(state.values[:, 2 * K], torch.full((4,), 11.0, dtype=torch.float64))
    assert not torch.equal(scales[0], scales[3])  # adapting in warmup (5 transitions)
    for later in scales[5:]:  # fixed afterwards
        assert torch.equal(later, scales[4])


def test_the_move_reads_the_chains_own_noise_precision():
    """Conditioned on the previous values, the block's likelihood has the chain's noise."""
    target = _target(interweave=1)
    seen = []
    block = target.gibbs_blocks()[0]
    original = block.interweave

    def spy(t, *args):
        seen.append(getattr(t.likelihood, "chain_precision", None))
        return original(t, *args)

    block.interweave = spy
    kernel = GibbsKernel(HMC(n_steps=2).build(target), block)
    g = torch.Generator().manual_seed(0)
    kernel.block = BlockSequence([block, NoisePrecisionGibbs()])
    state = kernel.init(0.3 * torch.randn(2, target.dim, generator=g).double(), g)
    kernel.step(state, g, step_size=0.01)
    assert seen[0] is None  # the first draw: no values yet
    torch.testing.assert_close(seen[1], state.values[:, -1:])  # the noise drawn at the start


def test_interweave_is_validated():
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="interweave"):
            HierarchicalPrior(interweave=bad).check()
    HierarchicalPrior(interweave=3).check()
    net = FunctionalNetwork(nn.Linear(2, 1))
    y = torch.zeros(4, 1)
    t = Target(
        net, torch.zeros(4, 2), y, Gaussian(1.0), HierarchicalPrior(interweave=1, learn_noise=False)
    )
    (block,) = t.gibbs_blocks()
    assert block.rounds == 1
    state = State(torch.zeros(1, 3), *t.value_and_grad(torch.zeros(1, 3)))
    values, moved = block.update(t, state, torch.Generator().manual_seed(0))
    assert values.shape == (1, 2 * 2 + 2)
