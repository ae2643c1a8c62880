"""UCI regression benchmark: test RMSE and log-likelihood over the standard 20 splits.

The small-data regression benchmark of the Bayesian deep learning literature (Hernández-Lobato
& Adams 2015; Gal & Ghahramani 2016): concrete, energy, yacht, wine-quality-red, with the fixed
train/test splits that ship in ``../shared/data/uci/`` (relative to the repository root; see its
README.md). The data are read from there and never copied into the package.

Protocol (the README's): standardise X and y with the training split's mean and standard
deviation, fit, predict a Gaussian ``predict(X_test, return_std=True)``, map it back to the
original units of y, and report the test RMSE and the average test log-likelihood per point
(both in y's units), as mean +- standard error over the splits. For the MCMC models the run also
keeps the convergence diagnostics (``diagnostics_["rhat_log_prob"]``, ``"rhat_predictions_max"``,
``"ess_bulk_log_prob"``) and whether a convergence warning (R-hat, divergences) fired.

Every model's settings are in ``MODELS`` below: one dict per model, the documented ones, not
tuned per data set (no inner grid search, unlike Gal's MC-dropout runs, which searched dropout
rate and tau on an 80/20 split of each training set). Change a setting from the command line
with ``--set model.param=value``.

    python benchmarks/scoreboard/uci.py --datasets concrete energy --splits 0-19 \\
        --models hmc mcdropout plannet --out results.json --n-jobs 2

Smoke run (one split, minutes on a CPU):

    python benchmarks/scoreboard/uci.py --datasets concrete yacht --splits 0 \\
        --models hmc mcdropout --set hmc.n_draws=50 --set hmc.n_warmup=50 --epochs 50

Splits run as joblib jobs (``--n-jobs``), each with ``--threads`` torch threads. The table
printed at the end (markdown) puts the published MC-dropout and deep-ensemble figures from the
data's README beside ours.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import platform
import re
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from joblib import Parallel, delayed
from sklearn.base import clone

from sklearn_bnn import HMCRegressor, MCDropoutRegressor, PlanNetRegressor
from sklearn_bnn.metrics import gaussian_nll
from sklearn_bnn.priors import GaussianPrior, HierarchicalPrior
from sklearn_bnn.samplers import HMC, NUTS
from sklearn_bnn.samplers.starts import MAPStart

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "uci"
DATASETS = ("concrete", "energy", "yacht", "wine-quality-red")

# One dict per model: the settings of the run. The protocol's network (one hidden layer of 50
# units) everywhere; data already standardised by the harness (normalize_y is then a no-op for
# HMC but keeps its noise_precision in standardised units whatever the data).
MODELS = {
    "hmc": (
        HMCRegressor,
        {  # the defaults (learned noise, one chain of 500 + 500, 50 leapfrog steps)
            "hidden_layer_sizes": (50,),
            "normalize_y": True,
            "random_state": 0,
        },
    ),
    "mcdropout": (
        MCDropoutRegressor,
        {
            "hidden_layer_sizes": (50,),
            "dropout": 0.05,  # middle of Gal's grid (0.005, 0.01, 0.05, 0.1)
            "prior_precision": 1e-4,  # Gal's UCI code: length scale 1e-2, precision l^2
            "noise_precision": None,  # learned jointly (Gal grid-searched tau)
            "max_iter": 4000,  # the protocol's 40 x 100 epochs (--epochs)
            "batch_size": 128,
            "learning_rate_init": 1e-3,
            "n_predict_draws": 100,
            "random_state": 0,
        },
    ),
    "plannet": (
        PlanNetRegressor,
        {
            "hidden_layer_sizes": (50,),
            "covariance": "full",  # one output: the same as "diagonal"
            "n_estimators": 5,
            "n_predict_draws": 30,
            "max_iter": 4000,
            "batch_size": 128,
            "learning_rate_init": 1e-3,
            "early_stopping": True,
            "validation_fraction": 0.1,
            "n_iter_no_change": 200,
            "device": "cpu",
            "random_state": 0,
        },
    ),
}
MCMC_MODELS = {"hmc"}
# What ``--set`` may construct (``--set hmc.sampler=HMC(trajectory_length='auto')``).
CONSTRUCTORS = {
    "HMC": HMC,
    "NUTS": NUTS,
    "MAPStart": MAPStart,
    "HierarchicalPrior": HierarchicalPrior,
    "GaussianPrior": GaussianPrior,
}
DIAGNOSTICS = ("rhat_log_prob", "rhat_predictions_max", "ess_bulk_log_prob")


# --- data ---------------------------------------------------------------------------------------


def _read_indices(path: Path) -> np.ndarray:
    return np.atleast_1d(np.loadtxt(path, dtype=np.int64))


def load_uci(name: str, split: int, data_dir: Path = DATA_DIR):
    """One train/test split of a UCI data set, in original units.

    Parameters
    ----------
    name : str
        Folder under ``data_dir``: ``"concrete"``, ``"energy"``, ``"yacht"``,
        ``"wine-quality-red"``.
    split : int
        0 to ``n_splits - 1`` (20 splits).
    data_dir : Path
        Folder holding one sub-folder per data set.

    Returns
    -------
    X_train, y_train, X_test, y_test : ndarray
        Features (n, n_features) and target (n,) as float64.
    """
    folder = Path(data_dir) / name
    if not folder.is_dir():
        raise FileNotFoundError(
            f"no data set {name!r} under {data_dir}; expected one of "
            f"{sorted(p.name for p in Path(data_dir).iterdir() if p.is_dir())}."
        )
    n_splits = (
        int(np.loadtxt(folder / "n_splits.txt")) if (folder / "n_splits.txt").exists() else 20
    )
    if not 0 <= split < n_splits:
        raise ValueError(f"split must be in 0..{n_splits - 1}, got {split}.")
    data = np.loadtxt(folder / "data.txt", dtype=np.float64)
    features = _read_indices(folder / "index_features.txt")
    target = int(_read_indices(folder / "index_target.txt")[0])
    train = _read_indices(folder / f"index_train_{split}.txt")
    test = _read_indices(folder / f"index_test_{split}.txt")
    X, y = data[:, features], data[:, target]
    return X[train], y[train], X[test], y[test]


def standardise(train: np.ndarray, test: np.ndarray):
    """Both arrays standardised with the training mean and standard deviation (constant
    columns keep scale 1); returns them with the mean and scale."""
    mean = train.mean(axis=0)
    scale = train.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    return (train - mean) / scale, (test - mean) / scale, mean, scale


def published_table(data_dir: Path = DATA_DIR) -> dict[str, dict[str, str]]:
    """The published figures of the data README's table: {data set: {column: "m +- se"}}."""
    readme = Path(data_dir) / "README.md"
    if not readme.exists():
        return {}
    rows, header = {}, None
    for line in readme.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("- "):
            rows[cells[0]] = dict(zip(header[1:], cells[1:], strict=False))
    return rows


