"""device="auto": the CPU without CUDA; with CUDA, the GPU only past the work crossover.

No GPU is needed: the resolution is tested with ``torch.cuda.is_available`` patched, and the
estimators are fitted on the CPU, which is what "auto" picks here.
"""

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification

from sklearn_bnn import (
    HMCClassifier,
    HMCRegressor,
    LossCalibratedBNN,
    MCDropoutClassifier,
    MCDropoutRegressor,
    PlanNetRegressor,
    SGMCMCClassifier,
    SGMCMCRegressor,
    SplitHMCClassifier,
    _utils,
)
from sklearn_bnn._utils import (
    AUTO_CUDA_WORK,
    AUTO_CUDA_WORK_REPLAYED,
    mlp_parameter_count,
    resolve_device,
)
from sklearn_bnn.samplers import GSGHMC, HMC, NUTS, SGHMC, DenseMetric, DiagonalMetric
from sklearn_bnn.samplers.starts import MAPStart


def test_without_cuda_auto_is_always_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for work in (None, 1.0, AUTO_CUDA_WORK, 1e15, lambda: 1e15):
        assert resolve_device("auto", work=work) == torch.device("cpu")
    assert resolve_device(None) == torch.device("cpu")


def test_with_cuda_auto_follows_the_work(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    digits = 884 * mlp_parameter_count(64, (100,), 7)  # issue 31: the CPU was faster
    large = 160_000 * mlp_parameter_count(50, (100,), 5)  # issue 31: CUDA was far faster
    assert resolve_device("auto", work=digits) == torch.device("cpu")
    assert resolve_device("auto", work=large) == torch.device("cuda")
    assert resolve_device("auto", work=lambda: large) == torch.device("cuda")
    assert resolve_device("auto", work=AUTO_CUDA_WORK) == torch.device("cuda")
    assert resolve_device("auto") == torch.device("cuda")  # no work known: as before
    assert resolve_device("cpu", work=large) == torch.device("cpu")  # an explicit choice


def test_the_threshold_sits_between_the_measurements():
    low = 884 * mlp_parameter_count(64, (100,), 7)
    high = 160_000 * mlp_parameter_count(50, (100,), 5)
    assert low < AUTO_CUDA_WORK < high
    assert AUTO_CUDA_WORK == pytest.approx(np.sqrt(low * high), rel=0.01)


def test_the_work_is_only_computed_when_it_decides(monkeypatch):
    def fail():
        raise AssertionError("work computed")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    resolve_device("auto", work=fail)
    resolve_device("cpu", work=fail)


X, Y = make_classification(60, 5, n_informative=3, random_state=0)
Y_REG = X[:, 0] + 0.1 * X[:, 1]
FAST = dict(hidden_layer_sizes=(8,), n_draws=5, n_warmup=5, random_state=0)
TRAINED = dict(hidden_layer_sizes=(8,), max_iter=2, batch_size=16, n_predict_draws=3)

ESTIMATORS = [
    (HMCClassifier(sampler=HMC(n_steps=3), **FAST), Y),
    (HMCRegressor(sampler=HMC(n_steps=3), **FAST), Y_REG),
    (SplitHMCClassifier(n_splits=2, init=MAPStart(n_steps=10), sampler=HMC(n_steps=3), **FAST), Y),
    (SGMCMCClassifier(hidden_layer_sizes=(8,), batch_size=16, n_draws=3, n_warmup=3), Y),
    (MCDropoutClassifier(random_state=0, **TRAINED), Y),
    (MCDropoutRegressor(random_state=0, **TRAINED), Y_REG),
    (LossCalibratedBNN(n_train_draws=2, random_state=0, **TRAINED), Y),
    (PlanNetRegressor(n_estimators=2, random_state=0, **TRAINED), Y_REG),
]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(
    "estimator, y",
    ESTIMATORS,
    ids=[f"{type(e).__name__}{i}" for i, (e, _) in enumerate(ESTIMATORS)],
)
def test_every_family_fits_and_predicts_with_auto(estimator, y, monkeypatch):
    """With CUDA reported present and this small work, "auto" picks the CPU at fit time, and
    prediction runs there too (on the fit's device, not on a fresh resolution of "auto")."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    seen = []
    original = _utils.resolve_device

    def recording(device, work=None, **kwargs):
        resolved = original(device, work=work, **kwargs)
        seen.append(resolved)
        return resolved

    for module in ("sklearn_bnn.estimators._base", "sklearn_bnn.estimators._trained"):
        monkeypatch.setattr(f"{module}.resolve_device", recording)
    monkeypatch.setattr(_utils, "resolve_device", recording)
    est = estimator.set_params(device="auto").fit(X, y)
    assert est.device_ == "cpu"
    out = est.predict_proba(X[:7]) if hasattr(est, "predict_proba") else est.predict(X[:7])
    assert np.all(np.isfinite(out))
    assert seen and all(d.type == "cpu" for d in seen)


def test_device_is_known_only_after_fit():
    est = HMCClassifier(device="auto")
    with pytest.raises(AttributeError, match="device_: it is set by fit"):
        _ = est.device_
    assert not hasattr(est, "device_")


def test_the_sampling_work_counts_rows_parameters_and_chains():
    est = HMCClassifier(hidden_layer_sizes=(100,), n_chains=4)
    assert est._work_per_gradient(884, 64, 7) == 884 * mlp_parameter_count(64, (100,), 7) * 4
    sg = SGMCMCClassifier(hidden_layer_sizes=(100,), batch_size=128)
    assert sg._work_per_gradient(10_000, 64, 7) == 128 * mlp_parameter_count(64, (100,), 7)


def test_replayed_hmc_takes_cuda_from_a_lower_work(monkeypatch):
    """Trajectories replayed from CUDA graphs were faster on CUDA down to iris (issue 31,
    H200): the lower threshold sends every measured set there, toy problems stay on the CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    measured = {
        "iris": 120 * mlp_parameter_count(4, (100,), 3),
        "cancer": 455 * mlp_parameter_count(30, (100,), 2),
        "digits": 884 * mlp_parameter_count(64, (100,), 7),
    }
    for work in measured.values():
        assert resolve_device("auto", work=work, threshold=AUTO_CUDA_WORK_REPLAYED).type == "cuda"
    toy = 60 * mlp_parameter_count(5, (8,), 2)
    assert resolve_device("auto", work=toy, threshold=AUTO_CUDA_WORK_REPLAYED).type == "cpu"


def test_the_threshold_follows_the_sampler():
    """The lower threshold only where the steps are replayed: full-data HMC with the
    leapfrog and a diagonal metric or none, SGLD and SGHMC (the minibatch default); NUTS, the
    split integrators, a dense metric and the Metropolis-adjusted minibatch samplers run
    eagerly."""
    replayed = [
        HMCClassifier(device="auto"),
        HMCRegressor(device="auto", sampler=HMC(n_steps=20)),
        HMCClassifier(device="auto", sampler=HMC(metric=DiagonalMetric(torch.ones(3)))),
        SplitHMCClassifier(device="auto", sampler=HMC(integrator="naive")),
        SGMCMCClassifier(device="auto"),
        SGMCMCRegressor(device="auto", sampler="sgld"),
        SGMCMCClassifier(device="auto", sampler=SGHMC(integrator="obabo")),
    ]
    eager = [
        HMCClassifier(device="auto", sampler="nuts"),
        HMCClassifier(device="auto", sampler=NUTS()),
        HMCClassifier(device="auto", sampler=HMC(metric=DenseMetric(torch.eye(3)))),
        SplitHMCClassifier(device="auto"),
        SGMCMCClassifier(device="auto", sampler="amagold"),
        SGMCMCClassifier(device="auto", sampler=GSGHMC()),
    ]
    assert all(e._auto_cuda_work() == AUTO_CUDA_WORK_REPLAYED for e in replayed)
    assert all(e._auto_cuda_work() == AUTO_CUDA_WORK for e in eager)
