"""Priors over the flattened weights: layout of the precisions, value and gradient in closed
form against torch.distributions and autograd."""

import math

import numpy as np
import pytest
import torch

from sklearn_bnn import HMCClassifier, HMCRegressor
from sklearn_bnn.priors import (
    BoundGaussianPrior,
    GaussianPrior,
    HierarchicalPrior,
    fan_in_precision,
)

NAMES = ["0.weight", "0.bias", "2.weight"]
SIZES = [6, 3, 3]
F64 = dict(dtype=torch.float64, device="cpu")


def _theta(c=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(c, sum(SIZES), generator=g, dtype=torch.float64)


@pytest.mark.parametrize(
    "precision, per_tensor",
    [
        (2.0, [2.0, 2.0, 2.0]),
        ([1.0, 4.0, 0.5], [1.0, 4.0, 0.5]),
        ({"0.bias": 9.0}, [3.0, 9.0, 3.0]),  # missing names take `default`
    ],
)
def test_precision_vector_lays_one_value_per_tensor(precision, per_tensor):
    tau = GaussianPrior(precision, default=3.0).precision_vector(NAMES, SIZES, **F64)
    expected = torch.cat(
        [torch.full((n,), v, **F64) for v, n in zip(per_tensor, SIZES, strict=True)]
    )
    torch.testing.assert_close(tau, expected, rtol=0, atol=0)


def test_log_density_and_gradient_match_torch_distributions():
    """-tau theta^2 / 2 is log N(0, 1/tau) up to a constant; the gradient is autograd's."""
    tau = GaussianPrior([1.0, 4.0, 0.5]).precision_vector(NAMES, SIZES, **F64)
    bound = BoundGaussianPrior(tau)
    theta = _theta().requires_grad_(True)
    reference = torch.distributions.Normal(0.0, tau.rsqrt()).log_prob(theta).sum(-1)
    (ref_grad,) = torch.autograd.grad(reference.sum(), theta)
    constant = (0.5 * torch.log(tau) - 0.5 * math.log(2 * math.pi)).sum()
    torch.testing.assert_close(bound.log_prob(theta), reference.detach() - constant)
    torch.testing.assert_close(bound.grad(theta), ref_grad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("chains", [1, 3])
def test_the_log_density_on_a_gpu_is_the_cpu_one(chains):
    """One chain on a GPU takes a product and a sum instead of the matrix-vector product."""
    tau = torch.linspace(0.5, 3.0, sum(SIZES), dtype=torch.float64)
    theta = _theta(chains)
    on_gpu = BoundGaussianPrior(tau.cuda()).log_prob(theta.cuda())
    torch.testing.assert_close(on_gpu.cpu(), BoundGaussianPrior(tau).log_prob(theta))


def test_weight_scales_value_and_gradient_and_in_place_forms_agree():
    tau = torch.linspace(0.5, 3.0, sum(SIZES), dtype=torch.float64)
    bound, theta = BoundGaussianPrior(tau), _theta()
    w = 0.25
    torch.testing.assert_close(bound.log_prob(theta, w), w * bound.log_prob(theta))
    torch.testing.assert_close(bound.grad(theta, w), w * bound.grad(theta))
    start = torch.randn(theta.shape, dtype=torch.float64)
    added = bound.add_grad_(start.clone(), theta, w)
    torch.testing.assert_close(added, start + bound.grad(theta, w))
    out = torch.empty_like(theta)
    torch.testing.assert_close(bound.neg_grad_into(out, theta, w), -bound.grad(theta, w))
    # one position (D,) gives a scalar
    assert bound.log_prob(theta[0]).shape == ()


def test_weighted_precision_follows_an_in_place_update():
    """A Gibbs step may rewrite tau in place: the cached weighted copy must not go stale."""
    tau = torch.ones(4, dtype=torch.float64)
    bound = BoundGaussianPrior(tau)
    torch.testing.assert_close(bound.weighted_precision(0.5), torch.full((4,), 0.5, **F64))
    tau.mul_(4.0)
    torch.testing.assert_close(bound.weighted_precision(0.5), torch.full((4,), 2.0, **F64))
    bound.precision = torch.full((4,), 10.0, **F64)
    torch.testing.assert_close(bound.weighted_precision(0.5), torch.full((4,), 5.0, **F64))


@pytest.mark.parametrize(
    "precision, match",
    [
        ({"1.weight": 1.0}, "unknown parameters"),
        ([1.0, 2.0], "has 2 entries"),
        (-1.0, "finite and > 0"),
        ([1.0, float("inf"), 1.0], "finite and > 0"),
        (object(), "positive float, a sequence or a dict"),
    ],
)
def test_bad_precisions_are_refused_naming_the_problem(precision, match):
    with pytest.raises(ValueError, match=match):
        GaussianPrior(precision).bind(NAMES, SIZES, **F64)


def test_hierarchical_prior_binds_at_the_mean_precision_and_checks_its_parameters():
    bound = HierarchicalPrior(alpha=3.0, beta=2.0).bind(NAMES, SIZES, **F64)
    torch.testing.assert_close(bound.precision, torch.full((sum(SIZES),), 1.5, **F64))
    HierarchicalPrior().check()
    for bad in (dict(alpha=0.5), dict(beta=0.0), dict(noise_alpha=1.0), dict(alpha="2")):
        with pytest.raises(ValueError, match="HierarchicalPrior"):
            HierarchicalPrior(**bad).check()
    state = HierarchicalPrior(alpha=4.0).to_state()
    HierarchicalPrior._check_state(state)
    assert HierarchicalPrior.from_state(state).get_params() == state
    with pytest.raises(ValueError, match="must hold"):
        HierarchicalPrior._check_state({**state, "extra": 1.0})
    with pytest.raises(ValueError, match="must be a number"):
        HierarchicalPrior._check_state({**state, "beta": [1.0]})


def test_fan_in_precision_gives_each_unit_an_input_of_unit_prior_variance():
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    shapes = [(100, 64), (100,), (7, 100), (7,)]
    precision = fan_in_precision(names, shapes)
    assert precision == {"0.weight": 64.0, "0.bias": 1.0, "2.weight": 100.0, "2.bias": 1.0}
    assert fan_in_precision(names, shapes, output_precision=1.0)["2.weight"] == 1.0
    # a convolution's fan-in is its input channels times its kernel's size
    assert fan_in_precision(["w"], [(8, 3, 5, 5)]) == {"w": 75.0}
    # drawn from it, a hidden unit's summed input over standardised inputs has variance ~1
    rng = np.random.default_rng(0)
    w = rng.normal(scale=precision["0.weight"] ** -0.5, size=(4000, 64))
    x = rng.normal(size=(64,))
    assert abs(np.var(w @ x) / np.mean(x**2) - 1.0) < 0.1


@pytest.mark.parametrize("estimator", [HMCClassifier, HMCRegressor])
def test_auto_prior_scales_the_hidden_layers_by_fan_in_and_keeps_the_output_layer(estimator):
    from sklearn_bnn.targets import FunctionalNetwork

    est = estimator(hidden_layer_sizes=(16,), prior_precision="auto")
    network = FunctionalNetwork(est._build_network(0, 5, 3))
    precision = est._prior_precision(network)
    assert precision == {"0.weight": 5.0, "0.bias": 1.0, "2.weight": 1.0, "2.bias": 1.0}
    assert est.set_params(prior_precision="fan_in")._prior_precision(network)["2.weight"] == 16.0
    with pytest.raises(ValueError, match="prior_precision"):
        estimator(prior_precision="fan-in").fit(np.zeros((4, 2)), [0, 1, 0, 1])
