"""The hand-written, chain-batched gradient of the package's MLP (``BatchedMLP``, issue 31):
its value and gradient equal the general autograd path's and autograd's on the naive
expression (each chain through ``functional_call``, the likelihood and prior written out), for
every likelihood, activation, dtype, number of chains, data subset, prior weight, temperature
and per-chain precision it takes; any other network keeps the general path."""

import math

import pytest
import torch
from torch import nn

from sklearn_bnn.likelihoods import Bernoulli, Categorical, Gaussian
from sklearn_bnn.nets import ACTIVATIONS, MLP
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.targets import FunctionalNetwork, SplitTarget, Target
from sklearn_bnn.targets._batched_mlp import BatchedMLP

N, D_IN = 37, 4
TOL = {torch.float32: 2e-5, torch.float64: 1e-11}


def _data(kind, n_out, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, D_IN, generator=g, dtype=torch.float64).to(dtype)
    if kind == "categorical":
        y = torch.randint(0, n_out, (N,), generator=g)
    elif kind == "bernoulli":
        y = torch.randint(0, 2, (N, 1), generator=g).to(dtype)
    else:
        y = torch.randn(N, n_out, generator=g, dtype=torch.float64).to(dtype)
    return X, y


def _likelihood(kind, n_out):
    if kind == "categorical":
        return Categorical()
    if kind == "bernoulli":
        return Bernoulli()
    if n_out == 1:
        return Gaussian(4.0)
    return Gaussian(torch.tensor([2.0, 5.0, 0.5][:n_out]))


def _target(kind="categorical", n_out=3, hidden=(6,), activation="relu", dtype=torch.float64):
    torch.manual_seed(0)
    net = FunctionalNetwork(MLP(D_IN, hidden, n_out, activation=activation), dtype=dtype)
    X, y = _data(kind, n_out, dtype)
    prior = GaussianPrior([1.0, 2.0, 0.5, 3.0, 1.5, 0.7, 2.5, 0.9][: len(net.names)])
    return Target(net, X, y, _likelihood(kind, n_out), prior)


def _positions(target, c, seed=1, scale=0.7):
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(c, target.dim, generator=g, dtype=torch.float64)
    return (scale * theta).to(target.dtype)


def _general(target, theta, *args):
    """The general path's value and gradient (autograd; vmap over chains when C > 1)."""
    target.batched_mlp = False
    try:
        return target.value_and_grad(theta, *args)
    finally:
        del target.batched_mlp


def _naive(target, theta, X, y, prior_weight=1.0):
    """Autograd, chain by chain, on the density written out: the module through
    ``functional_call``, the likelihood's own formula, -w tau theta^2 / 2, over T."""
    values, grads = [], []
    lik = target.likelihood
    tau_noise = getattr(lik, "chain_precision", None)
    tau_prior = target.prior_density.precision
    for c in range(theta.shape[0]):
        leaf = theta[c].detach().clone().requires_grad_(True)
        f = target.network.forward(leaf, X)
        if isinstance(lik, Categorical):
            ll = torch.log_softmax(f, -1).gather(1, y[:, None]).sum()
        elif isinstance(lik, Bernoulli):
            ll = (y * torch.nn.functional.logsigmoid(f)).sum()
            ll = ll + ((1 - y) * torch.nn.functional.logsigmoid(-f)).sum()
        else:
            tau = tau_noise[c] if tau_noise is not None else lik.precision
            tau = torch.as_tensor(tau, dtype=f.dtype).expand(f.shape[1])
            ll = torch.distributions.Normal(f, tau**-0.5).log_prob(y).sum()
        prec = tau_prior[c] if tau_prior.ndim == 2 else tau_prior
        value = (ll - 0.5 * prior_weight * (prec * leaf**2).sum()) / target.temperature
        (grad,) = torch.autograd.grad(value, leaf)
        values.append(value.detach())
        grads.append(grad)
    return torch.stack(values), torch.stack(grads)


