"""A Table-2-style comparison (seeds/000 §5.2) on images: a small CNN on scikit-learn's digits.

The paper's Table 2 runs a 38,390-parameter CNN on 48,000 Fashion-MNIST images in 3 subsets.
Here, small enough for a CPU in minutes: 8x8 digits (1,257 training images in 3 subsets of
419, 540 test images), a CNN of two 3x3 convolutions (8 and 16 channels, SELU, 2x2 max-pooling)
and two dense layers [64, 32, 10] (3,658 parameters), prior N(0, I), identity mass, the same L
and eps for every scheme, chains started at posterior modes (the estimators' MAP
initialisation: full-batch Adam from each chain's random initialisation, shared by every
scheme) and no adaptation.

Reported per scheme: acceptance (mean +- sd over chains), mean ESS over the parameters (per
chain, averaged; and over the chains jointly), test accuracy of the posterior predictive,
full-data gradients' worth of work per transition, and wall time. Paper (FMNIST): acceptance
0.76 / 0.72 / 0.66 / 0.89 and mean ESS 6.26 / 6.21 / 6.24 / 6.37 for full / naive / randomised /
symmetric, accuracy 89.8 % for all but symmetric (90.0 %).

Run: ``python benchmarks/samplers/split_table2_digits.py [--n-draws 60] [--burn 20] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from sklearn_bnn._utils import seeded_torch
from sklearn_bnn.diagnostics import ess
from sklearn_bnn.likelihoods import Categorical
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import HMC, run_chains
from sklearn_bnn.samplers.starts import find_mode
from sklearn_bnn.targets import FunctionalNetwork, SplitTarget, Target

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import SPLIT_SCHEMES as INTEGRATORS  # noqa: E402
from harness import DigitsCNN  # noqa: E402


def run(scheme, targets, start, data, args):
    Xte, yte = data[1], data[3]
    target = targets["full" if scheme == "full" else "split"]
    sampler = HMC(
        step_size=args.step_size,
        n_steps=args.n_steps,
        integrator=INTEGRATORS[scheme],
        step_jitter=0.0,
    )
    kernel = sampler.build(target)
    begin = time.perf_counter()
    chains = run_chains(
        kernel,
        kernel.init(start),
        torch.Generator().manual_seed(args.seed),
        n_warmup=args.burn,
        n_draws=args.n_draws,
        step_size=args.step_size,
    )
    wall = time.perf_counter() - begin
    draws = chains.draws.numpy()  # (C, n_draws, D)
    per_chain = np.mean([[ess(c[:, j]) for j in range(c.shape[1])] for c in draws])
    joint = np.mean([ess(draws[:, :, j]) for j in range(draws.shape[2])])
    logits = target.network.forward_batched(chains.draws.reshape(-1, draws.shape[-1]), Xte)
    accuracy = np.mean(torch.softmax(logits, -1).mean(0).argmax(-1).numpy() == yte)
    work = chains.n_grad / (args.burn + args.n_draws)
    return chains.accepted.double().mean(1).numpy(), per_chain, joint, accuracy, work, wall


def setup(args):
    """Data, the full and split targets, and chain starts at posterior modes (shared)."""
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X / 16.0, y, test_size=0.3, stratify=y, random_state=0)
    modules = []
    for c in range(args.chains):
        with seeded_torch(args.seed + c):
            modules.append(DigitsCNN(dropout=None))
    net = FunctionalNetwork(modules[0])
    start = torch.stack([FunctionalNetwork(m).initial_position() for m in modules])
    target_args = (net, Xtr, torch.as_tensor(ytr), Categorical(), GaussianPrior(1.0))
    targets = {"full": Target(*target_args), "split": SplitTarget(*target_args, n_splits=3)}
    start = find_mode(targets["full"], start, n_steps=args.n_init_steps)
    return targets, start, (Xtr, Xte, ytr, yte)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-draws", type=int, default=60)
    parser.add_argument("--burn", type=int, default=20)
    parser.add_argument("--chains", type=int, default=3)
    parser.add_argument("--n-steps", type=int, default=10)
    parser.add_argument("--step-size", type=float, default=6e-3)
    parser.add_argument("--n-init-steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    targets, start, data = setup(args)
    print(
        f"digits CNN (3,658 parameters), {len(data[0])} training images, 3 subsets; "
        f"{args.chains} chains, L = {args.n_steps}, eps = {args.step_size:g}, "
        f"{args.burn} burn-in + {args.n_draws} draws each"
    )
    header = (
        f"{'scheme':<11} {'acceptance':>13} {'ESS/chain':>9} {'ESS joint':>9} {'accuracy':>8} "
        f"{'grads/tr':>8} {'wall s':>7}"
    )
    print(header)
    print("-" * len(header))
    for scheme in ("full", "naive", "randomised", "symmetric"):
        acc, per_chain, joint, accuracy, work, wall = run(scheme, targets, start, data, args)
        print(
            f"{scheme:<11} {acc.mean():>6.2f} +- {acc.std():.2f} {per_chain:>9.2f} {joint:>9.2f} "
            f"{accuracy:>8.3f} {work:>8.1f} {wall:>7.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
