"""The package's estimators in other libraries: MAPIE, scikit-activeml and Ray (docs/interop.md).

1. MAPIE: split-conformal intervals around an ``HMCRegressor`` (diabetes), scored by the
   residual over the model's own predictive standard deviation, and conformal label sets
   from an ``HMCClassifier`` (digits).
2. scikit-activeml: BALD choosing which digits to label, from ``predict_samples``; against
   labelling at random (one seed: an illustration, not a benchmark).
3. Ray: two chains as joblib jobs on a local Ray instance, with the draws of ``n_jobs=1``
   (skipped when Ray is not installed).

Needs: pip install -e ".[interop]" (MAPIE, scikit-activeml) and, for part 3, pip install ray
Run: python examples/interop.py   (one to two minutes on a 2-core CPU; Ray's start-up is a
third of it)
"""

import os
import time
import warnings

import joblib
import numpy as np
import torch
from mapie.classification import SplitConformalClassifier
from mapie.regression import SplitConformalRegressor
from skactiveml.classifier import SklearnClassifier
from skactiveml.pool import GreedyBALD
from sklearn.datasets import load_diabetes, load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import HMCClassifier, HMCRegressor
from sklearn_bnn.metrics import mutual_information

ALPHA = 0.1  # 90 % intervals
ALPHA_SETS = 0.01  # 99 % label sets: below the accuracy (97 %), LAC's sets would be empty
warnings.filterwarnings("ignore", message="R-hat")  # short chains in parts 2 and 3


def three_way_split(X, y, seed, stratify=False):
    """Train / conformalize / test, 50 / 25 / 25 %."""
    X_train, X_rest, y_train, y_rest = train_test_split(
        X, y, train_size=0.5, random_state=seed, stratify=y if stratify else None
    )
    X_cal, X_test, y_cal, y_test = train_test_split(
        X_rest, y_rest, train_size=0.5, random_state=seed, stratify=y_rest if stratify else None
    )
    scale = StandardScaler().fit(X_train).transform
    return scale(X_train), y_train, scale(X_cal), y_cal, scale(X_test), y_test


def conformal_regression():
    X, y = load_diabetes(return_X_y=True)
    X_train, y_train, X_cal, y_cal, X_test, y_test = three_way_split(X, y, seed=0)
    reg = HMCRegressor(
        hidden_layer_sizes=(16,),
        normalize_y=True,
        n_warmup=150,
        n_draws=200,
        n_chains=2,
        random_state=0,
    ).fit(X_train, y_train)
    print(f"1a. diabetes, {len(X_test)} test rows, 90 % intervals:")
    mean, std = reg.predict(X_test, return_std=True)
    z = 1.6449  # the model's own Gaussian interval
    inside = np.abs(y_test - mean) <= z * std
    print(
        f"    HMCRegressor mean -/+ 1.645 std      coverage {inside.mean():.3f}  "
        f"mean width {2 * z * std.mean():6.1f}"
    )
    for score in ("absolute", "std_normalized"):
        mapie = SplitConformalRegressor(
            reg, confidence_level=1 - ALPHA, conformity_score=score, prefit=True
        ).conformalize(X_cal, y_cal)
        _, bounds = mapie.predict_interval(X_test)
        low, high = bounds[:, 0, 0], bounds[:, 1, 0]
        covered = (y_test >= low) & (y_test <= high)
        width = high - low
        print(
            f"    MAPIE split conformal, {score:15s}  coverage {covered.mean():.3f}  "
            f"mean width {width.mean():6.1f}  width range {width.min():.1f}-{width.max():.1f}"
        )


def conformal_classification(digits):
    X_train, y_train, X_cal, y_cal, X_test, y_test = digits
    clf = HMCClassifier(hidden_layer_sizes=(32,), n_warmup=150, n_draws=150, random_state=0).fit(
        X_train, y_train
    )
    accuracy = np.mean(clf.predict(X_test) == y_test)
    print(f"1b. digits, {len(X_test)} test rows, accuracy {accuracy:.3f}, 99 % label sets:")
    for score in ("lac", "aps"):
        mapie = SplitConformalClassifier(
            clf, confidence_level=1 - ALPHA_SETS, conformity_score=score, random_state=0
        ).conformalize(X_cal, y_cal)
        _, sets = mapie.predict_set(X_test)
        sets = sets[:, :, 0]
        covered = sets[np.arange(len(y_test)), np.searchsorted(clf.classes_, y_test)]
        print(
            f"    MAPIE split conformal, {score}: coverage {covered.mean():.3f}  "
            f"mean set size {sets.sum(1).mean():.2f}  empty sets {np.mean(sets.sum(1) == 0):.3f}"
        )


def active_learning(digits, rounds=4, batch=20):
    X_pool, y_pool, _, _, X_test, y_test = digits
    rng = np.random.default_rng(0)
    # Start from 3 labelled images per class: the wrapper's classes must all be in the fit,
    # or predict_samples would have fewer columns than skactiveml's classes.
    start = np.concatenate([rng.choice(np.flatnonzero(y_pool == c), 3, False) for c in range(10)])
    y = np.full(len(y_pool), -1)  # -1: not labelled (yet)
    y[start] = y_pool[start]
    model = SklearnClassifier(
        HMCClassifier(hidden_layer_sizes=(32,), n_warmup=100, n_draws=100, random_state=0),
        classes=np.arange(10),
        missing_label=-1,
    )
    bald = GreedyBALD(
        sample_predictions_method_name="predict_samples", missing_label=-1, random_state=0
    )
    print(f"2.  BALD on digits: {len(start)} labels, then {rounds} rounds of {batch} queries")
    for r in range(rounds):
        model.fit(X_pool, y)
        picks = bald.query(X_pool, y, model, fit_ensemble=False, batch_size=batch)
        mi = mutual_information(model.predict_samples(X_pool))
        unlabelled = y == -1
        print(
            f"    round {r}: {np.sum(~unlabelled):3d} labels, test accuracy "
            f"{np.mean(model.predict(X_test) == y_test):.3f}; queried points' mutual "
            f"information {np.median(mi[picks]):.3f} (median) against "
            f"{np.median(mi[unlabelled]):.3f} in the pool"
        )
        y[picks] = y_pool[picks]  # the oracle answers


def chains_on_ray():
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # stay on loopback
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        from ray.util.joblib import register_ray
    except ImportError:
        print("3.  Ray is not installed (pip install ray): skipped")
        return
    X, y = load_digits(n_class=3, return_X_y=True)
    X = StandardScaler().fit_transform(X)
    params = dict(hidden_layer_sizes=(16,), n_warmup=50, n_draws=50, n_chains=2, random_state=0)
    # n_jobs at most Ray's CPUs (or -1): Ray's pool refuses more processes than the cluster has.
    local = HMCClassifier(**params, n_jobs=1).fit(X, y)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        register_ray()
        with joblib.parallel_config(backend="ray"):
            on_ray = HMCClassifier(**params, n_jobs=2).fit(X, y)
    finally:
        ray.shutdown()
    same = torch.equal(local.samples_.draws, on_ray.samples_.draws)
    print(f"3.  2 chains as Ray jobs: draws identical to n_jobs=1: {same}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    X, y = load_digits(return_X_y=True)
    digits = three_way_split(X, y, seed=0, stratify=True)
    for part, args in [
        (conformal_regression, ()),
        (conformal_classification, (digits,)),
        (active_learning, (digits,)),
        (chains_on_ray, ()),
    ]:
        start = time.perf_counter()
        part(*args)
        print(f"    ({time.perf_counter() - start:.0f} s)")
