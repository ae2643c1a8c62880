"""Peak memory of one HMC trajectory: full batch against split HMC in 10 subsets.

N = 100,000 rows of 20 features, MLP [20, 256, 256, 1] (71,681 parameters), one chain, L steps.
Each configuration runs in a fresh subprocess. The start state (full-data log density and
gradient) is computed subset by subset for every configuration; then the peak resident set
size is reset (``/proc/self/clear_refs``) and one trajectory is integrated. Reported: the
process's peak RSS during the trajectory and its increase over the RSS just before it (the
memory the trajectory itself needed: activations, autograd graph, gradients). On a CUDA device
(``--device cuda``) ``torch.cuda.max_memory_allocated`` is used instead.

glibc's malloc keeps freed blocks in its heap and raises its mmap threshold as large blocks are
freed, so by default the RSS of a process that has already freed some tensors says more about
the allocator's history than about the memory the trajectory needs (the start state, computed
just before, leaves a heap that the split trajectory then reuses without new pages, or not,
depending on fragmentation). The children therefore run with a fixed mmap threshold and trim
threshold (128 KiB): every tensor block larger than that is its own mapping, returned to the
system when freed, and the peak RSS follows the peak of live memory. ``--glibc-default`` runs
without these settings, for comparison.

Target: split / full <= 0.25. Run: ``python benchmarks/speed/split_memory.py [--steps 3]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn

from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import State
from sklearn_bnn.targets import FunctionalNetwork, SplitTarget, Target

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import SPLIT_SCHEMES as INTEGRATORS  # noqa: E402
from harness import child_env, proc_status_kib, reset_peak_rss, run_child  # noqa: E402


def measure(scheme: str, n: int, n_splits: int, steps: int, device: str) -> dict:
    """One trajectory in this process; memory figures in MiB."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 20, generator=g).to(device)
    y = X[:, :1].sin() + 0.1 * torch.randn(n, 1, generator=g).to(device)
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)
    )
    net = FunctionalNetwork(module, device=device)
    args = (net, X, y, Gaussian(100.0), GaussianPrior(1.0))
    split = SplitTarget(*args, n_splits=n_splits)
    target = Target(*args) if scheme == "full" else split
    q = net.initial_position()[None]
    state = State(q, *split.value_and_grad(q))
    p = torch.randn(q.shape, generator=g).to(device)
    eps = torch.full((1,), 1e-4, device=device)
    inv_mass = torch.ones(net.dim, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        reset_peak_rss()
        before = proc_status_kib("VmRSS") * 1024
    INTEGRATORS[scheme](target, state, p, eps, steps, inv_mass, torch.Generator().manual_seed(0))
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = proc_status_kib("VmHWM") * 1024
    mib = 2.0**20
    return {"peak": peak / mib, "before": before / mib, "increase": (peak - before) / mib}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--n-splits", type=int, default=10)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--glibc-default", action="store_true", help="keep glibc's adaptive malloc thresholds"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.n, args.n_splits, args.steps, args.device)))
        return
    kind = "allocated (CUDA)" if args.device == "cuda" else "RSS"
    env = child_env(fixed_malloc=not args.glibc_default)
    print(
        f"one trajectory of {args.steps} steps, N = {args.n}, MLP [20, 256, 256, 1], "
        f"{args.n_splits} subsets; peak {kind} in MiB, fresh process per row"
        + ("" if args.glibc_default or args.device == "cuda" else ", malloc thresholds 128 KiB")
    )
    header = f"{'scheme':<11} {'peak':>8} {'before':>8} {'increase':>9} {'increase / full':>16}"
    print(header)
    print("-" * len(header))
    full = None
    for scheme in INTEGRATORS:
        cmd = [sys.executable, __file__, "--child", scheme, "--n", str(args.n)]
        cmd += ["--n-splits", str(args.n_splits), "--steps", str(args.steps)]
        r = run_child(cmd + ["--device", args.device], env)
        full = r if full is None else full
        ratio = r["increase"] / full["increase"]
        print(
            f"{scheme:<11} {r['peak']:>8.0f} {r['before']:>8.0f} {r['increase']:>9.0f} "
            f"{ratio:>16.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
