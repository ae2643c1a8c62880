"""sklearn_bnn.load on crafted files (issue 19, parts 1 and 4).

Every crafted file must raise a ValueError naming the offending field, create no file and
import no module; every legitimate file must load and predict exactly as the saved model.
"""

import io
import pickle
import resource
import sys
import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
import torch
from sklearn.frozen import FrozenEstimator

import sklearn_bnn
from sklearn_bnn import (
    BayesDecisionClassifier,
    EnsembleReducer,
    HMCClassifier,
    HMCRegressor,
    MCDropoutClassifier,
    PlanNetRegressor,
)
from sklearn_bnn._persistence import encode, register_network
from sklearn_bnn.samplers.starts import MAPStart

FAST_HMC = dict(
    hidden_layer_sizes=(3,), n_draws=6, n_warmup=2, init=MAPStart(n_steps=2), random_state=0
)


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    return X, (X[:, 0] > 0).astype(int), np.digitize(X[:, 0], [-0.5, 0.5])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Good files of a few fitted models, written once; each test edits a copy."""
    X, y2, y3 = _data()
    folder = tmp_path_factory.mktemp("good")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hmc = HMCClassifier(**FAST_HMC).fit(X, y2)
        models = {
            "hmc": hmc,
            "hmc_reg": HMCRegressor(**FAST_HMC).fit(X, X[:, 0]),
            "dropout": MCDropoutClassifier(
                hidden_layer_sizes=(3,), max_iter=2, n_predict_draws=4, random_state=0
            ).fit(X, y3),
            "plannet": PlanNetRegressor(
                hidden_layer_sizes=(3,), max_iter=2, n_estimators=2, device="cpu", random_state=0
            ).fit(X, X[:, :2]),
            "decision": BayesDecisionClassifier(
                HMCClassifier(**FAST_HMC), utility=[[1.0, 0.0], [0.0, 2.0]]
            ).fit(X, y2),
            "reducer": EnsembleReducer(FrozenEstimator(hmc), random_state=0).fit(X, y2),
        }
    paths = {}
    for name, model in models.items():
        paths[name] = folder / f"{name}.pt"
        sklearn_bnn.save(model, paths[name])
        sklearn_bnn.load(paths[name])  # warm up: lazy imports happen here, not in the tests
    return models, paths


def _payload(files, name="hmc"):
    return torch.load(files[1][name], weights_only=True)


def _state(payload):
    return payload["state"]["__dict__"]


def _expect_rejected(payload_or_path, tmp_path, match, **params):
    """load raises ValueError(match), leaves the folder as it was and imports nothing."""
    if isinstance(payload_or_path, Path):
        path = payload_or_path
    else:
        path = tmp_path / "crafted.pt"
        torch.save(payload_or_path, path)
    files_before, modules_before = set(tmp_path.rglob("*")), set(sys.modules)
    with pytest.raises(ValueError, match=match):
        sklearn_bnn.load(path, **params)
    assert set(tmp_path.rglob("*")) == files_before
    assert set(sys.modules) == modules_before
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    "name, param",
    [("hmc_reg", "n_leapfrog"), ("hmc_reg", "chain_method"), ("dropout", "weight_decay")],
)
def test_a_parameter_the_class_does_not_take_is_refused_by_name(files, tmp_path, name, param):
    payload = _payload(files, name)
    payload["params"][param] = 1
    torch.save(payload, tmp_path / "m.pt")
    with pytest.raises(ValueError, match=rf"has no parameter\(s\) \['{param}'\]"):
        sklearn_bnn.load(tmp_path / "m.pt")


# -- legitimate files ---------------------------------------------------------------------------
def test_a_map_start_object_round_trips(files, tmp_path):
    sklearn_bnn.save(files[0]["hmc_reg"], tmp_path / "m.pt")
    loaded = sklearn_bnn.load(tmp_path / "m.pt")
    assert isinstance(loaded.init, MAPStart) and loaded.init.n_steps == 2


@pytest.mark.parametrize("name", ["hmc", "hmc_reg", "dropout", "plannet", "decision", "reducer"])
def test_round_trip_identical_predictions(files, name):
    models, paths = files
    X = _data()[0]
    loaded = sklearn_bnn.load(paths[name])
    assert type(loaded) is type(models[name])
    method = "predict_proba" if hasattr(models[name], "predict_proba") else "predict"
    np.testing.assert_array_equal(getattr(loaded, method)(X), getattr(models[name], method)(X))
    np.testing.assert_array_equal(loaded.predict(X), models[name].predict(X))


def test_round_trip_reducer_on_a_stack(tmp_path):
    rng = np.random.default_rng(1)
    stack = rng.dirichlet([1.0, 1.0], size=(6, 10))
    y = rng.integers(0, 2, 10)
    reducer = EnsembleReducer(random_state=0).fit(stack, y)
    sklearn_bnn.save(reducer, tmp_path / "r.pt")
    loaded = sklearn_bnn.load(tmp_path / "r.pt")
    np.testing.assert_array_equal(loaded.transform(stack), reducer.transform(stack))


def test_registered_network_factory_is_saved_by_name(tmp_path):
    def tiny_net(n_in, n_out):
        return torch.nn.Linear(n_in, n_out)

    register_network(tiny_net, name="tests.tiny_net")
    X, y, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = HMCClassifier(module=tiny_net, **FAST_HMC).fit(X, y)
    sklearn_bnn.save(clf, tmp_path / "m.pt")
    assert _payload((None, {"m": tmp_path / "m.pt"}), "m")["params"]["module"] == {
        "__network__": "tests.tiny_net"
    }
    loaded = sklearn_bnn.load(tmp_path / "m.pt")
    assert loaded.module is tiny_net
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))


def test_save_refuses_a_wrapped_foreign_model(tmp_path):
    from sklearn.linear_model import LogisticRegression

    X, y, _ = _data()
    model = BayesDecisionClassifier(LogisticRegression()).fit(X, y)
    with pytest.raises(TypeError, match="LogisticRegression"):
        sklearn_bnn.save(model, tmp_path / "m.pt")


# -- the exploit of issue 19 and other names that are not on the allow-list -------------------
def test_issue_19_exploit_writes_no_file(files, tmp_path):
    payload = _payload(files)
    payload["params"]["module"] = {"__dtype__": "save"}
    _state(payload)["n_features_in_"] = "attacker content"
    _state(payload)["n_outputs_"] = str(tmp_path / "pwned")
    _expect_rejected(payload, tmp_path, r"parameter 'module': dtype .*'save'")


@pytest.mark.parametrize("name", ["save", "load", "os", "Tensor", "float32; import os"])
def test_dtype_naming_anything_but_a_dtype(files, tmp_path, name):
    payload = _payload(files)
    _state(payload)["network_"]["__dict__"]["dtype"] = {"__dtype__": name}
    _expect_rejected(payload, tmp_path, r"network_'\]\['dtype'\]: dtype")


@pytest.mark.parametrize(
    "entry, match",
    [
        ({"__network__": "torch.save"}, "network factory .* is not registered"),
        ({"__network__": "os.system"}, "network factory .* is not registered"),
        ({"__object__": "HMCClassifier", "state": None}, "not a registered value class"),
        ({"__estimator__": "os.system"}, "expected an estimator record"),
        ({"__function__": "os.system"}, "unrecognised entry"),
        ({"__dtype__": "float32", "__device__": "cpu"}, "unrecognised entry"),
    ],
)
def test_module_factory_naming_a_function(files, tmp_path, entry, match):
    payload = _payload(files)
    payload["params"]["module"] = entry
    _expect_rejected(payload, tmp_path, "parameter 'module': .*" + match)


@pytest.mark.parametrize("name", ["os.system", "Popen", "PosteriorSamples", "FrozenEstimator"])
def test_class_that_is_not_a_registered_estimator(files, tmp_path, name):
    payload = _payload(files)
    payload["class"] = name
    _expect_rejected(payload, tmp_path, "is not a registered sklearn_bnn estimator")


def test_nested_estimator_of_an_unregistered_class(files, tmp_path):
    payload = _payload(files, "decision")
    _state(payload)["estimator_"]["__estimator__"]["class"] = "subprocess.Popen"
    _expect_rejected(payload, tmp_path, r"estimator_'\]: class .* is not a registered")


@pytest.mark.parametrize(
    "param, value",
    [
        ("activation", "os.system"),
        ("sampler", "__import__('os').system('touch pwned')"),
        ("dtype", "os.system"),
        ("init", "subprocess.Popen"),
    ],
)
def test_code_like_strings_stay_strings(files, tmp_path, param, value):
    payload = _payload(files)
    payload["params"][param] = value
    _expect_rejected(payload, tmp_path, param)


def test_unknown_parameter_name(files, tmp_path):
    payload = _payload(files)
    payload["params"]["__class__"] = "os.system"
    _expect_rejected(payload, tmp_path, r"has no parameter\(s\) \['__class__'\]")


def test_unknown_state_entry(files, tmp_path):
    payload = _payload(files)
    _state(payload)["predict_proba"] = "os.system"
    _expect_rejected(payload, tmp_path, r"unexpected entries \['predict_proba'\]")


def test_deep_nesting(files, tmp_path):
    payload = _payload(files)
    deep = []
    for _ in range(200):
        deep = [deep]
    _state(payload)["diagnostics_"]["__dict__"]["deep"] = deep
    _expect_rejected(payload, tmp_path, "nested more than")


# -- edited sizes and shapes --------------------------------------------------------------------
def test_huge_n_features_in_is_rejected_without_allocating(files, tmp_path):
    payload = _payload(files)
    _state(payload)["n_features_in_"] = 10**9
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    _expect_rejected(payload, tmp_path, r"samples_\['0.weight'\] has shape \(3, 3\)")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 200_000


def test_huge_hidden_layer_is_rejected(files, tmp_path):
    payload = _payload(files)
    payload["params"]["hidden_layer_sizes"] = {"__tuple__": [10**9]}
    _expect_rejected(payload, tmp_path, r"samples_\['0.weight'\] has shape")


def test_classes_edited_to_three_for_a_two_class_model(files, tmp_path):
    payload = _payload(files)
    _state(payload)["classes_"] = {"__ndarray__": torch.tensor([0, 1, 2])}
    _expect_rejected(payload, tmp_path, r"n_outputs_=1 does not fit 3 classes_")


def test_classes_edited_along_with_n_outputs(files, tmp_path):
    payload = _payload(files)
    _state(payload)["classes_"] = {"__ndarray__": torch.tensor([0, 1, 2])}
    _state(payload)["n_outputs_"] = 3
    _expect_rejected(payload, tmp_path, r"samples_\['2.weight'\] has shape \(1, 3\)")


def test_classifier_relabelled_as_regressor(files, tmp_path):
    payload = _payload(files)
    payload["class"] = "HMCRegressor"
    payload["params"].pop("calibration")  # the classifiers' only
    payload["params"].pop("class_weight")
    payload["params"]["noise_precision"] = 1.0
    payload["params"]["normalize_y"] = True
    _expect_rejected(payload, tmp_path, r"lacks \['_y_2d', 'y_mean_', 'y_scale_'\]")


def test_draws_of_the_wrong_shape(files, tmp_path):
    payload = _payload(files)
    samples = _state(payload)["samples_"]["state"]["__dict__"]
    samples["draws"] = samples["draws"][..., :-1].clone()
    _expect_rejected(
        payload, tmp_path, r"'samples_'\]: the layout .* has 16 weights, but each draw has 15"
    )


def test_layout_consistent_with_itself_but_not_the_network(files, tmp_path):
    payload = _payload(files)
    samples = _state(payload)["samples_"]["state"]["__dict__"]
    samples["draws"] = samples["draws"][..., :-1].clone()
    samples["shapes"][-1] = []  # a scalar bias would fit 15 weights
    samples["shapes"][-2] = [1, 2]
    _expect_rejected(payload, tmp_path, r"samples_\['2.weight'\] has shape \(1, 2\)")


def test_wrong_attribute_types(files, tmp_path):
    payload = _payload(files)
    _state(payload)["acceptance_rate_"] = "high"
    _expect_rejected(payload, tmp_path, "acceptance_rate_ must be a number")


def test_dropout_weights_of_the_wrong_shape(files, tmp_path):
    payload = _payload(files, "dropout")
    weights = _state(payload)["module_"]["__dict__"]
    weights["0.weight"] = torch.zeros(3, 4)
    _expect_rejected(payload, tmp_path, r"module_\['0.weight'\] has shape \(3, 4\)")


def test_plannet_with_a_missing_network(files, tmp_path):
    payload = _payload(files, "plannet")
    _state(payload)["estimators_"].pop()
    _expect_rejected(payload, tmp_path, "estimators_ must be a list of 2 items")


def test_decision_utility_of_the_wrong_size(files, tmp_path):
    payload = _payload(files, "decision")
    _state(payload)["utility_"] = {"__ndarray__": torch.eye(3, dtype=torch.float64)}
    _expect_rejected(payload, tmp_path, "utility has 3 rows but the classifier has 2 classes")


def test_reducer_kept_indices_out_of_range(files, tmp_path):
    payload = _payload(files, "reducer")
    _state(payload)["kept_indices_"] = {"__ndarray__": torch.tensor([0, 99])}
    _state(payload)["n_members_"] = 2
    _expect_rejected(payload, tmp_path, "kept_indices_ must be")


def test_reducer_members_of_another_model(files, tmp_path):
    payload = _payload(files, "reducer")
    _state(payload)["n_members_full_"] = 99
    _expect_rejected(payload, tmp_path, "n_members_full_=99, but the wrapped estimator_ has 6")


# -- files that are not weights-only files ------------------------------------------------------
def test_truncated_file(files, tmp_path):
    data = files[1]["hmc"].read_bytes()
    for size in (10, len(data) // 2, len(data) - 30):
        path = tmp_path / f"truncated_{size}.pt"
        path.write_bytes(data[:size])
        _expect_rejected(path, tmp_path, "is not a sklearn_bnn weights-only file")


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_joblib_file(files, tmp_path):
    path = tmp_path / "model.joblib"
    joblib.dump(files[0]["hmc"], path)
    _expect_rejected(path, tmp_path, "is not a sklearn_bnn weights-only file")


class _Pwn:
    """Unpickling this object would create the file ``target``."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        return (Path.touch, (Path(self.target),))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickle_that_would_run_code(tmp_path):
    for name, payload in [
        ("raw.pkl", _Pwn(tmp_path / "pwned")),
        ("inside.pt", {"format": "sklearn_bnn.weights/1", "class": _Pwn(tmp_path / "pwned")}),
    ]:
        buffer = io.BytesIO()
        if name.endswith(".pkl"):
            pickle.dump(payload, buffer)
        else:
            torch.save(payload, buffer)
        (tmp_path / name).write_bytes(buffer.getvalue())
        _expect_rejected(tmp_path / name, tmp_path, "is not a sklearn_bnn weights-only file")


