"""The Gibbs block of a hierarchical prior's precisions (targets/_gibbs.py).

tau_l | w ~ Gamma(alpha + n_l/2, beta + |w_l|^2/2), tempered Gamma((alpha - 1 + n_l/2)/T + 1,
(beta + |w_l|^2/2)/T): the draws are checked against these moments within Monte Carlo error, and
the target conditioned on per-chain precisions against the Gaussian prior's closed form.
"""

import numpy as np
import pytest
import torch
from torch import nn

from sklearn_bnn.likelihoods import Categorical, Gaussian
from sklearn_bnn.priors import GaussianPrior, HierarchicalPrior
from sklearn_bnn.samplers import HMC, BlockSequence, GibbsKernel
from sklearn_bnn.samplers._base import State
from sklearn_bnn.samplers.gibbs import with_gibbs_blocks
from sklearn_bnn.targets import FunctionalNetwork, NoisePrecisionGibbs, PriorPrecisionGibbs, Target

F64 = torch.float64


def _target(prior, likelihood=None, n_out=1, seed=0):
    torch.manual_seed(seed)
    net = FunctionalNetwork(
        nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, n_out)), dtype=F64
    )
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(20, 2, generator=g, dtype=F64)
    y = torch.randn(20, n_out, generator=g, dtype=F64)
    return Target(net, X, y, likelihood or Gaussian(4.0), prior)


@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_draw_has_the_conjugate_gamma_moments(temperature):
    target = _target(HierarchicalPrior(alpha=2.0, beta=0.5, learn_noise=False))
    target.temperature = temperature
    (block,) = target.gibbs_blocks()
    assert isinstance(block, PriorPrecisionGibbs)
    theta = torch.randn(1, target.dim, generator=torch.Generator().manual_seed(1), dtype=F64)
    C = 20000
    state = State(theta.expand(C, -1), torch.zeros(C, dtype=F64), torch.zeros(C, target.dim))
    tau = block.draw(target, state, torch.Generator().manual_seed(2)).numpy()
    assert tau.shape == (C, 4)
    for k, w in enumerate(theta[0].split(target.network.sizes)):
        shape = (2.0 - 1 + w.numel() / 2) / temperature + 1
        rate = (0.5 + 0.5 * float(w.square().sum())) / temperature
        mean, var = shape / rate, shape / rate**2
        assert abs(tau[:, k].mean() - mean) < 4 * np.sqrt(var / C), k
        # the variance's standard error: sqrt((m4 - var^2) / C), m4 = (3k^2 + 6k) / rate^4
        se_var = np.sqrt((3 * shape**2 + 6 * shape - shape**2) / C) / rate**2
        assert abs(tau[:, k].var() - var) < 4 * se_var, k


def test_conditioned_target_is_the_gaussian_prior_of_each_chain():
    target = _target(HierarchicalPrior(learn_noise=False))
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(3, target.dim, generator=g, dtype=F64)
    tau = torch.rand(3, 4, generator=g, dtype=F64) + 0.5
    (block,) = target.gibbs_blocks()
    conditioned = block.condition(target, tau)
    value, grad = conditioned.value_and_grad(theta)
    names, sizes = target.network.names, target.network.sizes
    for c in range(3):
        fixed = Target(
            target.network, target.X, target.y, Gaussian(4.0), GaussianPrior(tau[c].tolist())
        )
        assert names == fixed.network.names and sizes == fixed.network.sizes
        v, gr = fixed.value_and_grad(theta[c : c + 1])  # one chain: the single-chain path
        torch.testing.assert_close(value[c : c + 1], v)
        torch.testing.assert_close(grad[c : c + 1], gr)
        v1, g1 = conditioned.select_chains(torch.tensor([c])).value_and_grad(theta[c : c + 1])
        torch.testing.assert_close(v1, v)
        torch.testing.assert_close(g1, gr)
    assert target.prior_density.precision.ndim == 1  # the target itself is unchanged


def test_regression_sweeps_the_precisions_then_the_noise():
    target = _target(HierarchicalPrior(noise_alpha=3.0, noise_beta=0.2), likelihood=Gaussian(4.0))
    blocks = target.gibbs_blocks()
    assert [type(b) for b in blocks] == [PriorPrecisionGibbs, NoisePrecisionGibbs]
    assert target.likelihood.prior == (3.0, 0.2)  # the hierarchical prior's noise hyperprior
    kernel = with_gibbs_blocks(HMC(n_steps=3).build(target), target)
    assert isinstance(kernel, GibbsKernel) and isinstance(kernel.block, BlockSequence)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(2, target.dim, dtype=F64), g)
    assert state.values.shape == (2, 5)
    state, info = kernel.step(
        state,
        g,
        step_size=torch.full((2,), 0.05, dtype=F64),
        inv_mass=torch.ones(target.dim, dtype=F64),
    )
    assert set(info.extra) >= {"precision[0.weight]", "precision[2.bias]", "noise_precision"}
    # the cached log density is that of the target conditioned on all the new values
    v, gr = kernel.block.condition(target, state.values).value_and_grad(state.position)
    torch.testing.assert_close(state.log_prob, v)
    torch.testing.assert_close(state.grad, gr)


def test_classification_has_the_precision_block_only():
    target = _target(HierarchicalPrior(), likelihood=Categorical(), n_out=3)
    assert [type(b) for b in target.gibbs_blocks()] == [PriorPrecisionGibbs]


def test_scheme_is_validated_by_name():
    with pytest.raises(ValueError, match="scheme"):
        _target(HierarchicalPrior(scheme="both"))
    with pytest.raises(ValueError, match="scheme='joint'"):
        _target(HierarchicalPrior(scheme="joint"))