def _check(target, theta, X=None, y=None, prior_weight=1.0):
    """The fast path is taken, and agrees with the general path and the naive expression
    (the naive one without the constants the Gaussian likelihood leaves in, compared by
    differences between chains and by gradients)."""
    X_ = target.X if X is None else X
    y_ = target.y if y is None else y
    assert target._batched_applies(theta, X_, y_) is not None
    value, grad = target.value_and_grad(theta, X, y, prior_weight)
    ref_value, ref_grad = _general(target, theta, X, y, prior_weight)
    naive_value, naive_grad = _naive(target, theta, X_, y_, prior_weight)
    tol = TOL[target.dtype]
    assert value.shape == (theta.shape[0],) and grad.shape == theta.shape
    assert value.dtype == grad.dtype == target.dtype
    scale = ref_value.abs().max().item() + 1.0
    assert torch.allclose(value, ref_value, rtol=0, atol=tol * scale)
    assert torch.allclose(value, naive_value, rtol=0, atol=tol * scale)
    gscale = ref_grad.abs().max().item() + 1.0
    assert torch.allclose(grad, ref_grad, rtol=0, atol=tol * gscale)
    assert torch.allclose(grad, naive_grad, rtol=0, atol=tol * gscale)
    if X is None and prior_weight == 1.0:
        # the gradient alone (a trajectory's inner steps): the same operations, no value
        assert torch.allclose(target.log_prob_grad(theta), grad, rtol=0, atol=tol * gscale)


LIKELIHOODS = [("categorical", 3), ("categorical", 2), ("bernoulli", 1), ("gaussian", 1),
               ("gaussian", 3)]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_chains", [1, 5])
@pytest.mark.parametrize(("kind", "n_out"), LIKELIHOODS)
def test_likelihoods(kind, n_out, n_chains, dtype):
    target = _target(kind, n_out, dtype=dtype)
    _check(target, _positions(target, n_chains))


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_activations(activation, dtype):
    target = _target(hidden=(6, 5), activation=activation, dtype=dtype)
    _check(target, _positions(target, 5))


@pytest.mark.parametrize("hidden", [(), (7,), (3, 4, 5)])
@pytest.mark.parametrize("n_chains", [1, 5])
def test_depths(hidden, n_chains):
    target = _target("gaussian", 3, hidden=hidden)
    _check(target, _positions(target, n_chains))


@pytest.mark.parametrize("n_chains", [1, 5])
def test_the_gradient_alone_is_tempered(n_chains):
    target = _target()
    theta = _positions(target, n_chains)
    target.temperature = 2.0
    _check(target, theta)


