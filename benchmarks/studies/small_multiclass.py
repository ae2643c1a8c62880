"""SGMCMCClassifier and MCDropoutClassifier at their defaults on small multi-class sets (issue 33).

Every model runs in ``make_pipeline(StandardScaler(), model)`` with only ``random_state`` set,
beside scikit-learn's ``MLPClassifier(random_state=s)``. For each set and seed s the rows are
split 75 / 25, stratified, with ``random_state=s`` (the split and the models' seeds change
together), and each model is scored on the test rows: NLL (mean negative log predictive
probability), accuracy, ECE (top label, 15 equal-width bins), the mean top-label confidence,
the NLL of the correctly and of the wrongly classified test rows, and the fit time.

Sets:

* ``digits``: scikit-learn's 1,797 8x8 images, 10 classes, 64 features.
* ``wine``: scikit-learn's 178 wines, 3 classes, 13 features.
* ``segment``: the UCI image-segmentation set (Statlog), 2,310 rows, 7 classes, 18 features (the
  19th, ``region-pixel-count``, is 9 on every row). scikit-learn does not ship it; the copy in
  the ``river`` package is read without importing river (``pip install --no-deps river``),
  or give the file's path with ``--segment`` (the zipped or plain CSV).
* ``breast_cancer``: scikit-learn's 569 rows, 2 classes (a check that a change does not hurt
  binary sets).
* ``segment_window``: the segment set as a binary problem, "window" (its most confused class)
  against the rest.
* ``synthetic_1k_2``, ``synthetic_1k_3``: ``make_classification(n_samples=1000,
  n_features=20, n_informative=5, n_classes=2 or 3, flip_y=0.03, random_state=0)``: small,
  noisy sets on which the default networks over-fit.
* ``synthetic_20k``: ``make_classification(n_samples=20_000, n_features=20, n_informative=10,
  n_redundant=5, n_classes=5, n_clusters_per_class=2, flip_y=0.01, random_state=0)``, a larger
  set, where a default that depends on the number of rows has to be harmless.

A model with a learned temperature (``calibration="temperature"``) also gets a record of its
untempered average, tagged ``<tag>/untempered``: the same draws or network as
``calibration=None`` with the same seed, so it scores the uncalibrated model without a second
fit (no fit time).

Writes one record per fit to ``--out`` (JSON, rewritten after every fit; a rerun with the same
``--tag`` skips the (set, model, seed) cells already there; by default
``benchmarks/out/small_multiclass.json``, which git ignores: the record the docs cite is
``benchmarks/results/small_multiclass.json``) and prints a table of means over seeds with their
standard errors.

    python benchmarks/studies/small_multiclass.py --quick          # seed 0, the three small sets
    python benchmarks/studies/small_multiclass.py                  # seeds 0-4, the three small sets
    python benchmarks/studies/small_multiclass.py --sets breast_cancer synthetic_20k --seeds 0 1 2
    python benchmarks/studies/small_multiclass.py --models sgmcmc --sg-kw '{"calibration": null}' \\
        --tag sg-uncalibrated                              # a setting against the defaults
    python benchmarks/studies/small_multiclass.py --report         # the tables of --out, by tag
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.datasets import (  # noqa: E402
    load_breast_cancer,
    load_digits,
    load_wine,
    make_classification,
)
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from sklearn_bnn import HMCClassifier, MCDropoutClassifier, SGMCMCClassifier  # noqa: E402
from sklearn_bnn.metrics import (  # noqa: E402
    expected_calibration_error,
    negative_log_likelihood,
)

OUT_DEFAULT = Path(__file__).resolve().parents[1] / "out" / "small_multiclass.json"  # git ignores
SMALL = ["digits", "wine", "segment"]
CHECKS = ["breast_cancer", "segment_window", "synthetic_1k_2", "synthetic_1k_3", "synthetic_20k"]
MODELS = {
    "mlp": lambda seed, kw: MLPClassifier(random_state=seed, **kw),
    "sgmcmc": lambda seed, kw: SGMCMCClassifier(random_state=seed, **kw),
    "mc_dropout": lambda seed, kw: MCDropoutClassifier(random_state=seed, **kw),
    "hmc": lambda seed, kw: HMCClassifier(random_state=seed, **kw),
}
LABELS = {
    "mlp": "MLPClassifier",
    "sgmcmc": "SGMCMCClassifier",
    "mc_dropout": "MCDropoutClassifier",
    "hmc": "HMCClassifier",
}


def _segment_file(path: str | None) -> Path:
    if path:
        return Path(path)
    spec = importlib.util.find_spec("river")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "the segment set needs its CSV: `pip install --no-deps river` (read from the "
            "package's files, river is not imported) or --segment PATH"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "segment.csv.zip"


def load_segment(path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The UCI image-segmentation set: X (2310, 18) float64, y (2310,) class names."""
    file = _segment_file(path)
    raw = file.read_bytes()
    if file.suffix == ".zip":
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            raw = z.read(z.namelist()[0])
    lines = raw.decode().strip().splitlines()
    header = lines[0].split(",")
    target = header.index("category")
    rows = [line.split(",") for line in lines[1:]]
    y = np.array([r[target] for r in rows])
    X = np.array([[float(v) for i, v in enumerate(r) if i != target] for r in rows])
    return X, y


