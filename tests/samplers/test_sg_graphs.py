"""SGLD and SGHMC minibatch steps recorded as a CUDA graph and replayed (samplers/_sg_graphs.py).

On the CPU the buffered step runs unrecorded (``record=False``): it must give the eager
kernel's transition to float rounding (same batches, same draws), count and undo a divergence
as the eager kernel does, and still sample. Where CUDA is present the recorded replay must
equal the unrecorded step, and an estimator fit on the GPU must replay its steps.
"""

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch

from sklearn_bnn import set_config
from sklearn_bnn.likelihoods import Categorical, Gaussian
from sklearn_bnn.nets import MLP
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import SGHMC, SGLD
from sklearn_bnn.samplers.stochastic_gradient._sg_graphs import GraphedSGSteps
from sklearn_bnn.targets import FunctionalNetwork, MinibatchTarget

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SAMPLERS = {
    "sgld": lambda: SGLD(step_size=1e-4),
    "sghmc-euler": lambda: SGHMC(step_size=1e-2),
    "sghmc-obabo": lambda: SGHMC(step_size=1e-2, integrator="obabo"),
    "sghmc-skew": lambda: SGHMC(step_size=1e-2, integrator="skew"),
    "sghmc-warmup": lambda: SGHMC(step_size=1e-2, warmup_step_size=3e-2),
}


def minibatch_target(device="cpu", n=400, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 6, generator=g, dtype=torch.float64).numpy()
    y = ((X[:, 0] + X[:, 1] > 0).astype(np.int64) + (X[:, 2] > 1)).astype(np.int64)
    torch.manual_seed(seed)
    net = FunctionalNetwork(MLP(6, (12,), 3), device=device, dtype=dtype)
    target = MinibatchTarget(net, X, y, Categorical(), GaussianPrior(1.0), batch_size=32)
    assert target.batch_device is not None  # resident: the batch indices are drawn there
    return target


def transitions(kernel, start, n, seed=0, n_warmup=2, inv_mass=None):
    g = torch.Generator(device=start.device).manual_seed(seed)
    state = kernel.init(start, g, n_warmup=n_warmup)
    inv_mass = torch.ones(start.shape[-1]) if inv_mass is None else inv_mass
    infos = []
    for _ in range(n):
        state, info = kernel.step(state, g, step_size=kernel.step_size, inv_mass=inv_mass)
        infos.append(info)
    return state, infos


