"""GPU against CPU: HMC transitions, NumPyro's HMC and NUTS, an estimator fit, SG-MCMC epochs.

Issue 31's measurements in one script, for one NVIDIA H100 with torch, JAX and NumPyro
installed and no network (the data: scikit-learn's bundled digits and a synthetic set made
here). On the device machine, from the repository root::

    python benchmarks/gpu/gpu_speed.py --out $OUT/gpu.json

(Torch's profiler prints ``USDT`` lines; filter them with ``grep --line-buffered -v USDT``: a
plain ``grep`` into a pipe holds its output back, and a run stopped at its time limit then
shows nothing.) It prints one table and writes every figure to ``--out`` (JSON). It runs in
under 8 minutes (``--budget`` seconds, 450 by default: a section that would not fit in what
is left is skipped and says so; a section that fails records its error and the others go on).
On any machine,
``--smoke`` runs every section at tiny sizes on the CPU (skipping NumPyro where it is not
installed), to check the script itself::

    python benchmarks/gpu/gpu_speed.py --smoke --out /tmp/gpu_smoke.json

(``--smoke``: 5 leapfrog steps instead of 50, a 600-second budget.)

Sections:

1. ``transitions``: seconds per HMC transition (50 leapfrog steps, fixed step size) of our
   ``HMCKernel`` on our network ``Target``, on cuda and on cpu, at 1, 8 and 32 chains, on
   digits 0-6 (884 training rows, 64 features, MLP 100 units: 7,207 parameters) and on a
   synthetic 160,000-row, 50-feature, 5-class set (5,605 parameters). The marginal cost of
   transitions from two budgets, so fixed costs cancel; a configuration whose predicted time
   (from one timed gradient) would not fit is reported as that prediction.
2. ``auto``: which device ``device="auto"`` picks for each configuration (replayed HMC:
   ``sklearn_bnn._utils.AUTO_CUDA_WORK_REPLAYED``) against which one was faster.
3. ``numpyro``: NumPyro's HMC with ``num_steps=50`` and ``trajectory_length = 50 * step``
   (with ``num_steps`` alone NumPyro keeps the trajectory length 2 pi and changes the step:
   numpyro issue 1678), at the same fixed step, same MLP, prior and data (digits), seconds per
   transition; then our HMC, NumPyro's HMC (50 steps, step adapted) and NUTS (tree depth <= 8),
   each with step-size warmup, as log-density ESS per second of sampling.
4. ``estimator``: ``HMCClassifier(device=cuda)`` at its defaults on the 160k set (150,000
   rows to fit, 10,000 held out): fit time, accuracy and negative log-likelihood.
5. ``sgmcmc``: seconds per epoch of ``SGMCMCClassifier`` (defaults but ``init="random"``, so
   the MAP start's epochs do not count) on cuda, steps replayed from a CUDA graph and eager,
   and on cpu, 160k set, marginal over epochs; seconds per SGHMC minibatch step (the kernel
   alone) on iris, digits and the 160k set at 1 and 8 chains; CUDA synchronisations of one
   SGHMC transition. ``sgfit``: ``SGMCMCClassifier`` fits with the MAP start timed apart (at
   its defaults on cuda; 10 + 10 transitions on cuda and cpu), held-out accuracy and NLL.
6. ``syncs``: host synchronisations per transition, counted by
   ``torch.cuda.set_sync_debug_mode("warn")`` (one warning each) on cuda, and as host reads
   (``.item()``, ``.cpu()``, ``bool(t)``, ...) counted by a ``TorchFunctionMode`` on any
   device: a fixed-L transition, a warmup and a sampling transition of the loop.
7. ``profile``: the GPU kernels of five transitions (one chain, digits), replayed, replayed
   with the log density computed at every step (as before ``Target.log_prob_grad``) and eager:
   kernels per transition, their summed device time, the twelve that take the most.

``--only`` runs some sections, ``--data`` and ``--chains`` narrow the transitions section
(``benchmarks/results/gpu_h200_2026-11-27/`` holds the runs of 2026-11-27).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
import warnings
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU to torch too

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_iris, make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split  # noqa: E402

from sklearn_bnn import HMCClassifier, SGMCMCClassifier, set_config  # noqa: E402
from sklearn_bnn._utils import (  # noqa: E402
    AUTO_CUDA_WORK,
    AUTO_CUDA_WORK_REPLAYED,
    mlp_parameter_count,
    resolve_device,
)
from sklearn_bnn.diagnostics import ess  # noqa: E402
from sklearn_bnn.likelihoods import Categorical  # noqa: E402
from sklearn_bnn.nets import MLP  # noqa: E402
from sklearn_bnn.priors import GaussianPrior  # noqa: E402
from sklearn_bnn.samplers import HMC as OurHMC  # noqa: E402
from sklearn_bnn.samplers import SGHMC, run_chains  # noqa: E402
from sklearn_bnn.samplers.starts import MAPStart  # noqa: E402
from sklearn_bnn.targets import FunctionalNetwork, MinibatchTarget, Target  # noqa: E402

N_STEPS = 50
HIDDEN = 100
STEP = 1e-3  # fixed step of the timing runs (the figures do not depend on the acceptance)


class Clock:
    """The global budget: seconds left, and whether a section expected to take ``need``
    seconds still fits."""

    def __init__(self, budget: float):
        self.start, self.budget = time.perf_counter(), budget

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)

    def fits(self, need: float) -> bool:
        return self.left() > need


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


# -- data ------------------------------------------------------------------------------------
def digits_data(smoke: bool):
    X_tr, y_tr, X_te, y_te, _ = digits_split(classes=range(7))
    if smoke:
        X_tr, y_tr = X_tr[:200], y_tr[:200]
    return X_tr.astype(np.float32), y_tr, X_te.astype(np.float32), y_te


def small_data(loader):
    """A small bundled set (iris, breast cancer), 80 % to fit: where the crossover lies."""

    def make(smoke: bool):
        X, y = loader(return_X_y=True)
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
        scaler = StandardScaler().fit(X_tr)
        return (
            scaler.transform(X_tr).astype(np.float32),
            y_tr,
            scaler.transform(X_te).astype(np.float32),
            y_te,
        )

    return make


def large_data(smoke: bool):
    n = 3_000 if smoke else 160_000
    X, y = make_classification(
        n_samples=n,
        n_features=50,
        n_informative=20,
        n_redundant=10,
        n_classes=5,
        n_clusters_per_class=2,
        class_sep=1.0,
        random_state=0,
    )
    X = StandardScaler().fit_transform(X).astype(np.float32)
    n_test = n // 16
    return X[n_test:], y[n_test:], X[:n_test], y[:n_test]


def network_target(X, y, device, hidden=HIDDEN):
    torch.manual_seed(0)
    module = MLP(X.shape[1], (hidden,), int(y.max()) + 1)
    net = FunctionalNetwork(module, device=device, dtype=torch.float32)
    Xt = torch.as_tensor(X, device=device)
    yt = torch.as_tensor(y, device=device, dtype=torch.long)
    return net, Target(net, Xt, yt, Categorical(), GaussianPrior(1.0))


# -- 1. transitions ----------------------------------------------------------------------------
def gradient_seconds(target, positions, device, repeats=3) -> float:
    target.value_and_grad(positions)  # warm-up
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        target.value_and_grad(positions)
    sync(device)
    return (time.perf_counter() - start) / repeats


def time_transitions(target, positions, device, n1, n2):
    """Seconds per transition from runs of n1 and n2 transitions (marginal cost)."""
    kernel = OurHMC(step_size=STEP, n_steps=N_STEPS, step_jitter=0.0).build(target)
    times = []
    for n in (1, n1, n2):  # the first run warms up (allocator, kernels)
        g = torch.Generator(device=device).manual_seed(0)
        state = kernel.init(positions, g)
        sync(device)
        start = time.perf_counter()
        run_chains(kernel, state, g, n_warmup=0, n_draws=n, step_size=STEP)
        sync(device)
        times.append(time.perf_counter() - start)
    return (times[2] - times[1]) / (n2 - n1)


def transitions_section(data, devices, chains, clock, smoke, per_config=40.0):
    """Each (data, device, chains): on cuda twice, trajectories replayed from CUDA graphs
    (``path="graphs"``, the default) and run eagerly (``path="eager"``, up to 8 chains)."""
    rows = []
    for name, (X, y, _, _) in data.items():
        for device in devices:
            for C in chains[device]:
                paths = ["graphs", "eager"] if device == "cuda" and C <= 8 else ["default"]
                for path in paths:
                    row = dict(data=name, device=device, chains=C, path=path, rows=len(X))
                    set_config(hmc_cuda_graphs=path != "eager")
                    try:
                        row.update(one_configuration(X, y, device, C, clock, smoke, per_config))
                    except Exception as exc:  # noqa: BLE001 - one configuration's failure
                        row["error"] = repr(exc)
                    finally:
                        set_config(hmc_cuda_graphs=True)
                    rows.append(row)
                    print_row("transition", row)
    return rows


def one_configuration(X, y, device, C, clock, smoke, per_config):
    row = {}
    net, target = network_target(X, y, device)
    row["parameters"] = net.dim
    row["work"] = len(X) * net.dim * C
    g = torch.Generator(device=device).manual_seed(1)
    positions = 0.1 * torch.randn(C, net.dim, generator=g, device=device)
    grad_s = gradient_seconds(target, positions, device)
    predicted = grad_s * N_STEPS
    row["gradient_s"] = grad_s
    n1, n2 = (1, 3) if smoke else (3, 13)
    need = predicted * (1 + n1 + n2) * 1.3
    if need > min(per_config, clock.left() - 60) and not smoke:
        row["s_per_transition"] = predicted
        row["how"] = "predicted: 50 x one timed gradient (too slow to run)"
    else:
        row["s_per_transition"] = time_transitions(target, positions, device, n1, n2)
        row["how"] = f"marginal over {n1} and {n2} transitions"
    return row


# -- 2. auto ---------------------------------------------------------------------------------
def auto_section(rows):
    out = []
    by_key = {}
    for r in rows:
        if "s_per_transition" in r and r.get("path") != "eager":
            by_key.setdefault((r["data"], r["chains"]), {})[r["device"]] = r
    for (name, C), per_device in sorted(by_key.items()):
        work = next(iter(per_device.values()))["work"]
        available = torch.cuda.is_available
        try:  # what "auto" would pick on a machine with CUDA
            torch.cuda.is_available = lambda: True
            picked = resolve_device("auto", work=work, threshold=AUTO_CUDA_WORK_REPLAYED).type
        finally:
            torch.cuda.is_available = available
        faster = min(per_device, key=lambda d: per_device[d]["s_per_transition"])
        entry = dict(data=name, chains=C, work=work, auto=picked, faster=faster)
        entry["agree"] = picked == faster if len(per_device) > 1 else None
        out.append(entry)
        print_row("auto", entry)
    return dict(threshold=AUTO_CUDA_WORK, picks=out)


# -- 3. numpyro ------------------------------------------------------------------------------
def jax_potential(X, y, shapes):
    """The negative log posterior of the same MLP (ReLU, N(0, 1) prior) on a flat vector laid
    out as our FunctionalNetwork's (weight (out, in) row-major, then bias, per layer)."""
    import jax
    import jax.numpy as jnp

    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    sizes = [int(np.prod(s)) for s in shapes]
    offsets = np.cumsum([0, *sizes])

    def potential(theta):
        parts = [theta[offsets[i] : offsets[i + 1]].reshape(shapes[i]) for i in range(len(shapes))]
        w1, b1, w2, b2 = parts
        hidden = jax.nn.relu(Xj @ w1.T + b1)
        logits = hidden @ w2.T + b2
        log_lik = jnp.take_along_axis(jax.nn.log_softmax(logits), yj[:, None], 1).sum()
        return -log_lik + 0.5 * jnp.sum(theta**2)

    return potential


