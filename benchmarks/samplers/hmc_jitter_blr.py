"""Jittered HMC trajectories on Bayesian linear regression: ESS of a prediction per seed.

A fixed trajectory (``n_steps`` leapfrog steps of the adapted step size) can land near a period
of a Gaussian posterior, and then the chain barely moves in some directions (Neal 2011,
"MCMC using Hamiltonian dynamics", §5.4.2.2-3). This samples the exact posterior of a Bayesian
linear regression (2 weights and a bias, 40 rows, prior precision 2, noise precision 4: the
Gaussian ``HMCRegressor(module=nn.Linear(2, 1))`` samples) with the HMC kernel, 50 steps, dual
averaging over the warmup, one chain started at the posterior mean, float64, and reports the
lowest bulk ESS of the predictions [x, 1] theta at 5 rows, per seed and jitter setting.
``--estimator`` runs ``HMCRegressor`` itself instead (MAP start; about 3x slower).
Run: ``python benchmarks/samplers/hmc_jitter_blr.py [--seeds 10] [--n-draws 2000] [--estimator]``.
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
from sklearn_bnn.samplers import HMC, run_chains

CONFIGS = {
    "fixed L=50": {"step_jitter": 0.0},
    "step_jitter=0.2": {"step_jitter": 0.2},
    "step_jitter=0.5": {"step_jitter": 0.5},
    "n_steps_jitter=0.5": {"n_steps_jitter": 0.5, "step_jitter": 0.0},
}
ALPHA, BETA = 2.0, 4.0


class Gaussian:
    """The exact N(mean, cov) posterior as a target (value_and_grad on (C, D))."""

    def __init__(self, mean, cov):
        self.mean = torch.as_tensor(mean)
        self.precision = torch.linalg.inv(torch.as_tensor(cov))
        self.dim, self.dtype, self.device = len(mean), torch.float64, torch.device("cpu")

    def value_and_grad(self, theta):
        grad = -(theta - self.mean) @ self.precision
        return 0.5 * (grad * (theta - self.mean)).sum(-1), grad


def blr_data(n=40):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2))
    y = X @ np.array([1.0, -2.0]) + 0.3 + rng.normal(scale=0.5, size=n)
    X1 = np.hstack([X, np.ones((n, 1))])
    cov = np.linalg.inv(ALPHA * np.eye(3) + BETA * X1.T @ X1)
    return X, y, BETA * cov @ X1.T @ y, cov


def kernel_draws(X, y, mean, cov, seed, n_draws, n_warmup, **jitter):
    target = Gaussian(mean, cov)
    kernel = HMC(n_steps=50, **jitter).build(target)
    g = torch.Generator().manual_seed(seed)
    state = kernel.init(target.mean[None].clone())
    run = run_chains(kernel, state, g, n_warmup=n_warmup, n_draws=n_draws, step_size="auto")
    X1 = np.hstack([X[:5], np.ones((5, 1))])
    return run.draws.numpy()[0] @ X1.T  # (n_draws, 5)


def estimator_draws(X, y, mean, cov, seed, n_draws, n_warmup, **jitter):
    reg = HMCRegressor(
        module=lambda n_in, n_out: nn.Linear(n_in, n_out),
        prior_precision=ALPHA,
        noise_precision=BETA,
        sampler=HMC(n_steps=50, **jitter),
        n_draws=n_draws,
        n_warmup=n_warmup,
        dtype="float64",
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reg.fit(X, y)
    return np.asarray(reg.predict_samples(X[:5])).reshape(n_draws, -1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--n-draws", type=int, default=2000)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    parser.add_argument("--estimator", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = blr_data()
    draws = estimator_draws if args.estimator else kernel_draws
    print(
        f"BLR posterior, {'HMCRegressor' if args.estimator else 'HMC kernel'}, 1 chain, "
        f"{args.n_warmup} + {args.n_draws} transitions of 50 steps"
    )
    print(
        f"{'configuration':<20}{'min':>6}{'median':>8}{'max':>6}  per seed 0.. (lowest of 5 rows)"
    )
    for name in args.configs:
        start = time.perf_counter()
        figures = []
        for seed in range(args.seeds):
            f = draws(*data, seed, args.n_draws, args.n_warmup, **CONFIGS[name])
            figures.append(min(ess_bulk(f[None, :, k]) for k in range(f.shape[1])))
        print(
            f"{name:<20}{min(figures):>6.0f}{np.median(figures):>8.0f}{max(figures):>6.0f}  "
            + " ".join(f"{v:.0f}" for v in figures)
            + f"  ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