def pair(name, device="cpu", n_chains=2, record=False):
    target = minibatch_target(device)
    eager = SAMPLERS[name]().build(target)
    eager.graphs.off_reason = "compared"  # the eager steps
    buffered = SAMPLERS[name]().build(target)
    buffered.graphs = GraphedSGSteps(record=record)
    start = target.network.initial_position()[None].repeat(n_chains, 1)
    start = start + 0.01 * torch.randn(
        start.shape, generator=torch.Generator().manual_seed(1), dtype=start.dtype
    ).to(start.device)
    return eager, buffered, start


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_the_buffered_step_is_the_eager_step(name):
    eager, buffered, start = pair(name)
    end_e, info_e = transitions(eager, start, 3)
    end_b, info_b = transitions(buffered, start, 3)
    assert buffered.graphs.recording is not None and buffered.graphs.recording.graph is None
    torch.testing.assert_close(end_b.position, end_e.position, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(end_b.log_prob, end_e.log_prob, rtol=1e-10, atol=1e-9)
    torch.testing.assert_close(end_b.grad, end_e.grad, rtol=1e-10, atol=1e-9)
    assert all(int(i.extra["divergent_steps"].sum()) == 0 for i in info_b)


@pytest.mark.parametrize("name", ["sgld", "sghmc-obabo", "sghmc-skew"])
def test_the_buffered_step_with_a_mass_is_the_eager_step(name):
    eager, buffered, start = pair(name)
    inv_mass = torch.linspace(0.5, 2.0, start.shape[-1], dtype=start.dtype)
    end_e, _ = transitions(eager, start, 2, inv_mass=inv_mass)
    end_b, _ = transitions(buffered, start, 2, inv_mass=inv_mass)
    assert buffered.graphs.recording.mass is not None
    torch.testing.assert_close(end_b.position, end_e.position, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(end_b.grad, end_e.grad, rtol=1e-10, atol=1e-9)


def test_a_divergent_chain_is_undone_and_counted():
    """A step size that blows one chain up: its position stays finite, its divergent steps
    are counted, the other chain moves on."""
    eager, buffered, start = pair("sghmc-euler")
    start[1] *= 1e200  # chain 1 cannot take a finite step: its products overflow
    end, infos = transitions(buffered, start, 1, n_warmup=0)
    n_steps = buffered.n_steps
    div = infos[0].extra["divergent_steps"]
    assert div[1] == n_steps and div[0] == 0
    assert torch.isfinite(end.position).all() and torch.isfinite(end.grad[0]).all()
    assert torch.equal(end.position[1], start[1])
    assert not torch.equal(end.position[0], start[0])
    end_e, infos_e = transitions(eager, start, 1, n_warmup=0)
    # the same count as the eager kernel (whose fresh momenta come from the main stream, so
    # the other chain's later draws differ from here on)
    assert torch.equal(infos_e[0].extra["divergent_steps"], div)


def regression_target(tau):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 4, generator=g, dtype=torch.float64).numpy()
    y = (X[:, :1] - 0.5 * X[:, 1:2] + 0.1 * torch.randn(300, 1, generator=g).numpy()).astype(
        np.float64
    )
    torch.manual_seed(0)
    net = FunctionalNetwork(MLP(4, (8,), 1), dtype=torch.float64)
    base = MinibatchTarget(net, X, y, Gaussian(1.0), GaussianPrior(1.0), batch_size=32)
    return base, base.with_noise_precision(tau)


def test_one_recording_serves_every_conditioned_copy():
    """A Gibbs block's noise precision makes a new copy of the target at every transition: the
    recording made on the first is reused (its inputs copied in), and each transition equals
    the eager kernel's on that copy."""
    base, first = regression_target(torch.full((2, 1), 4.0, dtype=torch.float64))
    _, second = regression_target(torch.tensor([[9.0], [25.0]], dtype=torch.float64))
    second = first.with_noise_precision(second.likelihood.chain_precision)
    # an epoch of steps (9), as many as stay clear of a divergence, whose fresh momentum the
    # recording draws from a generator of its own
    eager = SGHMC(step_size=1e-2, n_steps=9).build(first)
    eager.graphs.off_reason = "compared"
    buffered = SGHMC(step_size=1e-2, n_steps=9).build(first)
    buffered.graphs = GraphedSGSteps(record=False)
    start = base.network.initial_position()[None].repeat(2, 1)
    results = []
    for kernel in (eager, buffered):
        g = torch.Generator().manual_seed(0)
        state = kernel.init(start, g)
        ones = torch.ones(start.shape[-1], dtype=start.dtype)
        for target in (first, second, first):
            state, _ = kernel.with_target(target).step(state, g, 1e-2, ones)
        results.append(state)
    recording = buffered.graphs.recording
    assert recording is not None and buffered.graphs.targets_seen == 0
    assert recording.reads(second) and not recording.reads(base)
    torch.testing.assert_close(results[1].position, results[0].position, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(results[1].log_prob, results[0].log_prob, rtol=1e-10, atol=1e-8)


def test_a_target_that_changes_otherwise_turns_recording_off():
    kernel = SGHMC(step_size=1e-2).build(minibatch_target(seed=0))
    kernel.graphs = GraphedSGSteps(record=False)
    start = kernel.target.network.initial_position()[None]
    ones = torch.ones(start.shape[-1], dtype=start.dtype)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(start, g)
    with pytest.warns(RuntimeWarning, match="CUDA graphs are off"):
        for seed in (1, 2, 3):
            other = minibatch_target(seed=seed)
            state, _ = kernel.with_target(other).step(state, g, 1e-2, ones)
    assert kernel.graphs.off_reason is not None and kernel.graphs.recording is None


def test_nothing_is_recorded_on_the_cpu_by_default():
    target = minibatch_target()
    kernel = SGHMC(step_size=1e-2).build(target)
    transitions(kernel, target.network.initial_position()[None], 1)
    assert kernel.graphs.recording is None and kernel.graphs.off_reason is None


def test_a_kernel_with_the_recorder_copies_and_pickles():
    kernel = SGHMC(step_size=1e-2).build(minibatch_target())
    kernel.graphs = GraphedSGSteps(record=False)
    transitions(kernel, kernel.target.network.initial_position()[None], 1)
    assert kernel.graphs.recording is not None
    assert kernel.with_target(kernel.target).graphs is kernel.graphs  # shared by a copy
    clone = pickle.loads(pickle.dumps(kernel.graphs))
    assert clone.recording is None and clone.record is False
    assert copy.deepcopy(kernel).graphs.recording is None


def test_disabled_means_eager(monkeypatch):
    set_config(sg_cuda_graphs=False)
    kernel = SGHMC(step_size=1e-2).build(minibatch_target())
    kernel.graphs = GraphedSGSteps(record=False)
    transitions(kernel, kernel.target.network.initial_position()[None], 1)
    assert kernel.graphs.recording is None


# -- where CUDA is present ------------------------------------------------------------------
@cuda
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_the_replayed_step_is_the_unrecorded_step(name):
    _, unrecorded, start = pair(name, "cuda")
    _, replayed, _ = pair(name, "cuda", record=True)
    end_u, _ = transitions(unrecorded, start, 3)
    end_r, _ = transitions(replayed, start, 3)
    assert replayed.graphs.recording.graph is not None
    torch.testing.assert_close(end_r.position, end_u.position, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(end_r.grad, end_u.grad, rtol=1e-9, atol=1e-8)


@cuda
@pytest.mark.parametrize("task", ["classifier", "regressor-learning-its-noise"])
def test_an_estimator_replays_its_steps_on_the_gpu(task):
    """A fit on CUDA replays its steps without falling back (the regressor's learned noise
    re-conditions the target every transition: one recording serves every copy)."""
    from sklearn.datasets import load_diabetes, load_iris

    from sklearn_bnn import SGMCMCClassifier, SGMCMCRegressor

    if task == "classifier":
        X, y = load_iris(return_X_y=True)
        model, bound = SGMCMCClassifier(n_draws=20, n_warmup=20, batch_size=32), 0.85
    else:
        X, y = load_diabetes(return_X_y=True)
        model, bound = SGMCMCRegressor(n_draws=10, n_warmup=10, normalize_y=True), 0.3
    X = (X - X.mean(0)) / X.std(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.set_params(device="cuda", random_state=0).fit(X, y)
    assert not [w for w in caught if "CUDA graphs" in str(w.message)]
    assert model.score(X, y) > bound


def test_a_buffered_transition_reads_the_host_a_fixed_number_of_times():
    """The eager kernel reads one flag per minibatch step; the buffered steps (what a GPU
    replays) read nothing per step: the count per transition does not grow with its steps."""
    from test_host_sync import counting

    counts = {}
    for n_steps in (4, 12):
        target = minibatch_target()
        kernel = SGHMC(step_size=1e-2, n_steps=n_steps).build(target)
        kernel.graphs = GraphedSGSteps(record=False)
        g = torch.Generator().manual_seed(0)
        start = target.network.initial_position()[None].repeat(2, 1)
        ones = torch.ones(start.shape[-1], dtype=start.dtype)
        state = kernel.init(start, g)
        state, _ = kernel.step(state, g, 1e-2, ones)  # the first one makes the buffers
        with counting() as buffered:
            kernel.step(state, g, 1e-2, ones)
        kernel.graphs.off_reason = "eager"
        with counting() as eager:
            kernel.step(state, g, 1e-2, ones)
        counts[n_steps] = (buffered.count, eager.count)
    assert counts[4][0] == counts[12][0] <= 4
    assert counts[12][1] - counts[4][1] == 8  # one read per eager step
