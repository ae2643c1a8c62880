"""SGMCMCClassifier / SGMCMCRegressor at their defaults against scikit-learn's MLPs (issue 23).

Every model sits in ``make_pipeline(StandardScaler(), model)``; a 30 % test split per seed
(``train_test_split(..., random_state=seed, stratify=y)`` for the classifiers), the models
seeded with the same seed. Classification: accuracy, NLL (``log_loss``) and ECE (15 bins) on
the test rows; regression: RMSE and the Gaussian NLL per test point in units of y (the
MLPRegressor's predictive sd is the training RMSE, the plug-in of a point estimate). The
regression targets are standardised for both models (``TransformedTargetRegressor``), so the
figures are in the original units of y. Fit time is wall clock on one torch thread.

Printed: mean ± standard error over the seeds.

Usage::

    python benchmarks/studies/sgmcmc_defaults.py                       # small sets, 3 seeds
    python benchmarks/studies/sgmcmc_defaults.py --sets large --seeds 0  # 200,000 rows, once
    python benchmarks/studies/sgmcmc_defaults.py --kw '{"n_warmup": 50}'  # other settings
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import (
    load_breast_cancer,
    load_diabetes,
    load_digits,
    load_wine,
    make_classification,
)
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import SGMCMCClassifier, SGMCMCRegressor
from sklearn_bnn.metrics import expected_calibration_error

SG_ONLY = False
UCI = Path(os.environ.get("UCI_DATA", "/work/shared/data/uci"))


def _digits():
    return load_digits(n_class=7, return_X_y=True)


def _large():
    return make_classification(
        n_samples=200_000, n_features=50, n_informative=20, n_classes=5, random_state=0
    )


def _concrete():
    data = np.loadtxt(UCI / "concrete" / "data.txt")
    return data[:, :-1], data[:, -1]


CLASSIFICATION = {
    "digits 0-6": _digits,
    "breast cancer": lambda: load_breast_cancer(return_X_y=True),
    "wine": lambda: load_wine(return_X_y=True),
    "200k x 50": _large,
}
REGRESSION = {"diabetes": lambda: load_diabetes(return_X_y=True), "concrete": _concrete}
SETS = {
    "small": ["digits 0-6", "breast cancer", "wine", "diabetes", "concrete"],
    "large": ["200k x 50"],
}


def _classify(name, seed, kw):
    X, y = CLASSIFICATION[name]()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    out = {}
    models = {
        "MLP": MLPClassifier(random_state=seed),
        "SGMCMC": SGMCMCClassifier(random_state=seed, **kw),
    }
    if SG_ONLY:
        del models["MLP"]
    for label, model in models.items():
        pipe = make_pipeline(StandardScaler(), model)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pipe.fit(Xtr, ytr)
        fit_s = time.perf_counter() - start
        proba = pipe.predict_proba(Xte)
        out[label] = {
            "acc": float(np.mean(pipe.classes_[proba.argmax(1)] == yte)),
            "nll": float(log_loss(yte, proba, labels=pipe.classes_)),
            "ece": float(expected_calibration_error(yte, proba)),
            "fit s": fit_s,
        }
        if label == "SGMCMC":
            print(f"  {name} seed {seed}: step {model.diagnostics_['step_size']}", flush=True)
    return out


def _regress(name, seed, kw):
    X, y = REGRESSION[name]()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed)
    out = {}
    models = {
        "MLP": MLPRegressor(random_state=seed, max_iter=1000),
        "SGMCMC": SGMCMCRegressor(random_state=seed, **kw),
    }
    for label, model in models.items():
        pipe = TransformedTargetRegressor(
            make_pipeline(StandardScaler(), model), transformer=StandardScaler()
        )
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pipe.fit(Xtr, ytr)
        fit_s = time.perf_counter() - start
        scaler = pipe.transformer_
        if label == "MLP":
            mean = pipe.predict(Xte)
            sd = np.full_like(mean, np.sqrt(np.mean((pipe.predict(Xtr) - ytr) ** 2)))
        else:
            Xs = pipe.regressor_[0].transform(Xte)
            mean_s, sd_s = pipe.regressor_[-1].predict(Xs, return_std=True)
            mean = scaler.inverse_transform(mean_s.reshape(-1, 1)).ravel()
            sd = sd_s * scaler.scale_[0]
        nll = 0.5 * np.log(2 * np.pi * sd**2) + 0.5 * ((yte - mean) / sd) ** 2
        out[label] = {
            "rmse": float(np.sqrt(np.mean((yte - mean) ** 2))),
            "nll": float(np.mean(nll)),
            "fit s": fit_s,
        }
    return out


def _fmt(values):
    values = np.asarray(values, dtype=float)
    if len(values) == 1:
        return f"{values[0]:.3f}"
    se = values.std(ddof=1) / np.sqrt(len(values))
    return f"{values.mean():.3f} ± {se:.3f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["small"], help="small, large or names")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--kw", default="{}", help="JSON: SGMCMC parameters to override")
    parser.add_argument("--sg-only", action="store_true", help="classification: no MLP")
    args = parser.parse_args(argv)
    global SG_ONLY
    SG_ONLY = args.sg_only
    torch.set_num_threads(1)
    kw = json.loads(args.kw)
    names = [n for s in args.sets for n in SETS.get(s, [s])]
    print(f"seeds {args.seeds}; SGMCMC parameters {kw or 'defaults'}")
    print("| data | model | accuracy / RMSE | NLL | ECE | fit s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        runs = [
            (_classify if name in CLASSIFICATION else _regress)(name, seed, kw)
            for seed in args.seeds
        ]
        for model in [m for m in ("MLP", "SGMCMC") if m in runs[0]]:
            rows = [r[model] for r in runs]
            first = "acc" if "acc" in rows[0] else "rmse"
            ece = _fmt([r["ece"] for r in rows]) if "ece" in rows[0] else "–"
            print(
                f"| {name} | {model} | {_fmt([r[first] for r in rows])} | "
                f"{_fmt([r['nll'] for r in rows])} | {ece} | {_fmt([r['fit s'] for r in rows])} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
