"""NUTS on Neal's funnel (REFERENCE §4): the v-marginal against the truth N(0, 3^2).

v ~ N(0, 3^2), x_i | v ~ N(0, e^v), i = 1..10 (10 + 1 dimensions). As in seeds/003 §5.6, q(v) is
the normal with the draws' mean and variance, and the figure is KL(p(v) || q(v)); the published
NUTS figure is 1.109 (seeds/003 Table 5.1, 10^5 draws). Four chains, step size by dual averaging
(target acceptance 0.8), default maximum tree depth 10; one line per seed.

Run: ``python benchmarks/samplers/nuts_funnel.py`` (about 4 minutes per seed on a shared 2-core
CPU).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch

from sklearn_bnn.samplers import NUTS, run_chains

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from conftest import Funnel  # noqa: E402  (the analytic target the tests use)


def kl_to_truth(v) -> float:
    """KL(N(0, 9) || N(mean(v), var(v)))."""
    m, s2 = float(v.mean()), float(v.var())
    return 0.5 * math.log(s2 / 9.0) + (9.0 + m * m) / (2 * s2) - 0.5


def main(seeds=(0, 1, 2), n_chains: int = 4, n_warmup: int = 500, n_draws: int = 2000):
    torch.set_num_threads(1)
    target = Funnel()
    kernel = NUTS().build(target)
    print(f"Neal's funnel (10 + 1 dims), NUTS, {n_chains} chains x {n_draws} draws\n")
    print(
        "| seed | KL(p(v) \\|\\| q(v)) | mean v | var v (truth 9) | min v | divergences "
        "| accept | step size | grads | time (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        start = torch.randn(n_chains, target.dim, generator=g, dtype=torch.float64)
        t0 = time.perf_counter()
        run = run_chains(
            kernel, kernel.init(start), g, n_warmup=n_warmup, n_draws=n_draws, step_size="auto"
        )
        v = run.draws[..., 0]
        print(
            f"| {seed} | {kl_to_truth(v):.3f} | {float(v.mean()):.2f} | {float(v.var()):.2f} "
            f"| {float(v.min()):.2f} | {int(run.divergent.sum())} "
            f"| {float(run.accept_prob.mean()):.2f} | {float(run.step_size.mean()):.3f} "
            f"| {run.n_grad} | {time.perf_counter() - t0:.0f} |"
        )
    print("\npublished NUTS (seeds/003 Table 5.1): KL 1.109")


if __name__ == "__main__":
    main()
