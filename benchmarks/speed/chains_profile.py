"""Where the time of vectorized chains goes: one gradient of C chains against one chain.

For an MLP [13, H, 1] on 500 rows (Gaussian likelihood, N(0, 1) prior) this times, per
leapfrog step (one gradient), for C = 1, 2, 4, 8 chains:

- ``target``: the sampler's gradient, ``Target.value_and_grad`` on (C, D) (one chain: a plain
  forward/backward of a flat-parameter module; several: ``vmap`` over ``functional_call``);
- ``step``: a whole HMC transition of 10 leapfrog steps divided by 10 (the kernel's kicks,
  drifts, momentum draw and acceptance test included);
- ``floor``: a bare batched torch forward+backward of the same C networks written by hand
  (``torch.baddbmm`` on (C, ., .) weights; one chain: ``nn.Module`` forward/backward);

then the share of matrix products in the operators' time of the 8-chain gradient
(:mod:`torch.profiler`), and the fixed cost of a gradient (Python, dispatch, ``vmap``) on a
network too small to compute anything. The fastest of interleaved
rounds; ratios against the one-chain figure of the same column, measured in the same run.
Run: ``python benchmarks/speed/chains_profile.py [--hidden 50 200 800] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch

from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.nets import make_mlp
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import HMC
from sklearn_bnn.targets import FunctionalNetwork, Target

N_ROWS, N_IN = 500, 13
CHAINS = (1, 2, 4, 8)
MATMUL = ("mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "dot", "mv")


def interleaved_min(fns, rounds, calls):
    """Seconds per call of each closure: the fastest of ``rounds`` blocks of ``calls`` calls,
    the closures taking turns in every round. Process CPU time, not wall time: on a shared
    machine a process waiting for a core is not charged, and the minimum is the figure least
    disturbed by other processes (with one torch thread CPU time is the compute itself)."""
    best = [float("inf")] * len(fns)
    for fn in fns:
        fn()
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.process_time()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.process_time() - start) / calls)
    return best


def make_target(hidden, X, y):
    torch.manual_seed(0)
    network = FunctionalNetwork(make_mlp(N_IN, (hidden,), 1))
    return Target(network, X, y, Gaussian(10.0), GaussianPrior(1.0))


def bare_floor(hidden, C, X, y):
    """A closure: one forward+backward of C hand-batched networks (the floor)."""
    if C == 1:
        net = make_mlp(N_IN, (hidden,), 1)

        def one():
            net.zero_grad(set_to_none=True)
            (-5.0 * ((net(X) - y) ** 2).sum()).backward()

        return one
    w1 = torch.randn(C, N_IN, hidden, requires_grad=True)
    b1 = torch.randn(C, 1, hidden, requires_grad=True)
    w2 = torch.randn(C, hidden, 1, requires_grad=True)
    b2 = torch.randn(C, 1, 1, requires_grad=True)
    Xc = X.expand(C, -1, -1)

    def batched():
        h = torch.relu(torch.baddbmm(b1, Xc, w1))
        out = torch.baddbmm(b2, h, w2)
        loss = -5.0 * ((out - y) ** 2).sum()
        torch.autograd.grad(loss, (w1, b1, w2, b2))

    return batched


def matmul_share(fn, repeats=50):
    """Share of the operators' self CPU time (:mod:`torch.profiler`) spent in matrix
    products; the rest is elementwise work, reductions, copies and autograd bookkeeping."""
    fn()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            fn()
    matmul = other = 0.0
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            if event.key.removeprefix("aten::") in MATMUL:
                matmul += event.self_cpu_time_total
            else:
                other += event.self_cpu_time_total
    return matmul / (matmul + other)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, nargs="*", default=[10, 50, 200])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=200, help="calls per block at H=50")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N_ROWS, N_IN, generator=g)
    y = torch.randn(N_ROWS, 1, generator=g)
    print(f"MLP [13, H, 1], {N_ROWS} rows, float32, {args.threads} thread(s); ms per gradient")
    print(
        f"{'H':>5}{'C':>3}{'target':>9}{'step':>9}{'floor':>9}   ratios vs C=1 (target, step, "
        "floor)   target / floor"
    )
    for hidden in args.hidden:
        target = make_target(hidden, X, y)
        kernel = HMC(step_size=1e-4, n_steps=10, step_jitter=0.0).build(target)
        calls = max(2, args.repeats * 50 // (hidden * 10))
        fns = []
        for C in CHAINS:
            theta = target.network.initial_position()[None].repeat(C, 1)
            theta = theta + 0.01 * torch.randn(theta.shape, generator=g)
            state = kernel.init(theta)
            fns += [
                partial(target.value_and_grad, theta),
                partial(kernel.step, state, g),  # 10 leapfrog steps
                bare_floor(hidden, C, X, y),
            ]
        times = interleaved_min(fns, args.rounds, calls)
        base = None
        for k, C in enumerate(CHAINS):
            t_target, t_step, t_floor = times[3 * k : 3 * k + 3]
            row = (t_target, t_step / 10, t_floor)
            base = base or row
            ratios = ", ".join(f"{a / b:.2f}x" for a, b in zip(row, base, strict=True))
            print(
                f"{hidden:>5}{C:>3}"
                + "".join(f"{1e3 * t:>9.3f}" for t in row)
                + f"   {ratios:<28}{t_target / t_floor:>6.2f}x",
                flush=True,
            )
        theta8 = target.network.initial_position()[None].repeat(8, 1)
        shares = [
            matmul_share(fn, max(10, 10 * calls))
            for fn in (partial(target.value_and_grad, theta8), bare_floor(hidden, 8, X, y))
        ]
        print(
            f"      H={hidden}, 8 chains: matrix products take {100 * shares[0]:.0f} % of the "
            f"operators' time in the target, {100 * shares[1]:.0f} % in the floor",
            flush=True,
        )
    tiny = make_target(1, X[:1], y[:1])
    thetas = [tiny.network.initial_position()[None].repeat(C, 1) for C in CHAINS]
    fns = [partial(tiny.value_and_grad, theta) for theta in thetas]
    times = interleaved_min(fns, args.rounds, 200)
    print(
        "fixed cost per gradient (MLP [13, 1, 1] on 1 row: no arithmetic to speak of), "
        + ", ".join(f"C={C} {1e3 * t:.3f} ms" for C, t in zip(CHAINS, times, strict=True))
    )


if __name__ == "__main__":
    main()