# --- one run -------------------------------------------------------------------------------------


def run_one(model: str, params: dict, name: str, split: int, data_dir: Path, threads: int):
    """Fit one model on one split; return a JSON-ready record of its scores and diagnostics."""
    torch.set_num_threads(threads)
    X_train, y_train, X_test, y_test = load_uci(name, split, data_dir)
    Xs_train, Xs_test, _, _ = standardise(X_train, X_test)
    ys_train, _, y_mean, y_scale = standardise(y_train, y_test)
    estimator = clone(MODELS[model][0]()).set_params(**params)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        estimator.fit(Xs_train, ys_train)
        fit_time = time.perf_counter() - start
        start = time.perf_counter()
        mean_s, std_s = estimator.predict(Xs_test, return_std=True)
        predict_time = time.perf_counter() - start
    mean = np.ravel(mean_s) * y_scale + y_mean
    std = np.ravel(std_s) * y_scale
    fit_warnings = sorted({str(w.message).split(":")[0] for w in caught})
    record = {
        "dataset": name,
        "split": split,
        "model": model,
        "n_train": len(y_train),
        "n_test": len(y_test),
        "rmse": float(np.sqrt(np.mean((y_test - mean) ** 2))),
        "log_likelihood": -gaussian_nll(y_test, mean, std),
        "fit_time_s": fit_time,
        "predict_time_s": predict_time,
        "warnings": fit_warnings,
    }
    if model in MCMC_MODELS:
        diag = estimator.diagnostics_
        for key in DIAGNOSTICS:
            record[key] = float(np.max(diag[key]) if key.startswith("rhat") else np.min(diag[key]))
        record["acceptance_rate"] = float(estimator.acceptance_rate_)
        record["n_divergent"] = int(diag["n_divergent"])
        record["convergence_warning"] = any(("R-hat" in w or "diverged" in w) for w in fit_warnings)
    return record


