"""Regressors predict chunk by chunk of rows (bounded memory; issue 19 measured +1 GB for a
2 MB answer before): the numbers of all draws at once, to float32 round-off (the network sees
other blocks of rows)."""

import numpy as np
import pytest

import sklearn_bnn.estimators._dropout_masks as masks_module
import sklearn_bnn.estimators._tasks as tasks_module
from sklearn_bnn import HMCRegressor, MCDropoutRegressor, SplitHMCRegressor


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


@pytest.mark.parametrize("n_out", [1, 2])
def test_dropout_regressor_chunked_predict_equals_the_draws(monkeypatch, n_out):
    X, y = _data(n_out)
    reg = MCDropoutRegressor(
        hidden_layer_sizes=(8,), max_iter=3, n_predict_draws=12, random_state=0
    ).fit(X, y)
    draws = reg.predict_samples(X)
    monkeypatch.setattr(masks_module, "_PREDICT_CHUNK_ELEMENTS", 12 * 8 * 4)  # 4 rows a chunk
    mean, std = reg.predict(X, return_std=True)
    noise_var = 1.0 / np.asarray(reg.noise_precision_, dtype=np.float64)
    want_std = np.sqrt(draws.var(axis=0) + (noise_var if n_out > 1 else noise_var[0]))
    np.testing.assert_allclose(mean, draws.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(std, want_std, rtol=1e-5)
