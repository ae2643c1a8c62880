"""The torch thread count of a fit: chosen for the model's size, restored afterwards."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skorch.callbacks import Callback

import sklearn_bnn.estimators._base as base
import sklearn_bnn.estimators._dropout_base as dropout_base
from sklearn_bnn import (
    HMCRegressor,
    LossCalibratedBNN,
    MCDropoutClassifier,
    PlanNetRegressor,
    fit_threads,
)
from sklearn_bnn._threads import WORK_PER_THREAD, sampling_threads, threads_for
from sklearn_bnn.samplers import HMC
from sklearn_bnn.samplers.starts import MAPStart


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
        init=MAPStart(n_steps=5),
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


# -- the trained family: MC dropout, LossCalibratedBNN, PlanNetRegressor ----------------------
class ThreadsSeen(Callback):
    """A skorch callback that records torch's thread count at the end of every training epoch
    (in a class attribute: the estimators deep-copy their callbacks)."""

    seen: list = []

    def on_epoch_end(self, net, **kwargs):
        ThreadsSeen.seen.append(torch.get_num_threads())


@pytest.fixture
def seen():
    ThreadsSeen.seen = []
    return ThreadsSeen.seen


def _classification(n=60):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 4))
    return X, (X[:, 0] > 0).astype(int)


def _rule(module, rows):
    """What the rule of _threads.py decides for one forward pass of ``rows`` rows."""
    return threads_for(rows * sum(p.numel() for p in module.parameters()))


@pytest.mark.parametrize(("hidden", "threads"), [((8,), 1), ((2000, 2000), 3)])
def test_dropout_training_runs_in_the_threads_the_rule_gives(three_threads, seen, hidden, threads):
    """Inside the training (seen by a callback at every epoch) the thread count is the one the
    rule gives a minibatch's forward pass: 1 for a small network, 3 (torch's setting) for 4M
    parameters x 200 rows; torch's setting is back afterwards."""
    X, y = _classification(200)
    clf = MCDropoutClassifier(
        hidden_layer_sizes=hidden,
        max_iter=2,
        batch_size=200,
        callbacks=[ThreadsSeen()],
        calibration=None,  # one training run (the held-out temperature's is on 160 rows)
        random_state=0,
    ).fit(X, y)
    assert seen == [threads, threads] and threads == _rule(clf.module_, 200)
    assert torch.get_num_threads() == 3


def test_fit_threads_reaches_the_dropout_training(three_threads, seen):
    X, y = _classification()
    with fit_threads(2):
        MCDropoutClassifier(
            hidden_layer_sizes=(8,), max_iter=1, callbacks=[ThreadsSeen()], random_state=0
        ).fit(X, y)
    assert seen == [2] and torch.get_num_threads() == 3


def test_dropout_prediction_runs_in_the_threads_the_rule_gives(three_threads, monkeypatch):
    X, y = _classification()
    clf = MCDropoutClassifier(hidden_layer_sizes=(8,), max_iter=1, random_state=0).fit(X, y)
    seen, real = [], dropout_base.masked_output_samples

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(dropout_base, "masked_output_samples", spy)
    clf.predict_proba(X)
    assert seen == [_rule(clf.module_, clf.n_predict_draws * len(X))] == [1]
    assert torch.get_num_threads() == 3


def test_loss_calibrated_and_plannet_training_run_in_the_rules_threads(three_threads, seen):
    X, y = _classification()
    LossCalibratedBNN(
        hidden_layer_sizes=(8,), max_iter=2, callbacks=[ThreadsSeen()], random_state=0
    ).fit(X, y)
    assert seen == [1, 1]
    seen.clear()
    Y = np.c_[X[:, 0], X[:, 1] - X[:, 2]]
    PlanNetRegressor(
        hidden_layer_sizes=(8,),
        max_iter=2,
        n_estimators=1,
        early_stopping=False,
        callbacks=[ThreadsSeen()],
        random_state=0,
    ).fit(X, Y)
    assert seen == [1, 1] and torch.get_num_threads() == 3