def test_not_a_payload(tmp_path):
    for i, payload in enumerate([torch.zeros(3), {"format": "other"}, [1, 2]]):
        path = tmp_path / f"other_{i}.pt"
        torch.save(payload, path)
        _expect_rejected(path, tmp_path, "is not a sklearn_bnn weights-only file")


def test_compressed_entry_is_refused_before_unzipping(files, tmp_path):
    """A deflated entry could expand to gigabytes from a small file; torch.save never compresses."""
    import encodings.cp437  # noqa: F401  zipfile decodes names not flagged UTF-8 with it
    import zipfile

    path = tmp_path / "compressed.pt"
    with zipfile.ZipFile(files[1]["hmc"]) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
    _expect_rejected(path, tmp_path, "is compressed")


def test_diagnostics_of_another_shape(files, tmp_path):
    payload = _payload(files)
    _state(payload)["diagnostics_"]["__dict__"]["step_size"] = {"__ndarray__": torch.ones(5)}
    _expect_rejected(payload, tmp_path, r"diagnostics_\['step_size'\] must have a shape")


def test_seed_out_of_range(files, tmp_path):
    payload = _payload(files, "dropout")
    _state(payload)["mc_seed_"] = 2**70
    _expect_rejected(payload, tmp_path, r"mc_seed_ must be an int in \[0, ")


