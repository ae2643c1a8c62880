"""What a default ``HMCRegressor`` fit's own convergence check would cost to pass.

Fits ``HMCRegressor()`` at its defaults (one torch thread) on one of the panel's regression
sets, X standardised, then continues the chains with ``warm_start=True`` (each continuation the
default budget again) until the fit's own check (:func:`sklearn_bnn.diagnostics.converged`)
passes or ``--budget`` seconds have run. Prints one JSON line per fit: elapsed seconds, draws
in all (every chain), whether the check passes, the within-chain R-hat, the worst chain's own
R-hat and the test NLL (in y's units, or in standardised units with ``--standardise-y``).
Minutes per data set; feeds docs/benchmarks.md, "The current defaults".

    python benchmarks/studies/regressor_continuation.py yacht --split 0 --budget 300
    python benchmarks/studies/regressor_continuation.py wine-quality-red --standardise-y
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scoreboard"))
from panel import REGRESSION_SETS, load  # noqa: E402

from sklearn_bnn import HMCRegressor  # noqa: E402
from sklearn_bnn.diagnostics import converged  # noqa: E402


def gaussian_nll(y, mean, std) -> float:
    return float(np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y - mean) / std) ** 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=[s for s in REGRESSION_SETS if s != "gap1d"])
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--budget", type=float, default=300.0, help="seconds, then stop")
    parser.add_argument("--standardise-y", action="store_true", help="as the panel fits")
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, X_train, y_train, X_test, y_test, _ = load(args.dataset, args.split)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    if args.standardise_y:
        mu, sd = y_train.mean(), y_train.std()
        y_train, y_test = (y_train - mu) / sd, (y_test - mu) / sd
    model = HMCRegressor(random_state=args.split)
    start, k = time.perf_counter(), 0
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X_train, y_train)
        d, elapsed = model.diagnostics_, time.perf_counter() - start
        within = max(d["rhat_within_log_prob"], d["rhat_within_predictions_max"])
        mean, std = model.predict(X_test, return_std=True)
        record = {
            "dataset": args.dataset, "split": args.split, "fit": k, "s": round(elapsed, 1),
            "draws_in_all": int(d["n_draws"]), "passes": bool(converged(d)),
            "rhat_within": round(float(within), 3),
            "rhat_worst_chain": round(float(np.nanmax(d["rhat_per_chain"])), 3),
            "nll": round(gaussian_nll(y_test, mean, std), 3),
        }  # fmt: skip
        print(json.dumps(record), flush=True)
        if record["passes"] or elapsed > args.budget:
            break
        model.set_params(warm_start=True)
        k += 1


if __name__ == "__main__":
    main()
