"""What the regressors' four chains cost: ``HMCRegressor()`` at ``n_chains=1`` and at its default
``n_chains=4``, fitted one after the other on the same UCI split (issue 33).

The panel's cell: X and y standardised with the training split's statistics, the default MLP
(100 ReLU units), ``random_state=0``, torch's default threads (a fit then picks its own count,
``sklearn_bnn._threads``: one thread for every set here). Fit seconds, in pairs (one chain,
then four) repeated ``--repeats`` times; the ratio of each pair, from the same minute of the
machine. Run it with no other job on the machine.

Run: ``python benchmarks/speed/regressor_chains_cost.py [--datasets concrete wine-quality-red]
[--split 0] [--repeats 1]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scoreboard"))
from uci import DATA_DIR, load_uci, standardise  # noqa: E402

from sklearn_bnn import HMCRegressor  # noqa: E402


def fit_seconds(X, y, n_chains: int) -> float:
    reg = HMCRegressor(n_chains=n_chains, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # R-hat: the chains' modes differ
        start = time.perf_counter()
        reg.fit(X, y)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["concrete", "wine-quality-red"])
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    print("| set | rows | one chain s | four chains s | ratio |\n| --- | --- | --- | --- | --- |")
    for name in args.datasets:
        X_train, y_train, X_test, y_test = load_uci(name, args.split, DATA_DIR)
        X, _, _, _ = standardise(X_train, X_test)
        y, _, _, _ = standardise(y_train, y_test)
        for _ in range(args.repeats):
            one = fit_seconds(X, y, 1)
            four = fit_seconds(X, y, 4)
            print(f"| {name} | {len(y)} | {one:.1f} | {four:.1f} | {four / one:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