def test_feature_names_of_another_length(files, tmp_path):
    payload = _payload(files, "dropout")
    _state(payload)["feature_names_in_"] = {"__objarray__": ["a", "b"], "kind": "O"}
    _expect_rejected(payload, tmp_path, "feature_names_in_ must hold n_features_in_ strings")


def test_torch_load_is_called_weights_only(files, monkeypatch):
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # cannot override an explicit True
    sklearn_bnn.load(files[1]["hmc"])
    assert calls and all(kw.get("weights_only") is True for kw in calls)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_split_model_fitted_with_data_on_a_gpu_loads_without_one(tmp_path):
    from sklearn_bnn import SplitHMCClassifier

    X, y, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SplitHMCClassifier(n_splits=2, **FAST_HMC).fit(X, y)
    sklearn_bnn.save(clf, tmp_path / "m.pt")
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    payload["params"]["data_device"] = "cuda"  # as saved on a GPU machine
    torch.save(payload, tmp_path / "m.pt")
    loaded = sklearn_bnn.load(tmp_path / "m.pt")
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))


def test_tensor_requiring_grad_is_detached(files, tmp_path):
    payload = _payload(files)
    _state(payload)["classes_"]["__ndarray__"] = torch.tensor([0.0, 1.0], requires_grad=True)
    torch.save(payload, tmp_path / "m.pt")
    np.testing.assert_array_equal(sklearn_bnn.load(tmp_path / "m.pt").classes_, [0.0, 1.0])