def load(name: str, segment: str | None = None):
    if name == "digits":
        return load_digits(return_X_y=True)
    if name == "wine":
        return load_wine(return_X_y=True)
    if name == "segment":
        return load_segment(segment)
    if name == "breast_cancer":
        return load_breast_cancer(return_X_y=True)
    if name == "segment_window":  # binary: the segment set's hardest class against the rest
        X, y = load_segment(segment)
        return X, (y == "window").astype(int)
    if name in ("synthetic_1k_2", "synthetic_1k_3"):  # small and noisy: 750 training rows
        return make_classification(
            n_samples=1000,
            n_features=20,
            n_informative=5,
            n_classes=int(name[-1]),
            flip_y=0.03,
            random_state=0,
        )
    if name == "synthetic_20k":
        return make_classification(
            n_samples=20_000,
            n_features=20,
            n_informative=10,
            n_redundant=5,
            n_classes=5,
            n_clusters_per_class=2,
            flip_y=0.01,
            random_state=0,
        )
    raise SystemExit(f"unknown set {name!r}")


def score(y_true, proba, classes) -> dict:
    """NLL, accuracy, ECE, mean confidence and the NLL of the right and the wrong rows."""
    index = np.searchsorted(classes, y_true)
    right = proba.argmax(1) == index
    p_true = np.clip(proba[np.arange(len(index)), index], np.finfo(float).eps, 1.0)
    nll_rows = -np.log(p_true)
    return {
        "nll": negative_log_likelihood(y_true, proba, labels=classes),
        "accuracy": float(right.mean()),
        "ece": expected_calibration_error(y_true, proba, labels=classes),
        "confidence": float(proba.max(1).mean()),
        "nll_right": float(nll_rows[right].mean()),
        "nll_wrong": float(nll_rows[~right].mean()) if (~right).any() else None,
        "n_wrong": int((~right).sum()),
        "nll_wrong_share": float(nll_rows[~right].sum() / nll_rows.sum()),
    }


def _details(model) -> dict:
    """What a fitted model says about itself that the diagnosis reads."""
    out = {}
    for name in ("calibration_temperature_", "n_iter_", "dropout_"):
        if hasattr(model, name):
            value = getattr(model, name)
            out[name.rstrip("_")] = value if not isinstance(value, np.ndarray) else value.tolist()
    diag = getattr(model, "diagnostics_", None)
    if isinstance(diag, dict):
        for key in ("step_size", "init_steps", "init_loss", "init_converged"):
            if key in diag:
                value = diag[key]
                if isinstance(value, torch.Tensor | np.ndarray):
                    value = np.asarray(value, dtype=float).ravel().tolist()
                out[key] = value
    return out


def _untempered(model, X):
    """The average a calibrated model tempers (None for a model without a temperature): the
    draws of a calibrated fit are those of ``calibration=None`` with the same seed, so this
    scores the uncalibrated default without a second fit."""
    if getattr(model, "calibration_posterior_", None) is None:
        return None
    if hasattr(model, "_dropout_average"):
        return model._dropout_average(X)
    return model._predictive_mean(X)


def run_cell(name, model_key, seed, kw, segment=None) -> list[dict]:
    """The records of one fit: its scores, and, for a model with a learned temperature, the
    scores of its untempered average (tag ``<tag>/untempered``, no fit time)."""
    X, y = load(name, segment)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=seed, stratify=y)
    model = MODELS[model_key](seed, kw)
    pipe = make_pipeline(StandardScaler(), model)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe.fit(Xtr, ytr)
    fit_s = time.perf_counter() - start
    proba = pipe.predict_proba(Xte)
    record = {
        "set": name,
        "model": model_key,
        "seed": seed,
        "n_train": len(ytr),
        "fit_s": fit_s,
        **score(yte, proba, pipe.classes_),
        **_details(model),
        "warnings": sorted({str(w.message)[:80] for w in caught}),
    }
    raw = _untempered(model, pipe[0].transform(Xte))
    if raw is None:
        return [record]
    plain = {**record, **score(yte, raw, pipe.classes_), "fit_s": None, "untempered": True}
    return [record, plain]