def numpyro_section(X, y, device, clock, smoke, with_ess=True):
    try:
        import jax
        import numpyro
        from numpyro.infer import HMC, NUTS
    except ImportError as exc:
        return dict(skipped=f"NumPyro not importable: {exc!r}")
    out = dict(numpyro=numpyro.__version__, jax=jax.__version__, jax_devices=str(jax.devices()))
    net, target = network_target(X, y, device)
    theta0 = net.initial_position()
    potential = jax_potential(X, y, [tuple(s) for s in net.shapes])
    init = jax.numpy.asarray(theta0.detach().cpu().numpy())
    n1, n2 = (2, 4) if smoke else (5, 20)

    def numpyro_seconds(kernel, n_warmup, n_draws, n_chains=1):
        """(seconds per draw after warmup, potential energies of the draws); several chains
        vectorised (NumPyro's own ``vmap`` of the transition, which ``init`` sets up when
        given one key per chain: ``chain_method="vectorized"``)."""
        if n_chains == 1:
            state = kernel.init(jax.random.PRNGKey(0), n_warmup, init_params=init)
        else:
            keys = jax.random.split(jax.random.PRNGKey(0), n_chains)
            inits = jax.numpy.broadcast_to(init, (n_chains, init.shape[0]))
            state = kernel.init(keys, n_warmup, init_params=inits)
        step = jax.jit(lambda s: kernel.sample(s, (), {}))
        for _ in range(n_warmup):
            state = step(state)
        for _ in range(2):  # compiled, and compiled again should the state's types settle
            state = step(state)
        jax.block_until_ready(state.z)
        energies = []
        start = time.perf_counter()
        for _ in range(n_draws):
            state = step(state)
            energies.append(state.potential_energy)
        jax.block_until_ready(state.z)
        seconds = time.perf_counter() - start
        return seconds / n_draws, np.asarray(jax.numpy.stack(energies))

    # fixed step, 50 steps, the same trajectory as ours, at 1, 8 and 32 chains
    for C in (1, 2) if smoke else (1, 8, 32):
        try:

            def fixed():  # a fresh kernel per run: NumPyro's init vmaps the kernel's step
                return HMC(
                    potential_fn=potential,
                    step_size=STEP,
                    num_steps=N_STEPS,
                    trajectory_length=N_STEPS * STEP,
                    adapt_step_size=False,
                    adapt_mass_matrix=False,
                )

            t1, _ = numpyro_seconds(fixed(), 0, n1, C)
            t2, _ = numpyro_seconds(fixed(), 0, n2, C)
            out[f"numpyro_fixed_{C}ch_s"] = (t2 * n2 - t1 * n1) / (n2 - n1)
            positions = theta0[None].to(device).repeat(C, 1)
            out[f"ours_fixed_{C}ch_s"] = time_transitions(target, positions, device, n1, n2)
            out[f"ratio_{C}ch"] = out[f"ours_fixed_{C}ch_s"] / out[f"numpyro_fixed_{C}ch_s"]
        except Exception as exc:  # noqa: BLE001
            out[f"fixed_{C}ch_error"] = repr(exc)
    # the same products at the same precision: XLA's default float32 dot on these cards may
    # round its inputs to TF32, torch's does not; each side timed at the other's setting too
    for C in (1,) if smoke else (1, 8):
        try:
            with jax.default_matmul_precision("highest"):
                t1, _ = numpyro_seconds(fixed(), 0, n1, C)
                t2, _ = numpyro_seconds(fixed(), 0, n2, C)
            out[f"numpyro_fixed_{C}ch_highest_s"] = (t2 * n2 - t1 * n1) / (n2 - n1)
            positions = theta0[None].to(device).repeat(C, 1)
            tf32 = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                out[f"ours_fixed_{C}ch_tf32_s"] = time_transitions(
                    target, positions, device, n1, n2
                )
            finally:
                torch.backends.cuda.matmul.allow_tf32 = tf32
        except Exception as exc:  # noqa: BLE001
            out[f"precision_{C}ch_error"] = repr(exc)
    print_row("numpyro", out)
    if not with_ess:
        return out

    n_warmup, n_draws = (20, 20) if smoke else (100, 100)
    ess_rows = []
    # ours: warmup with dual averaging, then the timed draws
    try:
        if clock.fits(60):
            kernel = OurHMC(n_steps=N_STEPS, step_jitter=0.5).build(target)
            g = torch.Generator(device=device).manual_seed(0)
            state = kernel.init(theta0[None].to(device), g)
            warm = run_chains(kernel, state, g, n_warmup=n_warmup, n_draws=1)
            sync(device)
            start = time.perf_counter()
            run = run_chains(
                kernel, warm.state, g, n_warmup=0, n_draws=n_draws, step_size=warm.step_size
            )
            sync(device)
            seconds = time.perf_counter() - start
            e = ess(run.log_prob.double().numpy())
            ess_rows.append(
                dict(
                    sampler=f"ours HMC L={N_STEPS}",
                    s_per_draw=seconds / n_draws,
                    ess=e,
                    ess_per_s=e / seconds,
                )
            )
    except Exception as exc:  # noqa: BLE001
        ess_rows.append(dict(sampler=f"ours HMC L={N_STEPS}", error=repr(exc)))
    for label, make in (
        (
            f"numpyro HMC L={N_STEPS}",
            lambda: HMC(potential_fn=potential, num_steps=N_STEPS, trajectory_length=None),
        ),
        ("numpyro NUTS depth<=8", lambda: NUTS(potential_fn=potential, max_tree_depth=8)),
    ):
        try:
            if not clock.fits(90):
                ess_rows.append(dict(sampler=label, skipped="budget"))
                continue
            per_draw, energies = numpyro_seconds(make(), n_warmup, n_draws)
            e = ess(-energies[None].astype(np.float64))
            ess_rows.append(
                dict(sampler=label, s_per_draw=per_draw, ess=e, ess_per_s=e / (per_draw * n_draws))
            )
        except Exception as exc:  # noqa: BLE001
            ess_rows.append(dict(sampler=label, error=repr(exc)))
    for r in ess_rows:
        print_row("ess", r)
    out["ess"] = ess_rows
    return out