def test_parameter_instead_of_a_tensor(files, tmp_path):
    payload = _payload(files)
    samples = _state(payload)["samples_"]["state"]["__dict__"]
    samples["draws"] = torch.nn.Parameter(samples["draws"])
    _expect_rejected(payload, tmp_path, r"\['draws'\]: a Parameter is not allowed")


def test_file_without_a_fitted_state(files, tmp_path):
    payload = _payload(files)
    payload["state"] = None
    _expect_rejected(payload, tmp_path, "holds no fitted state")


def test_many_hidden_layers_are_not_built(files, tmp_path):
    payload = _payload(files)
    payload["params"]["hidden_layer_sizes"] = {"__tuple__": [1] * 10**5}
    _expect_rejected(payload, tmp_path, "hidden_layer_sizes has 100000 layers, but samples_")


class _NetWithConstants(torch.nn.Module):
    """A frozen parameter and a buffer: saved as network_ constants, checked against the file."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((n_in,), 2.0), requires_grad=False)
        self.register_buffer("shift", torch.arange(n_in, dtype=torch.float32))
        self.linear = torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.linear(x * self.scale + self.shift)


def test_custom_module_with_constants(tmp_path):
    X, y, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = HMCClassifier(module=_NetWithConstants, **FAST_HMC).fit(X, y)
    sklearn_bnn.save(clf, tmp_path / "m.pt")
    with pytest.raises(ValueError, match=r"parameter\(s\) \['module'\] held Python code"):
        sklearn_bnn.load(tmp_path / "m.pt")
    loaded = sklearn_bnn.load(tmp_path / "m.pt", module=_NetWithConstants)
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    _state(payload)["network_"]["__dict__"]["constants"]["__dict__"]["shift"] = torch.zeros(5)
    _expect_rejected(
        payload,
        tmp_path,
        r"network_ constants\['shift'\] has shape \(5,\)",
        module=_NetWithConstants,
    )


# -- sampler objects and prior objects as parameters -------------------------------------------
@pytest.mark.parametrize("name", sorted(__import__("sklearn_bnn.samplers").samplers.SAMPLERS))
def test_every_registered_sampler_object_survives_a_file(tmp_path, name):
    from sklearn_bnn._persistence import decode
    from sklearn_bnn.samplers import SAMPLERS

    sampler = SAMPLERS[name]()
    path = tmp_path / "s.pt"
    torch.save(encode(sampler), path)
    back = decode(torch.load(path, weights_only=True))
    assert type(back) is type(sampler)
    assert repr(back.get_params(deep=False)) == repr(sampler.get_params(deep=False))


def test_estimator_with_sampler_and_prior_objects_round_trips(tmp_path):
    from sklearn_bnn.priors import HierarchicalPrior
    from sklearn_bnn.samplers import NUTS, S3HMC

    X, _, _ = _data()
    y = X[:, 0] + 0.1 * X[:, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = [
            HMCRegressor(sampler=NUTS(max_tree_depth=3), **FAST_HMC).fit(X, y),
            HMCRegressor(
                sampler=S3HMC(n_steps=3), prior_precision=HierarchicalPrior(beta=2.0), **FAST_HMC
            ).fit(X, y),
        ]
    for model in models:
        sklearn_bnn.save(model, tmp_path / "m.pt")
        back = sklearn_bnn.load(tmp_path / "m.pt")
        assert repr(back.get_params()) == repr(model.get_params())
        np.testing.assert_allclose(back.predict(X), model.predict(X))


def _sampler_payload(files, tmp_path):
    from sklearn_bnn.samplers import NUTS

    X, y2, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = HMCClassifier(sampler=NUTS(max_tree_depth=3), **FAST_HMC).fit(X, y2)
    sklearn_bnn.save(model, tmp_path / "nuts.pt")
    return torch.load(tmp_path / "nuts.pt", weights_only=True)


def test_sampler_name_not_registered_is_refused(files, tmp_path):
    payload = _sampler_payload(files, tmp_path)
    payload["params"]["sampler"]["__sampler__"] = "os.system"
    _expect_rejected(payload, tmp_path, "sampler 'os.system'|sampler str 'os.system'")


def test_sampler_parameter_not_of_its_class_is_refused(files, tmp_path):
    payload = _sampler_payload(files, tmp_path)
    payload["params"]["sampler"]["params"]["__dict__"]["__reduce__"] = "os.system"
    _expect_rejected(payload, tmp_path, "do not match its class")


def test_regressor_file_without_its_target_scaling_is_refused_naming_it(files, tmp_path):
    payload = _payload(files, "hmc_reg")
    state = _state(payload)
    state["_y_mean"], state["_y_scale"] = state.pop("y_mean_"), state.pop("y_scale_")
    torch.save(payload, tmp_path / "renamed.pt")
    with pytest.raises(ValueError, match=r"lacks \['y_mean_', 'y_scale_'\]"):
        sklearn_bnn.load(tmp_path / "renamed.pt")


# -- pipelines ----------------------------------------------------------------------------------
def _no_pickle(monkeypatch):
    """Make any use of the pickle module's unpickler fail the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("pickle was used to load")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)