def _mean_se(values) -> str:
    values = np.asarray([v for v in values if v is not None], dtype=float)
    if len(values) == 0:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    se = values.std(ddof=1) / np.sqrt(len(values))
    return f"{values.mean():.3f} ± {se:.3f}"


def table(records: list[dict]) -> str:
    """Markdown: one row per (set, tag, model), means ± se over seeds."""
    lines = [
        "| set | model | tag | n | NLL | accuracy | ECE | confidence | NLL right | "
        "NLL wrong | fit s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys = []
    for r in records:
        key = (r["set"], r["model"], r["tag"])
        if key not in keys:
            keys.append(key)
    order = {s: i for i, s in enumerate(SMALL + CHECKS)}
    keys.sort(key=lambda k: (order.get(k[0], 99), list(MODELS).index(k[1]), k[2]))
    for set_name, model, tag in keys:
        rows = [r for r in records if (r["set"], r["model"], r["tag"]) == (set_name, model, tag)]
        cells = [
            _mean_se([r[m] for r in rows])
            for m in ("nll", "accuracy", "ece", "confidence", "nll_right", "nll_wrong", "fit_s")
        ]
        lines.append(f"| {set_name} | {LABELS[model]} | {tag} | {len(rows)} | " + " | ".join(cells))
        lines[-1] += " |"
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=None, help=f"default {SMALL}")
    parser.add_argument("--models", nargs="+", default=["mlp", "sgmcmc", "mc_dropout"])
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0-4")
    parser.add_argument("--quick", action="store_true", help="seed 0 only")
    parser.add_argument("--sg-kw", default="{}", help="JSON: SGMCMCClassifier settings")
    parser.add_argument("--dropout-kw", default="{}", help="JSON: MCDropoutClassifier settings")
    parser.add_argument("--hmc-kw", default="{}", help="JSON: HMCClassifier settings")
    parser.add_argument("--tag", default="defaults", help="names this run's settings in --out")
    parser.add_argument("--segment", default=None, help="path of segment.csv(.zip)")
    parser.add_argument("--out", default=str(OUT_DEFAULT))
    parser.add_argument("--report", action="store_true", help="print the tables of --out")
    args = parser.parse_args(argv)

    out = Path(args.out)
    records = json.loads(out.read_text()) if out.exists() else []
    if args.report:
        print(table(records))
        return
    torch.set_num_threads(1)
    sets = args.sets or SMALL
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2, 3, 4])
    kws = {
        "mlp": {},
        "sgmcmc": json.loads(args.sg_kw),
        "mc_dropout": json.loads(args.dropout_kw),
        "hmc": json.loads(args.hmc_kw),
    }
    done = {(r["set"], r["model"], r["seed"], r["tag"]) for r in records}
    mine = []
    for name in sets:
        for seed in seeds:
            for model in args.models:
                key = (name, model, seed, args.tag if model != "mlp" else "defaults")
                if key in done:
                    tags = (key[3], f"{key[3]}/untempered")
                    mine.extend(
                        r
                        for r in records
                        if (r["set"], r["model"], r["seed"]) == key[:3] and r["tag"] in tags
                    )
                    continue
                record, *plain = run_cell(name, model, seed, kws[model], args.segment)
                record["tag"] = key[3]
                for r in plain:
                    r["tag"] = f"{key[3]}/untempered"
                for r in [record, *plain]:
                    r["settings"] = kws[model]
                    records.append(r)
                    mine.append(r)
                done.add(key)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(records, indent=1))
                shown = ("calibration_temperature", "dropout", "n_iter")
                extra = {k: record[k] for k in shown if k in record}
                print(
                    f"{name} seed {seed} {model} [{key[3]}]: NLL {record['nll']:.4f} "
                    f"acc {record['accuracy']:.3f} ECE {record['ece']:.3f} "
                    f"conf {record['confidence']:.3f} fit {record['fit_s']:.1f} s {extra}",
                    flush=True,
                )
    print(table(mine))


if __name__ == "__main__":
    main()
