"""HMC speed against a bare torch baseline measured in the same run.

1. Gradient evaluations per second while sampling (seeds/000 §5.1 set-up: MLP [1, 100, 100, 1],
   400 points, L = 30, eps = 5e-4, prior N(0, I), noise precision 100), divided by the rate of a
   bare torch forward + backward of the same loss on an ordinary ``nn.Module``.
2. ``predict_proba`` with 500 draws on 10,000 rows: one batched call against a Python loop over
   the draws.

Measurements alternate between the two sides and the median ratio is reported, so load from
other processes affects both alike. Run: ``python benchmarks/speed/hmc_speed.py [--threads N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from sklearn_bnn import HMCClassifier
from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import HMC, run_chains
from sklearn_bnn.targets import FunctionalNetwork, Target

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import regression_mlp  # noqa: E402


def regression_data(n=400, seed=0):
    """1-D regression data in clusters, in the spirit of the set-up of seeds/000 §5.1."""
    rng = np.random.default_rng(seed)
    x = np.concatenate(
        [
            rng.uniform(-7, -4, n // 4),
            rng.uniform(-2, 0, n // 4),
            rng.uniform(2, 4, n // 4),
            rng.uniform(5, 7, n - 3 * (n // 4)),
        ]
    )
    y = np.sin(x) + 0.1 * x + rng.normal(scale=0.1, size=n)
    as_column = lambda a: torch.tensor(a[:, None], dtype=torch.float32)  # noqa: E731
    return as_column(x), as_column(y)


def bare_rate(net, X, y, tau, n_steps):
    """Gradient evaluations per second of plain forward + backward on the module."""
    params = list(net.parameters())
    start = time.perf_counter()
    for _ in range(n_steps):
        for p in params:
            p.grad = None
        loss = 0.5 * tau * ((net(X) - y) ** 2).sum() + 0.5 * sum((p * p).sum() for p in params)
        loss.backward()
    return n_steps / (time.perf_counter() - start)


def sampling_rate(kernel, state, n_transitions, generator):
    """Gradient evaluations per second inside HMC transitions (fixed eps, fixed L)."""
    start = time.perf_counter()
    run = run_chains(kernel, state, generator, n_warmup=0, n_draws=n_transitions, step_size=5e-4)
    seconds = time.perf_counter() - start
    return run.n_grad / seconds, run


def predict_speed(n_rows, n_draws=500, repeats=3):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_rows, 20)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the draws are for timing only
        clf = HMCClassifier(
            hidden_layer_sizes=(50,),
            n_draws=n_draws,
            n_warmup=0,
            sampler=HMC(n_steps=1, step_size=1e-4),
            init="random",
            random_state=0,
        )
        clf.fit(X[:500], y[:500])
    net, draws = clf.network_, clf.samples_.flat()
    X = X[:n_rows]
    Xt = torch.as_tensor(X)
    batched, looped = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        p_batched = clf.predict_proba(X)
        batched.append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.no_grad():
            p_loop = sum(torch.softmax(net.forward(th, Xt), -1) for th in draws) / len(draws)
        looped.append(time.perf_counter() - t)
    assert np.allclose(p_batched, p_loop.numpy(), atol=1e-5)
    return statistics.median(batched), statistics.median(looped)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transitions", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    X, y = regression_data()
    tau = 100.0
    net = regression_mlp()
    target = Target(FunctionalNetwork(net), X, y, Gaussian(tau), GaussianPrior(1.0))
    kernel = HMC(step_size=5e-4, n_steps=30, step_jitter=0.0).build(target)
    generator = torch.Generator().manual_seed(0)
    state = kernel.init(FunctionalNetwork(net).initial_position())
    n_bare = args.transitions * 30
    bare_rate(net, X, y, tau, 50)  # warm-up of both paths
    sampling_rate(kernel, state, 2, generator)
    bare, sampling, ratios = [], [], []
    for _ in range(args.rounds):
        b = bare_rate(net, X, y, tau, n_bare)
        s, run = sampling_rate(kernel, state, args.transitions, generator)
        bare.append(b)
        sampling.append(s)
        ratios.append(s / b)
    print(
        f"HMC sampling, MLP [1,100,100,1] ({target.dim:,} parameters), 400 points, L = 30, "
        f"eps = 5e-4, {args.threads} thread(s)"
    )
    print(f"{'':<32}{'grad evals / s':>16}")
    print(f"{'bare torch forward+backward':<32}{statistics.median(bare):>16.0f}")
    print(f"{'sklearn_bnn HMC':<32}{statistics.median(sampling):>16.0f}")
    print(
        f"{'ratio (median over rounds)':<32}{statistics.median(ratios):>16.3f}   "
        f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)})"
    )
    print(f"acceptance in the last round: {run.accepted.double().mean():.2f}")

    print("\npredict_proba, 500 draws, MLP [20, 50, 3]")
    print(f"{'rows':>8}{'batched (s)':>14}{'loop (s)':>12}{'speed-up':>10}")
    for n_rows in (10_000, 1_000, 100):
        b, lo = predict_speed(n_rows)
        print(f"{n_rows:>8}{b:>14.3f}{lo:>12.3f}{lo / b:>9.2f}x")


if __name__ == "__main__":
    main()
