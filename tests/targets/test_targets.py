"""Targets: value and gradient against autograd through the module with a hand-written
likelihood and prior; chains batched = a loop over chains; split and minibatch targets against
the full-data target; the function target's vmap and fallback paths."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from sklearn_bnn.likelihoods import Categorical, Gaussian
from sklearn_bnn.nets import MLP
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.targets import (
    FunctionalNetwork,
    FunctionTarget,
    MinibatchTarget,
    SplitTarget,
    Target,
    split_bounds,
)

N, D_IN, TAU_NOISE = 23, 3, 4.0
PRIOR = [1.0, 2.0, 0.5, 3.0]  # one precision per tensor of the module below


def _module():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D_IN, 5), nn.Tanh(), nn.Linear(5, 2))


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D_IN, generator=g, dtype=torch.float64)
    y = torch.randn(N, 2, generator=g, dtype=torch.float64)
    return X, y


def _network():
    return FunctionalNetwork(_module(), dtype=torch.float64)


def _positions(net, c, seed=1):
    g = torch.Generator().manual_seed(seed)
    return net.initial_position() + 0.3 * torch.randn(c, net.dim, generator=g, dtype=net.dtype)


def _reference(net, theta, X, y, prior_weight=1.0):
    """log N(y; f(x), 1/tau) summed + weight * log N(theta; 0, 1/prior) (no constant), and its
    gradient, by autograd through a copy of the module loaded with ``theta`` (D,)."""
    module = nn.Sequential(nn.Linear(D_IN, 5), nn.Tanh(), nn.Linear(5, 2)).double()
    leaf = theta.detach().clone().requires_grad_(True)
    params = dict(zip(net.names, leaf.split(net.sizes), strict=True))
    f = torch.func.functional_call(
        module, {n: p.view(s) for (n, p), s in zip(params.items(), net.shapes, strict=True)}, (X,)
    )
    lik = torch.distributions.Normal(f, TAU_NOISE**-0.5).log_prob(y).sum()
    prior = sum(
        -0.5 * tau * (p**2).sum() for tau, p in zip(PRIOR, leaf.split(net.sizes), strict=True)
    )
    value = lik + prior_weight * prior
    (grad,) = torch.autograd.grad(value, leaf)
    return value.detach(), grad


def _target(cls=Target, **kw):
    X, y = _data()
    return cls(_network(), X, y, Gaussian(TAU_NOISE), GaussianPrior(PRIOR), **kw)


@pytest.mark.parametrize("chains", [1, 3])
def test_value_and_grad_match_autograd_of_the_hand_written_density(chains):
    target = _target()
    theta = _positions(target.network, chains)
    value, grad = target.value_and_grad(theta)
    assert value.shape == (chains,) and grad.shape == (chains, target.dim)
    X, y = _data()
    for c in range(chains):
        ref_value, ref_grad = _reference(target.network, theta[c], X, y)
        torch.testing.assert_close(value[c], ref_value)
        torch.testing.assert_close(grad[c], ref_grad)
    torch.testing.assert_close(target.log_prob(theta), value)
    torch.testing.assert_close(target.log_prob(theta[0]), value[0])


def test_chains_batched_equal_a_loop_over_chains():
    target = _target()
    theta = _positions(target.network, 4)
    value, grad = target.value_and_grad(theta)
    for c in range(4):
        v, g = target.value_and_grad(theta[c : c + 1])
        torch.testing.assert_close(value[c : c + 1], v, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(grad[c : c + 1], g, rtol=1e-10, atol=1e-10)


def test_the_users_module_is_not_mutated():
    module = _module()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    X, y = _data()
    net = FunctionalNetwork(module, dtype=torch.float64)
    Target(net, X, y, Gaussian(1.0), GaussianPrior(1.0)).value_and_grad(_positions(net, 2))
    for k, v in module.state_dict().items():
        assert torch.equal(v, before[k]) and v.dtype == torch.float32


def test_a_data_subset_with_a_weighted_prior():
    target = _target()
    theta = _positions(target.network, 2)
    X, y = _data()
    value, grad = target.value_and_grad(theta, X[:5], y[:5], prior_weight=0.25)
    for c in range(2):
        ref_value, ref_grad = _reference(target.network, theta[c], X[:5], y[:5], 0.25)
        torch.testing.assert_close(value[c], ref_value)
        torch.testing.assert_close(grad[c], ref_grad)


def test_temperature_divides_the_log_density():
    target, hot = _target(), _target()
    hot.temperature = 2.0
    theta = _positions(target.network, 2)
    value, grad = target.value_and_grad(theta)
    hot_value, hot_grad = hot.value_and_grad(theta)
    torch.testing.assert_close(hot_value, value / 2)
    torch.testing.assert_close(hot_grad, grad / 2)


def test_classification_target_matches_the_summed_log_softmax():
    X, _ = _data()
    labels = torch.arange(N) % 2
    net = _network()
    target = Target(net, X, labels, Categorical(), GaussianPrior(PRIOR))
    theta = _positions(net, 2)
    value, grad = target.value_and_grad(theta)
    for c in range(2):
        leaf = theta[c].clone().requires_grad_(True)
        logits = net.forward(leaf, X)
        prior = sum(
            -0.5 * t * (p**2).sum() for t, p in zip(PRIOR, leaf.split(net.sizes), strict=True)
        )
        ref = torch.log_softmax(logits, -1)[torch.arange(N), labels].sum() + prior
        (ref_grad,) = torch.autograd.grad(ref, leaf)
        torch.testing.assert_close(value[c], ref.detach())
        torch.testing.assert_close(grad[c], ref_grad)


# ---------------------------------------------------------------------------------- split


def test_split_bounds_cover_the_rows_in_nearly_equal_blocks():
    bounds = split_bounds(23, n_splits=4)
    assert bounds[0][0] == 0 and bounds[-1][1] == 23
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert {stop - start for start, stop in bounds} <= {5, 6}
    assert len(split_bounds(23, split_size=5)) == 5 and len(split_bounds(3, n_splits=10)) == 3
    with pytest.raises(ValueError, match="n_splits or split_size"):
        split_bounds(10)


@pytest.mark.parametrize("chains", [1, 3])
def test_split_subsets_sum_to_the_full_target(chains):
    full, split = _target(), _target(SplitTarget, n_splits=4)
    theta = _positions(full.network, chains)
    value, grad = full.value_and_grad(theta)
    parts = [split.subset_value_and_grad(theta, m) for m in range(split.n_splits)]
    torch.testing.assert_close(sum(v for v, _ in parts), value)
    torch.testing.assert_close(sum(g for _, g in parts), grad)
    # each subset is its likelihood plus the prior divided by M (seeds/000 eq. 6)
    X, y = _data()
    start, stop = split.bounds[1]
    ref_value, ref_grad = _reference(full.network, theta[0], X[start:stop], y[start:stop], 0.25)
    torch.testing.assert_close(parts[1][0][0], ref_value)
    torch.testing.assert_close(parts[1][1][0], ref_grad)
    split_value, split_grad = split.value_and_grad(theta)
    torch.testing.assert_close(split_value, value)
    torch.testing.assert_close(split_grad, grad)
    torch.testing.assert_close(split.log_prob(theta), value)
    assert split.n_subset_grads == 2 * split.n_splits


# ------------------------------------------------------------------------------ minibatch


@pytest.mark.parametrize("chains", [1, 3])
@pytest.mark.parametrize("module", ["sequential", "mlp"])
def test_minibatch_estimate_scales_the_batch_likelihood_by_n_over_b(chains, module):
    """Both gradients: autograd's (any network; for one chain on the CPU the flat module's
    pass, the scaling in its copy-out) and the package MLP's hand-written one."""
    X, y = _data()
    if module == "mlp":
        torch.manual_seed(0)
        network = FunctionalNetwork(MLP(D_IN, (5,), 2, activation="tanh"), dtype=torch.float64)
    else:
        network = _network()
    mb = MinibatchTarget(
        network, X.numpy(), y.numpy(), Gaussian(TAU_NOISE), GaussianPrior(PRIOR), batch_size=5
    )
    theta = _positions(mb.network, chains)
    rows = np.array([3, 17, 4, 9, 22])
    X_rows, y_rows = mb.batch(rows)
    assert (mb._batched_applies(theta, X_rows, y_rows) is not None) == (module == "mlp")
    value, grad = mb.batch_value_and_grad(theta, rows)
    scale = N / len(rows)
    for c in range(chains):
        lik_value, lik_grad = _reference(mb.network, theta[c], X[rows], y[rows], 0.0)
        prior_value, prior_grad = _reference(mb.network, theta[c], X[:0], y[:0], 1.0)
        torch.testing.assert_close(value[c], scale * lik_value + prior_value)
        torch.testing.assert_close(grad[c], scale * lik_grad + prior_grad)
    torch.testing.assert_close(mb.batch_log_prob(theta, rows), value)
    log_lik, grad_again = mb.batch_likelihood_and_grad(theta, rows)
    torch.testing.assert_close(log_lik + mb.log_prior(theta), value)
    torch.testing.assert_close(grad_again, grad)


