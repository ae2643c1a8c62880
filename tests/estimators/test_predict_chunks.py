"""Regressors predict chunk by chunk of rows (bounded memory; issue 19 measured +1 GB for a
2 MB answer before): the numbers of all draws at once, to float32 round-off (the network sees
other blocks of rows). ``predict_samples`` fills its result chunk by chunk: beside the result
only a chunk is held."""

import tracemalloc
import warnings

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import sklearn_bnn.estimators._dropout_masks as masks_module
import sklearn_bnn.estimators._tasks as tasks_module
from sklearn_bnn import (
    HMCClassifier,
    HMCRegressor,
    MCDropoutClassifier,
    MCDropoutRegressor,
    SplitHMCRegressor,
)


def _data(n_out):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    y = np.c_[X[:, 0], X[:, 1] * 50.0 + 100.0][:, :n_out]
    return X, (y[:, 0] if n_out == 1 else y)


@pytest.mark.parametrize("n_out", [1, 2])
@pytest.mark.parametrize(
    "make",
    [
        lambda: HMCRegressor(hidden_layer_sizes=(4,), n_draws=15, n_warmup=10, random_state=0),
        lambda: SplitHMCRegressor(
            hidden_layer_sizes=(4,), n_draws=15, n_warmup=10, n_splits=2, random_state=0
        ),
    ],
)
def test_hmc_regressors_chunked_predict_equals_the_draws(monkeypatch, make, n_out):
    X, y = _data(n_out)
    reg = make().set_params(normalize_y=True).fit(X, y)
    draws = reg.predict_samples(X)
    noise_var = np.reshape(reg.noise_std_, -1) ** 2
    want_std = np.sqrt(draws.var(axis=0) + (noise_var if n_out > 1 else noise_var[0]))
    # 8 bytes x 15 draws x n_out outputs per row: a budget of 3 rows' worth
    monkeypatch.setattr(tasks_module, "_PREDICT_CHUNK_BYTES", 3 * 8 * 15 * n_out)
    mean, std = reg.predict(X, return_std=True)
    assert mean.shape == y.shape and std.shape == y.shape
    np.testing.assert_allclose(mean, draws.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(std, want_std, rtol=1e-5)
    # the variance in its two parts: E[1 / tau] (the same for every row) and the draws' spread
    parts = reg.predict_variance_parts(X)
    for field in parts:
        assert field.shape == y.shape
    np.testing.assert_allclose(parts.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(parts.total_std, std, rtol=1e-12)
    np.testing.assert_allclose(parts.total_std**2, parts.noise_std**2 + parts.weight_std**2)
    np.testing.assert_allclose(parts.weight_std**2, draws.var(axis=0), rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(parts.noise_std, np.broadcast_to(reg.noise_std_, y.shape))


@pytest.mark.parametrize("n_out", [1, 2])
def test_dropout_regressor_chunked_predict_equals_the_draws(monkeypatch, n_out):
    X, y = _data(n_out)
    reg = MCDropoutRegressor(
        hidden_layer_sizes=(8,), max_iter=3, n_predict_draws=12, random_state=0
    ).fit(X, y)
    draws = reg.predict_samples(X)
    monkeypatch.setattr(masks_module, "PREDICT_CHUNK_ELEMENTS", 12 * 8 * 4)  # 4 rows a chunk
    mean, std = reg.predict(X, return_std=True)
    noise_var = 1.0 / np.asarray(reg.noise_precision_, dtype=np.float64)
    want_std = np.sqrt(draws.var(axis=0) + (noise_var if n_out > 1 else noise_var[0]))
    np.testing.assert_allclose(mean, draws.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(std, want_std, rtol=1e-5)


class _LargestTensor(TorchDispatchMode):
    """Records the size in bytes of the largest memory any torch operation allocates: the
    storage of an output that is not an input's (views and in-place results are not new)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def _measured(predict_samples, X):
    """``predict_samples(X)``, the largest torch allocation and numpy's peak (tracemalloc), the
    two measured on separate calls (the dispatch mode's own Python objects would count)."""
    with _LargestTensor() as spy:
        result = predict_samples(X)
    tracemalloc.start()
    try:
        predict_samples(X)
        numpy_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, spy.largest, numpy_peak


def _unchunked_hmc(est, X):
    """What predict_samples computed before: every draw of every row in one block."""
    out = est._network_outputs(X)
    if hasattr(est, "classes_"):
        return est._likelihood().predictive(out).double().numpy()
    return out.double().numpy() * np.reshape(est.y_scale_, -1) + np.reshape(est.y_mean_, -1)


def _unchunked_dropout(est, X):
    out = est._net_output_samples(X)
    if hasattr(est, "classes_"):
        return torch.softmax(out, dim=-1).numpy()
    return out.numpy() * est.y_scale_ + est.y_mean_


_N_ROWS = 1000  # per-draw results of 0.2-1.2 MB against chunks of a few kB


@pytest.mark.parametrize("family", ["hmc", "dropout"])
@pytest.mark.parametrize("task", ["classifier", "regressor"])
def test_predict_samples_fills_its_result_chunk_by_chunk(monkeypatch, family, task):
    # A torch intermediate of the result's size (the per-draw outputs joined, then mapped to
    # probabilities, then converted to float64) used to double or triple the memory of
    # predict_samples; now the result is the only large block: every torch tensor made is at
    # most a chunk, and numpy allocates the result and little else.
    rng = np.random.default_rng(1)
    X_fit = rng.normal(size=(40, 3))
    y_fit = np.digitize(X_fit[:, 0], [-0.5, 0.5]) if task == "classifier" else X_fit[:, :2]
    if family == "hmc":  # 4 chains of 12 draws
        est = (HMCClassifier if task == "classifier" else HMCRegressor)(
            hidden_layer_sizes=(4,), n_draws=12, n_warmup=10, random_state=0
        )
    else:
        est = (MCDropoutClassifier if task == "classifier" else MCDropoutRegressor)(
            hidden_layer_sizes=(4,), max_iter=3, n_predict_draws=48, random_state=0
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 12 draws a chain do not converge
        est.fit(X_fit, y_fit)
    X = rng.normal(size=(_N_ROWS, 3))
    expected = (_unchunked_hmc if family == "hmc" else _unchunked_dropout)(est, X)
    n_draws = expected.shape[0]  # the HMC estimators pool their chains' draws
    n_columns = 3 if task == "classifier" else 2
    rows = 50  # per chunk, forced small
    if family == "hmc":
        monkeypatch.setattr(tasks_module, "_PREDICT_CHUNK_BYTES", 8 * n_draws * n_columns * rows)
    else:
        monkeypatch.setattr(masks_module, "PREDICT_CHUNK_ELEMENTS", n_draws * 4 * rows)
    result, largest, numpy_peak = _measured(est.predict_samples, X)
    assert result.shape == (n_draws, _N_ROWS, n_columns) and result.dtype == np.float64
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-7)
    # a chunk's float64 outputs or float32 activations (4 hidden units), or X itself
    bound = max(8 * n_draws * rows * max(n_columns, 4), X.nbytes)
    assert largest <= bound < result.nbytes / 5, (largest, bound, result.nbytes)
    # the result, copies of X and numpy's fixed-size ufunc buffers: no second block
    assert numpy_peak <= result.nbytes + 2 * X.nbytes + 2**18, (numpy_peak, result.nbytes)
