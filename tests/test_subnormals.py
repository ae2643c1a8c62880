"""Sampling runs with float subnormals flushed to zero, and leaves the caller's setting alone."""

import pytest
import torch

from sklearn_bnn._utils import _flushing_subnormals, flush_subnormals
from sklearn_bnn.samplers import HMC, sample


def _require_flush_flag():
    """Skip the calling test on a CPU without the flush-denormal flag (no SSE3 on x86)."""
    supported = torch.set_flush_denormal(True)
    torch.set_flush_denormal(False)
    if not supported:
        pytest.skip("this CPU has no flush-denormal flag: torch.set_flush_denormal returns False")


def _probe(seen):
    @flush_subnormals
    def probe():
        seen.append(_flushing_subnormals())
        return torch.full((1,), 1e-39, dtype=torch.float32) * 2.0

    return probe


def test_flushed_inside_and_restored_after():
    _require_flush_flag()
    seen = []
    assert not _flushing_subnormals()
    out = _probe(seen)()
    assert seen == [True] and out.item() == 0.0
    assert not _flushing_subnormals()


def test_without_the_flag_the_function_runs_unchanged(monkeypatch):
    """A CPU without the flag (emulated): the wrapped function runs, on subnormals as they are."""
    monkeypatch.setattr(torch, "set_flush_denormal", lambda mode: False)
    seen = []
    out = _probe(seen)()
    assert seen == [False] and out.item() == pytest.approx(2e-39, rel=1e-6)


def test_a_caller_that_flushes_keeps_flushing():
    _require_flush_flag()
    torch.set_flush_denormal(True)
    try:
        sample(
            lambda x: -0.5 * (x**2).sum(), torch.zeros(2), HMC(n_steps=2), n_warmup=2,
            n_draws=2, random_state=0,
        )  # fmt: skip
        assert _flushing_subnormals()
    finally:
        torch.set_flush_denormal(False)


def test_sampling_leaves_the_setting_off():
    sample(lambda x: -0.5 * (x**2).sum(), torch.zeros(2), HMC(n_steps=2), n_warmup=2,
           n_draws=2, random_state=0)  # fmt: skip
    assert not _flushing_subnormals()