def test_pipeline_of_a_scaler_and_hmc_round_trips_without_pickle(tmp_path, monkeypatch):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y, _ = _data()
    X = X * [1.0, 10.0, 100.0] + 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = make_pipeline(StandardScaler(), HMCClassifier(**FAST_HMC)).fit(X, y)
    sklearn_bnn.save(pipe, tmp_path / "p.pt")
    _no_pickle(monkeypatch)
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k) or real_load(*a, **k))
    loaded = sklearn_bnn.load(tmp_path / "p.pt")
    assert calls and all(kw.get("weights_only") is True for kw in calls)
    assert [type(s).__name__ for _, s in loaded.steps] == ["StandardScaler", "HMCClassifier"]
    np.testing.assert_array_equal(loaded[0].scale_, pipe[0].scale_)
    np.testing.assert_array_equal(loaded.predict_proba(X), pipe.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), pipe.predict(X))


@pytest.fixture(scope="module")
def more_families():
    """Fitted tiny models of the families the ``files`` fixture lacks."""
    from sklearn_bnn import (
        LossCalibratedBNN,
        MCDropoutRegressor,
        SGMCMCClassifier,
        SplitHMCRegressor,
    )

    X, y2, y3 = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "split_reg": SplitHMCRegressor(
                hidden_layer_sizes=(3,), n_draws=6, n_warmup=2, random_state=0
            ).fit(X, X[:, 0]),
            "sgmcmc": SGMCMCClassifier(
                hidden_layer_sizes=(3,), n_draws=4, n_warmup=2, calibration=None, random_state=0
            ).fit(X, y3),
            "dropout_reg": MCDropoutRegressor(
                hidden_layer_sizes=(3,), max_iter=2, n_predict_draws=4, random_state=0
            ).fit(X, X[:, 0]),
            "lcbnn": LossCalibratedBNN(
                hidden_layer_sizes=(3,), max_iter=2, n_predict_draws=4, random_state=0
            ).fit(X, y2),
        }


