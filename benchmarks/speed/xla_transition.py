"""One HMC transition, the package against the same transition written in JAX and jitted.

Digits classes 0-6 (scikit-learn's ``load_digits``, 70 % of the rows for training: 884 x 64,
standardised), the package's default MLP (one hidden layer of 100 ReLU units, 7 outputs),
Gaussian prior of precision 1, categorical likelihood summed over rows, float32. A transition
is a momentum draw, 50 leapfrog steps at a fixed step size (identity mass, no jitter, no
rescale moves, the gradient cached between steps) and the Metropolis test:

- ``jax``: the whole transition under one :func:`jax.jit` (``lax.fori_loop`` over the steps,
  chains by :func:`jax.vmap`);
- ``ours``: :meth:`HMCKernel.step` (the kernel of ``HMC(...).build(target)``) on the package's
  :class:`Target` (the hand-batched MLP gradient, ``Target.batched_mlp``);
- ``general``: the same with ``batched_mlp = False`` (one chain: autograd through a module
  whose parameters are views of one flat vector; several: ``vmap`` over ``functional_call``),
  the path before issue 31.

Seconds per transition after warm-up, the median of interleaved repeats, ratios from the same
run; each thread setting runs in its own process (XLA reads its thread flags at import):
torch's default threads with XLA's default, then one thread for both. At the default setting
the last column times ours again at the threads a fit of the model would choose
(``sklearn_bnn._threads``: one per 2.5e8 multiply-adds of a forward pass), which is how users
run it: digits at up to 8 chains takes one thread whatever torch's default. Subnormal floats are
flushed to zero in torch's calling thread, as the package's fits do and as XLA does. The load
average is read at the start and end of each chain count. JAX is imported here only, never
by the package.

Run: ``python benchmarks/speed/xla_transition.py [--chains 1 8 32 128] [--threads default 1]``;
``--quick`` for a smoke run (1 and 8 chains, 5 steps, 2 repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HIDDEN, N_OUT, PRIOR = 100, 7, 1.0


def digits():
    """Training rows of digits 0-6, standardised (float32)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    keep = y < N_OUT
    X_train, _, y_train, _ = train_test_split(X[keep], y[keep], test_size=0.3, random_state=0)
    return StandardScaler().fit_transform(X_train).astype(np.float32), y_train.astype(np.int64)


# -- ours ----------------------------------------------------------------------------------------
def ours(X, y, theta0, eps, n_steps, batched=True, fit_threads=False):
    """A closure running one transition of the package's HMC kernel, and its acceptances;
    with ``fit_threads``, at the torch threads a fit of this model would choose
    (:func:`sklearn_bnn._threads.sampling_threads`: rows x parameters x chains)."""
    import torch

    from sklearn_bnn._threads import sampling_threads
    from sklearn_bnn.likelihoods import Categorical
    from sklearn_bnn.nets import MLP
    from sklearn_bnn.priors import GaussianPrior
    from sklearn_bnn.samplers.hamiltonian.hmc import HMC
    from sklearn_bnn.targets import FunctionalNetwork, Target

    net = FunctionalNetwork(MLP(X.shape[1], (HIDDEN,), N_OUT))
    target = Target(net, X, torch.as_tensor(y), Categorical(), GaussianPrior(PRIOR))
    target.batched_mlp = batched
    kernel = HMC(step_size=eps, n_steps=n_steps, step_jitter=0.0).build(target)
    generator = torch.Generator().manual_seed(0)
    box = {"state": kernel.init(torch.as_tensor(theta0), generator)}
    accepts = []

    work = X.shape[0] * theta0.shape[1] * theta0.shape[0]

    def step():
        if fit_threads:
            with sampling_threads(work):
                box["state"], info = kernel.step(box["state"], generator)
        else:
            box["state"], info = kernel.step(box["state"], generator)
        accepts.append(float(info.accept_prob.mean()))

    return step, accepts


