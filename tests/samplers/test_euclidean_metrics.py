"""Euclidean metric objects (DiagonalMetric, DenseMetric) and the shared kick / drift steps."""

from pathlib import Path

import pytest
import torch

from sklearn_bnn.samplers import HMC, NUTS, sample

DATA = Path(__file__).resolve().parents[1] / "data"


def _correlated_5d():
    idx = torch.arange(5, dtype=torch.float64)
    prec = torch.linalg.inv(0.6 ** (idx[:, None] - idx[None]).abs())
    return lambda x: -0.5 * x @ prec @ x


@pytest.mark.parametrize(
    "key, sampler, kwargs",
    [
        ("hmc", HMC(n_leapfrog=8), dict(n_warmup=30, n_samples=30, random_state=0)),
        ("nuts", NUTS(max_tree_depth=5), dict(n_warmup=30, n_samples=30, random_state=0)),
        (
            "hmc_adapt",
            HMC(n_leapfrog=8),
            dict(n_warmup=60, n_samples=20, random_state=1, adapt_mass=True),
        ),
        (
            "nuts_adapt",
            NUTS(max_tree_depth=5),
            dict(n_warmup=60, n_samples=20, random_state=1, adapt_mass=True),
        ),
    ],
)
def test_default_metric_draws_unchanged(key, sampler, kwargs):
    """Without a metric, HMC and NUTS draw bit for bit what they drew before metric objects
    existed (tests/data/default_metric_draws.pt was written by the code of that time)."""
    expected = torch.load(DATA / "default_metric_draws.pt")[key]
    result = sample(
        _correlated_5d(), torch.zeros(5, dtype=torch.float64), sampler, n_chains=2, **kwargs
    )
    assert torch.equal(result.draws, expected)
