"""Ensemble-size reduction on held-out data: the greedy pick of seeds/004 against random order.

Issue 25, item 4: ``EnsembleReducer``'s greedy selection, fitted on a small validation split,
kept 3 of 100 bootstrap MLPs on digits and lost 0.7 points of test accuracy, and 1 of 200 and
lost 2.2 points. This study measures, on held-out test data, what the reduced ensembles keep.

Members: scikit-learn's ``MLPClassifier(hidden_layer_sizes=(50,), max_iter=200)``, each fitted
on a stratified bootstrap resample of the fitting rows (features standardised on those rows).
Splits, for each seed s: a stratified 30 % test set, then a stratified 20 % of the rest as the
validation set on which the reducer selects (digits: 1005 rows to fit, 252 to validate, 540 to
test; breast cancer: 318 / 80 / 171; wine: 99 / 25 / 54). Cases: digits with 100 members (the
first 100 of the 200 below) and with 200 ("bag of 200"), breast cancer and wine with 100.

Reducers, each on the stack of member predictions (``estimator=None``, ``fit(stack_val,
y_val)``, ``transform(stack_test)``), with ``random_state=s``:

* ``greedy``: ``method="greedy", tolerance=0`` (the previous default);
* ``random_order``: the defaults (accuracy, tolerance 0.005, 95 % upper bound);
* ``random_order, ECE``: ``scoring="ece"`` with a tolerance of 10 % of the full ensemble's
  validation ECE.

Reported: the members kept per split, the test accuracy and ECE (15 bins) of the full
ensemble, and the change of the reduced one against it: accuracy in points (mean and worst
over the splits), ECE relative to the full ensemble's (mean, lowest and highest).

Run: ``OMP_NUM_THREADS=1 python benchmarks/studies/ensemble_reduction.py [--seeds 0 1 2 3 4]
[--cache DIR] [--n-jobs 1]``. ``--cache`` keeps the member predictions between runs: the fits
take about 6 minutes per digits split (200 MLPs) on one thread of a loaded machine, the
reductions about 4 minutes for the 5 splits of all cases (mostly the ECE bounds).
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np
from joblib import Parallel, delayed
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

from sklearn_bnn.ensemble import EnsembleReducer
from sklearn_bnn.metrics import expected_calibration_error

LOADERS = {"digits": load_digits, "breast_cancer": load_breast_cancer, "wine": load_wine}
# (label, data set, members)
CASES = [
    ("digits, 100 MLPs", "digits", 100),
    ("digits, bag of 200", "digits", 200),
    ("breast cancer, 100 MLPs", "breast_cancer", 100),
    ("wine, 100 MLPs", "wine", 100),
]


def _fit_member(X, y, rows, seed, X_val, X_test):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPClassifier(hidden_layer_sizes=(50,), max_iter=200, random_state=seed)
        mlp.fit(X[rows], y[rows])
    return mlp.predict_proba(X_val), mlp.predict_proba(X_test)


def member_predictions(name: str, seed: int, n_members: int, n_jobs: int = 1) -> dict:
    """Validation and test predictions of ``n_members`` bootstrap MLPs on split ``seed``."""
    X, y = LOADERS[name](return_X_y=True)
    X_rest, X_test, y_rest, y_test = train_test_split(
        X, y, test_size=0.3, random_state=seed, stratify=y
    )
    X_fit, X_val, y_fit, y_val = train_test_split(
        X_rest, y_rest, test_size=0.2, random_state=seed, stratify=y_rest
    )
    scaler = StandardScaler().fit(X_fit)
    X_fit, X_val, X_test = (scaler.transform(a) for a in (X_fit, X_val, X_test))
    rng = np.random.RandomState(seed)
    by_class = [np.flatnonzero(y_fit == c) for c in np.unique(y_fit)]
    draws = []  # drawn in one sequence, so the members do not depend on n_jobs
    for _ in range(n_members):
        rows = np.concatenate([rng.choice(idx, len(idx)) for idx in by_class])
        draws.append((rows, rng.randint(2**31)))
    out = Parallel(n_jobs=n_jobs)(
        delayed(_fit_member)(X_fit, y_fit, rows, s, X_val, X_test) for rows, s in draws
    )
    return {
        "val": np.stack([v for v, _ in out]),
        "test": np.stack([t for _, t in out]),
        "y_val": y_val,
        "y_test": y_test,
    }


def cached_predictions(name, seed, n_members, cache, n_jobs):
    """``member_predictions``, read from / written to ``cache`` when given (a stack of more
    members serves a smaller one: members are drawn in sequence)."""
    path = os.path.join(cache, f"{name}_{seed}.npz") if cache else None
    if path and os.path.exists(path):
        data = dict(np.load(path))
        if len(data["val"]) >= n_members:
            return data
    data = member_predictions(name, seed, n_members, n_jobs)
    if path:
        os.makedirs(cache, exist_ok=True)
        np.savez(path, **data)
    return data


def reducers(val_stack, y_val, seed):
    ece_full = expected_calibration_error(y_val, val_stack.mean(axis=0))
    return {
        "greedy": EnsembleReducer(method="greedy", tolerance=0.0, random_state=seed),
        "random_order": EnsembleReducer(random_state=seed),
        "random_order, ECE": EnsembleReducer(
            scoring="ece", tolerance=0.1 * ece_full, random_state=seed
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--cache", default=None)
    parser.add_argument("--n-jobs", type=int, default=1)
    args = parser.parse_args()

    print(
        "| case | reducer | members kept (per split) | test accuracy full "
        "| accuracy change, points: mean / worst | test ECE full "
        "| ECE change, relative: mean [lowest, highest] |\n"
        "| --- | --- | --- | --- | --- | --- | --- |"
    )
    for label, name, n_members in CASES:
        rows = {}
        full_acc, full_ece = [], []
        for seed in args.seeds:
            data = cached_predictions(name, seed, n_members, args.cache, args.n_jobs)
            val, test = data["val"][:n_members], data["test"][:n_members]
            y_val, y_test = data["y_val"], data["y_test"]
            p_full = test.mean(axis=0)
            acc = np.mean(p_full.argmax(axis=1) == y_test)
            ece = expected_calibration_error(y_test, p_full)
            full_acc.append(acc)
            full_ece.append(ece)
            for key, reducer in reducers(val, y_val, seed).items():
                p = reducer.fit(val, y_val).transform(test).mean(axis=0)
                row = rows.setdefault(key, {"kept": [], "acc": [], "ece": []})
                row["kept"].append(reducer.n_members_)
                row["acc"].append(100 * (np.mean(p.argmax(axis=1) == y_test) - acc))
                row["ece"].append(expected_calibration_error(y_test, p) / ece - 1)
        for key, row in rows.items():
            d_acc, d_ece = np.array(row["acc"]), np.array(row["ece"])
            print(
                f"| {label} | {key} | {', '.join(map(str, row['kept']))} "
                f"| {np.mean(full_acc):.3f} | {d_acc.mean():+.2f} / {d_acc.min():+.2f} "
                f"| {np.mean(full_ece):.4f} "
                f"| {d_ece.mean():+.1%} [{d_ece.min():+.1%}, {d_ece.max():+.1%}] |",
                flush=True,
            )


if __name__ == "__main__":
    main()
