"""Speed of the stochastic-gradient samplers against bare SGD with momentum, same batches, same run.

An MLP (50 -> W -> W -> 2, W = ``--hidden``, 100 by default) on ``make_classification`` data
kept as a numpy array; every method sees the same sequence of batch row indices, gathered from
numpy and moved to the device per step. The baseline is ``torch.optim.SGD(momentum=0.9)`` on the
mean cross-entropy plus weight decay (the deep-learning form of the same posterior). Each sampler
runs its kernel directly (one transition = one epoch). Reported: minibatch gradient steps per
second and the ratio to SGD (target >= 0.9 for SGLD / SGHMC), so the cost of each acceptance
scheme shows as the drop of its ratio: GSGHMC's paired test adds a forward pass per step, AMAGOLD
and HTE a full-data forward pass per epoch (HTE: per try).

On a shared machine the absolute rates drift, so the methods run in ``--rounds`` rounds (SGD,
then every sampler, in turn), each ratio is taken against the SGD of its own round, and the
medians over rounds are printed, both of wall-clock time and of the process's CPU time (which
other jobs on the machine disturb less). The ``noise`` row times the sampler's one intrinsic
extra: a draw of D standard normals from a generator (SGD draws none); ``bound`` is the ratio an
SGD step would have with that draw added, the most a one-draw sampler (SGLD, SGHMC-Euler or
skew) can reach (OBABO draws twice).

Run: ``python benchmarks/speed/sgmcmc_speed.py [--rows 20000] [--batch 128] [--hidden 100]
[--epochs 3] [--rounds 3] [--device cpu] [--only SGLD,SGHMC-Euler]``, or ``--sweep`` for the
SGD / SGLD / SGHMC ratios over batch sizes 32, 128, 512 and widths 100, 400.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from sklearn.datasets import make_classification

from sklearn_bnn.likelihoods import Categorical
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import AMAGOLD, GSGHMC, HTE, SGHMC, SGLD
from sklearn_bnn.targets import FunctionalNetwork, MinibatchTarget


def make_net(seed, hidden=100):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(50, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 2),
    )


def batches(n, batch, epochs, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g).numpy()
        out += [np.sort(perm[i * batch : (i + 1) * batch]) for i in range(n // batch)]
    return out


def _clock(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


def _rates(n_steps, start, device):
    wall, cpu = _clock(device)
    return n_steps / (wall - start[0]), n_steps / max(cpu - start[1], 1e-9)


def time_sgd(X, y, rows_list, device, hidden=100):
    """(wall, CPU) steps per second of SGD with momentum over ``rows_list``."""
    net = make_net(0, hidden).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    start = _clock(device)
    for rows in rows_list:
        Xb = torch.as_tensor(np.ascontiguousarray(X[rows])).to(device)
        yb = torch.as_tensor(y[rows]).to(device)
        opt.zero_grad(set_to_none=True)
        loss_fn(net(Xb), yb).backward()
        opt.step()
    return _rates(len(rows_list), start, device)


def time_sampler(sampler, X, y, batch, epochs, device, hidden=100):
    """(wall, CPU) steps per second of ``sampler``'s kernel over ``epochs`` transitions, and
    its acceptance of the last one."""
    net = FunctionalNetwork(make_net(0, hidden), device=device)
    target = MinibatchTarget(
        net, X, torch.as_tensor(y), Categorical(), GaussianPrior(1.0), batch_size=batch
    )
    kernel = sampler.build(target)
    state = kernel.init(net.initial_position()[None])
    gen = torch.Generator(device=device).manual_seed(0)
    inv_mass = torch.ones(target.dim, device=device)
    eps = torch.tensor([sampler.step_size], device=device)
    n_steps = 0
    start = _clock(device)
    for _ in range(epochs):
        state, info = kernel.step(state, gen, step_size=eps, inv_mass=inv_mass)
        tries = info.extra.get("n_tries") if info.extra else None
        n_steps += kernel.n_steps * (int(tries.max()) if tries is not None else 1)
    return (*_rates(n_steps, start, device), float(kernel.acceptance(info).mean()))


def time_noise(dim, n_draws, device):
    """(wall, CPU) seconds of one draw of ``dim`` standard normals into a buffer."""
    gen = torch.Generator(device=device).manual_seed(0)
    buffer = torch.empty(1, dim, device=device)
    start = _clock(device)
    for _ in range(n_draws):
        buffer.normal_(generator=gen)
    wall, cpu = _rates(n_draws, start, device)
    return 1.0 / wall, 1.0 / cpu


SAMPLERS = {
    "SGLD": lambda: SGLD(step_size=1e-6),
    "SGHMC-Euler": lambda: SGHMC(step_size=1e-3),
    "SGHMC-OBABO": lambda: SGHMC(step_size=1e-3, integrator="obabo"),
    "SGHMC-skew": lambda: SGHMC(step_size=1e-3, integrator="skew"),
    "GSGHMC": lambda: GSGHMC(step_size=1e-3),
    "AMAGOLD": lambda: AMAGOLD(step_size=1e-4),
    "HTE (1 try)": lambda: HTE(step_size=1e-3, max_tries=1),
}


def measure(rows, batch, hidden, epochs, rounds, device, names):
    """Median over ``rounds`` of each method's (wall, CPU) steps per second and of its (wall,
    CPU) ratio to the SGD of the same round; also the noise draw and its bound."""
    X, y = make_classification(rows, 50, n_informative=20, random_state=0)
    X = X.astype(np.float32)
    rows_list = batches(rows, batch, epochs, 0)
    dim = FunctionalNetwork(make_net(0, hidden)).dim
    time_sgd(X, y, rows_list[:20], device, hidden)  # warm up (lazy imports, allocator)
    time_sampler(SGHMC(step_size=1e-3, n_steps=20), X, y, batch, 1, device, hidden)
    runs = {name: [] for name in ["SGD+momentum", *names, "noise"]}
    for _ in range(rounds):
        sgd = time_sgd(X, y, rows_list, device, hidden)
        runs["SGD+momentum"].append((*sgd, 1.0, 1.0, None))
        for name in names:
            wall, cpu, acc = time_sampler(SAMPLERS[name](), X, y, batch, epochs, device, hidden)
            runs[name].append((wall, cpu, wall / sgd[0], cpu / sgd[1], acc))
        noise = time_noise(dim, len(rows_list), device)  # seconds per draw
        bound = [1.0 / (1.0 + noise[k] * sgd[k]) for k in range(2)]
        runs["noise"].append((1.0 / noise[0], 1.0 / noise[1], *bound, None))
    table = {}
    for name, values in runs.items():
        cols = [statistics.median(v[k] for v in values) for k in range(4)]
        table[name] = (*cols, values[-1][4])
    return table, dim, len(rows_list) // epochs


def print_table(table):
    print(f"{'method':<14}{'steps/s':>9}{'CPU st/s':>10}{'vs SGD':>8}{'CPU':>6}{'accept':>8}")
    for name, (wall, cpu, ratio, cpu_ratio, acc) in table.items():
        label = "noise (bound)" if name == "noise" else name
        acc = "-" if acc is None else f"{acc:.2f}"
        print(f"{label:<14}{wall:>9.0f}{cpu:>10.0f}{ratio:>8.2f}{cpu_ratio:>6.2f}{acc:>8}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", default=None, help="comma-separated method names")
    parser.add_argument("--sweep", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    names = list(SAMPLERS) if args.only is None else args.only.split(",")
    threads = f"{torch.get_num_threads()} thread(s)"
    if not args.sweep:
        table, dim, per_epoch = measure(
            args.rows, args.batch, args.hidden, args.epochs, args.rounds, device, names
        )
        print(
            f"{args.rows} rows x 50, MLP 50-{args.hidden}-{args.hidden}-2 (D = {dim}), batch "
            f"{args.batch} ({per_epoch} steps/epoch), {args.epochs} epochs, {device}, {threads}; "
            f"medians of {args.rounds} rounds"
        )
        print_table(table)
        return
    names = ["SGLD", "SGHMC-Euler"] if args.only is None else names
    print(f"{device}, {threads}; ratio to SGD (wall / CPU), medians of {args.rounds} rounds")
    print(
        f"{'hidden':>6}{'D':>8}{'batch':>6}{'SGD st/s':>9}"
        + "".join(f"{n:>14}" for n in [*names, "noise bound"])
    )
    for hidden in (100, 400):
        for batch in (32, 128, 512):
            table, dim, _ = measure(
                args.rows, batch, hidden, args.epochs, args.rounds, device, names
            )
            cells = "".join(f"{table[n][2]:>8.2f}/{table[n][3]:.2f}" for n in [*names, "noise"])
            print(f"{hidden:>6}{dim:>8}{batch:>6}{table['SGD+momentum'][0]:>9.0f}{cells}")


if __name__ == "__main__":
    main()
