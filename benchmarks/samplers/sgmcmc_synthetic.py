"""seeds/004 synthetic study: KL divergence to the truth as the dimension grows.

Diagonal Gaussians with means ~ Exp(0.1) and variances ~ U[0.1, 1]; every sampler sees the exact
gradient plus N(0, 1) noise (``NoisyGaussianTarget`` of ``tests/samplers/_sg_synthetic.py``);
1,000 draws after a burn-in; the step size of each sampler is the best of a small grid at each
dimension ("structural variations of the step size", as in the paper). KL(q || p) is computed
between the diagonal Gaussian q fitted to the draws (mean and variance per coordinate) and the
truth p.

Run: ``python benchmarks/samplers/sgmcmc_synthetic.py [--quick]``. Prints a table and, when
matplotlib is installed, writes ``sgmcmc_synthetic.png``. ``--quick`` uses dimensions 10 and 100
and 300 draws.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from sklearn_bnn.samplers import AMAGOLD, GSGHMC, HTE, SGHMC, SGLD, sample

# the target the tests use (a test fixture, not part of the package)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "samplers"))
from _sg_synthetic import NoisyGaussianTarget, random_gaussian_problem  # noqa: E402

STEPS = 5  # minibatch steps between two kept draws

SAMPLERS = {
    "SGLD": lambda eps: SGLD(step_size=eps**2, n_steps=STEPS),
    "SGHMC-Euler": lambda eps: SGHMC(step_size=eps, n_steps=STEPS),
    "SGHMC-OBABO": lambda eps: SGHMC(step_size=eps, integrator="obabo", n_steps=STEPS),
    "SGHMC-skew": lambda eps: SGHMC(step_size=eps, integrator="skew", n_steps=STEPS),
    "AMAGOLD": lambda eps: AMAGOLD(step_size=eps, n_steps=STEPS),
    "GSGHMC": lambda eps: GSGHMC(step_size=eps, n_steps=STEPS),
    "HTE": lambda eps: HTE(step_size=eps, n_steps=STEPS, max_tries=1),
}
GRID = (0.05, 0.1, 0.2, 0.4)  # time steps eps (SGLD's Langevin step is eps**2)


def kl_diag(draws: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """KL(N(m, s2) || N(mean, var)) for the diagonal Gaussian fitted to ``draws`` (n, D)."""
    m, s2 = draws.mean(0), draws.var(0)
    return float(0.5 * np.sum(s2 / var + (m - mean) ** 2 / var - 1.0 + np.log(var / s2)))


def run_one(name, eps, mean, var, n_draws, seed):
    target = NoisyGaussianTarget(mean, var, grad_noise=1.0, seed=seed)
    start = torch.zeros(len(mean), dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = sample(
            target,
            start,
            SAMPLERS[name](eps),
            n_warmup=n_draws // 2,
            n_draws=n_draws,
            n_chains=1,
            random_state=seed,
        )
    draws = result.draws[0].numpy()
    if not np.isfinite(draws).all() or np.any(draws.var(0) == 0):
        return np.inf
    return kl_diag(draws, mean, var)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    dims = (10, 100) if args.quick else (10, 100, 1000)
    n_draws = 300 if args.quick else 1000
    rng = np.random.default_rng(0)
    problems = {d: random_gaussian_problem(d, rng) for d in dims}
    table, best_eps = {}, {}
    t0 = time.perf_counter()
    for name in SAMPLERS:
        for d in dims:
            mean, var = problems[d]
            kls = {eps: run_one(name, eps, mean, var, n_draws, seed=1) for eps in GRID}
            best_eps[name, d] = min(kls, key=kls.get)
            table[name, d] = kls[best_eps[name, d]]
    header = f"{'sampler':<13}" + "".join(f"{'D=' + str(d):>16}" for d in dims)
    print(
        f"KL(draws || truth), {n_draws} draws, {STEPS} noisy-gradient steps per draw; "
        "best step size of the grid in brackets"
    )
    print(header)
    for name in SAMPLERS:
        cells = "".join(f"{table[name, d]:>9.3g} ({best_eps[name, d]:<4})" for d in dims)
        print(f"{name:<13}{cells}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name in SAMPLERS:
        ax.plot(dims, [table[name, d] for d in dims], marker="o", label=name)
    ax.set(xscale="log", yscale="log", xlabel="dimension", ylabel="KL to the truth")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig("sgmcmc_synthetic.png", dpi=120)
    print("wrote sgmcmc_synthetic.png")


if __name__ == "__main__":
    main()
