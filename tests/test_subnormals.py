"""Sampling runs with float subnormals flushed to zero, and leaves the caller's setting alone."""

import torch

from sklearn_bnn._utils import _flushing_subnormals, flush_subnormals
from sklearn_bnn.samplers import HMC, sample


def test_flushed_inside_and_restored_after():
    seen = []

    @flush_subnormals
    def probe():
        seen.append(_flushing_subnormals())
        return torch.full((1,), 1e-39, dtype=torch.float32) * 2.0

    assert not _flushing_subnormals()
    out = probe()
    if torch.set_flush_denormal(False):  # supported here: it was on inside, off again now
        assert seen == [True] and out.item() == 0.0
    assert not _flushing_subnormals()


def test_a_caller_that_flushes_keeps_flushing():
    if not torch.set_flush_denormal(True):
        return  # a CPU without the flag: nothing to keep
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