# -- JAX -----------------------------------------------------------------------------------------
def jax_transition(X, y, theta0, eps, n_steps):
    """The same transition in JAX, jitted whole: a closure running one, and its acceptances."""
    import jax
    import jax.numpy as jnp

    d = X.shape[1]
    sizes = [HIDDEN * d, HIDDEN, N_OUT * HIDDEN, N_OUT]  # torch's flat layout
    bounds = np.cumsum([0, *sizes])
    Xj, yj = jnp.asarray(X), jnp.asarray(y)

    def log_density(theta):
        W1 = theta[bounds[0] : bounds[1]].reshape(HIDDEN, d)
        b1 = theta[bounds[1] : bounds[2]]
        W2 = theta[bounds[2] : bounds[3]].reshape(N_OUT, HIDDEN)
        b2 = theta[bounds[3] : bounds[4]]
        logits = jax.nn.relu(Xj @ W1.T + b1) @ W2.T + b2
        log_lik = jnp.take_along_axis(jax.nn.log_softmax(logits), yj[:, None], 1).sum()
        return log_lik - 0.5 * PRIOR * jnp.sum(theta * theta)

    value_and_grad = jax.vmap(jax.value_and_grad(log_density))

    def transition(key, q, log_p, grad):
        key, k_momentum, k_accept = jax.random.split(key, 3)
        p0 = jax.random.normal(k_momentum, q.shape, q.dtype)

        def leapfrog_step(_, carry):
            q, p, _, g = carry
            q = q + eps * p
            lp, g = value_and_grad(q)
            return q, p + eps * g, lp, g

        p = p0 + 0.5 * eps * grad
        q1, p1, lp1, g1 = jax.lax.fori_loop(0, n_steps, leapfrog_step, (q, p, log_p, grad))
        p1 = p1 - 0.5 * eps * g1  # the last kick is a half one
        h0 = -log_p + 0.5 * jnp.sum(p0 * p0, -1)
        h1 = -lp1 + 0.5 * jnp.sum(p1 * p1, -1)
        log_ratio = jnp.nan_to_num(h0 - h1, nan=-jnp.inf)
        accept = jnp.log(jax.random.uniform(k_accept, log_p.shape)) < log_ratio
        pick = lambda new, old: jnp.where(accept[:, None] if new.ndim == 2 else accept, new, old)  # noqa: E731
        prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
        return key, pick(q1, q), pick(lp1, log_p), pick(g1, grad), prob

    jitted = jax.jit(transition)
    q = jnp.asarray(theta0)
    lp, g = jax.jit(value_and_grad)(q)
    box = {"carry": (jax.random.PRNGKey(0), q, lp, g)}
    accepts = []

    def step():
        *carry, prob = jitted(*box["carry"])
        jax.block_until_ready(carry[1])
        box["carry"] = tuple(carry)
        accepts.append(float(prob.mean()))

    return step, accepts


# -- one thread setting --------------------------------------------------------------------------
def start(X, n_chains, seed=0):
    """Starting positions (C, D): the MLP's own initialisation, one per chain."""
    import torch

    from sklearn_bnn.nets import MLP

    rows = []
    for c in range(n_chains):
        torch.manual_seed(seed + c)
        net = MLP(X.shape[1], (HIDDEN,), N_OUT)
        rows.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
    return torch.stack(rows).numpy()


def timed(step) -> tuple[float, float]:
    """Wall and process CPU seconds of one call of ``step``."""
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - wall, time.process_time() - cpu