# -- 4. estimator ----------------------------------------------------------------------------
def estimator_section(X, y, X_te, y_te, device, smoke):
    params = dict(device=device, random_state=0)
    if smoke:
        params.update(n_warmup=10, n_draws=10, init=MAPStart(n_steps=20), sampler=OurHMC(n_steps=5))
    clf = HMCClassifier(**params)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y)
    fit_s = time.perf_counter() - start
    graph_warnings = [str(w.message) for w in caught if "CUDA graphs" in str(w.message)]
    proba = clf.predict_proba(X_te)
    nll = -np.mean(np.log(np.clip(proba[np.arange(len(y_te)), y_te], 1e-12, None)))
    out = dict(
        device=device,
        params="defaults" if not smoke else params,
        fit_s=fit_s,
        accuracy=float(np.mean(proba.argmax(1) == y_te)),
        nll=float(nll),
        fit_rows=len(X),
        test_rows=len(X_te),
        graph_warnings=graph_warnings,
    )
    print_row("estimator", out)
    return out


# -- 5. sgmcmc -------------------------------------------------------------------------------
def sgmcmc_section(X, y, devices, clock, smoke, sg_sets):
    """Seconds per sampling epoch of ``SGMCMCClassifier`` at its defaults (but a random start),
    on cuda with the minibatch step replayed from a CUDA graph (``path="graphs"``, the
    default) and launched eagerly (``path="eager"``), and on the CPU; then the host
    synchronisations of one SGHMC transition (an epoch) on cuda, replayed."""
    rows = []
    for device in devices:
        for path in ["graphs", "eager"] if device == "cuda" else ["default"]:
            row = dict(device=device, path=path, rows=len(X))
            set_config(sg_cuda_graphs=path != "eager")
            try:
                budgets = (2, 4) if smoke else (2, 6)
                times = []
                for n_draws in budgets:
                    if not clock.fits(30):
                        raise TimeoutError("budget")
                    clf = SGMCMCClassifier(
                        device=device, init="random", n_warmup=1, n_draws=n_draws, random_state=0
                    )
                    start = time.perf_counter()
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        clf.fit(X, y)
                    times.append(time.perf_counter() - start)
                row["s_per_epoch"] = (times[1] - times[0]) / (budgets[1] - budgets[0])
                row["graph_warnings"] = [
                    str(w.message) for w in caught if "CUDA graphs" in str(w.message)
                ]
                row["note"] = f"defaults but init='random'; marginal over {budgets} sampling epochs"
            except Exception as exc:  # noqa: BLE001
                row["error"] = repr(exc)
                row["traceback"] = traceback.format_exc()
                print(row["traceback"])
            finally:
                set_config(sg_cuda_graphs=True)
            rows.append(row)
            print_row("sgmcmc", row)
    for name, (Xd, yd) in sg_sets.items():
        for device in devices:
            for C in (1, 8):
                for path in ["graphs", "eager"] if device == "cuda" else ["default"]:
                    row = dict(sg_steps=name, device=device, path=path, chains=C, rows=len(Xd))
                    set_config(sg_cuda_graphs=path != "eager")
                    try:
                        if not clock.fits(20):
                            raise TimeoutError("budget")
                        row.update(sg_step_seconds(Xd, yd, device, C, 20 if smoke else 200))
                    except Exception as exc:  # noqa: BLE001
                        row["error"] = repr(exc)
                    finally:
                        set_config(sg_cuda_graphs=True)
                    rows.append(row)
                    print_row("sgmcmc", row)
    if "cuda" in devices or smoke:
        try:
            rows.append(sg_syncs(X[:20_000], y[:20_000], devices[0]))
            print_row("sgmcmc", rows[-1])
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(syncs_error=repr(exc), traceback=traceback.format_exc()))
    return rows


