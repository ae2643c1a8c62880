"""HMC against NUTS on digits: ESS per second of the log posterior density, default settings.

Both samplers start at the same MAP point and adapt the step size in warmup; the effective
sample size is the bulk ESS (rank-normalised, split chains) of the log density over all chains.
Run: ``python benchmarks/samplers/hmc_vs_nuts_digits.py [--n-draws 200] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from sklearn_bnn import HMCClassifier
from sklearn_bnn.diagnostics import ess_bulk
from sklearn_bnn.metrics import expected_calibration_error, negative_log_likelihood

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split, timed_fit  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-draws", type=int, default=200)
    parser.add_argument("--n-warmup", type=int, default=200)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    X_tr, y_tr, X_te, y_te, _ = digits_split()
    print(
        f"digits, MLP [64, 100, 10], {args.n_chains} chains x ({args.n_warmup} warmup + "
        f"{args.n_draws} draws), {args.threads} thread(s)"
    )
    print(
        f"{'sampler':<8}{'seconds':>9}{'grads':>10}{'ESS(lp)':>9}{'ESS/s':>8}{'accept':>8}"
        f"{'depth':>7}{'acc':>7}{'NLL':>7}{'ECE':>7}"
    )
    for sampler in ("hmc", "nuts"):
        clf = HMCClassifier(
            sampler=sampler,
            n_draws=args.n_draws,
            n_warmup=args.n_warmup,
            n_chains=args.n_chains,
            random_state=0,
        )
        seconds = timed_fit(clf, X_tr, y_tr)
        d = clf.diagnostics_
        n_eff = ess_bulk(clf.samples_.log_prob.double().numpy())
        p = clf.predict_proba(X_te)
        depth = d.get("mean_tree_depth", np.array([np.nan])).mean()
        print(
            f"{sampler:<8}{seconds:>9.1f}{d['n_grad_evals']:>10,}{n_eff:>9.1f}"
            f"{n_eff / seconds:>8.3f}{clf.acceptance_rate_:>8.2f}{depth:>7.1f}"
            f"{np.mean(clf.classes_[p.argmax(1)] == y_te):>7.3f}"
            f"{negative_log_likelihood(y_te, p):>7.3f}{expected_calibration_error(y_te, p):>7.3f}"
        )


if __name__ == "__main__":
    main()
