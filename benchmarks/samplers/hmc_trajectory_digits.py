"""Trajectory length on digits: ESS of the log density per 1,000 gradients, HMC and NUTS.

The demo's classifier (``HMCClassifier()``: MLP [64, 100, 10], N(0, 1) prior, one chain, MAP
start, dual averaging) on all ten digit classes (stratified 70/30 split, standardised), with
the trajectory set by: a fixed 50 steps (the default), 50 steps with the step size or the step
count jittered per transition, and NUTS with a capped tree depth; ``--rescale on off`` runs
each with and without the exact unit-rescaling move (``rescale_moves``). ESS is the bulk ESS of the
log posterior density over the draws. One torch thread.
Run: ``python benchmarks/samplers/hmc_trajectory_digits.py [--n-draws 200] [--n-warmup 200]
[--seed 0]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from sklearn_bnn import HMCClassifier
from sklearn_bnn.diagnostics import ess_bulk
from sklearn_bnn.metrics import negative_log_likelihood
from sklearn_bnn.samplers import HMC, NUTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split, timed_fit  # noqa: E402

CONFIGS = {
    "fixed L=50": lambda: HMC(n_steps=50, step_jitter=0.0),
    "step_jitter=0.5": lambda: HMC(n_steps=50, step_jitter=0.5),
    "n_steps_jitter=0.5": lambda: HMC(n_steps=50, n_steps_jitter=0.5, step_jitter=0.0),
    "NUTS depth 6": lambda: NUTS(max_tree_depth=6),
    "NUTS depth 7": lambda: NUTS(max_tree_depth=7),
    "NUTS depth 8": lambda: NUTS(max_tree_depth=8),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-draws", type=int, default=200)
    parser.add_argument("--n-warmup", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    parser.add_argument(
        "--rescale",
        nargs="*",
        choices=["on", "off"],
        default=["off"],
        help="run each configuration with rescale_moves=True (on), False (off) or both",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    X_tr, y_tr, X_te, y_te, _ = digits_split()
    print(f"digits, MLP [64, 100, 10], 1 chain, {args.n_warmup} + {args.n_draws}, seed {args.seed}")
    print(
        f"{'configuration':<28}{'grads':>9}{'ESS(lp)':>9}{'per 1k grad':>13}{'accept':>8}"
        f"{'eps':>9}{'NLL':>7}{'sec':>6}"
    )
    runs = [(name, rescale) for name in args.configs for rescale in args.rescale]
    for name, rescale in runs:
        clf = HMCClassifier(
            sampler=CONFIGS[name](),
            n_draws=args.n_draws,
            n_warmup=args.n_warmup,
            random_state=args.seed,
            rescale_moves=rescale == "on",
        )
        name = f"{name}{' +rescale' if rescale == 'on' else ''}"
        seconds = timed_fit(clf, X_tr, y_tr)
        d = clf.diagnostics_
        n_grad = int(np.sum(d["n_grad_evals"]))
        n_eff = ess_bulk(clf.samples_.log_prob.double().numpy())
        nll = negative_log_likelihood(y_te, clf.predict_proba(X_te))
        eps = float(np.mean(d["step_size"]))
        print(
            f"{name:<28}{n_grad:>9,}{n_eff:>9.1f}{1e3 * n_eff / n_grad:>13.2f}"
            f"{clf.acceptance_rate_:>8.2f}{eps:>9.4f}{nll:>7.3f}{seconds:>6.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