def sgfit_section(X, y, X_te, y_te, devices, clock, smoke):
    """``SGMCMCClassifier`` fits with each MAP search (minibatch Adam; the calibration's refit
    runs a second) timed apart: at its defaults on cuda, and with 10 + 10 transitions, a MAP
    search capped at 20,000 steps and no calibration on cuda and on the CPU, with held-out
    accuracy and NLL."""
    from sklearn_bnn.samplers import starts as init_module

    found = init_module.find_mode_minibatch
    timings = []

    def timed_search(*args, **kwargs):
        sync_all()
        start = time.perf_counter()
        out = found(*args, **kwargs)
        sync_all()
        timings.append((time.perf_counter() - start, out[1].n_epochs, out[1].n_steps))
        return out

    # the fixed costs at a capped MAP search (a search at its defaults runs up to 200 epochs,
    # twice with the calibration's refit: minutes on a CPU)
    short = dict(n_warmup=10, n_draws=10, init=MAPStart(n_steps=20_000), calibration=None)
    if smoke:
        short = dict(n_warmup=2, n_draws=2, init=MAPStart(n_steps=200), calibration=None)
    runs = [(d, short) for d in devices]
    if "cuda" in devices:
        runs.insert(0, ("cuda", {}))
    rows = []
    init_module.find_mode_minibatch = timed_search
    try:
        for device, params in runs:
            row = dict(device=device, params=params or "defaults")
            print(f"sgfit      | starting {row}", flush=True)
            try:
                if not clock.fits(90):
                    raise TimeoutError("budget")
                timings.clear()
                clf = SGMCMCClassifier(device=device, random_state=0, **params)
                start = time.perf_counter()
                clf.fit(X, y)
                row["fit_s"] = time.perf_counter() - start
                for k, (seconds, epochs, steps) in enumerate(timings):  # fit, then refit
                    row[f"map{k}_s"], row[f"map{k}_epochs"], row[f"map{k}_steps"] = (
                        seconds,
                        epochs,
                        steps,
                    )
                proba = clf.predict_proba(X_te)
                p_true = np.clip(proba[np.arange(len(y_te)), y_te], 1e-12, None)
                row["accuracy"] = float(np.mean(proba.argmax(1) == y_te))
                row["nll"] = float(-np.mean(np.log(p_true)))
            except Exception as exc:  # noqa: BLE001
                row["error"] = repr(exc)
                row["traceback"] = traceback.format_exc()
            rows.append(row)
            print_row("sgfit", row)
    finally:
        init_module.find_mode_minibatch = found
    return rows


