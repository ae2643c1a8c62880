"""The MAP search's Adam steps on fixed buffers, replayed from CUDA graphs on a GPU
(samplers/_adam_graphs.py, issue 31).

On the CPU the steps run eagerly on the buffers: the search must stay a search (the loss falls,
stopped chains keep their weights) and make no host read inside an epoch. Where CUDA is present
the recorded steps, one graph per batch size, must equal the eager ones to float tolerance.
"""

import numpy as np
import pytest
import torch
from test_host_sync import counting
from test_sg_graphs import minibatch_target

from sklearn_bnn import set_config
from sklearn_bnn.samplers._adam_graphs import AdamSteps
from sklearn_bnn.samplers.starts import find_mode_minibatch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def starts(target, n_chains=3, seed=0):
    theta = target.network.initial_position()[None].repeat(n_chains, 1)
    g = torch.Generator().manual_seed(seed)
    noise = 0.1 * torch.randn(theta.shape, generator=g, dtype=theta.dtype)
    return theta + noise.to(theta.device)


def test_the_search_lowers_the_loss_and_counts_its_steps():
    target = minibatch_target()
    theta, search = find_mode_minibatch(target, starts(target), 600, seed=0)
    curve = search.loss_curve
    assert curve.shape == (search.n_epochs, 3) and np.all(curve[-1] < curve[0] - 0.2)
    assert np.array_equal(search.steps_per_chain, [600, 600, 600])
    assert torch.isfinite(theta).all()


def test_a_stopped_chain_keeps_its_weights():
    target = minibatch_target()
    adam = AdamSteps(target, starts(target), record=False)
    adam.active[1] = False
    before = adam.theta[1].clone()
    rows = torch.arange(32)
    for _ in range(3):
        adam.step(rows, 1e-3)
    assert torch.equal(adam.theta[1], before)
    assert adam.steps.tolist() == [3, 0, 3]
    assert not torch.equal(adam.theta[0], starts(target)[0])


def test_an_epoch_reads_the_host_once():
    """The steps read nothing on the host: an epoch of 13 batches costs as many host reads as
    one of 4 (the epoch's loss and stopping rule, read once)."""
    counts = []
    for batch_size, n_batches in ((100, 4), (32, 13)):  # one whole epoch of the 400 rows
        target = minibatch_target()
        target.batch_size = batch_size
        with counting() as reads:
            find_mode_minibatch(target, starts(target), n_batches, seed=0)
        counts.append(reads.count)
    assert counts[0] == counts[1] <= 12


@cuda
def test_the_replayed_steps_are_the_eager_steps():
    target = minibatch_target("cuda")
    theta0 = starts(target)
    replayed = AdamSteps(target, theta0)
    eager = AdamSteps(target, theta0, record=False)
    assert replayed.record
    rng = np.random.default_rng(0)
    for t in range(1, 30):
        size = 32 if t % 3 else 31  # two batch sizes, two recordings
        rows = torch.from_numpy(np.sort(rng.choice(400, size, replace=False))).cuda()
        lr = 1e-2 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        replayed.step(rows, lr)
        eager.step(rows, lr)
    assert sorted(replayed.graphs) == [31, 32] and replayed.off_reason is None
    for name in ("theta", "m", "v", "total"):
        torch.testing.assert_close(
            getattr(replayed, name), getattr(eager, name), rtol=1e-9, atol=1e-12
        )
    assert torch.equal(replayed.steps, eager.steps)


@cuda
def test_the_search_on_a_gpu_equals_the_eager_search(monkeypatch):
    target = minibatch_target("cuda")
    theta_r, search_r = find_mode_minibatch(target, starts(target), 300, seed=1)
    set_config(map_cuda_graphs=False)
    theta_e, search_e = find_mode_minibatch(target, starts(target), 300, seed=1)
    torch.testing.assert_close(theta_r, theta_e, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(search_r.loss_curve, search_e.loss_curve, rtol=1e-9)