@pytest.mark.parametrize("chains", [1, 3])
def test_minibatch_full_data_density_is_the_exact_target(chains):
    X, y = _data()
    full = _target()
    mb = MinibatchTarget(
        _network(), X.numpy(), y.numpy(), Gaussian(TAU_NOISE), GaussianPrior(PRIOR), batch_size=6
    )
    theta = _positions(full.network, chains)
    value, grad = full.value_and_grad(theta)
    mb_value, mb_grad = mb.value_and_grad(theta)
    torch.testing.assert_close(mb_value, value)
    torch.testing.assert_close(mb_grad, grad)
    torch.testing.assert_close(mb.log_prob(theta), value)


def test_minibatch_refuses_a_bad_batch_size():
    X, y = _data()
    with pytest.raises(ValueError, match="batch_size"):
        MinibatchTarget(_network(), X, y, Gaussian(1.0), GaussianPrior(1.0), batch_size=0)
    with pytest.raises(ValueError, match="resident"):
        MinibatchTarget(
            _network(), X, y, Gaussian(1.0), GaussianPrior(1.0), batch_size=4, resident="yes"
        )


def test_resident_data_give_the_same_draws_as_batches_moved_from_the_host(tmp_path):
    """Data kept whole on the device, batch indices drawn there (no transfer per step): the
    same rows and the same arithmetic as batches gathered from numpy, so the same draws."""
    from sklearn_bnn.samplers import SGHMC, sample

    X, y = _data()
    targets = {}
    for resident in (True, False):
        targets[resident] = MinibatchTarget(
            _network(), X.numpy(), y.numpy(), Gaussian(TAU_NOISE), GaussianPrior(PRIOR),
            batch_size=5, resident=resident,
        )
    assert isinstance(targets[True].X, torch.Tensor) and targets[True].batch_device is not None
    assert isinstance(targets[False].X, np.ndarray) and targets[False].batch_device is None
    draws = {
        resident: sample(
            target, target.network.initial_position(), SGHMC(step_size=1e-3),
            n_warmup=3, n_draws=10, n_chains=2, random_state=0,
        ).draws
        for resident, target in targets.items()
    }
    torch.testing.assert_close(draws[True], draws[False], rtol=1e-6, atol=1e-7)
    # "auto": in-memory data that fit stay resident, a memory map never
    path = tmp_path / "X.npy"
    np.save(path, X.numpy())
    mapped = np.load(path, mmap_mode="r")
    auto = dict(batch_size=5)
    assert MinibatchTarget(_network(), X.numpy(), y.numpy(), Gaussian(1.0), GaussianPrior(1.0),
                           **auto).resident
    assert not MinibatchTarget(_network(), mapped, y.numpy(), Gaussian(1.0),
                               GaussianPrior(1.0), **auto).resident