@pytest.mark.parametrize(
    "name",
    ["hmc", "hmc_reg", "dropout", "plannet", "decision", "reducer", "split_reg", "sgmcmc",
     "dropout_reg", "lcbnn"],
)  # fmt: skip
def test_pipeline_of_each_family_round_trips(files, more_families, name, tmp_path):
    from sklearn.decomposition import PCA
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, RobustScaler, StandardScaler

    X = _data()[0]
    model = {**files[0], **more_families}[name]
    # steps fitted here, before the fitted model (which then sees transformed inputs: the
    # round trip must give the same numbers whatever they are); the scalers rotate by family
    scalers = [StandardScaler(), MinMaxScaler((-1, 1)), RobustScaler(), MaxAbsScaler()]
    scaler = scalers[len(name) % 4 if name != "hmc" else 0].fit(X)
    steps = [("scale", scaler), ("pca", PCA(3, whiten=True).fit(scaler.transform(X)))]
    steps += [("skip", "passthrough"), ("model", model)]
    pipe = Pipeline(steps)
    sklearn_bnn.save(pipe, tmp_path / "p.pt")
    loaded = sklearn_bnn.load(tmp_path / "p.pt")
    assert type(loaded) is Pipeline and [n for n, _ in loaded.steps] == [n for n, _ in steps]
    assert type(loaded[-1]) is type(model)
    method = "predict_proba" if hasattr(model, "predict_proba") else "predict"
    np.testing.assert_array_equal(getattr(loaded, method)(X), getattr(pipe, method)(X))


