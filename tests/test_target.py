"""The functional network's batched evaluation over posterior draws."""

import pytest
import torch
from torch import nn

from sklearn_bnn.targets import FunctionalNetwork


@pytest.fixture(scope="module")
def network_and_draws():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    network = FunctionalNetwork(module, dtype=torch.float64)
    draws = torch.randn(40, network.dim, dtype=torch.float64)
    X = torch.randn(13, 5, dtype=torch.float64)
    return network, draws, X


# One draw at a time (and below 16 on a CPU, which falls back to it), vmap chunks of 16 that
# leave a remainder of 8, one chunk of all 40, and the size heuristic.
@pytest.mark.parametrize("chunk_size", [1, 4, 16, 40, None])
def test_batched_outputs_equal_one_draw_at_a_time(network_and_draws, chunk_size):
    network, draws, X = network_and_draws
    expected = torch.stack([network.forward(theta, X) for theta in draws])
    batched = network.forward_batched(draws, X, chunk_size=chunk_size)
    torch.testing.assert_close(batched, expected, rtol=1e-12, atol=1e-12)
    mean = network.forward_batched(draws, X, transform=torch.tanh, mean=True, chunk_size=chunk_size)
    torch.testing.assert_close(mean, torch.tanh(expected).mean(0), rtol=1e-12, atol=1e-12)
    # written into a preallocated result (here a strided view, as a chunk of rows is)
    block = torch.full((40, 20, 3), float("nan"), dtype=torch.float64)
    out = network.forward_batched(
        draws, X, transform=torch.tanh, chunk_size=chunk_size, out=block[:, 2:15]
    )
    torch.testing.assert_close(out, torch.tanh(expected), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(block[:, 2:15], torch.tanh(expected), rtol=1e-12, atol=1e-12)
    assert block[:, :2].isnan().all() and block[:, 15:].isnan().all()


def test_inputs_are_laid_out_in_c_order_whatever_the_callers_layout():
    import numpy as np

    net = FunctionalNetwork(torch.nn.Linear(3, 2))
    X = np.asfortranarray(np.arange(12.0).reshape(4, 3))
    tensor = net.as_tensor(X)
    assert tensor.is_contiguous()
    assert torch.equal(tensor, net.as_tensor(np.ascontiguousarray(X)))
