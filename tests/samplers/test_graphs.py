"""Trajectories recorded as CUDA graphs and replayed (samplers/_graphs.py, issue 31).

The replayed trajectory must equal the eager one to float tolerance, a divergence included
(both run on to a non-finite end, which the Metropolis test rejects); the sampler must still
sample its target; a target that changes between transitions must turn recording off with a
warning, never read a stale density. The CUDA tests skip where there is no GPU; the CPU tests
check that nothing is recorded there and that a kernel holding the recorder still copies and
pickles.
"""

import copy
import pickle
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from sklearn_bnn import ConvergenceWarning, set_config
from sklearn_bnn.likelihoods import Categorical, Gaussian
from sklearn_bnn.nets import MLP
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import HMC, _graphs, run_chains
from sklearn_bnn.samplers.geometry.euclidean import IdentityMetric, as_metric
from sklearn_bnn.samplers.hamiltonian.integrators import leapfrog
from sklearn_bnn.targets import FunctionalNetwork, Target

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


class Normal:
    """N(mu, diag(sd^2)) in every chain, as a target."""

    def __init__(self, mu, sd):
        self.mu, self.sd = mu, sd

    def value_and_grad(self, theta):
        z = (theta - self.mu) / self.sd
        return -0.5 * (z * z).sum(-1), -z / self.sd


def network_target(device, n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 8, generator=g)
    y = (X[:, 0] + X[:, 1] > 0).long() + (X[:, 2] > 1).long()
    torch.manual_seed(seed)
    net = FunctionalNetwork(MLP(8, (16,), 3), device=device)
    return Target(net, X, y, Categorical(), GaussianPrior(1.0))


def test_nothing_is_recorded_on_the_cpu():
    kernel = HMC(n_steps=5, step_size=0.1).build(Normal(torch.zeros(2), torch.ones(2)))
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(3, 2), g)
    kernel.step(state, g)
    assert kernel.graphed.recording is None and kernel.graphed.off_reason is None


def test_a_kernel_with_the_recorder_copies_and_pickles():
    kernel = HMC(n_steps=5, step_size=0.1).build(Normal(torch.zeros(2), torch.ones(2)))
    kernel.graphed.off_reason = "a reason"
    assert copy.deepcopy(kernel).graphed.off_reason == "a reason"
    assert copy.deepcopy(kernel).graphed is not kernel.graphed
    assert copy.copy(kernel).graphed is kernel.graphed  # with_target's copies share it
    restored = pickle.loads(pickle.dumps(kernel.graphed))
    assert restored.recording is None and restored.off_reason == "a reason"


def _trajectories(kernel, state, n_transitions, seed):
    """Run ``n_transitions`` from ``state`` with a fresh generator; the states in order."""
    g = torch.Generator(device=state.position.device).manual_seed(seed)
    out = []
    for _ in range(n_transitions):
        state, info = kernel.step(state, g)
        out.append((state.position.clone(), info.accept_prob.clone()))
    return out


@cuda
@pytest.mark.parametrize("n_chains", [1, 4])
def test_replayed_trajectories_equal_eager_ones(monkeypatch, n_chains):
    target = network_target("cuda")
    sampler = HMC(n_steps=12, step_size=0.02, step_jitter=0.5, n_steps_jitter=0.3)
    q0 = 0.1 * torch.randn(n_chains, target.dim, generator=torch.Generator().manual_seed(1))
    inv_mass = torch.rand(target.dim, generator=torch.Generator().manual_seed(2)) + 0.5
    results = {}
    for enabled in (False, True):
        set_config(hmc_cuda_graphs=enabled)
        kernel = sampler.build(target)
        kernel.inv_mass = inv_mass.cuda()
        state = kernel.init(q0.cuda())
        results[enabled] = _trajectories(kernel, state, 6, seed=3)
        if enabled:
            assert kernel.graphed.recording is not None
    for (q_e, a_e), (q_g, a_g) in zip(results[False], results[True], strict=True):
        torch.testing.assert_close(q_g, q_e, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a_g, a_e, rtol=1e-4, atol=1e-5)


@cuda
def test_a_replayed_divergence_ends_as_the_eager_one(monkeypatch):
    target = Normal(torch.zeros(3, device="cuda"), torch.full((3,), 1e-3, device="cuda"))
    state = HMC(n_steps=30, step_size=5.0).build(target).init(torch.ones(2, 3, device="cuda"))
    p0 = torch.ones(2, 3, device="cuda")
    eps = torch.full((2,), 5.0, device="cuda")
    metric = as_metric(torch.ones(3, device="cuda"))
    eager = leapfrog(target, state, p0, eps, 30, metric)
    set_config(hmc_cuda_graphs=True)
    replayed = _graphs.GraphedLeapfrog()(leapfrog, target, state, p0, eps, 30, metric, None)
    assert not torch.isfinite(replayed[0].log_prob).any()
    torch.testing.assert_close(replayed[0].position, eager[0].position, equal_nan=True)
    torch.testing.assert_close(replayed[1], eager[1], equal_nan=True)


