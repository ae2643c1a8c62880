"""The unit-rescaling Gibbs block of a ReLU / identity MLP (targets/_rescale.py).

The move scales hidden unit j's incoming row and bias by c and its outgoing column by 1/c with
c^2 ~ GIG(k/2, 2A/T, 2B/T), k = n_in + 1 - n_out (Liu & Sabatti 2000). Checked here: the exact
GIG sampler against scipy's; the move leaves a Gaussian prior (tempered, per-chain precisions)
invariant, and that check fails when the Jacobian exponent or the Haar factor is wrong; the
network's function and the re-evaluated state; which targets declare the block; a
BlockSequence hands the moved position on; confined kernels drop it.
"""

import types

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

import sklearn_bnn.targets._rescale as rescale_module
from sklearn_bnn import set_config
from sklearn_bnn.likelihoods import Gaussian, sample_gamma
from sklearn_bnn.nets import MLP
from sklearn_bnn.priors import BoundGaussianPrior, GaussianPrior, HierarchicalPrior
from sklearn_bnn.samplers import HMC, ConstrainedHMC
from sklearn_bnn.samplers.gibbs import BlockSequence, GibbsKernel, kernel_for
from sklearn_bnn.targets import (
    FunctionalNetwork,
    LayerRescaleGibbs,
    NoisePrecisionGibbs,
    PriorPrecisionGibbs,
    SplitTarget,
    Target,
    UnitRescaleGibbs,
)
from sklearn_bnn.targets._rescale import homogeneous_layers, sample_log_gig


# -- the GIG sampler ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "p, a, b",
    [
        (0.5, 1.0, 1.0),
        (27.5, 50.0, 3.0),
        (-17.5, 2.0, 80.0),
        (1.0, 0.01, 5.0),
        (0.5, 3.0, 0.0),
        (-2.0, 0.0, 4.0),
    ],
)
@pytest.mark.parametrize("host_reads", [True, False], ids=["cpu_passes", "one_pass"])
def test_log_gig_draws_match_scipy(p, a, b, host_reads, monkeypatch):
    """Both ways of drawing the rejection rounds: passes of 25 until every element has its
    draw (the CPU), and all 100 rounds in one pass, reading nothing (a GPU's)."""
    set_config(host_reads_on_cpu=host_reads)
    monkeypatch.setattr(rescale_module, "MAX_PASS_SIZE", 2**22)  # 20,000 x 100 in one pass
    n = 20_000
    g = torch.Generator().manual_seed(0)
    full = lambda x: torch.full((n,), x, dtype=torch.float64)  # noqa: E731
    v = sample_log_gig(full(p), full(a), full(b), g).numpy()
    if a > 0 and b > 0:
        ref = stats.geninvgauss(p, np.sqrt(a * b), scale=np.sqrt(b / a))
    elif b == 0:  # Gamma(p, rate a/2)
        ref = stats.gamma(p, scale=2 / a)
    else:  # inverse Gamma(-p, scale b/2)
        ref = stats.invgamma(-p, scale=b / 2)
    ref_v = np.log(ref.rvs(size=n, random_state=1))
    # margins over generator seeds 0-4, both paths: the means' |z| at most 2.5, sd ratios
    # within 0.022, KS p-values at least 0.016
    se = np.sqrt((v.var() + ref_v.var()) / n)
    assert abs(v.mean() - ref_v.mean()) < 4 * se
    assert abs(v.std() / ref_v.std() - 1) < 0.04
    assert stats.ks_2samp(v, ref_v).pvalue > 1e-3


def test_improper_or_nonfinite_gig_leaves_the_scale_alone():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, -0.5, 0.0, 1.0, 1.0, float("nan")], dtype=torch.float64)
    a = torch.tensor([0.0, 1.0, 0.0, float("inf"), 1.0, 1.0], dtype=torch.float64)
    b = torch.tensor([1.0, 0.0, 0.0, 1.0, float("nan"), 1.0], dtype=torch.float64)
    assert torch.equal(sample_log_gig(p, a, b, g), torch.zeros(6, dtype=torch.float64))


