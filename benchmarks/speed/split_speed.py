"""Split HMC speed: subset-gradient work per second against bare PyTorch on the same subsets.

For each split scheme, HMC transitions (one chain, fixed step size) are timed and the subset
gradients they evaluated are counted (:attr:`SplitTarget.n_subset_grads`); the rate is divided
by the rate of a bare loop over the same subsets: forward of an ordinary ``nn.Module``, the same
summed log-likelihood, ``torch.autograd.grad`` for its parameters. The ratio is the fraction of
the machine's forward/backward speed that sampling keeps; everything the sampler adds (the
prior, momentum and position updates, the full-data energy, Metropolis-Hastings) counts against
it. Measurements alternate between the sampler and the bare loop and the median ratio is
reported, so that load from other processes affects both alike.

Set-ups: the seeds/000 §5.1 regression (MLP [1, 100, 100, 1], 400 points in 4 subsets of 100,
L = 30) and a larger one (MLP [20, 256, 256, 1], 20,000 rows in 10 subsets of 2,000, L = 5).
Target: ratio >= 0.85. Both the median of the per-round ratios and the ratio of each side's
fastest round are printed: on a shared machine the second is the steadier figure.
Run: ``python benchmarks/speed/split_speed.py [--rounds 15] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import HMC, naive_split, randomised_split, symmetric_split
from sklearn_bnn.targets import FunctionalNetwork, SplitTarget

SCHEMES = {"naive": naive_split, "randomised": randomised_split, "symmetric": symmetric_split}


def setup(n, n_in, widths, n_splits, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, n_in, generator=g)
    y = torch.sin(X.sum(1, keepdim=True)) + 0.1 * torch.randn(n, 1, generator=g)
    torch.manual_seed(seed)
    sizes = (n_in, *widths)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    module = nn.Sequential(*layers, nn.Linear(sizes[-1], 1))
    target = SplitTarget(
        FunctionalNetwork(module), X, y, Gaussian(100.0), GaussianPrior(1.0), n_splits=n_splits
    )
    return module, target


def bare_seconds(module, target, n_grads):
    """Seconds for ``n_grads`` plain forward/backward passes, cycling over the subsets."""
    params = list(module.parameters())
    subsets = [target.subset(m) for m in range(target.n_splits)]
    likelihood = target.likelihood
    start = time.perf_counter()
    for i in range(n_grads):
        X, y = subsets[i % len(subsets)]
        torch.autograd.grad(likelihood.log_prob(module(X), y), params)
    return time.perf_counter() - start


def sampler_seconds(kernel, state, generator, n_transitions):
    """Seconds and subset gradients for ``n_transitions`` HMC transitions."""
    target = kernel.target
    target.n_subset_grads = 0
    start = time.perf_counter()
    for _ in range(n_transitions):
        state, _ = kernel.step(state, generator)
    return time.perf_counter() - start, target.n_subset_grads, state


def compare(name, module, target, n_steps, step_size, n_transitions, rounds):
    for scheme, integrator in SCHEMES.items():
        sampler = HMC(step_size=step_size, n_steps=n_steps, integrator=integrator, step_jitter=0.0)
        kernel = sampler.build(target)
        state = kernel.init(target.network.initial_position())
        generator = torch.Generator().manual_seed(0)
        sampler_seconds(kernel, state, generator, 1)  # warm up
        bare_seconds(module, target, 10)
        ratios, rates, best_ours, best_bare = [], [], float("inf"), float("inf")
        for _ in range(rounds):
            seconds, n_grads, state = sampler_seconds(kernel, state, generator, n_transitions)
            bare = bare_seconds(module, target, n_grads)
            rate = n_grads / seconds
            ratios.append(bare / seconds)
            rates.append(rate)
            best_ours = min(best_ours, seconds / n_grads)
            best_bare = min(best_bare, bare / n_grads)
        print(
            f"{name:<26} {scheme:<11} {n_grads / n_transitions:>9.0f} "
            f"{statistics.median(rates):>12.0f} {statistics.median(ratios):>8.3f} "
            f"{best_bare / best_ours:>7.3f} {min(ratios):>6.3f}-{max(ratios):.3f}",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    header = (
        f"{'set-up':<26} {'scheme':<11} {'grads/tr':>9} {'subset gr/s':>12} {'ratio':>8} "
        f"{'best':>7} {'range':>11}"
    )
    print(header)
    print("-" * len(header))
    module, target = setup(400, 1, (100, 100), 4)
    compare("1D, 4 x 100 rows, L=30", module, target, 30, 5e-4, 4, args.rounds)
    module, target = setup(20_000, 20, (256, 256), 10)
    compare("20-D, 10 x 2,000 rows, L=5", module, target, 5, 1e-4, 1, args.rounds)
    print("grads/tr: subset gradients per transition; ratio: median over rounds of the")
    print("sampler's subset-gradient rate / the bare forward+backward rate on the same subsets;")
    print("best: the same ratio from each side's fastest round (least disturbed by other load).")


if __name__ == "__main__":
    main()
