"""Jittered HMC trajectories on Bayesian linear regression: ESS of a prediction per seed.

A fixed trajectory (``n_steps`` leapfrog steps of the adapted step size) can land near a period
of a Gaussian posterior, and then the chain barely moves in some directions (Neal 2011,
"MCMC using Hamiltonian dynamics", §5.4.2.2-3). This runs ``HMCRegressor`` with a linear module
(the posterior over [w, b] is an exact Gaussian) for several seeds and reports the lowest bulk
ESS over the predictions at 5 rows, for each jitter setting. One chain, one torch thread.
Run: ``python benchmarks/hmc_jitter_blr.py [--seeds 10] [--n-draws 2000]``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from torch import nn

from sklearn_bnn import HMCRegressor
from sklearn_bnn.diagnostics import ess_bulk
from sklearn_bnn.samplers import HMC

CONFIGS = {
    "fixed L=50": {},
    "n_steps_jitter=0.5": {"n_steps_jitter": 0.5},
    "step_jitter=0.2": {"step_jitter": 0.2},
    "step_jitter=0.5": {"step_jitter": 0.5},
    "step_jitter=0.9": {"step_jitter": 0.9},
}


def linear(n_in, n_out):
    return nn.Linear(n_in, n_out)


def blr_data(n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.linspace(1.0, -2.0, d) + 0.3 + rng.normal(scale=0.5, size=n)
    return X, y


def prediction_ess(X, y, seed, n_draws, n_warmup, **jitter):
    """Lowest bulk ESS of the predictions at the first 5 rows, and the gradients spent."""
    reg = HMCRegressor(
        module=linear,
        prior_precision=2.0,
        noise_precision=4.0,
        sampler=HMC(n_steps=50, **jitter),
        n_draws=n_draws,
        n_warmup=n_warmup,
        dtype="float64",
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reg.fit(X, y)
    f = reg.predict_samples(X[:5])  # (n_draws, 5)
    f = np.asarray(f).reshape(1, n_draws, -1)
    return min(ess_bulk(f[..., k]) for k in range(f.shape[-1])), reg.diagnostics_["n_grad_evals"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-draws", type=int, default=2000)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    X, y = blr_data()
    print(f"BLR, [w (2), b], 40 rows, 1 chain, {args.n_warmup} + {args.n_draws} transitions")
    print(f"{'configuration':<22}{'min':>7}{'median':>8}{'max':>7}  per seed (lowest of 5 rows)")
    for name in args.configs:
        start = time.perf_counter()
        figures = [
            prediction_ess(X, y, s, args.n_draws, args.n_warmup, **CONFIGS[name])[0]
            for s in range(args.seeds)
        ]
        print(
            f"{name:<22}{min(figures):>7.0f}{np.median(figures):>8.0f}{max(figures):>7.0f}  "
            + " ".join(f"{v:.0f}" for v in figures)
            + f"  ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
