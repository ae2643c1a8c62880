"""benchmarks/scoreboard/uci.py: the loader, the protocol's scores and the table, on one tiny run.

Skipped where the shared UCI data (``../shared/data/uci`` beside the repository) is absent.
"""

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

from sklearn_bnn.samplers.starts import MAPStart

ROOT = Path(__file__).resolve().parents[1]
_UCI = ROOT / "benchmarks" / "scoreboard" / "uci.py"
_spec = importlib.util.spec_from_file_location("uci_benchmark", _UCI)
uci = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uci)

pytestmark = pytest.mark.skipif(
    not (uci.DATA_DIR / "yacht" / "data.txt").exists(), reason="UCI data not available"
)


def test_loader_reads_disjoint_splits_of_the_documented_sizes():
    X_train, y_train, X_test, y_test = uci.load_uci("yacht", 3)
    assert X_train.shape == (277, 6) and X_test.shape == (31, 6)
    assert y_train.shape == (277,) and y_test.shape == (31,)
    rows = {tuple(r) for r in np.c_[X_train, y_train]}
    assert not any(tuple(r) in rows for r in np.c_[X_test, y_test])
    with pytest.raises(ValueError, match="split"):
        uci.load_uci("yacht", 20)
    assert uci.published_table()["concrete"]["MC dropout RMSE"] == "4.82 +- 0.16"
    assert uci.parse_splits("0-2,5") == [0, 1, 2, 5]


def test_one_tiny_run_per_kind_and_the_table():
    hmc = dict(uci.MODELS["hmc"][1], hidden_layer_sizes=(5,), n_draws=10, n_warmup=10,
               n_chains=2, init=MAPStart(n_steps=20))  # fmt: skip
    mcd = dict(uci.MODELS["mcdropout"][1], max_iter=2, n_predict_draws=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = [
            uci.run_one("hmc", hmc, "yacht", 0, uci.DATA_DIR, 1),
            uci.run_one("mcdropout", mcd, "yacht", 0, uci.DATA_DIR, 1),
        ]
    for r in records:
        assert np.isfinite(r["rmse"]) and np.isfinite(r["log_likelihood"]) and r["n_test"] == 31
    assert set(uci.DIAGNOSTICS) <= set(records[0]) and "convergence_warning" in records[0]
    table = uci.markdown_table(uci.summarise(records), uci.published_table())
    assert table.count("\n") == 3 and "| yacht | hmc | 1 |" in table and "0.67 +- 0.05" in table


def test_set_builds_samplers_and_priors_and_checks_nested_settings():
    assert uci.parse_override("hmc.n_draws=50") == ("hmc", "n_draws", 50)
    assert uci.parse_override("hmc.activation=relu") == ("hmc", "activation", "relu")
    _, key, sampler = uci.parse_override("hmc.sampler=HMC(trajectory_length='auto')")
    assert key == "sampler" and sampler.trajectory_length == "auto"
    _, _, prior = uci.parse_override("hmc.prior_precision=HierarchicalPrior(alpha=3.0)")
    assert prior.alpha == 3.0
    with pytest.raises(Exception, match="unknown constructor"):
        uci.parse_override("hmc.sampler=eval('1')")
    overrides = [
        uci.parse_override("hmc.sampler=NUTS()"),
        uci.parse_override("hmc.sampler__max_tree_depth=8"),  # a setting of the new sampler
        uci.parse_override("hmc.init__n_steps=100"),
    ]
    params = uci.model_params(["hmc"], overrides, None)["hmc"]
    assert params["sampler__max_tree_depth"] == 8 and params["sampler"].max_tree_depth == 10
    with pytest.raises(SystemExit, match="no parameter"):
        uci.model_params(["hmc"], [uci.parse_override("hmc.sampler__max_tree_depth=8")], None)