# ------------------------------------------------------------------------------- function


def _gaussian_log_density(theta):
    scales = torch.arange(1, theta.shape[-1] + 1, dtype=theta.dtype)
    return -0.5 * ((theta - 1.0) ** 2 / scales).sum()


def test_function_target_batched_equals_the_loop_and_the_closed_form():
    theta = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    batched = FunctionTarget(_gaussian_log_density, 3, dtype=torch.float64)
    looped = FunctionTarget(_gaussian_log_density, 3, dtype=torch.float64, vectorize=False)
    value, grad = batched.value_and_grad(theta)
    assert batched._batched is True
    loop_value, loop_grad = looped.value_and_grad(theta)
    torch.testing.assert_close(value, loop_value)
    torch.testing.assert_close(grad, loop_grad)
    scales = torch.arange(1, 4, dtype=torch.float64)
    torch.testing.assert_close(grad, -(theta - 1.0) / scales)
    torch.testing.assert_close(batched.log_prob(theta), value)
    torch.testing.assert_close(batched.log_prob(theta[0]), value[0])


def test_function_target_falls_back_to_a_loop_where_vmap_fails():
    def with_control_flow(theta):  # .item() has no batching rule
        if theta.sum().item() > 0:
            return -0.5 * (theta**2).sum()
        return -(theta**2).sum()

    theta = torch.tensor([[1.0, 2.0], [-1.0, -2.0]], dtype=torch.float64)
    target = FunctionTarget(with_control_flow, 2, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="could not be batched"):
        value, grad = target.value_and_grad(theta)
    assert target._batched is False
    torch.testing.assert_close(value, torch.tensor([-2.5, -5.0], dtype=torch.float64))
    torch.testing.assert_close(grad, torch.tensor([[-1.0, -2.0], [2.0, 4.0]], dtype=torch.float64))
    strict = FunctionTarget(with_control_flow, 2, dtype=torch.float64, vectorize=True)
    with pytest.raises(RuntimeError):
        strict.value_and_grad(theta)


def test_function_target_validates_its_arguments():
    with pytest.raises(ValueError, match="callable"):
        FunctionTarget(3.0, dim=2)
    with pytest.raises(ValueError, match="vectorize"):
        FunctionTarget(_gaussian_log_density, dim=2, vectorize="yes")
    # a parameter the density ignores gets a zero gradient, not an error
    value, grad = FunctionTarget(lambda t: -(t[0] ** 2), 2).value_and_grad(torch.ones(1, 2))
    torch.testing.assert_close(grad, torch.tensor([[-2.0, 0.0]]))
    assert math.isclose(value.item(), -1.0)