def sync_all() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def sg_kernel(X, y, device, n_steps=None):
    torch.manual_seed(0)
    net = FunctionalNetwork(MLP(X.shape[1], (HIDDEN,), int(y.max()) + 1), device=device)
    target = MinibatchTarget(net, X, y, Categorical(), GaussianPrior(1.0), batch_size=128)
    return net, SGHMC(step_size=1e-3, n_steps=n_steps).build(target)


def sg_step_seconds(X, y, device, C, n_steps):
    """Seconds per SGHMC minibatch step (batches of 128), the kernel alone: marginal over
    transitions of ``n_steps`` and ``3 n_steps`` steps after one that warms up (and records)."""
    times = []
    for n in (n_steps, n_steps, 3 * n_steps):
        net, kernel = sg_kernel(X, y, device, n)
        g = torch.Generator(device=device).manual_seed(0)
        start_pos = net.initial_position()[None].repeat(C, 1)
        state = kernel.init(start_pos, g)
        ones = torch.ones(net.dim, device=device)
        state, _ = kernel.step(state, g, step_size=1e-3, inv_mass=ones)  # records on cuda
        sync(device)
        start = time.perf_counter()
        kernel.step(state, g, step_size=1e-3, inv_mass=ones)
        sync(device)
        times.append(time.perf_counter() - start)
    replayed = kernel.graphs.recording is not None and kernel.graphs.recording.graph is not None
    return dict(
        s_per_step=(times[2] - times[1]) / (2 * n_steps),
        work=128 * net.dim * C,
        replayed=replayed,
    )