@pytest.mark.parametrize("n_chains", [1, 5])
def test_the_gradient_alone_skips_the_values(n_chains):
    """:meth:`Target.log_prob_grad` computes neither the likelihood's value nor the prior's:
    fewer operations (on a GPU, kernels of a replayed step) than :meth:`value_and_grad`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += not func.is_view
            return func(*args, **(kwargs or {}))

    target = _target()
    theta = _positions(target, n_chains)
    target.value_and_grad(theta)  # the caches filled
    counts = []
    for evaluate in (target.value_and_grad, target.log_prob_grad):
        Count.n = 0
        with Count():
            evaluate(theta)
        counts.append(Count.n)
    assert counts[1] <= counts[0] - 4, counts  # the likelihood's value, the prior's (3), the sum


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_chains", [1, 5])
def test_subset_prior_weight_and_temperature(n_chains, dtype):
    target = _target(dtype=dtype)
    target.temperature = 2.0
    theta = _positions(target, n_chains)
    _check(target, theta, target.X[5:20], target.y[5:20], prior_weight=0.25)


@pytest.mark.parametrize("n_chains", [1, 5])
def test_split_target_subsets(n_chains):
    torch.manual_seed(0)
    net = FunctionalNetwork(MLP(D_IN, (6,), 3), dtype=torch.float64)
    X, y = _data("categorical", 3, torch.float64)
    target = SplitTarget(net, X, y, Categorical(), GaussianPrior(1.0), n_splits=3)
    theta = _positions(target, n_chains)
    full_grad = target.value_and_grad(theta)[1]
    torch.testing.assert_close(target.log_prob_grad(theta), full_grad, rtol=1e-12, atol=1e-10)
    for m in range(3):
        value, grad = target.subset_value_and_grad(theta, m)
        target.batched_mlp = False
        ref_value, ref_grad = target.subset_value_and_grad(theta, m)
        del target.batched_mlp
        assert torch.allclose(value, ref_value, rtol=1e-12, atol=1e-10)
        assert torch.allclose(grad, ref_grad, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_chains", [1, 5])
def test_per_chain_prior_precision(n_chains, dtype):
    target = _target(dtype=dtype)
    g = torch.Generator().manual_seed(3)
    precision = (0.2 + 3 * torch.rand(n_chains, target.dim, generator=g)).to(dtype)
    _check(target.with_prior_precision(precision), _positions(target, n_chains))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_chains", [1, 5])
@pytest.mark.parametrize("n_out", [1, 2])
def test_per_chain_noise_precision(n_out, n_chains, dtype):
    """The learned noise precision a Gibbs step drew, one row per chain."""
    target = _target("gaussian", n_out, dtype=dtype)
    g = torch.Generator().manual_seed(4)
    tau = (0.5 + 5 * torch.rand(n_chains, n_out, generator=g)).to(dtype)
    conditioned = target.with_noise_precision(tau)
    theta = _positions(target, n_chains)
    _check(conditioned, theta, prior_weight=0.5)
    _check(conditioned, theta)  # and the gradient alone, which uses the whole prior
    # a different precision per chain gives a different density: the rows are used
    if n_chains > 1:
        same = target.with_noise_precision(tau[:1].expand(n_chains, n_out))
        values = same.value_and_grad(theta)[0], conditioned.value_and_grad(theta)[0]
        assert not torch.allclose(*values)


def test_dropout_mlp_in_eval_mode():
    torch.manual_seed(0)
    net = FunctionalNetwork(MLP(D_IN, (6,), 3, dropout=0.3), dtype=torch.float64)
    X, y = _data("categorical", 3, torch.float64)
    target = Target(net, X, y, Categorical(), GaussianPrior(1.0))
    _check(target, _positions(target, 5))


def test_repeated_calls_do_not_share_results():
    """The workspace is reused between calls; what is handed out is not."""
    target = _target()
    theta = _positions(target, 5)
    v1, g1 = target.value_and_grad(theta)
    kept = v1.clone(), g1.clone()
    target.value_and_grad(2 * theta)
    assert torch.equal(v1, kept[0]) and torch.equal(g1, kept[1])
    other = _positions(target, 3, seed=9)  # another number of chains: another workspace
    _check(target, other)
    _check(target, theta)


def test_many_data_pieces_keep_the_caches_bounded():
    """Batches that come and go (a minibatch target's) are each evaluated right, and the
    copies derived from them do not pile up."""
    target = _target()
    theta = _positions(target, 3)
    fast = target._batched()
    for start in range(25):
        rows = slice(start, start + 10)
        _check(target, theta, target.X[rows].clone(), target.y[rows].clone(), prior_weight=0.5)
        assert len(fast._cache) <= fast.max_cached and len(fast._work) <= 4


class _Sub(MLP):
    def forward(self, x):
        return 2 * super().forward(x)


@pytest.mark.parametrize("n_chains", [1, 5])
def test_other_modules_take_the_general_path(n_chains):
    torch.manual_seed(0)
    X, y = _data("categorical", 3, torch.float64)
    modules = [
        nn.Sequential(nn.Linear(D_IN, 6), nn.ReLU(), nn.Linear(6, 3)),
        _Sub(D_IN, (6,), 3),
        MLP(D_IN, (6,), 3, activation="gelu"),
    ]
    modules[-1][1].approximate = "tanh"  # a GELU this path does not write out
    frozen = MLP(D_IN, (6,), 3)
    frozen[0].bias.requires_grad_(False)
    modules.append(frozen)
    for module in modules:
        net = FunctionalNetwork(module, dtype=torch.float64)
        target = Target(net, X, y, Categorical(), GaussianPrior(1.0))
        theta = _positions(target, n_chains)
        assert target._batched_applies(theta, X, y) is None
        value, grad = target.value_and_grad(theta)
        naive_value, naive_grad = _naive(target, theta, X, y)
        assert torch.allclose(value, naive_value, atol=1e-10)
        assert torch.allclose(grad, naive_grad, atol=1e-10)


def test_for_network_recognises_only_the_package_mlp():
    assert BatchedMLP.for_network(FunctionalNetwork(MLP(3, (4, 4), 2, "tanh"))) is not None
    assert BatchedMLP.for_network(FunctionalNetwork(MLP(3, (), 2))) is not None
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert BatchedMLP.for_network(FunctionalNetwork(seq)) is None


def test_unsupported_data_falls_back():
    """Targets not in the shapes the fast path writes out (here a Gaussian y of shape (n,))
    take the general path and its own broadcasting."""
    target = _target("gaussian", 1)
    y = target.y[:, 0]
    theta = _positions(target, 5)
    assert target._batched_applies(theta, target.X, y) is None
    assert math.isfinite(target.value_and_grad(theta, target.X, y)[0].sum().item())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["categorical", "bernoulli", "gaussian"])
@pytest.mark.parametrize("c", [1, 3])
def test_the_gpu_forms_equal_the_general_path(kind, c):
    """On a GPU one chain takes other product layouts (``_weight_grad``, ``_rows_dot``)."""
    n_out = 1 if kind == "bernoulli" else 3
    target = _target(kind, n_out, hidden=(6, 5))
    cuda = Target(
        target.network.to("cuda"),
        target.X.cuda(),
        target.y.cuda(),
        target.likelihood,
        target.prior,
    )
    theta = _positions(target, c).cuda()
    value, grad = cuda.value_and_grad(theta)
    ref_value, ref_grad = _general(target, theta.cpu())
    torch.testing.assert_close(value.cpu(), ref_value, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(grad.cpu(), ref_grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(cuda.log_prob_grad(theta).cpu(), ref_grad, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("n_chains", [1, 5])
def test_without_a_workspace(n_chains):
    """Past ``max_workspace_bytes`` every buffer is allocated per call: the same values."""
    target = _target(hidden=(6, 5))
    target._batched().max_workspace_bytes = 0
    theta = _positions(target, n_chains)
    _check(target, theta)
    assert not target._batched()._work


@pytest.mark.parametrize(("kind", "n_out"), LIKELIHOODS)
def test_minibatch_columns_gathered_from_feature_major_data(kind, n_out):
    """A resident minibatch target's one-chain CPU batches are gathered as columns of the whole
    data's feature-major copies; the estimate must be the general path's on the same rows."""
    import numpy as np

    from sklearn_bnn.targets import MinibatchTarget

    full = _target(kind, n_out, dtype=torch.float32)
    target = MinibatchTarget(full.network, full.X, full.y, full.likelihood, full.prior,
                             batch_size=8, temperature=2.0)  # fmt: skip
    theta = _positions(target, 1)
    for rows in (torch.tensor([0, 3, 4, 9, 20, 36]), np.array([1, 2, 30])):
        value, grad = target.batch_likelihood_and_grad(theta, rows)
        assert target._feature_major is not None  # the gathered path was taken
        index = torch.as_tensor(rows)
        scale = N / len(index)
        ref_value, ref_grad = _general(full, theta, full.X[index], full.y[index], 1.0 / scale)
        ref_value = ref_value - full.prior_density.log_prob(theta, 1.0 / scale)  # likelihood
        assert torch.allclose(value, scale * ref_value / 2.0, rtol=1e-5, atol=1e-4)
        assert torch.allclose(grad, scale * ref_grad / 2.0, rtol=1e-5, atol=1e-4)
