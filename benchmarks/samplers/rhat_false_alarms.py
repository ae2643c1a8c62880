"""How often the convergence checks fire on chains that are stationary by construction.

Each replicate draws C chains of S draws of 65 quantities (the log density and 64 monitored
predictions, as an estimator monitors them), each an independent stationary Gaussian AR(1)
series with autocorrelation ``phi`` started from its stationary law, so every flag is a false
alarm. For each setting it prints the fraction of replicates in which

* ``within``: the within-chain split R-hat (``sklearn_bnn.diagnostics.rhat_within``, worst of
  the 65) exceeds 1.1 (for one chain: its split R-hat);
* ``worst chain``: the worst chain's own split R-hat (``rhat_per_chain``) exceeds 1.1;
* ``pooled``: the split R-hat of the chains together exceeds 1.1;
* ``warns``: ``sklearn_bnn.diagnostics.converged`` says no (what raises the warning).

The bulk ESS of one chain is about S (1 - phi) / (1 + phi). Takes about six minutes on one
core (``--replicates 200``).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from sklearn_bnn.diagnostics import RHAT_MAX, convergence_check

SETTINGS = [  # (chains, draws, phi)
    (1, 200, 0.0),
    (1, 200, 0.6),
    (1, 500, 0.6),
    (1, 500, 0.8),
    (4, 200, 0.0),
    (4, 200, 0.6),
    (4, 500, 0.6),
    (4, 500, 0.8),
]


def stationary_ar1(rng, chains, draws, quantities, phi):
    x = np.empty((chains, draws, quantities))
    x[:, 0] = rng.standard_normal((chains, quantities))
    noise = rng.standard_normal((chains, draws, quantities)) * np.sqrt(1 - phi**2)
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print("| chains | draws a chain | ESS a chain | within | worst chain | pooled | warns |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for chains, draws, phi in SETTINGS:
        flags = np.zeros((args.replicates, 4), dtype=bool)
        for r in range(args.replicates):
            x = stationary_ar1(rng, chains, draws, 65, phi)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                check = convergence_check(x[..., 0], x[..., 1:])
            within = max(check["rhat_within_log_prob"], check["rhat_within_predictions_max"])
            pooled = max(check["rhat_log_prob"], check["rhat_predictions_max"])
            flags[r] = [
                within > RHAT_MAX,
                np.nanmax(check["rhat_per_chain"]) > RHAT_MAX,
                pooled > RHAT_MAX,
                not check["converged"],
            ]
        ess = draws * (1 - phi) / (1 + phi)
        rates = " | ".join(f"{v:.2f}" for v in flags.mean(axis=0))
        print(f"| {chains} | {draws} | {ess:.0f} | {rates} |", flush=True)


if __name__ == "__main__":
    main()
