"""Table 1 of seeds/000 (§5.1): full HMC against naive, randomised and symmetric split HMC.

Set-up as in the paper: MLP [1, 100, 100, 1] (10,401 parameters, ReLU), 400 points in 4 subsets
of 100, L = 30, eps = 5e-4, identity mass, prior N(0, I), Gaussian likelihood with noise
precision 100, ten randomly initialised chains (the same starting points for every scheme, no
adaptation). The data: the two-cluster 1-D set of Izmailov et al. (2019) that the paper uses,
x uniform on [-1, -0.7] and on [0.5, 1] (200 points each), y = cos(4x + 0.8) + N(0, 0.1^2).

Reported per scheme: acceptance rate (mean +- sd over the chains, after the burn-in), mean ESS
over the parameters (Geyer's initial monotone sequence, :func:`sklearn_bnn.diagnostics.ess`),
both per chain (averaged over chains) and over the ten chains jointly, full-data gradients'
worth of work per transition, and wall time. Paper: acceptance 0.63 / 0.59 / 0.73 / 0.88, mean
ESS 6.92 / 6.77 / 7.52 / 7.72 for full / naive / randomised / symmetric.

Run: ``python benchmarks/samplers/split_table1.py [--n-draws 400] [--burn 100] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sklearn_bnn import HMCRegressor, SplitHMCRegressor
from sklearn_bnn.diagnostics import ess
from sklearn_bnn.samplers import HMC

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import izmailov_data  # noqa: E402

PAPER = {"full": (0.63, 0.06, 6.92), "naive": (0.59, 0.05, 6.77)}
PAPER.update({"randomised": (0.73, 0.07, 7.52), "symmetric": (0.88, 0.04, 7.72)})


def run(scheme: str, X, y, n_draws: int, burn: int, seed: int):
    params = dict(
        hidden_layer_sizes=(100, 100),
        prior_precision=1.0,
        noise_precision=100.0,
        n_chains=10,
        init="random",
        n_warmup=burn,
        n_draws=n_draws,
        random_state=seed,
    )
    if scheme == "full":
        est = HMCRegressor(sampler=HMC(step_size=5e-4, n_steps=30), **params)
    else:
        sampler = HMC(step_size=5e-4, n_steps=30, integrator=scheme)
        est = SplitHMCRegressor(n_splits=4, sampler=sampler, **params)
    start = time.perf_counter()
    est.fit(X, y)
    wall = time.perf_counter() - start
    acc = est.diagnostics_["acceptance_rate"]
    draws = est.samples_.draws.numpy()  # (10, n_draws, 10401)
    per_chain = np.mean([[ess(c[:, j]) for j in range(c.shape[1])] for c in draws])
    joint = np.mean([ess(draws[:, :, j]) for j in range(draws.shape[2])])
    work = est.diagnostics_["n_grad_evals"] / (burn + n_draws)
    rmse = np.sqrt(np.mean((est.predict(X) - y) ** 2))
    return acc, per_chain, joint, work, wall, rmse


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-draws", type=int, default=400)
    parser.add_argument("--burn", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    X, y = izmailov_data()
    print(f"seeds/000 Table 1 set-up, 10 chains, {args.burn} burn-in + {args.n_draws} draws each")
    header = (
        f"{'scheme':<11} {'acceptance':>13} {'paper':>11} {'ESS/chain':>9} {'ESS 10ch':>8} "
        f"{'paper':>6} {'grads/tr':>8} {'RMSE':>6} {'wall s':>7}"
    )
    print(header)
    print("-" * len(header))
    for scheme in ("full", "naive", "randomised", "symmetric"):
        acc, per_chain, joint, work, wall, rmse = run(
            scheme, X, y, args.n_draws, args.burn, args.seed
        )
        pa, ps, pe = PAPER[scheme]
        print(
            f"{scheme:<11} {acc.mean():>6.2f} +- {acc.std():.2f} {pa:>4.2f} +- {ps:.2f} "
            f"{per_chain:>9.2f} {joint:>8.2f} {pe:>6.2f} {work:>8.1f} {rmse:>6.3f} {wall:>7.0f}",
            flush=True,
        )
    print(
        "grads/tr: full-data gradients' worth of work per transition (one subset gradient "
        "counts 1/4)."
    )


if __name__ == "__main__":
    main()
