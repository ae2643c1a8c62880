"""Speed of the stochastic-gradient samplers against bare SGD with momentum, same batches, same run.

An MLP (50 -> 100 -> 100 -> 2) on ``make_classification`` data kept as a numpy array; every
method sees the same sequence of batch row indices, gathered from numpy and moved to the device
per step. The baseline is ``torch.optim.SGD(momentum=0.9)`` on the mean cross-entropy plus weight
decay (the deep-learning form of the same posterior). Each sampler runs its kernel directly
(one transition = one epoch). Reported: minibatch gradient steps per second and the ratio to
SGD (target >= 0.9 for SGLD / SGHMC), so the cost of each acceptance scheme shows as the drop
of its ratio: GSGHMC's paired test adds a forward pass per step, AMAGOLD and HTE a full-data
forward pass per epoch (HTE: per try).

Run: ``python benchmarks/sgmcmc_speed.py [--rows 20000] [--epochs 3] [--device cpu]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.datasets import make_classification

from sklearn_bnn.likelihoods import Categorical
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import AMAGOLD, GSGHMC, HTE, SGHMC, SGLD
from sklearn_bnn.targets import FunctionalNetwork, MinibatchTarget


def make_net(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(50, 100),
        torch.nn.ReLU(),
        torch.nn.Linear(100, 100),
        torch.nn.ReLU(),
        torch.nn.Linear(100, 2),
    )


def batches(n, batch, epochs, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g).numpy()
        out += [np.sort(perm[i * batch : (i + 1) * batch]) for i in range(n // batch)]
    return out


def time_sgd(X, y, rows_list, device):
    net = make_net(0).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    for rows in rows_list:
        Xb = torch.as_tensor(np.ascontiguousarray(X[rows])).to(device)
        yb = torch.as_tensor(y[rows]).to(device)
        opt.zero_grad(set_to_none=True)
        loss_fn(net(Xb), yb).backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return len(rows_list) / (time.perf_counter() - t0)


def time_sampler(sampler, X, y, batch, epochs, device):
    net = FunctionalNetwork(make_net(0), device=device)
    target = MinibatchTarget(
        net, X, torch.as_tensor(y), Categorical(), GaussianPrior(1.0), batch_size=batch
    )
    kernel = sampler.build(target)
    state = kernel.init(net.initial_position()[None])
    gen = torch.Generator(device=device).manual_seed(0)
    inv_mass = torch.ones(target.dim, device=device)
    eps = torch.tensor([sampler.step_size], device=device)
    n_steps = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        state, info = kernel.step(state, gen, step_size=eps, inv_mass=inv_mass)
        tries = info.extra.get("n_tries") if info.extra else None
        n_steps += kernel.n_steps * (int(tries.max()) if tries is not None else 1)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return n_steps / (time.perf_counter() - t0), float(kernel.acceptance(info).mean())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    X, y = make_classification(args.rows, 50, n_informative=20, random_state=0)
    X = X.astype(np.float32)
    rows_list = batches(args.rows, args.batch, args.epochs, 0)
    samplers = {
        "SGLD": SGLD(step_size=1e-6),
        "SGHMC-Euler": SGHMC(step_size=1e-3),
        "SGHMC-OBABO": SGHMC(step_size=1e-3, integrator="obabo"),
        "SGHMC-skew": SGHMC(step_size=1e-3, integrator="skew"),
        "GSGHMC": GSGHMC(step_size=1e-3),
        "AMAGOLD": AMAGOLD(step_size=1e-4),
        "HTE (1 try)": HTE(step_size=1e-3, max_tries=1),
    }
    time_sgd(X, y, rows_list[:20], device)  # warm up (lazy imports, allocator)
    time_sampler(SGHMC(step_size=1e-3, n_steps=20), X, y, args.batch, 1, device)
    sgd = time_sgd(X, y, rows_list, device)
    print(
        f"{args.rows} rows x 50, batch {args.batch}, {args.epochs} epochs, {device}, "
        f"{torch.get_num_threads()} thread(s)"
    )
    print(f"{'method':<14}{'steps/s':>10}{'vs SGD':>9}{'accept':>9}")
    print(f"{'SGD+momentum':<14}{sgd:>10.0f}{1.0:>9.2f}{'-':>9}")
    for name, sampler in samplers.items():
        rate, acc = time_sampler(sampler, X, y, args.batch, args.epochs, device)
        print(f"{name:<14}{rate:>10.0f}{rate / sgd:>9.2f}{acc:>9.2f}")
    sgd2 = time_sgd(X, y, rows_list, device)
    print(f"SGD again (drift check): {sgd2:.0f} steps/s ({sgd2 / sgd:.2f} of the first)")


if __name__ == "__main__":
    main()