# -- which networks ---------------------------------------------------------------------
def test_only_homogeneous_mlps_have_the_block():
    relu = FunctionalNetwork(MLP(3, (4, 5), 2))
    assert homogeneous_layers(relu) == [(0, 4, 3, 12, 16, 5), (16, 5, 4, 36, 41, 2)]
    assert UnitRescaleGibbs.for_network(FunctionalNetwork(MLP(3, (4,), 2, "identity")))
    for module in (
        MLP(3, (4,), 2, activation="tanh"),
        MLP(3, (), 2),  # no hidden unit
        nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)),  # a user's module
    ):
        assert UnitRescaleGibbs.for_network(FunctionalNetwork(module)) is None
    frozen = MLP(3, (4,), 2)
    frozen[0].bias.requires_grad_(False)
    assert UnitRescaleGibbs.for_network(FunctionalNetwork(frozen)) is None


# -- invariance of the Gaussian prior -----------------------------------------------------
def _prior_statistics(net, x):
    """Per unit of the first hidden layer of MLP(3, (4, 5), 2): log |row, bias|^2, log |column|^2
    and their product, per chain; (C, 12)."""
    C = x.shape[0]
    W, b, V = x[:, 0:12].view(C, 4, 3), x[:, 12:16], x[:, 16:36].view(C, 5, 4)
    row = (W.square().sum(-1) + b.square()).log()
    col = V.square().sum(1).log()
    W2, b2, V2 = x[:, 16:36].view(C, 5, 4), x[:, 36:41], x[:, 41:51].view(C, 2, 5)
    row2 = (W2.square().sum(-1) + b2.square()).log()
    col2 = V2.square().sum(1).log()
    return torch.cat([row, col, row * col, row2, col2, row2 * col2], 1)


def _invariance_z(temperature, per_chain, n=20_000, seed=0):
    """z-scores of the statistics after one move from exact prior draws against fresh ones."""
    net = FunctionalNetwork(MLP(3, (4, 5), 2), dtype=torch.float64)
    block = UnitRescaleGibbs.for_network(net)
    g = torch.Generator().manual_seed(seed)
    if per_chain:
        per_tensor = torch.exp(torch.randn(n, len(net.sizes), generator=g, dtype=torch.float64))
    else:
        per_tensor = torch.tensor([[2.0, 0.5, 1.0, 3.0, 0.7, 1.5]], dtype=torch.float64)
    tau = torch.cat([per_tensor[:, [k]].expand(n, s) for k, s in enumerate(net.sizes)], 1)
    prior = BoundGaussianPrior.per_chain(tau) if per_chain else BoundGaussianPrior(tau[0])

    def draw():  # exact draws of the tempered prior N(0, T / tau)
        return (
            torch.randn(n, net.dim, generator=g, dtype=torch.float64) * (temperature / tau).sqrt()
        )

    target = types.SimpleNamespace(prior_density=prior, temperature=temperature)
    _, moved = block.move(target, types.SimpleNamespace(position=draw()), g)
    after, fresh = _prior_statistics(net, moved), _prior_statistics(net, draw())
    se = ((after.var(0) + fresh.var(0)) / n).sqrt()
    return ((after.mean(0) - fresh.mean(0)) / se).abs()


@pytest.mark.parametrize("temperature, per_chain", [(1.0, False), (0.5, True), (2.0, True)])
def test_the_move_leaves_the_tempered_prior_invariant(temperature, per_chain):
    # margins over seeds 0-4: the largest |z| of the 36 statistics 3.0
    assert _invariance_z(temperature, per_chain).max() < 4.5


