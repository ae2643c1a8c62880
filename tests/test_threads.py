"""The torch thread count of a fit: chosen for the model's size, restored afterwards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sklearn_bnn.estimators._base as base
from sklearn_bnn import HMCRegressor, fit_threads
from sklearn_bnn._threads import WORK_PER_THREAD, sampling_threads, threads_for
from sklearn_bnn.samplers import HMC


@pytest.fixture
def three_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield
    torch.set_num_threads(before)


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    return X, X @ np.array([1.0, -1.0, 0.5])


def _spy(monkeypatch, fail=False):
    """Record the thread count run_sampler sees (and optionally fail there)."""
    seen = []
    real = base.run_sampler

    def run_sampler(*args, **kwargs):
        seen.append(torch.get_num_threads())
        if fail:
            raise RuntimeError("boom")
        return real(*args, **kwargs)

    monkeypatch.setattr(base, "run_sampler", run_sampler)
    return seen


def _model():
    return HMCRegressor(
        hidden_layer_sizes=(5,),
        n_warmup=5,
        sampler=HMC(n_steps=3),
        n_init_steps=5,
        random_state=0,
        n_draws=5,
    )


def test_threads_for_scales_with_the_work_and_is_capped(three_threads):
    assert threads_for(1e6) == 1
    assert threads_for(2 * WORK_PER_THREAD) == 2
    assert threads_for(1e15) == 3


def test_a_small_fit_runs_on_one_thread_and_restores_the_setting(three_threads, monkeypatch):
    seen = _spy(monkeypatch)
    _model().fit(*_data())
    assert seen == [1]
    assert torch.get_num_threads() == 3


def test_the_setting_is_restored_when_the_fit_fails(three_threads, monkeypatch):
    seen = _spy(monkeypatch, fail=True)
    with pytest.raises(RuntimeError, match="boom"):
        _model().fit(*_data())
    assert seen == [1]
    assert torch.get_num_threads() == 3
    with pytest.raises(RuntimeError, match="boom"), sampling_threads(1e15):
        assert torch.get_num_threads() == 3
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 3


def test_fit_threads_overrides_the_choice_inside_its_block(three_threads, monkeypatch):
    seen = _spy(monkeypatch)
    with fit_threads(2):
        _model().fit(*_data())
        with fit_threads(None):
            _model().fit(*_data())
    _model().fit(*_data())
    assert seen == [2, 1, 1]
    assert torch.get_num_threads() == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_fit_threads_validates_its_argument(bad):
    with pytest.raises(ValueError, match="n_threads must be None or an int >= 1"):
        with fit_threads(bad):
            pass