def sg_syncs(X, y, device):
    """CUDA synchronisations of one SGHMC transition (an epoch of batches of 128) on cuda,
    steps replayed, after a first transition that records them."""
    net, kernel = sg_kernel(X, y, device)
    g = torch.Generator(device=device).manual_seed(0)
    state = kernel.init(net.initial_position()[None], g)
    ones = torch.ones(net.dim, device=device)
    state, _ = kernel.step(state, g, step_size=1e-3, inv_mass=ones)
    sync(device)
    syncs, reads = count_syncs(lambda: kernel.step(state, g, step_size=1e-3, inv_mass=ones), device)
    return dict(
        sg_transition_steps=kernel.n_steps,
        cuda_syncs=syncs,
        host_reads=reads,
        replayed=kernel.graphs.recording is not None and kernel.graphs.recording.graph is not None,
    )


# -- 6. syncs --------------------------------------------------------------------------------
HOST_READS = {
    "item",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__format__",
    "tolist",
    "cpu",
    "numpy",
}


class HostReads(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in HOST_READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def count_syncs(fn, device):
    """(CUDA sync warnings, host reads) while ``fn`` runs."""
    cuda = torch.device(device).type == "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            with HostReads() as reads:
                fn()
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
    syncs = sum("synchroniz" in str(w.message) for w in caught) if cuda else None
    return syncs, reads.count


def syncs_section(X, y, device, n_steps=5):
    """Counts per transition (they do not depend on the number of leapfrog steps unless a
    step synchronises, so a short trajectory on 200 rows keeps the counting cheap)."""
    net, target = network_target(X[:200], y[:200], device, hidden=32)
    kernel = OurHMC(step_size=STEP, n_steps=n_steps, step_jitter=0.5).build(target)
    g = torch.Generator(device=device).manual_seed(0)
    positions = 0.1 * torch.randn(2, net.dim, generator=g, device=device)
    state = kernel.init(positions, g)
    eps = torch.full((2,), STEP, device=device)
    inv_mass = torch.ones(net.dim, device=device)
    kernel.step(state, g, step_size=eps, inv_mass=inv_mass)  # warm-up
    sync(device)
    out = dict(device=device, n_steps=n_steps)
    s, r = count_syncs(lambda: kernel.step(state, g, step_size=eps, inv_mass=inv_mass), device)
    out["one_transition_fixed_L"] = dict(cuda_syncs=s, host_reads=r)

    def loop(n_warmup, n_draws):
        return count_syncs(
            lambda: run_chains(kernel, state, g, n_warmup=n_warmup, n_draws=n_draws), device
        )

    base, warm, draw = loop(22, 1), loop(27, 1), loop(22, 6)
    for key, other in (("per_warmup_transition", warm), ("per_sampling_transition", draw)):
        out[key] = dict(
            cuda_syncs=None if base[0] is None else (other[0] - base[0]) / 5,
            host_reads=(other[1] - base[1]) / 5,
        )
    print_row("syncs", out)
    return out


# -- 7. profile ------------------------------------------------------------------------------
def profile_section(X, y, device, n_transitions=5):
    """GPU kernels of HMC transitions (50 steps, one chain, digits), replayed and eager: how
    many a transition launches, their summed device time against the wall time, and the
    kernels that take the most (where the rest of the gap to XLA is). ``graphs_with_values``
    replays steps that all compute the log density (the target's ``log_prob_grad`` hidden),
    as before the inner steps took the gradient alone: its saving, measured in the same run
    (``wall_s_per_transition``: timed without the profiler, 10 transitions)."""
    from torch.profiler import ProfilerActivity, profile

    out = {}
    for path in ("graphs", "graphs_with_values", "eager"):
        set_config(hmc_cuda_graphs=path != "eager")
        try:
            net, target = network_target(X, y, device)
            if path == "graphs_with_values":
                target.log_prob_grad = None  # the leapfrog then asks value_and_grad each step
            kernel = OurHMC(step_size=STEP, n_steps=N_STEPS).build(target)
            g = torch.Generator(device=device).manual_seed(0)
            state = kernel.init(net.initial_position()[None].to(device), g)
            eps = torch.full((1,), STEP, device=device)
            inv_mass = torch.ones(net.dim, device=device)
            for _ in range(2):
                state, _ = kernel.step(state, g, step_size=eps, inv_mass=inv_mass)
            sync(device)
            start = time.perf_counter()
            for _ in range(10):
                state, _ = kernel.step(state, g, step_size=eps, inv_mass=inv_mass)
            sync(device)
            plain_wall = (time.perf_counter() - start) / 10
            start = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(n_transitions):
                    state, _ = kernel.step(state, g, step_size=eps, inv_mass=inv_mass)
                sync(device)
            wall = (time.perf_counter() - start) / n_transitions
            kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]

            def us(event):
                return event.time_range.elapsed_us()

            device_us = sum(us(e) for e in kernels) / n_transitions
            by_name = {}
            for e in kernels:
                by_name.setdefault(e.name[:80], [0, 0.0])
                by_name[e.name[:80]][0] += 1
                by_name[e.name[:80]][1] += us(e)
            top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:12]
            out[path] = dict(
                wall_s_per_transition=plain_wall,
                wall_s_per_transition_profiled=wall,
                kernels_per_transition=len(kernels) / n_transitions,
                device_s_per_transition=device_us * 1e-6,
                top=[
                    dict(name=n, per_transition=c / n_transitions, us=t / n_transitions)
                    for n, (c, t) in top
                ],
            )
        except Exception as exc:  # noqa: BLE001
            out[path] = dict(error=repr(exc), traceback=traceback.format_exc())
        finally:
            set_config(hmc_cuda_graphs=True)
        print_row("profile", {"path": path, **{k: v for k, v in out[path].items() if k != "top"}})
        for row in out[path].get("top", []):
            print_row("  kernel", row)
    return out


