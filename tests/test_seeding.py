"""The one seeding scheme (``sklearn_bnn/_seeding.py``): a SeedSequence per fit, children by
purpose and index; the same random_state gives the same draws on every MCMC family."""

import numpy as np
import pytest
import torch

from sklearn_bnn import HMCRegressor, SGMCMCClassifier, SplitHMCClassifier
from sklearn_bnn._seeding import child, numpy_rng, root_seed, torch_seed
from sklearn_bnn.samplers import HMC, chain_seeds
from sklearn_bnn.samplers.starts import MAPStart


def test_children_depend_on_their_path_only():
    root = root_seed(3)
    late = child(root, "network")
    assert child(root_seed(3), "sampling").spawn_key != late.spawn_key
    # asking for other children first changes nothing (spawn() would)
    child(root, "sampling"), child(root, 0)
    assert torch_seed(child(root, "network")) == torch_seed(late)
    assert child(root, 2).spawn_key == np.random.SeedSequence(3).spawn(3)[2].spawn_key
    seeds = {torch_seed(child(root, k)) for k in ("network", "sampling", "data", 0, 1)}
    assert len(seeds) == 5


def test_root_seed_inputs():
    assert root_seed(5).entropy == 5
    seq = np.random.SeedSequence(1)
    assert root_seed(seq) is seq
    assert root_seed(None).entropy != root_seed(None).entropy
    rs = np.random.RandomState(0)
    assert root_seed(rs).entropy != root_seed(rs).entropy  # one draw per fit
    assert root_seed(np.random.RandomState(0)).entropy == root_seed(
        np.random.RandomState(0)
    ).entropy
    with pytest.raises(ValueError, match="random_state"):
        root_seed(-1)
    with pytest.raises(ValueError, match="key"):
        child(seq, -1)
    assert numpy_rng(child(seq, "data")).integers(1 << 30) == numpy_rng(
        child(seq, "data")
    ).integers(1 << 30)


def test_chain_seeds_are_the_sequence_children():
    seq = root_seed(7)
    assert chain_seeds(7, 3) == [torch_seed(child(seq, c)) for c in range(3)]
    assert chain_seeds(seq, 3) == chain_seeds(7, 3)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(48, 3))
    return X, (X[:, 0] - X[:, 1] > 0).astype(int), X @ np.array([1.0, -0.5, 0.2])


SMALL = dict(hidden_layer_sizes=(4,), n_draws=6, n_warmup=6, init=MAPStart(n_steps=5), n_chains=2)


@pytest.mark.parametrize(
    "make, task",
    [
        (
            lambda s: HMCRegressor(
                **SMALL, sampler=HMC(n_steps=3), noise_precision=10.0, random_state=s
            ),
            "r",
        ),
        (
            lambda s: SplitHMCClassifier(
                **SMALL, sampler=HMC(n_steps=3), n_splits=3, random_state=s
            ),
            "c",
        ),
        (lambda s: SGMCMCClassifier(**SMALL, batch_size=16, random_state=s), "c"),
    ],
)
def test_same_random_state_same_draws(data, make, task):
    X, y_class, y_reg = data
    y = y_class if task == "c" else y_reg
    first, second = make(4).fit(X, y), make(4).fit(X, y)
    assert torch.equal(first.samples_.draws, second.samples_.draws)
    other = make(5).fit(X, y)
    assert not torch.equal(first.samples_.draws, other.samples_.draws)
    # the chains start from different networks: one "network" child per chain
    assert not torch.equal(first.samples_.draws[0, 0], first.samples_.draws[1, 0])
