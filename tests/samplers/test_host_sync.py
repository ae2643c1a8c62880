"""No host synchronisation inside a transition (issue 31).

On a GPU, reading a tensor's value on the host (``.item()``, ``float(t)``, ``if t.any():``,
``.tolist()``, ``.cpu()``) waits for every queued kernel: one such read per leapfrog step turns
an asynchronous trajectory into L round trips. These tests run on the CPU and count, through a
:class:`torch.overrides.TorchFunctionMode`, every call that would be such a read on a device
(and every tensor built from Python data, a host-to-device copy there), then assert that the
leapfrog steps, the Metropolis test, the jitter draws, the Gibbs blocks and the dual-averaging
update make none, and that the sampling loop makes a small fixed number per transition.
"""

import contextlib

import pytest
import torch
from conftest import correlated_gaussian
from torch.overrides import TorchFunctionMode

from sklearn_bnn import set_config
from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.nets import MLP
from sklearn_bnn.priors import HierarchicalPrior
from sklearn_bnn.samplers import HMC, State, run_chains
from sklearn_bnn.samplers.adaptation.step_size_and_mass import DualAveraging
from sklearn_bnn.samplers.driver._loop import _Record
from sklearn_bnn.samplers.gibbs import with_gibbs_blocks
from sklearn_bnn.samplers.hamiltonian.hmc import metropolis_hastings
from sklearn_bnn.samplers.hamiltonian.integrators import leapfrog
from sklearn_bnn.targets import FunctionalNetwork, Target

F64 = torch.float64


@pytest.fixture(autouse=True)
def _device_paths(monkeypatch):
    """The paths a GPU takes: the CPU's leapfrog reads the host (free there) to stop a
    trajectory whose every chain has diverged; these tests count what a device would see."""
    set_config(host_reads_on_cpu=False)

#: Tensor methods and functions that read a value on the host (a device sync on a GPU).
READS = {
    "item",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__format__",
    "tolist",
    "cpu",
    "numpy",
}
#: Factories that copy Python data into a tensor (a host-to-device copy, synchronous, on a GPU).
COPIES = {"tensor", "as_tensor"}