# -- output ----------------------------------------------------------------------------------
def print_row(section, row):
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}={fmt(x)}" for k, x in v.items()) + "}"
        return str(v)

    print(f"{section:<11}| " + "  ".join(f"{k}={fmt(v)}" for k, v in row.items()), flush=True)


def run_section(results, name, clock, need, fn):
    """Run one section unless it does not fit in the budget; record its error if it fails."""
    if not clock.fits(need):
        results[name] = dict(skipped=f"budget: {clock.left():.0f} s left, needs ~{need:.0f}")
        print_row(name, results[name])
        return
    start = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as exc:  # noqa: BLE001 - one section's failure must not end the run
        results[name] = dict(error=repr(exc), traceback=traceback.format_exc())
        print_row(name, dict(error=repr(exc)))
    results.setdefault("section_seconds", {})[name] = time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, CPU only")
    parser.add_argument("--budget", type=float, default=None, help="seconds (default 450)")
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated sections to run (syncs, sgmcmc, sgfit, profile, transitions, auto, "
        "numpyro, estimator); all by default",
    )
    parser.add_argument(
        "--data",
        default="iris,cancer,digits,160k",
        help="data sets of the transitions section (iris, cancer, digits, 160k)",
    )
    parser.add_argument(
        "--chains", default="1,8,32,128", help="chain counts on cuda (the CPU runs 1 and 8)"
    )
    parser.add_argument(
        "--no-ess",
        action="store_true",
        help="numpyro section: the fixed-step timings only (no warmed-up ESS runs)",
    )
    args = parser.parse_args(argv)
    only = None if args.only is None else set(args.only.split(","))
    global N_STEPS
    if args.smoke:  # short trajectories, so that every path runs on a CPU in minutes
        N_STEPS = 5
    clock = Clock(args.budget or (600.0 if args.smoke else 450.0))
    cuda = torch.cuda.is_available() and not args.smoke
    devices = ["cuda", "cpu"] if cuda else ["cpu"]
    main_device = devices[0]
    chains = {"cuda": [int(c) for c in args.chains.split(",")], "cpu": [1, 8]}
    if args.smoke:
        chains = {"cuda": [1, 2], "cpu": [1, 2]}
    results = dict(
        meta=dict(
            torch=torch.__version__,
            python=platform.python_version(),
            device=torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
            cpu_threads=torch.get_num_threads(),
            smoke=args.smoke,
            n_steps=N_STEPS,
            step_size=STEP,
            auto_cuda_work=AUTO_CUDA_WORK,
        )
    )
    print_row("meta", results["meta"])
    data = {
        "iris": small_data(load_iris)(args.smoke),
        "cancer": small_data(load_breast_cancer)(args.smoke),
        "digits": digits_data(args.smoke),
        "160k": large_data(args.smoke),
    }
    for name, (X, y, _, _) in data.items():
        results["meta"][f"{name}_rows"] = len(X)
        results["meta"][f"{name}_parameters"] = mlp_parameter_count(
            X.shape[1], (HIDDEN,), int(y.max()) + 1
        )

    def guarded(results, name, clock, need, fn):
        if only is None or name in only:
            run_section(results, name, clock, need, fn)

    timed = {k: v for k, v in data.items() if k in args.data.split(",")}
    guarded(results, "syncs", clock, 10, lambda: syncs_section(*data["digits"][:2], main_device))
    guarded(
        results,
        "sgmcmc",
        clock,
        20,
        lambda: sgmcmc_section(
            *data["160k"][:2],
            devices,
            clock,
            args.smoke,
            {k: data[k][:2] for k in ("iris", "digits", "160k")},
        ),
    )
    guarded(
        results,
        "sgfit",
        clock,
        60,
        lambda: sgfit_section(*data["160k"], devices, clock, args.smoke),
    )
    guarded(
        results, "profile", clock, 20, lambda: profile_section(*data["digits"][:2], main_device)
    )
    guarded(
        results,
        "transitions",
        clock,
        60,
        lambda: transitions_section(timed, devices, chains, clock, args.smoke),
    )
    guarded(results, "auto", clock, 1, lambda: auto_section(results.get("transitions", [])))
    guarded(
        results,
        "numpyro",
        clock,
        60,
        lambda: numpyro_section(
            *data["digits"][:2], main_device, clock, args.smoke, with_ess=not args.no_ess
        ),
    )
    guarded(
        results,
        "estimator",
        clock,
        20 if args.smoke else 150,
        lambda: estimator_section(*data["160k"], main_device, args.smoke),
    )
    results["meta"]["total_s"] = time.perf_counter() - clock.start
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1, default=_json_default))
    print(f"total {results['meta']['total_s']:.0f} s; wrote {args.out}")


def _json_default(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return str(value)


if __name__ == "__main__":
    main()
