"""The matrix products of one MLP gradient on a GPU, in each layout that gives the same result.

Issue 31: a replayed leapfrog step of the default MLP on digits (884 rows, 64 features, 100
hidden units, 7 classes) spends most of its device time in a few matrix products whose outputs
are tiny (100 x 65) and whose inner dimension is the row count; cuBLAS's choice of kernel for
them depends on the operands' layout. This script times, for one and for eight chains, every
product of :class:`~sklearn_bnn.targets._batched_mlp.BatchedMLP`'s step in the layouts that
compute it (float32, TF32 off, as the package runs; TF32 on for reference), each replayed 200
times from a CUDA graph so that only device time counts. On the device machine::

    python benchmarks/gpu/gpu_gemm_shapes.py --out $OUT/gemm.json

``--smoke`` runs it on the CPU with plain timing (to check the script).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

REPS = 200


def timed(fn, device, reps=REPS) -> float:
    """Microseconds per call: replayed from a CUDA graph on a GPU, plain calls on the CPU."""
    if device == "cpu":
        fn()
        start = time.perf_counter()
        for _ in range(10):
            fn()
        return (time.perf_counter() - start) / 10 * 1e6
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def split_k(a, b, parts):
    """a (M, K) @ b (K, N) as ``parts`` products over slices of K, summed."""
    K = a.shape[1]
    k = K // parts
    a3 = a[:, : k * parts].reshape(a.shape[0], parts, k).transpose(0, 1)  # (P, M, k)
    b3 = b[: k * parts].reshape(parts, k, b.shape[1])  # (P, k, N)
    out = torch.bmm(a3, b3).sum(0)
    if k * parts < K:
        out += a[:, k * parts :] @ b[k * parts :]
    return out


def variants(C, n, d, h, o, device):
    g = torch.Generator(device="cpu").manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(device)

    X1t = r(d + 1, n)  # inputs with a ones row, feature-major (as the package keeps them)
    X1 = X1t.t().contiguous()  # row-major copy
    Wb = r(C * h, d + 1)
    dz1 = r(C * h, n)  # gradient w.r.t. the first pre-activation, (C h, n)
    a = r(C, h, n)  # hidden activation, feature-major
    a_rows = a.transpose(1, 2).contiguous()  # (C, n, h)
    W2 = r(C, o, h)
    b2 = r(C, o, 1)
    dz2 = r(C, o, n)
    W2t = W2.transpose(1, 2).contiguous()
    out = {}
    out["fwd1 mm(Wb, X1t) [now]"] = lambda: torch.mm(Wb, X1t)
    out["fwd1 mm(X1, Wb.t()).t()"] = lambda: torch.mm(X1, Wb.t())
    out["fwd2 baddbmm(b, W2, a) [now]"] = lambda: torch.baddbmm(b2, W2, a)
    out["fwd2 bmm(W2, a) + b"] = lambda: torch.bmm(W2, a).add_(b2)
    out["fwd2 bmm(a_rows, W2.mT).mT (rows out)"] = lambda: torch.bmm(a_rows, W2.transpose(1, 2))
    if C == 1:
        out["fwd2 addmm(b, W2, a)"] = lambda: torch.addmm(b2[0], W2[0], a[0])
        out["fwd2 addmm(b_row, a_rows, W2.t()) (Lt bias)"] = lambda: torch.addmm(
            b2[0, :, 0], a_rows[0], W2[0].t()
        )
    out["wgrad1 mm(dz, X1t.t()) [now]"] = lambda: torch.mm(dz1, X1t.t())
    out["wgrad1 mm(dz, X1)"] = lambda: torch.mm(dz1, X1)
    out["wgrad1 mm(X1t, dz.t()).t()"] = lambda: torch.mm(X1t, dz1.t())
    for parts in (4, 8, 16):
        out[f"wgrad1 split-K {parts} over X1"] = lambda p=parts: split_k(dz1, X1, p)
    out["wgrad2 bmm(dz2, a.mT) [now]"] = lambda: torch.bmm(dz2, a.transpose(1, 2))
    out["wgrad2 bmm(dz2, a_rows)"] = lambda: torch.bmm(dz2, a_rows)
    out["wgrad2 bmm(a, dz2.mT).mT"] = lambda: torch.bmm(a, dz2.transpose(1, 2))
    if C == 1:
        out["wgrad2 mm(dz2[0], a_rows[0])"] = lambda: torch.mm(dz2[0], a_rows[0])
        out["wgrad2 split-K 8"] = lambda: split_k(dz2[0], a_rows[0], 8)
    out["dgrad bmm(W2.mT, dz2) [now]"] = lambda: torch.bmm(W2.transpose(1, 2), dz2)
    out["dgrad bmm(W2t, dz2)"] = lambda: torch.bmm(W2t, dz2)
    logp = r(C, o * n)
    onehot = r(o * n)
    out["value mv(logp, onehot) [now]"] = lambda: torch.mv(logp, onehot)
    out["value (logp * onehot).sum(1)"] = lambda: (logp * onehot).sum(1)
    D = (d + 1) * h + (h + 1) * o
    theta, tau = r(C, D), r(D).abs()
    out["prior matmul(theta^2, tau) (before)"] = lambda: torch.matmul(theta.square(), tau)
    out["prior (theta^2 * tau).sum(1) [now, C=1]"] = lambda: theta.square().mul_(tau).sum(-1)
    return out


def whole_gradients(n, d, h, o, device):
    """One chain's whole gradient of the categorical MLP (no value, prior included): the
    package's (``Target.log_prob_grad``: the batched form, feature-major) against a rows-first
    form written here, whose first layer's bias and ReLU and second layer's bias ride in
    cuBLASLt epilogues (``torch._addmm_activation``, ``addmm`` with a bias row) and whose
    every gradient piece is one product or sum written into the flat vector: about 11 kernels
    against about 16. The two are checked equal first."""
    from sklearn_bnn.likelihoods import Categorical
    from sklearn_bnn.nets import MLP
    from sklearn_bnn.priors import GaussianPrior
    from sklearn_bnn.targets import FunctionalNetwork, Target

    g = torch.Generator(device="cpu").manual_seed(0)
    X = torch.randn(n, d, generator=g).to(device)
    y = torch.randint(0, o, (n,), generator=g).to(device)
    torch.manual_seed(0)
    target = Target(FunctionalNetwork(MLP(d, (h,), o), device=device), X, y, Categorical(),
                    GaussianPrior(1.0))  # fmt: skip
    theta = 0.1 * torch.randn(1, target.dim, generator=g).to(device)
    tau = target.prior_density.precision
    onehot = torch.nn.functional.one_hot(y, o).to(X.dtype)
    grad = torch.empty_like(theta)
    gW1, gb1, gW2, gb2 = grad.view(-1).split([h * d, h, o * h, o])
    W1, b1, W2, b2 = theta.view(-1).split([h * d, h, o * h, o])
    W1, W2 = W1.view(h, d), W2.view(o, h)
    gW1, gW2 = gW1.view(h, d), gW2.view(o, h)

    def rows_first():
        a = torch._addmm_activation(b1, X, W1.t())  # relu(X W1^T + b1), (n, h)
        log_p = torch.log_softmax(torch.addmm(b2, a, W2.t()), 1)  # (n, o)
        dz = torch.ops.aten._log_softmax_backward_data(onehot, log_p, 1, log_p.dtype)
        torch.mm(dz.t(), a, out=gW2)
        torch.sum(dz, 0, out=gb2)
        da = torch.mm(dz, W2)  # (n, h)
        dz1 = torch.ops.aten.threshold_backward.grad_input(da, a, 0, grad_input=da)
        torch.mm(dz1.t(), X, out=gW1)
        torch.sum(dz1, 0, out=gb1)
        return grad.addcmul_(tau, theta, value=-1)

    reference = target.log_prob_grad(theta)
    torch.testing.assert_close(rows_first().clone(), reference, rtol=1e-4, atol=1e-4)
    return {
        "whole gradient, Target.log_prob_grad [now]": lambda: target.log_prob_grad(theta),
        "whole gradient, rows first with epilogues": rows_first,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    results = dict(device=torch.cuda.get_device_name(0) if device == "cuda" else "cpu", rows=[])
    for C in (1, 8):
        for tf32 in (False, True) if device == "cuda" else (False,):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for name, fn in variants(C, 884, 64, 100, 7, device).items():
                us = timed(fn, device)
                row = dict(chains=C, tf32=tf32, product=name, us=us)
                results["rows"].append(row)
                print(f"C={C} tf32={int(tf32)} {name:<36} {us:8.2f} us", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, fn in whole_gradients(884, 64, 100, 7, device).items():
        us = timed(fn, device)
        results["rows"].append(dict(chains=1, tf32=False, product=name, us=us))
        print(f"C=1 tf32=0 {name:<36} {us:8.2f} us", flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