# --- summary -------------------------------------------------------------------------------------


def _mean_se(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    se = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
    return float(v.mean()), se


def summarise(records: list[dict]) -> list[dict]:
    """Mean and standard error over splits, per (data set, model)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["model"]), []).append(r)
    rows = []
    for (name, model), runs in groups.items():
        row = {"dataset": name, "model": model, "n_splits": len(runs)}
        for key in ("rmse", "log_likelihood", "fit_time_s"):
            row[key], row[key + "_se"] = _mean_se([r[key] for r in runs])
        if model in MCMC_MODELS:
            row["rhat_log_prob_max"] = max(r["rhat_log_prob"] for r in runs)
            row["rhat_predictions_max"] = max(r["rhat_predictions_max"] for r in runs)
            row["ess_bulk_log_prob_min"] = min(r["ess_bulk_log_prob"] for r in runs)
            row["n_convergence_warnings"] = sum(r["convergence_warning"] for r in runs)
        rows.append(row)
    return rows


def _pm(mean: float, se: float, digits: int = 2) -> str:
    return f"{mean:.{digits}f}" if np.isnan(se) else f"{mean:.{digits}f} +- {se:.{digits}f}"


def markdown_table(rows: list[dict], published: dict) -> str:
    """Ours beside the published MC-dropout and deep-ensemble figures."""
    columns = [
        "data set", "model", "splits", "RMSE", "LL", "fit s", "R-hat lp / pred (max)",
        "ESS lp (min)", "conv. warnings", "MC dropout RMSE", "MC dropout LL",
        "deep ens. RMSE", "deep ens. LL",
    ]  # fmt: skip
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join(["---"] * len(columns)) + " |"]
    for row in sorted(rows, key=lambda r: (r["dataset"], r["model"])):
        pub = published.get(row["dataset"], {})
        if row["model"] in MCMC_MODELS:
            diag = [
                f"{row['rhat_log_prob_max']:.2f} / {row['rhat_predictions_max']:.2f}",
                f"{row['ess_bulk_log_prob_min']:.0f}",
                f"{row['n_convergence_warnings']}/{row['n_splits']}",
            ]
        else:
            diag = ["", "", ""]
        cells = [
            row["dataset"],
            row["model"],
            str(row["n_splits"]),
            _pm(row["rmse"], row["rmse_se"]),
            _pm(row["log_likelihood"], row["log_likelihood_se"]),
            f"{row['fit_time_s']:.1f}",
            *diag,
            pub.get("MC dropout RMSE", ""),
            pub.get("MC dropout LL", ""),
            pub.get("deep ensemble (5) RMSE", ""),
            pub.get("deep ensemble LL", ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- command line --------------------------------------------------------------------------------


def parse_splits(text: str) -> list[int]:
    """``"0-19"``, ``"0,3,5"`` or ``"0-4,7"`` to a sorted list of split numbers."""
    splits = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if match is None:
            raise argparse.ArgumentTypeError(f"bad split range {part!r}; use e.g. 0-19 or 0,3,5")
        low = int(match[1])
        high = int(match[2]) if match[2] is not None else low
        splits.update(range(low, high + 1))
    return sorted(splits)


def parse_override(text: str) -> tuple[str, str, object]:
    """``"hmc.n_draws=50"`` to ``("hmc", "n_draws", 50)`` (values read as Python literals, or
    a call of one of ``CONSTRUCTORS`` with literal arguments)."""
    match = re.fullmatch(r"(\w+)\.(\w+)=(.*)", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"bad --set {text!r}; use model.param=value")
    try:
        value = ast.literal_eval(match[3])
    except (ValueError, SyntaxError):
        value = _construct(match[3])
    return match[1], match[2], value


def _construct(text: str):
    """A call of one of ``CONSTRUCTORS`` (``HMC(n_steps=30)``, ``HierarchicalPrior()``) built
    from literal arguments; any other text stays a bare string (such as relu)."""
    try:
        call = ast.parse(text, mode="eval").body
    except SyntaxError:
        return text
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
        return text
    if call.func.id not in CONSTRUCTORS:
        raise argparse.ArgumentTypeError(
            f"--set: unknown constructor {call.func.id!r}; known: {sorted(CONSTRUCTORS)}"
        )
    args = [ast.literal_eval(a) for a in call.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return CONSTRUCTORS[call.func.id](*args, **kwargs)


def model_params(models: list[str], overrides, epochs: int | None) -> dict[str, dict]:
    params = {m: dict(MODELS[m][1]) for m in models}
    if epochs is not None and "mcdropout" in params:
        params["mcdropout"]["max_iter"] = epochs
    for model, key, value in overrides:
        if model not in MODELS:
            raise SystemExit(f"--set: unknown model {model!r}; models are {sorted(MODELS)}")
        if model in params:
            known = MODELS[model][0]().set_params(**copy.deepcopy(params[model])).get_params()
            if key not in known:  # a sampler__ setting: of the sampler set so far
                raise SystemExit(f"--set: {MODELS[model][0].__name__} has no parameter {key!r}")
            params[model][key] = value
    return params


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", default=list(DATASETS))
    p.add_argument("--splits", type=parse_splits, default=list(range(20)), help="e.g. 0-19")
    p.add_argument("--models", nargs="+", default=["hmc", "mcdropout"], choices=sorted(MODELS))
    p.add_argument("--epochs", type=int, default=None, help="MC dropout max_iter, in epochs (4000)")
    p.add_argument(
        "--set",
        dest="overrides",
        type=parse_override,
        action="append",
        default=[],
        metavar="MODEL.PARAM=VALUE",
        help="override one setting of MODELS (repeatable)",
    )
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--n-jobs", type=int, default=1, help="joblib jobs (one per split and model)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per job")
    p.add_argument("--out", type=Path, default=None, help="JSON file for all results")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    params = model_params(args.models, args.overrides, args.epochs)
    jobs = [
        (model, name, split)
        for name in args.datasets
        for split in args.splits
        for model in args.models
    ]
    for name in args.datasets:  # fail early on a missing data set or split
        load_uci(name, max(args.splits), args.data_dir)
    start = time.perf_counter()
    records = Parallel(n_jobs=args.n_jobs, verbose=5 if args.n_jobs != 1 else 0)(
        delayed(run_one)(model, params[model], name, split, args.data_dir, args.threads)
        for model, name, split in jobs
    )
    wall = time.perf_counter() - start
    rows = summarise(records)
    table = markdown_table(rows, published_table(args.data_dir))
    print(table)
    print(f"\n{len(jobs)} fits in {wall:.0f} s wall ({args.n_jobs} jobs x {args.threads} threads)")
    if args.out is not None:
        result = {
            "settings": {m: {k: _jsonable(v) for k, v in p.items()} for m, p in params.items()},
            "args": {k: _jsonable(v) for k, v in vars(args).items()},
            "machine": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "processor": platform.processor() or platform.machine(),
            },
            "wall_time_s": wall,
            "summary": rows,
            "runs": records,
        }
        args.out.write_text(json.dumps(result, indent=1))
        print(f"results written to {args.out}")
    return rows


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)  # a sampler, prior or init object


if __name__ == "__main__":
    main()
