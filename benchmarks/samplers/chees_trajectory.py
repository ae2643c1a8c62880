"""ChEES against a fixed trajectory: ESS of the log density per 1,000 gradients of each chain.

Issue 24, item 3: does adapting the integration time across chains (``trajectory_length="auto"``,
ChEES; Hoffman, Radul & Sountsov 2021) mix a network posterior better per gradient than the
default 50 jittered leapfrog steps? Problems:

- ``digits``: all ten classes, stratified 70/30 split, standardised; ``HMCClassifier`` at its
  defaults (MLP [64, 100, 10], N(0, 1) prior, rescaling moves, held-out temperature);
- ``concrete``: UCI concrete, split 0 (``../shared/data/uci``), X and y standardised with the
  training split; ``HMCRegressor(hidden_layer_sizes=(50,))`` at its defaults (noise learned).

Configurations, all with ``--n-chains`` vectorized chains (ChEES needs several): ``fixed`` (the
default sampler, 50 steps, step size jittered by +-50 %) and ``chees`` (the same with
``trajectory_length="auto"``, starting from 50 steps); ``fixed1`` is the default single chain,
the figure of the issue; ``fixed_mass`` and ``chees_mass`` add a diagonal mass adapted in
Stan's windows (``adapt_mass=True``). The gradient count is the sampler's (warmup and draws, Gibbs
re-evaluations included) times the number of chains. ESS is the bulk ESS of the log posterior
density over all chains; the worst prediction's R-hat and the test NLL are printed beside it.
One torch thread unless ``--threads``.

Run: ``python benchmarks/samplers/chees_trajectory.py --problem digits [--n-chains 4]
[--n-warmup 500 --n-draws 500] [--seed 0] [--configs fixed chees fixed1 fixed_mass chees_mass]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from sklearn_bnn import HMCClassifier, HMCRegressor
from sklearn_bnn.diagnostics import ess_bulk
from sklearn_bnn.metrics import gaussian_nll, negative_log_likelihood
from sklearn_bnn.samplers import HMC

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scoreboard"))
from harness import digits_split, timed_fit  # noqa: E402
from uci import load_uci, standardise  # noqa: E402


def digits_problem():
    X_tr, y_tr, X_te, y_te, _ = digits_split()
    return HMCClassifier, {}, X_tr, y_tr, X_te, y_te


def concrete_problem():
    X_tr, y_tr, X_te, y_te = load_uci("concrete", 0)
    X_tr, X_te, _, _ = standardise(X_tr, X_te)
    y_tr, y_te, _, _ = standardise(y_tr[:, None], y_te[:, None])
    return HMCRegressor, {"hidden_layer_sizes": (50,)}, X_tr, y_tr[:, 0], X_te, y_te[:, 0]


PROBLEMS = {"digits": digits_problem, "concrete": concrete_problem}
CONFIGS = {
    "fixed": {},
    "chees": {"sampler": HMC(trajectory_length="auto")},
    "fixed1": {"n_chains": 1},
    "fixed_mass": {"sampler": HMC(adapt_mass=True)},
    "chees_mass": {"sampler": HMC(trajectory_length="auto", adapt_mass=True)},
}


def score(clf, X_te, y_te) -> float:
    if hasattr(clf, "predict_proba"):
        return negative_log_likelihood(y_te, clf.predict_proba(X_te))
    mean, std = clf.predict(X_te, return_std=True)
    return gaussian_nll(y_te, mean, std)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problem", choices=list(PROBLEMS), default="digits")
    parser.add_argument("--n-chains", type=int, default=4)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--configs", nargs="*", default=["fixed", "chees", "fixed1"], choices=list(CONFIGS)
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    estimator, params, X_tr, y_tr, X_te, y_te = PROBLEMS[args.problem]()
    print(
        f"{args.problem}, {args.n_chains} chains, {args.n_warmup} + {args.n_draws}, "
        f"seed {args.seed}, {args.threads} thread(s)"
    )
    print(
        f"{'config':<8}{'chains':>7}{'grads':>10}{'ESS(lp)':>9}{'per 1k grad':>12}"
        f"{'R-hat lp':>9}{'R-hat pred':>11}{'steps':>7}{'time':>8}{'NLL':>8}{'sec':>6}"
    )
    for name in args.configs:
        config = {"n_chains": args.n_chains, **CONFIGS[name]}
        clf = estimator(
            **params,
            **config,
            n_draws=args.n_draws,
            n_warmup=args.n_warmup,
            random_state=args.seed,
        )
        seconds = timed_fit(clf, X_tr, y_tr)
        d = clf.diagnostics_
        chains = config["n_chains"]
        n_grad = int(np.sum(d["n_grad_evals"])) * chains
        n_eff = ess_bulk(clf.samples_.log_prob.double().numpy())
        steps = clf.samples_.stats.get("n_steps")
        steps = float(steps.double().mean()) if steps is not None else 50.0
        eps = float(np.mean(d["step_size"]))
        print(
            f"{name:<8}{chains:>7}{n_grad:>10,}{n_eff:>9.1f}{1e3 * n_eff / n_grad:>12.2f}"
            f"{d.get('rhat_log_prob', float('nan')):>9.3f}"
            f"{d.get('rhat_predictions_max', float('nan')):>11.3f}{steps:>7.1f}"
            f"{steps * eps:>8.3f}{score(clf, X_te, y_te):>8.3f}{seconds:>6.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