class SyncCounter(TorchFunctionMode):
    """Counts host reads and host-to-device copies, by name, while active."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS:
            self.calls.append(name)
        elif name in COPIES and args and not isinstance(args[0], torch.Tensor):
            self.calls.append(name)
        return func(*args, **(kwargs or {}))

    @property
    def count(self) -> int:
        return len(self.calls)


@contextlib.contextmanager
def counting():
    with SyncCounter() as counter:
        yield counter


def _gaussian_state(C=3, D=4):
    target = correlated_gaussian(D, seed=1)
    q = torch.randn(C, D, generator=torch.Generator().manual_seed(0), dtype=F64)
    log_prob, grad = target.value_and_grad(q)
    return target, State(q, log_prob, grad)


def test_the_counter_sees_a_read_inside_leapfrog(monkeypatch):
    """The check itself: one ``.item()`` per step inside leapfrog is seen L times."""
    target, state = _gaussian_state()
    original = target.value_and_grad

    def reading(q):
        value, grad = original(q)
        value.sum().item()
        return value, grad

    monkeypatch.setattr(target, "value_and_grad", reading)
    eps = torch.full((3,), 0.1, dtype=F64)
    with counting() as counter:
        leapfrog(target, state, torch.ones_like(state.position), eps, 7, torch.ones(4, dtype=F64))
    assert counter.calls == ["item"] * 7


def test_leapfrog_reads_nothing():
    target, state = _gaussian_state()
    eps = torch.full((3,), 0.1, dtype=F64)
    p = torch.ones_like(state.position)
    with counting() as counter:
        leapfrog(target, state, p, eps, 20, torch.ones(4, dtype=F64))
    assert counter.calls == []


def test_leapfrog_still_stops_where_every_chain_diverged():
    """Without the host check, a trajectory whose every chain has left the finite region
    keeps the state where that happened, as the early stop did."""
    target, state = _gaussian_state()
    eps = torch.full((3,), 1e6, dtype=F64)
    p = torch.ones_like(state.position)
    end, p1, _ = leapfrog(target, state, p, eps, 30, torch.ones(4, dtype=F64))
    assert not torch.isfinite(end.log_prob).any()


def test_metropolis_test_reads_nothing():
    target, state = _gaussian_state()
    proposal = State(state.position + 0.1, state.log_prob - 0.2, state.grad)
    h0 = torch.zeros(3, dtype=F64)
    h1 = torch.tensor([0.1, float("inf"), 2000.0], dtype=F64)
    g = torch.Generator().manual_seed(0)
    with counting() as counter:
        metropolis_hastings(state, proposal, h0, h1, g, 1000.0)
    assert counter.calls == []


STEP_CASES = {
    "fixed": dict(n_steps=10, step_jitter=0.0),
    "step_jitter": dict(n_steps=10, step_jitter=0.5),
}


@pytest.mark.parametrize("case", sorted(STEP_CASES))
def test_hmc_step_reads_nothing(case):
    target, state = _gaussian_state()
    kernel = HMC(step_size=0.2, **STEP_CASES[case]).build(target)
    g = torch.Generator().manual_seed(0)
    eps = torch.full((3,), 0.2, dtype=F64)
    inv_mass = torch.ones(4, dtype=F64)
    with counting() as counter:
        for _ in range(3):
            state, _ = kernel.step(state, g, step_size=eps, inv_mass=inv_mass)
    assert counter.calls == []


#: The step count is a Python int: the uniform that jitters it is read once per transition.
COUNTED_CASES = {
    "n_steps_jitter": dict(n_steps=10, n_steps_jitter=0.5, step_jitter=0.0),
    "trajectory_length": dict(trajectory_length=1.5, step_jitter=0.0),
}


@pytest.mark.parametrize("case", sorted(COUNTED_CASES))
def test_a_jittered_step_count_is_one_read_per_transition(case):
    """The uniform (and, for a trajectory length, the mean step size) reach the host in one
    read, before the trajectory; the steps and the Metropolis test read nothing."""
    target, state = _gaussian_state()
    kernel = HMC(step_size=0.2, **COUNTED_CASES[case]).build(target)
    g = torch.Generator().manual_seed(0)
    inv_mass = torch.ones(4, dtype=F64)
    with counting() as counter:
        for k in range(4):
            eps = torch.full((3,), 0.2 + 0.01 * k, dtype=F64)
            state, _ = kernel.step(state, g, step_size=eps, inv_mass=inv_mass)
    assert counter.count == 4, counter.calls


def test_chees_reads_once_per_transition():
    """ChEES: the uniform, the mean step size and the adapted time in one read; its Adam
    step, taken by the warmup from the trajectory's ends, on the device (the schedule's start
    reads the first step size once, before the first transition)."""
    target, _ = _gaussian_state(C=4)
    sampler = HMC(step_size=0.2, n_steps=5, trajectory_length="auto", step_jitter=0.0)
    kernel = sampler.build(target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(4, 4, dtype=F64), g, n_warmup=10)
    eps = torch.full((4,), 0.2, dtype=F64)
    inv_mass = torch.ones(4, dtype=F64)
    schedule = kernel.trajectory_schedule(10, eps)
    with counting() as counter:
        for _ in range(4):
            state, info = kernel.step(state, g, step_size=eps, inv_mass=inv_mass,
                                      trajectory=schedule)  # fmt: skip
            schedule.update(*info.trajectory, info.accept_prob, info.divergent)
    assert counter.calls == ["tolist"] * 4


def test_dual_averaging_update_reads_nothing():
    averager = DualAveraging(torch.full((3,), 0.1, dtype=F64))
    accept = torch.tensor([0.9, 0.5, float("nan")], dtype=F64)
    with counting() as counter:
        for _ in range(5):
            averager.update(accept)
            eps = averager.step_size
    assert eps.shape == (3,)
    assert counter.calls == []


def _network_target(prior):
    torch.manual_seed(0)
    X = torch.linspace(-2, 2, 12, dtype=F64)[:, None]
    y = torch.sin(X)
    net = FunctionalNetwork(MLP(1, (5,), 1), dtype=F64)
    target = Target(net, X, y, Gaussian(1.0, prior=(2.0, 1.0)), prior)
    target.rescale_moves = True
    return net, target


@pytest.mark.parametrize("interweave", [0, 1])
def test_a_transition_with_gibbs_blocks_reads_nothing(interweave):
    """The rescaling moves (unit and layer), the precisions' and the noise's Gibbs draws."""
    prior = HierarchicalPrior(scheme="gibbs", learn_noise=True, interweave=interweave)
    net, target = _network_target(prior)
    kernel = with_gibbs_blocks(HMC(n_steps=5, step_jitter=0.5).build(target), target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(net.initial_position().expand(3, -1).clone(), g, n_warmup=5)
    eps = torch.full((3,), 0.01, dtype=F64)
    inv_mass = torch.ones(net.dim, dtype=F64)
    with counting() as counter:
        for _ in range(3):
            state, _ = kernel.step(state, g, step_size=eps, inv_mass=inv_mass)
    assert counter.calls == []


def test_a_per_output_gaussian_reads_nothing_after_its_first_call():
    """A vector precision and a per-output Gamma rate (a multi-output regressor's): no read
    (the log-likelihood summed its log-precisions with ``.item()`` at every gradient). Their
    copy to the device, once, is not something a CPU run can see."""
    likelihood = Gaussian(torch.tensor([4.0, 9.0]), prior=(2.0, torch.tensor([1.0, 0.5])))
    output = torch.randn(6, 2, dtype=F64)
    y = torch.zeros(6, 2, dtype=F64)
    sum_sq = torch.rand(3, 2, dtype=F64)
    g = torch.Generator().manual_seed(0)
    likelihood.log_prob(output, y)
    likelihood.sample_precision(sum_sq, 6, g)
    with counting() as counter:
        for _ in range(3):
            likelihood.log_prob(output, y)
            likelihood.sample_precision(sum_sq, 6, g)
    assert counter.calls == []


#: Host reads of one warmup transition: whether a chain's step size collapsed (once the chains
#: have had the updates that check needs). The divergences are counted on the device.
LOOP_READS_PER_WARMUP = 1
#: Host reads of one transfer of the staged sampling transitions (on an accelerator, every
#: ``_Record.chunk`` transitions): the five per-transition statistics, the draws and their
#: log densities.
LOOP_READS_PER_FLUSH = 7


def _loop_reads(n_warmup, n_draws, monkeypatch):
    set_config(stage_draws_on_cpu=True)  # as on an accelerator
    target, _ = _gaussian_state()
    kernel = HMC(n_steps=5, step_jitter=0.5).build(target)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.zeros(3, 4, dtype=F64))
    with counting() as counter:
        run_chains(kernel, state, g, n_warmup=n_warmup, n_draws=n_draws, step_size="auto")
    return counter.count


def test_the_loop_reads_a_fixed_count_per_transition(monkeypatch):
    """Marginal counts from two run lengths, so the run's fixed reads cancel (the step-size
    search at the start, the warnings' checks at the end of warmup, the result). Sampling
    transitions read nothing: 100 more transitions are two more transfers of 50."""
    assert _Record.MAX_CHUNK == 50
    per_warmup = (_loop_reads(80, 5, monkeypatch) - _loop_reads(40, 5, monkeypatch)) / 40
    per_100_draws = _loop_reads(40, 110, monkeypatch) - _loop_reads(40, 10, monkeypatch)
    assert per_warmup == LOOP_READS_PER_WARMUP
    assert per_100_draws == 2 * LOOP_READS_PER_FLUSH


def test_staged_draws_equal_direct_ones(monkeypatch):
    """The staged record (an accelerator's) keeps the same draws and statistics as the
    direct one, thinned, with a chunk that does not divide the run."""
    target, _ = _gaussian_state()
    runs = []
    for staged in (False, True):
        set_config(stage_draws_on_cpu=staged)
        monkeypatch.setattr(_Record, "MAX_CHUNK", 7)
        kernel = HMC(n_steps=5, trajectory_length=0.5).build(target)
        g = torch.Generator().manual_seed(0)
        state = kernel.init(torch.zeros(3, 4, dtype=F64))
        runs.append(run_chains(kernel, state, g, n_warmup=20, n_draws=45, thin=2))
    direct, staged = runs
    assert staged.draws.shape == direct.draws.shape == (3, 22, 4)
    torch.testing.assert_close(staged.draws, direct.draws, rtol=0, atol=0)
    torch.testing.assert_close(staged.log_prob, direct.log_prob, rtol=0, atol=0)
    for name in ("accept_prob", "accepted", "acceptance", "divergent", "energy_error"):
        torch.testing.assert_close(getattr(staged, name), getattr(direct, name), rtol=0, atol=0)
    assert staged.draw_stats.keys() == direct.draw_stats.keys()
    for name, values in direct.draw_stats.items():
        torch.testing.assert_close(staged.draw_stats[name], values, rtol=0, atol=0)
