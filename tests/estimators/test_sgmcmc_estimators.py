"""SGMCMCClassifier / SGMCMCRegressor: persistence, memory bounded by a batch, samplers by object,
warm starts, learning something."""

import warnings

import joblib
import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

import sklearn_bnn
from sklearn_bnn import SGMCMCClassifier, SGMCMCRegressor
from sklearn_bnn.samplers import GSGHMC, SAMPLERS, SGHMC
from sklearn_bnn.samplers.starts import MAPStart
from sklearn_bnn.targets import MinibatchTarget


def _sg(name, step_size):
    """The sampler ``name`` at its defaults with a fixed ``step_size``."""
    return SAMPLERS[name](step_size=step_size)


SMALL = dict(
    hidden_layer_sizes=(16,),
    batch_size=32,
    sampler=SGHMC(step_size=0.02),
    n_warmup=15,
    n_draws=15,
    init="random",  # the settings of docs/sgmcmc.md's iris table (random start)
    random_state=0,
)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X).astype(np.float32), y


@pytest.mark.parametrize("sampler", ["sghmc", "sgld", "hte"])
def test_samplers_learn_iris(iris, sampler):
    X, y = iris
    step = {"sgld": 0.005, "amagold": 0.005}.get(sampler, 0.02)
    clf = SGMCMCClassifier(**{**SMALL, "sampler": _sg(sampler, step)}).fit(X, y)
    assert clf.score(X, y) > 0.8
    assert clf.predict_samples(X[:5]).shape == (15, 5, 3)
    assert 0 < clf.acceptance_rate_ <= 1


@pytest.mark.parametrize("sampler, step", [("gsghmc", 0.05), ("amagold", 0.02)])
def test_adjusted_samplers_learn_iris(iris, sampler, step):
    """The documented settings (docs/sgmcmc.md): from a random start, 15 + 15 epochs of
    32-row batches, GSGHMC at eps = 0.05 (acceptance ~0.6 per step) and AMAGOLD at eps = 0.02
    (~0.6 per trajectory). Smaller steps are accepted more often but do not leave the random
    initialisation in 15 epochs (eps = 0.005: ~35-45 % accuracy, as for plain SGHMC)."""
    X, y = iris
    clf = SGMCMCClassifier(**{**SMALL, "sampler": _sg(sampler, step)}).fit(X, y)
    assert clf.score(X, y) > 0.85
    assert 0.3 < clf.acceptance_rate_ < 0.95


def test_gsghmc_augmented_energy_sticks_on_a_lucky_batch(iris):
    """The literal eq. 9 test with N/|B|-scaled energies: the batch spread (~4 nats here)
    exceeds the change a step makes, so almost nothing is accepted and what is accepted moves
    the chain onto a more favourable batch (the reason the default is the paired energy, which
    accepts most steps: 0.75-0.81 at these settings, measured below; 0.3-0.95 is asserted at
    eps = 0.05 by test_adjusted_samplers_learn_iris).

    The collapse takes time: the acceptances come early in sampling, before the chain has
    reached its lucky batch, so over SMALL's 15 epochs (60 steps) the rate depended on when it
    collapsed: 0.0-0.183 over random_state 0-9 (mean 0.058; 2 seeds at or over 0.1). Measured
    over 60 epochs (240 steps) the early acceptances weigh less: 0.0-0.046 over random_state
    0-9 (mean 0.020), while energy="paired" at these settings accepts 0.75-0.81, so the bound
    separates the two by more than 2x on either side."""
    X, y = iris
    sampler = GSGHMC(step_size=0.02, energy="augmented")
    clf = SGMCMCClassifier(**{**SMALL, "sampler": sampler, "n_draws": 60}).fit(X, y)
    assert clf.acceptance_rate_ < 0.1


def test_sampler_object_and_thinning(iris):
    X, y = iris
    clf = SGMCMCClassifier(**{**SMALL, "sampler": GSGHMC(step_size=0.02), "thin": 5}).fit(X, y)
    assert len(clf.samples_) == 3
    assert "step_accept_rate" in clf.samples_.stats


