"""PosteriorSamples: layout of the flat vector, pooling, continuation and its stored form."""

import numpy as np
import pytest
import torch

from sklearn_bnn.samples import PosteriorSamples

NAMES, SHAPES = ["w", "b"], [(2, 3), (3,)]


def _samples(chains=2, draws=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(chains, draws, 9, generator=g, dtype=torch.float64)
    lp = torch.randn(chains, draws, generator=g, dtype=torch.float64)
    stats = {"accept_prob": torch.rand(chains, draws, generator=g, dtype=torch.float64)}
    return PosteriorSamples(x, lp, NAMES, SHAPES, stats)


def test_sizes_and_pooling():
    s = _samples()
    assert (s.n_chains, s.n_draws, s.dim, len(s)) == (2, 5, 9, 10)
    assert repr(s) == "PosteriorSamples(n_chains=2, n_draws=5, dim=9)"
    flat = s.flat()
    assert flat.shape == (10, 9)
    torch.testing.assert_close(flat[5:], s.draws[1])  # chain after chain


def test_as_dict_unflattens_in_the_layout_order():
    s = _samples()
    named = s.as_dict()
    assert list(named) == NAMES
    assert named["w"].shape == (2, 5, 2, 3) and named["b"].shape == (2, 5, 3)
    rebuilt = torch.cat([named["w"].reshape(2, 5, -1), named["b"]], -1)
    torch.testing.assert_close(rebuilt, s.draws, rtol=0, atol=0)


def test_draws_are_detached_and_on_the_cpu():
    x = torch.zeros(1, 2, 9, requires_grad=True)
    s = PosteriorSamples(x, torch.zeros(1, 2), NAMES, SHAPES)
    assert not s.draws.requires_grad and s.draws.device.type == "cpu" and s.stats == {}


def test_concatenate_continues_the_chains_and_keeps_shared_statistics():
    a, b = _samples(seed=0), _samples(draws=3, seed=1)
    b.stats["tree_depth"] = torch.ones(2, 3)
    c = a.concatenate(b)
    assert c.n_draws == 8
    torch.testing.assert_close(c.draws[:, 5:], b.draws)
    torch.testing.assert_close(c.log_prob[:, :5], a.log_prob)
    assert set(c.stats) == {"accept_prob"} and c.stats["accept_prob"].shape == (2, 8)


def test_summary_has_one_column_per_coordinate_and_the_log_density():
    s = _samples(draws=50)
    out = s.summary()
    assert set(out) == {"mean", "sd", "ess_bulk", "ess_tail", "rhat"}
    for values in out.values():
        assert values.shape == (10,)
    np.testing.assert_allclose(out["mean"][:9], s.draws.mean((0, 1)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(out["mean"][9], s.log_prob.mean().item(), rtol=1e-12)


def test_state_round_trip_and_checks():
    s = _samples()
    state = s.to_state()
    PosteriorSamples._check_state(state)
    back = PosteriorSamples.from_state(state)
    assert torch.equal(back.draws, s.draws) and back.shapes == s.shapes
    assert torch.equal(back.stats["accept_prob"], s.stats["accept_prob"])
    bad_lp = {**state, "log_prob": torch.zeros(2, 4, dtype=torch.float64)}
    with pytest.raises(ValueError, match="log_prob has shape"):
        PosteriorSamples._check_state(bad_lp)
    with pytest.raises(ValueError, match="weights, but each draw has 9"):
        PosteriorSamples._check_state({**state, "shapes": [[2, 3], [4]]})
    with pytest.raises(ValueError, match="names and shapes"):
        PosteriorSamples._check_state({**state, "names": ["w"]})


def test_to_inference_data_names_every_parameter():
    pytest.importorskip("arviz")
    s = _samples()
    s.info["step_size"] = [0.1, 0.2]
    idata = s.to_inference_data()
    assert idata.posterior["w"].shape == (2, 5, 2, 3)
    np.testing.assert_allclose(idata.sample_stats["step_size"].values[1], 0.2)
    assert "w" not in s.to_inference_data(include_draws=False).posterior
