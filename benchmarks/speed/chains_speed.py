"""Cost of many chains: wall time per draw of 8 chains against 1 chain.

MLP [13, 50, 1] on 500 rows (a regression in 13 features), fixed step size and L. Reports, for
each chain method, the wall time per draw per chain divided by that of a single chain measured in
the same run. Run: ``python benchmarks/speed/chains_speed.py [--threads N] [--chains 2 4 8]
[--methods vectorized]`` (``--threads 0`` keeps torch's default thread count; the fit itself
then picks its threads, ``sklearn_bnn.fit_threads``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from sklearn_bnn import HMCRegressor
from sklearn_bnn.samplers import HMC

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
import harness  # noqa: E402


def timed_fit(X, y, **params):
    reg = HMCRegressor(
        hidden_layer_sizes=(50,),
        n_warmup=0,
        n_draws=100,
        sampler=HMC(n_steps=10, step_size=1e-3),
        init="random",
        noise_precision=10.0,
        random_state=0,
        **params,
    )
    return harness.timed_fit(reg, X, y)  # timing only: no convergence asked


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="0: torch's default")
    parser.add_argument("--chains", type=int, nargs="*", default=[8], help="vectorized counts")
    parser.add_argument("--methods", nargs="*", default=["vectorized", "sequential", "parallel"])
    # how each is asked for: the estimators' n_jobs
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 13))
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=500)

    timed_fit(X, y, n_chains=1)  # warm-up
    one = min(timed_fit(X, y, n_chains=1) for _ in range(3))
    rows = [("1 chain", 1, one)]
    for C in args.chains:
        for method in args.methods:
            if C == 1:
                continue
            n_jobs = {"vectorized": None, "sequential": 1, "parallel": 2}[method]
            t = min(timed_fit(X, y, n_chains=C, n_jobs=n_jobs) for _ in range(2))
            jobs = f" (n_jobs={n_jobs})" if n_jobs is not None else ""
            rows.append((f"{C} chains, {method}{jobs}", C, t))
    threads = torch.get_num_threads()
    print(f"MLP [13, 50, 1], 500 rows, 100 draws per chain, L = 10, {threads} thread(s)")
    print(f"{'':<32}{'wall (s)':>10}{'per draw (ms)':>15}{'vs 1 chain':>12}")
    for name, _, t in rows:
        per_draw = t / 100
        print(f"{name:<32}{t:>10.2f}{1e3 * per_draw:>15.1f}{per_draw / (one / 100):>11.2f}x")


if __name__ == "__main__":
    main()