@pytest.mark.parametrize("shift", [0.5, -0.5, 1.0])
def test_the_invariance_check_fails_when_the_exponent_is_wrong(monkeypatch, shift):
    """p off by 1/2 is the Haar factor 1/c left out (or doubled); off by 1, a Jacobian exponent
    off by 2 (e.g. the bias left out of n_in + 1): the check above then fails far outside its
    margin (|z| of 15.9-31.6 over seeds 0-4)."""
    right = rescale_module.sample_log_gig
    monkeypatch.setattr(
        rescale_module, "sample_log_gig", lambda p, a, b, g: right(p + shift, a, b, g)
    )
    assert _invariance_z(0.5, True).max() > 8


def test_the_invariance_check_fails_when_the_temperature_is_left_out(monkeypatch):
    right = rescale_module.sample_log_gig
    monkeypatch.setattr(
        rescale_module, "sample_log_gig", lambda p, a, b, g: right(p, a * 0.5, b * 0.5, g)
    )
    assert _invariance_z(0.5, True).max() > 8


# -- the network's function and the re-evaluated state ------------------------------------
def _regression_target(dtype, prior=None, activation="relu", cls=Target, **kwargs):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    y = torch.as_tensor(X @ np.array([0.5, -1.0, 0.3]) + 0.1 * rng.normal(size=30))[:, None]
    torch.manual_seed(0)
    net = FunctionalNetwork(MLP(3, (8, 6), 1, activation=activation), dtype=dtype)
    target = cls(net, X, y, Gaussian(25.0), prior or GaussianPrior(1.0), **kwargs)
    target.rescale_moves = True
    return target


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_the_function_is_unchanged_and_the_state_reevaluated(dtype, rtol):
    target = _regression_target(dtype)
    (block,) = target.gibbs_blocks()
    g = torch.Generator().manual_seed(0)
    theta = 0.7 * torch.randn(4, target.dim, generator=g, dtype=dtype)
    values, state = block.update(target, _with_cache(target, theta), g)
    assert values.shape == (4, 0)
    moved = state.position
    assert (moved - theta).abs().max() > 1e-2  # it moved
    f = target.network.forward_batched
    np.testing.assert_allclose(f(moved, target.X), f(theta, target.X), rtol=rtol, atol=rtol)
    log_prob, grad = target.value_and_grad(moved)
    torch.testing.assert_close(state.log_prob, log_prob)
    torch.testing.assert_close(state.grad, grad)
    # the likelihood is the same at both positions, the prior is not
    lik = target.log_prob(moved) - target._log_prior(moved)
    torch.testing.assert_close(
        lik, target.log_prob(theta) - target._log_prior(theta), rtol=rtol, atol=rtol * 100
    )


def _with_cache(target, theta):
    from sklearn_bnn.samplers._base import State

    return State(theta, *target.value_and_grad(theta))


def test_targets_declare_the_block_only_where_it_applies():
    prior = HierarchicalPrior()
    target = _regression_target(torch.float32, prior)
    target.likelihood = Gaussian(25.0, prior=(2.0, 0.1))
    blocks = target.gibbs_blocks()
    assert [type(b) for b in blocks] == [
        LayerRescaleGibbs,
        PriorPrecisionGibbs,
        UnitRescaleGibbs,
        NoisePrecisionGibbs,
    ]
    target.rescale_moves = False
    assert [type(b) for b in target.gibbs_blocks()] == [PriorPrecisionGibbs, NoisePrecisionGibbs]
    assert _regression_target(torch.float32, activation="tanh").gibbs_blocks() == []
    split = _regression_target(torch.float32, cls=SplitTarget, n_splits=3)
    assert [type(b) for b in split.gibbs_blocks()] == [UnitRescaleGibbs]


def test_a_sequence_hands_the_moved_position_to_the_last_block():
    """layers (precisions integrated out) -> precisions -> units -> noise: the final state is
    the moved position, evaluated under the new precisions and noise."""
    target = _regression_target(torch.float64, HierarchicalPrior())
    target.likelihood = Gaussian(25.0, prior=(2.0, 0.1))
    sequence = BlockSequence(target.gibbs_blocks())
    g = torch.Generator().manual_seed(0)
    theta = 0.7 * torch.randn(3, target.dim, generator=g, dtype=torch.float64)
    values, state = sequence.update(target, _with_cache(target, theta), g)
    assert sequence.widths == [0, 6, 0, 1]
    assert (state.position - theta).abs().max() > 1e-2
    log_prob, grad = sequence.condition(target, values).value_and_grad(state.position)
    torch.testing.assert_close(state.log_prob, log_prob)
    torch.testing.assert_close(state.grad, grad)