def test_warm_start_appends_draws(iris):
    X, y = iris
    clf = SGMCMCClassifier(**{**SMALL, "warm_start": True}).fit(X, y)
    clf.fit(X, y)
    assert len(clf.samples_) == 30


def test_joblib_and_weights_only_round_trips(tmp_path, iris):
    X, y = iris
    clf = SGMCMCClassifier(**SMALL).fit(X, y)
    rng = np.random.default_rng(0)
    Xr = rng.normal(size=(64, 3))
    reg = SGMCMCRegressor(**{**SMALL, "sampler": SGHMC(step_size=0.005)}).fit(Xr, Xr.sum(1))
    for est, X_ in ((clf, X), (reg, Xr)):
        joblib.dump(est, tmp_path / "m.joblib")
        sklearn_bnn.save(est, tmp_path / "m.pt")
        torch.load(tmp_path / "m.pt", weights_only=True)
        for loaded in (joblib.load(tmp_path / "m.joblib"), sklearn_bnn.load(tmp_path / "m.pt")):
            np.testing.assert_array_equal(loaded.predict(X_), est.predict(X_))
            assert type(loaded) is type(est)


class RowRecorder:
    """A read-only stand-in for the data array that records the rows of every request and
    refuses to be converted whole (``np.asarray`` / ``torch.as_tensor`` of all of it)."""

    def __init__(self, array):
        self.array, self.shape, self.dtype, self.ndim = array, array.shape, array.dtype, array.ndim
        self.largest, self.n_requests = 0, 0

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, rows):
        out = self.array[rows]
        self.largest = max(self.largest, out.shape[0])
        self.n_requests += 1
        return out

    def __array__(self, *args, **kwargs):
        raise AssertionError("the whole data array was converted")