def test_nested_pipeline_and_a_steps_module_passed_to_load(tmp_path):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    X, y, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inner = make_pipeline(
            MinMaxScaler(), HMCClassifier(module=_NetWithConstants, **FAST_HMC)
        )
        pipe = make_pipeline(StandardScaler(), inner).fit(X, y)
    sklearn_bnn.save(pipe, tmp_path / "p.pt")
    with pytest.raises(ValueError, match=r"<step>__module=\.\.\."):
        sklearn_bnn.load(tmp_path / "p.pt")
    with pytest.raises(ValueError, match="a step among"):
        sklearn_bnn.load(tmp_path / "p.pt", nothing__module=_NetWithConstants)
    loaded = sklearn_bnn.load(
        tmp_path / "p.pt", pipeline__hmcclassifier__module=_NetWithConstants
    )
    np.testing.assert_array_equal(loaded.predict_proba(X), pipe.predict_proba(X))


def test_pipeline_with_a_step_that_holds_code_is_refused(files, tmp_path):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    X = _data()[0]
    model = files[0]["hmc"]
    code = make_pipeline(FunctionTransformer(np.log1p).fit(X), model)
    with pytest.raises(TypeError, match="FunctionTransformer, which a weights-only file does"):
        sklearn_bnn.save(code, tmp_path / "p.pt")
    assert not (tmp_path / "p.pt").exists()
    # a file naming a step class outside the allow-list: refused, nothing imported
    sklearn_bnn.save(make_pipeline(StandardScaler().fit(X), model), tmp_path / "good.pt")
    sklearn_bnn.load(tmp_path / "good.pt")  # warm up: lazy imports happen here
    payload = torch.load(tmp_path / "good.pt", weights_only=True)
    for name in ("FunctionTransformer", "os.system", "sklearn.compose.ColumnTransformer"):
        payload["params"]["steps"][0][1]["__sklearn__"]["class"] = name
        _expect_rejected(
            payload, tmp_path, f"class '{name}' is not one of the scikit-learn steps"
        )


def test_pipeline_step_states_are_checked(files, tmp_path):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = _data()[0]
    sklearn_bnn.save(make_pipeline(StandardScaler().fit(X), files[0]["hmc"]), tmp_path / "g.pt")
    sklearn_bnn.load(tmp_path / "g.pt")

    def edited(edit):
        payload = torch.load(tmp_path / "g.pt", weights_only=True)
        edit(payload["params"]["steps"][0][1]["__sklearn__"], payload)
        return payload

    def short_scale(step, payload):
        step["state"]["__dict__"]["scale_"] = {"__ndarray__": torch.ones(2, dtype=torch.float64)}

    def extra_entry(step, payload):
        step["state"]["__dict__"]["func"] = "os.system"

    def bad_parameter(step, payload):
        step["params"]["__dict__"]["with_mean"] = "yes"

    def wider_scaler(step, payload):
        state = step["state"]["__dict__"]
        state["n_features_in_"] = 4
        for key in ("mean_", "var_", "scale_"):
            state[key] = {"__ndarray__": torch.ones(4, dtype=torch.float64)}

    def unknown_step_class(step, payload):
        payload["params"]["steps"][1][1]["__estimator__"]["class"] = "Popen"

    for edit, match in [
        (short_scale, r"StandardScaler: scale_ must be of shape \(3,\)"),
        (extra_entry, r"unexpected entries \['func'\]"),
        (bad_parameter, "with_mean"),
        (wider_scaler, "step 'hmcclassifier' takes 3 features, but step 'standardscaler' gives 4"),
        (unknown_step_class, "class str 'Popen' is not a registered sklearn_bnn estimator"),
    ]:
        _expect_rejected(edited(edit), tmp_path, match)