def test_a_kernel_confined_to_a_box_drops_the_move():
    target = _regression_target(torch.float64)
    assert isinstance(kernel_for(HMC(), target), GibbsKernel)
    assert not isinstance(
        kernel_for(ConstrainedHMC(lower=[-5.0] * target.dim), target), GibbsKernel
    )


def _layer_norms(net, x):
    """log |w_t|^2 of every tensor (C, 6): the statistics the precisions depend on."""
    return torch.stack([w.square().sum(-1).log() for w in x.split(net.sizes, -1)], -1)


def _layer_invariance_z(temperature, n=20_000, seed=0, alpha=2.0, beta=1.0, told=None):
    """As :func:`_invariance_z` for the layer move under a hierarchical prior: exact draws of the
    tempered joint prior of (tau, w), one move of w (tau integrated out), against fresh draws."""
    net = FunctionalNetwork(MLP(3, (4, 5), 2), dtype=torch.float64)
    block = LayerRescaleGibbs(homogeneous_layers(net), alpha, beta)
    g = torch.Generator().manual_seed(seed)
    sizes = torch.tensor(net.sizes, dtype=torch.float64)

    def draw():
        # [N(w | 0, 1/tau) Gamma(tau | alpha, beta)]^(1/T): tau ~ Gamma((alpha - 1) / T + 1
        # + n_t (1/T - 1) / 2, rate beta / T), w | tau ~ N(0, T / tau)
        shape = (alpha - 1) / temperature + 1 + 0.5 * sizes * (1 / temperature - 1)
        tau = sample_gamma(shape.expand(n, -1).contiguous(), g) * temperature / beta
        tau = torch.cat([tau[:, [k]].expand(n, s) for k, s in enumerate(net.sizes)], 1)
        return (
            torch.randn(n, net.dim, generator=g, dtype=torch.float64) * (temperature / tau).sqrt()
        )

    def statistics(x):
        return torch.cat([_prior_statistics(net, x), _layer_norms(net, x)], 1)

    # ``told``: the temperature the block is given (a wrong one for the check of the check)
    target = types.SimpleNamespace(temperature=temperature if told is None else told)
    _, moved = block.move(target, types.SimpleNamespace(position=draw()), g)
    after, fresh = statistics(moved), statistics(draw())
    se = ((after.var(0) + fresh.var(0)) / n).sqrt()
    return ((after.mean(0) - fresh.mean(0)) / se).abs()


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_the_layer_move_leaves_the_marginal_prior_invariant(temperature):
    # margins over seeds 0-2: the largest |z| of the 42 statistics 3.0
    assert _layer_invariance_z(temperature).max() < 4.5


@pytest.mark.parametrize("wrong", ["haar", "temperature"])
def test_the_layer_invariance_check_fails_when_the_density_is_wrong(monkeypatch, wrong):
    """The Haar factor left out (K/2 off by 1/2): |z| 13-23 over seeds 0-2; the temperature
    left out of the marginal prior's power: |z| about 160 (T = 0.5)."""
    if wrong == "temperature":
        assert _layer_invariance_z(0.5, told=1.0).max() > 8
        return
    right = rescale_module.sample_log_concave

    def without_haar(h, h_and_slope, mode, curvature, ok, generator):
        def shifted(v):
            value, slope = h_and_slope(v)
            return value + 0.5 * v, slope + 0.5

        return right(lambda v: h(v) + 0.5 * v, shifted, mode, curvature, ok, generator)

    monkeypatch.setattr(rescale_module, "sample_log_concave", without_haar)
    assert _layer_invariance_z(0.5).max() > 8