@pytest.mark.parametrize("sampler", ["sghmc", "hte"])
def test_memory_bounded_by_a_batch_on_a_memory_map(tmp_path, monkeypatch, sampler):
    """200,000 rows x 50 features in a memory map. By construction of the data path: the
    target's inputs are a recorder around the map, so every tensor made from X comes from one
    indexing request, and no request (minibatch steps, HTE's full-data energy in chunks) asks
    for more than ``batch_size`` rows; the whole array is never converted."""
    n, d, batch = 200_000, 50, 2000
    X = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=np.float32, shape=(n, d))
    rng = np.random.default_rng(0)
    for start in range(0, n, 50_000):
        X[start : start + 50_000] = rng.normal(size=(50_000, d)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    X.flush()
    recorders = []
    make_target = SGMCMCClassifier._make_target

    def recording_target(self, network, X_, targets, seed):
        recorders.append(RowRecorder(X_))
        target = make_target(self, network, recorders[-1], targets, seed)
        assert target.X is recorders[-1]  # the target keeps the array, not a tensor of it
        return target

    monkeypatch.setattr(SGMCMCClassifier, "_make_target", recording_target)
    clf = SGMCMCClassifier(
        hidden_layer_sizes=(8,),
        sampler=_sg(sampler, 1e-3),
        batch_size=batch,
        n_warmup=0,
        n_draws=2,
        init=MAPStart(n_steps=20),  # its batches go through the recorder too
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # two draws: no R-hat
        clf.fit(np.load(tmp_path / "X.npy", mmap_mode="r"), y)
    (rec,) = recorders
    assert rec.largest == batch
    assert rec.n_requests >= 2 * (n // batch)  # two epochs went through the recorder
    assert np.isnan(clf.diagnostics_["rhat_log_prob"])  # too few draws: NaN, not a crash
    assert clf.score(X[:2000], y[:2000]) > 0.5


def test_progress_bar_shows_the_epoch(iris, capsys):
    X, y = iris
    SGMCMCClassifier(**{**SMALL, "n_warmup": 2, "n_draws": 2, "verbose": True}).fit(X, y)
    err = capsys.readouterr().err
    assert "epoch=" in err and "acc=" in err


def test_ensemble_reducer_on_sgmcmc_draws(iris):
    """seeds/004 Fig. 5 on SG-MCMC draws: the reducer fits the estimator, keeps a subset of the
    draws that preserves held-out accuracy, and predicts with it; a frozen fitted estimator
    works as well."""
    from sklearn.frozen import FrozenEstimator

    from sklearn_bnn.ensemble import EnsembleReducer

    X, y = iris
    reducer = EnsembleReducer(SGMCMCClassifier(**SMALL), random_state=0).fit(X, y)
    assert reducer.n_members_full_ == 15
    assert 1 <= reducer.n_members_ <= 15
    assert reducer.score_reduced_ >= reducer.score_full_
    assert reducer.predict_samples(X).shape == (reducer.n_members_, len(X), 3)
    assert reducer.score(X, y) > 0.8
    clf = SGMCMCClassifier(**SMALL).fit(X, y)
    frozen = EnsembleReducer(FrozenEstimator(clf), scoring="ece", random_state=0).fit(X, y)
    assert frozen.n_members_ <= 15 and frozen.predict_proba(X[:3]).shape == (3, 3)


@pytest.mark.slow
def test_temperature_tempers_the_linear_regression_posterior_once():
    """SGLD with the full batch and a small step: weight variances T times the Bayes ones.

    Passing the temperature to both the target and the sampler's noise would give T^2 times
    (0.0625 at T = 0.25), four times too small.
    """
    rng = np.random.default_rng(0)
    n = 60
    X = rng.normal(size=(n, 2))
    y = X @ np.array([1.0, -2.0]) + 0.3 + rng.normal(scale=0.5, size=n)
    alpha, beta = 2.0, 4.0
    X1 = np.hstack([X, np.ones((n, 1))])
    cov_bayes = np.linalg.inv(alpha * np.eye(3) + beta * X1.T @ X1)
    for T in (1.0, 0.25):
        reg = SGMCMCRegressor(
            module=lambda i, o: torch.nn.Linear(i, o),
            prior_precision=alpha,
            noise_precision=beta,
            temperature=T,
            sampler=_sg("sgld", 1e-3 * T).set_params(n_steps=1),  # one step a draw
            batch_size=n,
            n_warmup=300,
            n_draws=3000,
            dtype="float64",
            random_state=0,
        ).fit(X, y)
        draws = reg.samples_.draws.numpy()[0]
        ratio = draws.var(0) / (T * np.diag(cov_bayes))
        # measured 1.07-1.23 (SGLD's step inflates the variance a little); twice-tempered: 0.25
        assert np.all((ratio > 0.7) & (ratio < 1.5)), (T, ratio)


class _LSTMRegressor(torch.nn.Module):
    """A flat row of ``n_in`` features read as (n_in // 2) time steps of 2 features by an
    ``nn.LSTM``, whose fused kernel has no ``torch.func.vmap`` batching rule."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.lstm = torch.nn.LSTM(2, 8, batch_first=True)
        self.head = torch.nn.Linear(8, n_out)

    def forward(self, X):
        out, _ = self.lstm(X.reshape(X.shape[0], -1, 2))
        return self.head(torch.relu(out[:, -1]))


@pytest.mark.parametrize("sampler, n_chains", [("hte", 1), ("sghmc", 2)])
def test_recurrent_module_without_a_batching_rule(sampler, n_chains):
    """An ``nn.LSTM`` module: several chains' gradients (batched over chains by vmap) and the
    prediction over many draws fall back to a loop, with a RuntimeWarning, and give what the
    module gives draw by draw; HTE's full-data energy of one chain runs without vmap."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6)).astype(np.float32)
    y = X[:, ::2].sum(1)
    reg = SGMCMCRegressor(
        module=_LSTMRegressor,
        sampler=_sg(sampler, 0.01),
        batch_size=10,
        n_warmup=2,
        n_draws=10,
        n_chains=n_chains,
        init=MAPStart(n_steps=50),
        random_state=0,
    )
    if n_chains > 1:
        with pytest.warns(RuntimeWarning, match="could not be batched"):
            warnings.simplefilter("ignore", ConvergenceWarning)  # ten draws: R-hat
            reg.fit(X, y)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            reg.fit(X, y)
    draws = reg.predict_samples(X)
    assert draws.shape == (10 * n_chains, 40) and np.isfinite(draws).all()
    net = reg.network_
    expected = torch.stack([net.forward(t, torch.as_tensor(X)) for t in reg.samples_.flat()])
    np.testing.assert_allclose(draws, expected[..., 0].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls", ["HMCRegressor", "SplitHMCRegressor"])
def test_recurrent_module_with_learned_noise(cls):
    """The Gibbs step of the noise precision evaluates the residuals of every chain: with an
    ``nn.LSTM`` module it falls back to a loop too (full-batch and split targets)."""
    from sklearn_bnn import HMCRegressor, SplitHMCRegressor
    from sklearn_bnn.samplers import HMC

    est_cls = {"HMCRegressor": HMCRegressor, "SplitHMCRegressor": SplitHMCRegressor}[cls]
    extra = {"n_splits": 2} if cls == "SplitHMCRegressor" else {}
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 6)).astype(np.float32)
    y = X[:, ::2].sum(1)
    reg = est_cls(
        module=_LSTMRegressor,
        noise_precision=None,
        n_warmup=3,
        n_draws=3,
        sampler=HMC(n_steps=3),
        n_chains=2,
        random_state=0,
        **extra,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(X, y)
    precision = reg.samples_.stats["noise_precision"]
    assert np.isfinite(np.asarray(precision)).all() and np.asarray(precision).shape[:2] == (2, 3)


@pytest.mark.parametrize("sampler", ["sgld", "hte"])
def test_learned_noise_precision_streams_and_starts_from_the_exact_energy(monkeypatch, sampler):
    """``noise_precision=None``: Gibbs steps of the noise precision between epochs, with the
    residuals taken batch by batch (never the whole array) and the state's log density after
    the step equal to the exact full-data one under the new precision (AMAGOLD and HTE test
    against it); the learned noise lands near the truth on a linear model."""
    rng = np.random.default_rng(0)
    n = 4000
    X = rng.normal(size=(n, 3)).astype(np.float32)
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.normal(size=n)
    recorders, checked = [], []
    make_target = SGMCMCRegressor._make_target
    state_after = MinibatchTarget._state_under_new_noise

    def recording_target(self, network, X_, targets, seed):
        recorders.append(RowRecorder(X_))
        return make_target(self, network, recorders[-1], targets, seed)

    def checked_state(target, state, sum_sq, tau):
        # ``target`` is the density given the new precision (the Gibbs block's condition)
        new = state_after(target, state, sum_sq, tau)
        exact = target.log_prob(state.position)
        checked.append(float((new.log_prob - exact).abs().max() / exact.abs().max()))
        return new

    monkeypatch.setattr(SGMCMCRegressor, "_make_target", recording_target)
    monkeypatch.setattr(MinibatchTarget, "_state_under_new_noise", checked_state)
    reg = SGMCMCRegressor(
        module=lambda i, o: torch.nn.Linear(i, o),
        noise_precision=None,
        sampler=_sg(sampler, 1e-5 if sampler == "sgld" else 3e-4),
        batch_size=200,
        n_warmup=20,
        n_draws=40,
        n_chains=2,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg.fit(X, y)
    (rec,) = recorders
    assert rec.largest == 200
    assert len(checked) >= 60 and max(checked) < 1e-5
    if sampler == "sgld":  # measured 0.298
        assert 0.27 < float(reg.noise_std_) < 0.33, reg.noise_std_
    else:  # HTE's test starts from the Gibbs step's energy: a wrong one would reject (measured 1.0)
        assert np.mean(reg.diagnostics_["acceptance_rate"]) > 0.8
    # with a precision per draw the noise part is sqrt(E[1 / tau]) and the parts add up
    parts = reg.predict_variance_parts(X[:20])
    tau = reg.samples_.stats["noise_precision"].double().numpy().ravel()
    np.testing.assert_allclose(parts.noise_std, np.sqrt(np.mean(1.0 / tau)), rtol=1e-6)
    np.testing.assert_allclose(parts.weight_std**2, reg.predict_samples(X[:20]).var(0), rtol=1e-5)
    np.testing.assert_allclose(parts.total_std, reg.predict(X[:20], return_std=True)[1])