@cuda
def test_replayed_hmc_samples_a_gaussian():
    mu = torch.tensor([1.0, -2.0, 0.5], device="cuda")
    sd = torch.tensor([0.5, 2.0, 1.0], device="cuda")
    kernel = HMC(n_steps=20).build(Normal(mu, sd))
    g = torch.Generator(device="cuda").manual_seed(0)
    state = kernel.init(torch.zeros(8, 3, device="cuda"), g)
    run = run_chains(kernel, state, g, n_warmup=300, n_draws=1000)
    assert kernel.graphed.recording is not None
    draws = run.draws.reshape(-1, 3).to(mu.device)
    assert torch.allclose(draws.mean(0), mu, atol=0.1 * 2.0)
    assert torch.allclose(draws.std(0), sd, rtol=0.1)


@cuda
def test_a_target_that_changes_turns_recording_off(monkeypatch):
    kernel = HMC(n_steps=5, step_size=0.1).build(Normal(torch.zeros(2, device="cuda"), 1.0))
    g = torch.Generator(device="cuda").manual_seed(0)
    state = kernel.init(torch.zeros(2, 2, device="cuda"), g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(4):
            moved = kernel.with_target(Normal(torch.full((2,), float(i), device="cuda"), 1.0))
            state, _ = moved.step(state, g)
    assert kernel.graphed.off_reason is not None and kernel.graphed.recording is None
    assert sum("CUDA graphs are off" in str(w.message) for w in caught) == 1


class OpCounter(TorchDispatchMode):
    """Counts the operations that compute something (a kernel each on a GPU), views aside."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("chains", [1, 3])
def test_a_recorded_step_is_its_gradient_and_two_multiply_adds(chains):
    """On a GPU a replayed step costs its kernels (about 2 us each on an H200 whatever their
    size): the step around the gradient is the drift and the kick, nothing more (the divergence
    freeze it had cost 7 kernels; docs/hmc.md, "On a GPU"). An inner step takes the gradient
    alone; only the last one computes the log density too."""
    target = network_target("cpu")
    g = torch.Generator().manual_seed(0)
    q = 0.1 * torch.randn(chains, target.dim, generator=g)
    state = HMC(n_steps=1).build(target).init(q)
    eps = torch.full((chains,), 0.01)
    rec = _graphs._Recording(
        target, state, torch.randn(q.shape, generator=g), eps, IdentityMetric(), record=False
    )
    for kick_step in (rec.step, rec.half):
        rec._body(kick_step)  # the target's caches (derived data, workspaces) filled
    with OpCounter() as gradient:
        target.log_prob_grad(rec.q)
    with OpCounter() as value_and_gradient:
        target.value_and_grad(rec.q)
    assert len(gradient.ops) < len(value_and_gradient.ops)
    for kick_step, evaluation in ((rec.step, gradient), (rec.half, value_and_gradient)):
        with OpCounter() as step:
            rec._body(kick_step)
        assert len(step.ops) == len(evaluation.ops) + 2, (step.ops, evaluation.ops)
        assert step.ops.count("addcmul_") - evaluation.ops.count("addcmul_") == 2


@pytest.mark.parametrize("metric", ["identity", "shared", "per_chain"])
def test_the_recorded_step_is_the_leapfrog_step(metric):
    """The step the graphs record, run unrecorded here, against the eager leapfrog."""
    target = network_target("cpu")
    g = torch.Generator().manual_seed(0)
    C = 3
    q = 0.1 * torch.randn(C, target.dim, generator=g)
    state = HMC(n_steps=1).build(target).init(q)
    p0 = torch.randn(C, target.dim, generator=g)
    eps = torch.tensor([0.01, 0.02, 0.015])
    inv_mass = {
        "identity": IdentityMetric(),
        "shared": as_metric(torch.rand(target.dim, generator=g) + 0.5),
        "per_chain": as_metric(torch.rand(C, target.dim, generator=g) + 0.5),
    }[metric]
    end, p1, n = leapfrog(target, state, p0, eps, 9, inv_mass)
    rec = _graphs._Recording(target, state, p0, eps, inv_mass, record=False)
    end_g, p1_g, n_g = rec.run(state, p0, eps, 9, inv_mass)
    assert n_g == n == 9
    torch.testing.assert_close(end_g.position, end.position, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(end_g.log_prob, end.log_prob, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(end_g.grad, end.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(p1_g, p1, rtol=1e-4, atol=1e-4)
    # the buffers start afresh: a second trajectory from the same point is the same
    again = rec.run(state, p0, eps, 9, inv_mass)
    torch.testing.assert_close(again[0].position, end_g.position, rtol=0, atol=0)


def test_a_divergence_in_the_recorded_steps_is_rejected_and_counted(monkeypatch):
    """Every chain leaves the finite region: the recorded steps end where the eager leapfrog
    ends (non-finite), and the HMC step rejects the trajectory, counts it divergent and keeps
    its state finite."""
    set_config(host_reads_on_cpu=False)
    target = Normal(
        torch.zeros(3, dtype=torch.float64), torch.full((3,), 1e-3, dtype=torch.float64)
    )
    q = torch.ones(2, 3, dtype=torch.float64)
    kernel = HMC(n_steps=40, step_size=5.0).build(target)
    state = kernel.init(q)
    p0 = torch.ones(2, 3, dtype=torch.float64)
    eps = torch.full((2,), 5.0, dtype=torch.float64)
    metric = as_metric(torch.ones(3, dtype=torch.float64))
    end, p1, _ = leapfrog(target, state, p0, eps, 40, metric)
    assert not torch.isfinite(end.log_prob).any()
    rec = _graphs._Recording(target, state, p0, eps, metric, record=False)
    end_g, p1_g, _ = rec.run(state, p0, eps, 40, metric)
    torch.testing.assert_close(end_g.position, end.position, equal_nan=True)
    torch.testing.assert_close(p1_g, p1, equal_nan=True)
    new_state, info = kernel.step(state, torch.Generator().manual_seed(0))
    assert info.divergent.all() and not info.accepted.any()
    assert torch.equal(new_state.position, q) and torch.isfinite(new_state.log_prob).all()


def _regression_target(seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(50, 3, generator=g)
    y = (X[:, :1] - 0.5 * X[:, 1:2]) + 0.1 * torch.randn(50, 1, generator=g)
    torch.manual_seed(seed)
    net = FunctionalNetwork(MLP(3, (8,), 1))
    return Target(net, X, y, Gaussian(1.0), GaussianPrior(1.0))


def test_a_recording_replays_on_another_conditioned_copy():
    """A Gibbs block's copies (noise and prior precisions per chain) share one recording: the
    steps read the recording's own inputs, into which each copy's values are copied."""
    base = _regression_target()
    C, g = 2, torch.Generator().manual_seed(3)

    def conditioned(seed):
        gen = torch.Generator().manual_seed(seed)
        noise = torch.rand(C, 1, generator=gen) * 50 + 1
        prior = torch.rand(C, base.dim, generator=gen) + 0.5
        return base.with_noise_precision(noise).with_prior_precision(prior)

    first, second = conditioned(1), conditioned(2)
    q = 0.2 * torch.randn(C, base.dim, generator=g)
    p0 = torch.randn(C, base.dim, generator=g)
    eps = torch.tensor([0.01, 0.02])
    metric = as_metric(torch.ones(base.dim))
    rec = _graphs._Recording(first, HMC().build(first).init(q), p0, eps, metric, record=False)
    assert rec.target is not first and rec.reads(first) and rec.reads(second)
    for target in (second, first, second):
        state = HMC().build(target).init(q)
        eager = leapfrog(target, state, p0, eps, 7, metric)
        replayed = rec.run(state, p0, eps, 7, metric, target)
        torch.testing.assert_close(replayed[0].position, eager[0].position, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(replayed[0].log_prob, eager[0].log_prob, rtol=1e-5, atol=1e-3)
    # the inputs of the copies recorded on are not written to
    assert not torch.equal(first.likelihood.chain_precision, second.likelihood.chain_precision)


def test_a_recording_refuses_another_target():
    """Another data set, another likelihood, a copy without per-chain precisions: not read."""
    base, other = _regression_target(0), _regression_target(1)
    noise = torch.full((2, 1), 4.0)
    first = base.with_noise_precision(noise)
    q = torch.zeros(2, base.dim)
    metric = as_metric(torch.ones(base.dim))
    state = HMC().build(first).init(q)
    rec = _graphs._Recording(first, state, q, torch.full((2,), 0.01), metric, record=False)
    assert rec.reads(base.with_noise_precision(2 * noise))
    assert not rec.reads(other.with_noise_precision(noise))  # other data
    assert not rec.reads(base)  # not conditioned: the likelihood's own precision
    assert not rec.reads(base.with_noise_precision(torch.full((3, 1), 4.0)))  # other shape
    assert not rec.reads(
        base.with_noise_precision(noise).with_prior_precision(torch.ones(2, base.dim))
    )


@cuda
def test_a_regressor_learning_its_noise_replays_without_warning():
    """HMCRegressor's default learns the noise precision by a Gibbs block: one recording for
    every transition's conditioned copy, no fallback."""
    from sklearn_bnn import HMCRegressor

    g = torch.Generator().manual_seed(0)
    X = torch.randn(80, 3, generator=g).numpy()
    y = X[:, 0] - X[:, 1] + 0.1 * torch.randn(80, generator=g).numpy()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="CUDA graphs are off")
        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        est = HMCRegressor(hidden_layer_sizes=(8,), n_warmup=30, n_draws=30, device="cuda")
        est.set_params(random_state=0).fit(X, y)
    assert est.score(X, y) > 0.5