def worker(args):
    """Time every chain count at one thread setting; print one JSON line per count."""
    import torch

    from sklearn_bnn._threads import threads_for

    if args.threads != "default":
        torch.set_num_threads(int(args.threads))
    torch.set_flush_denormal(True)  # as a fit does (sklearn_bnn._utils), and as XLA does
    X, y = digits()
    for C in args.chains:
        theta0 = start(X, C)
        runs = {
            "jax": jax_transition(X, y, theta0, args.step_size, args.n_steps),
            "ours": ours(X, y, theta0, args.step_size, args.n_steps),
            "general": ours(X, y, theta0, args.step_size, args.n_steps, batched=False),
        }
        if args.threads == "default":  # as a fit runs: at the threads it picks for the model
            runs["fit"] = ours(X, y, theta0, args.step_size, args.n_steps, fit_threads=True)
        load = [os.getloadavg()[0]]
        for step, _ in runs.values():  # compile (JAX) and warm caches
            for _ in range(args.warmup):
                step()
        repeats = args.repeats if C <= 8 else max(2, args.repeats // 2)
        times = {name: [] for name in runs}
        for _ in range(repeats):  # interleaved: the same load for every variant
            for name, (step, _) in runs.items():
                times[name].append(timed(step))
        load.append(os.getloadavg()[0])
        row = {
            "threads": args.threads,
            "torch_threads": torch.get_num_threads(),
            "chains": C,
            "fit_threads": threads_for(X.shape[0] * theta0.shape[1] * C),
            "load": load,
            **{name: statistics.median(w for w, _ in t) for name, t in times.items()},
            **{f"cpu_{name}": statistics.median(c for _, c in t) for name, t in times.items()},
            **{f"accept_{name}": float(np.mean(a)) for name, (_, a) in runs.items()},
        }
        print(json.dumps(row), flush=True)


def run_setting(args, threads: str) -> list[dict]:
    """One worker process at ``threads``: XLA's flags set before it imports JAX."""
    env = dict(os.environ)
    if threads != "default":
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "")
            + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        ).strip()
    cmd = [sys.executable, __file__, "--worker", "--threads", threads]
    cmd += ["--chains", *map(str, args.chains), "--n-steps", str(args.n_steps)]
    cmd += ["--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    cmd += ["--step-size", str(args.step_size)]
    rows = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:  # each row as it comes: a long run shows its progress
            if line.startswith("{"):
                rows.append(json.loads(line))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return rows


def table(rows: list[dict]) -> str:
    """Wall seconds per transition and ratios to JAX; the CPU-time ratios (process CPU
    seconds, less sensitive to other jobs on a shared machine) beside them."""
    head = (
        "| threads | chains | JAX s | ours s | ours / JAX | general s | general / JAX | "
        "CPU ours / JAX | CPU general / JAX | accept (JAX, ours) | load | "
        "ours at a fit's threads: s / JAX |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [head]
    for r in rows:
        threads = f"default ({r['torch_threads']})" if r["threads"] == "default" else r["threads"]
        lines.append(
            f"| {threads} | {r['chains']} | {r['jax']:.4f} | {r['ours']:.4f} | "
            f"{r['ours'] / r['jax']:.2f}x | {r['general']:.4f} | "
            f"{r['general'] / r['jax']:.2f}x | {r['cpu_ours'] / r['cpu_jax']:.2f}x | "
            f"{r['cpu_general'] / r['cpu_jax']:.2f}x | "
            f"{r['accept_jax']:.2f}, {r['accept_ours']:.2f} | "
            f"{r['load'][0]:.1f}-{r['load'][1]:.1f} | "
            + (
                f"{r['fit']:.4f} / {r['fit'] / r['jax']:.2f}x ({r['fit_threads']} thread(s)) |"
                if "fit" in r
                else "|"
            )
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, nargs="*", default=[1, 8, 32, 128])
    parser.add_argument("--threads", nargs="*", default=["default", "1"])
    parser.add_argument("--n-steps", type=int, default=50)
    parser.add_argument("--step-size", type=float, default=2e-3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smoke run: 1, 8 chains, 5 steps")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.chains, args.n_steps, args.repeats, args.warmup = [1, 8], 5, 2, 1
    if args.worker:
        args.threads = args.threads[0]
        worker(args)
        return
    rows = []
    for threads in args.threads:
        rows += run_setting(args, threads)
    print(table(rows))


if __name__ == "__main__":
    main()
