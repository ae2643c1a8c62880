"""Our samplers beside the peers a user would pick: hamiltorch for (split) HMC, Pyro for NUTS.

Part 1, HMC on the seeds/000 §5.1 regression: MLP [1, 100, 100, 1] (10,401 parameters, ReLU),
the two-cluster 1-D data (400 points; 4 subsets of 100 for split HMC), L = 30, eps = 5e-4,
identity mass, prior N(0, I), Gaussian likelihood with noise precision 100, float32, one chain.
Our ``sample(target, ..., HMC(n_steps=30))`` (full data, and ``integrator="symmetric"`` on a
:class:`~sklearn_bnn.targets.SplitTarget`) against hamiltorch's ``sample_model`` and
``sample_split_model`` (its symmetric splitting, ``Integrator.SPLITTING``), both started at the
same posterior mode (full-batch Adam) with no adaptation, the same number of transitions. Both
sides are timed through their public calls (setup included), each after an untimed warm-up
call, alternating, several repeats; medians. Reported: transitions per second (equal work: same
L, eps and transitions), gradient evaluations per transition and per second (each side's own
count, in full-data units: a subset gradient counts 1/4) beside the rate of a bare
forward/backward pass of the likelihood, acceptance, how far a run moved from the start
(median distance of its last draw), and the predictive means of the two sides' draws: their fit
to the data and their gap on a grid against its run-to-run standard error, so that the speeds
compare samplers that do the same thing.

Part 2, NUTS on two torch log densities (float64): Bayesian logistic regression on scikit-learn's
breast cancer (standardised, intercept, prior N(0, I), 31 coordinates) and a 10-D Gaussian with
correlation 0.9 between every pair and standard deviations from 0.1 to 10. Our
``sample(logp, x0, NUTS())`` against Pyro's ``MCMC(NUTS(potential_fn=...))``: one chain from
the same start, the same warmup and draws, diagonal mass adaptation and target acceptance 0.8
on both, maximum tree depth 10. Reported: bulk ESS of the log density (the same estimator,
:func:`sklearn_bnn.diagnostics.ess_bulk`, on both sides' draws), per second of the whole run
(warmup included) and per 1,000 gradient evaluations (ours: the sampler's count; Pyro: the
calls of its potential function, an upper bound on its gradients).

The peers are benchmark-only: never package dependencies. Install them with
``pip install --no-deps pyro-ppl pyro-api`` (``opt_einsum`` and ``tqdm`` are Pyro's only other
pure-Python needs); hamiltorch 0.4.1 is not on PyPI: put a checkout of its source on
``--hamiltorch-path`` (or ``HAMILTORCH_PATH``). Its one extra import, ``termcolor``, is replaced
by a stub when missing. A peer that cannot be imported is reported and its rows are skipped;
``SKLEARN_BNN_HIDE_PEERS=hamiltorch,pyro`` (or ``all``) hides installed peers, to check that.

Run: ``python benchmarks/speed/peers.py [--quick] [--repeats 5] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import platform
import statistics
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sklearn_bnn.diagnostics import ess_bulk
from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import HMC, NUTS, sample
from sklearn_bnn.targets import FunctionalNetwork, SplitTarget, Target

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import izmailov_data, regression_mlp  # noqa: E402

N_STEPS, STEP_SIZE, NOISE_PRECISION, N_SPLITS = 30, 5e-4, 100.0, 4


# --------------------------------------------------------------------------- the peers


def hidden_peers() -> set[str]:
    """Peers named in ``SKLEARN_BNN_HIDE_PEERS`` (comma-separated, or ``all``)."""
    names = {n.strip().lower() for n in os.environ.get("SKLEARN_BNN_HIDE_PEERS", "").split(",")}
    return {"hamiltorch", "pyro"} if "all" in names else names - {""}


def import_hamiltorch(path: str | None):
    """hamiltorch, or None with a message; ``path`` is a directory holding its source."""
    if "hamiltorch" in hidden_peers():
        print("hamiltorch: hidden by SKLEARN_BNN_HIDE_PEERS; its rows are skipped")
        return None
    if path:
        sys.path.insert(0, path)
    try:
        importlib.import_module("termcolor")
    except ImportError:  # used only for hamiltorch's coloured progress messages
        stub = types.ModuleType("termcolor")
        stub.colored = lambda text, *args, **kwargs: text
        sys.modules["termcolor"] = stub
    try:
        return importlib.import_module("hamiltorch")
    except Exception as exc:  # noqa: BLE001 - any failure means: skip the peer
        print(f"hamiltorch: not importable ({type(exc).__name__}: {exc}); its rows are skipped")
        return None


def import_pyro():
    """``(pyro, pyro.infer)``, or None with a message."""
    if "pyro" in hidden_peers():
        print("pyro: hidden by SKLEARN_BNN_HIDE_PEERS; its rows are skipped")
        return None
    try:
        return importlib.import_module("pyro"), importlib.import_module("pyro.infer")
    except Exception as exc:  # noqa: BLE001
        print(f"pyro: not importable ({type(exc).__name__}: {exc}); its rows are skipped")
        return None


# --------------------------------------------------------------------------- part 1: HMC


def izmailov_tensors():
    """The two-cluster 1-D set of seeds/000 §5.1 (``harness.izmailov_data``) as float32 (n, 1)
    tensors."""
    x, y = izmailov_data()
    return torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)[:, None]


def posterior_mode(module, X, y, n_iter):
    """Flat parameters after ``n_iter`` full-batch Adam steps on the negative log posterior."""
    module = copy.deepcopy(module)
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    for _ in range(n_iter):
        opt.zero_grad()
        nll = 0.5 * NOISE_PRECISION * ((module(X) - y) ** 2).sum()
        prior = 0.5 * sum((p**2).sum() for p in module.parameters())
        (nll + prior).backward()
        opt.step()
    return nn.utils.parameters_to_vector(module.parameters()).detach()


def predictive_mean(module, draws, grid):
    """Mean network output on ``grid`` over the rows of ``draws`` (S, D)."""
    module = copy.deepcopy(module)
    outputs = []
    with torch.no_grad():
        for theta in draws:
            nn.utils.vector_to_parameters(theta, module.parameters())
            outputs.append(module(grid))
    return torch.stack(outputs).mean(0).squeeze(-1)


def ours_hmc(module, X, y, theta0, n_transitions, seed, split):
    """Our HMC (full or symmetric split) through ``sample``: seconds, draws, grads, acceptance."""
    start = time.perf_counter()
    network = FunctionalNetwork(module)
    args = (network, X, y, Gaussian(NOISE_PRECISION), GaussianPrior(1.0))
    if split:
        target, integrator = SplitTarget(*args, n_splits=N_SPLITS), "symmetric"
    else:
        target, integrator = Target(*args), "leapfrog"
    result = sample(
        target,
        theta0[None],
        HMC(n_steps=N_STEPS, integrator=integrator, step_size=STEP_SIZE, adapt_mass=False),
        n_warmup=0,
        n_draws=n_transitions,
        n_chains=1,
        random_state=seed,
    )
    seconds = time.perf_counter() - start
    accept = float(np.mean(result.info["acceptance_rate"]))
    return seconds, result.draws[0], result.info["n_grad_evals"], accept


class CallCounter:
    """Wraps hamiltorch's log-density factory to count the rows its densities evaluate."""

    def __init__(self, samplers_module):
        self.module, self.original = samplers_module, samplers_module.define_model_log_prob
        self.rows = 0

    def __enter__(self):
        def counted_factory(model, model_loss, x, y, *args, **kwargs):
            inner = self.original(model, model_loss, x, y, *args, **kwargs)

            def log_prob(params):
                self.rows += x.shape[0]
                return inner(params)

            return log_prob

        self.module.define_model_log_prob = counted_factory
        return self

    def __exit__(self, *exc):
        self.module.define_model_log_prob = self.original


def theirs_hmc(ht, module, X, y, theta0, n_transitions, seed, split):
    """hamiltorch's ``sample_model`` / ``sample_split_model``, same set-up as :func:`ours_hmc`.

    Returns seconds, draws, full-data gradient evaluations and acceptance. hamiltorch does not
    cache the gradient at the start of a trajectory and evaluates both end energies with extra
    forward passes: per transition L + 1 full gradients and 2 full forwards (full HMC), or
    2 M L subset gradients and 2 M subset forwards (symmetric split); the rows its densities
    evaluated are counted to check that.
    """
    ht.set_random_seed(seed)
    common = dict(
        model_loss="regression",
        num_samples=n_transitions,
        num_steps_per_sample=N_STEPS,
        step_size=STEP_SIZE,
        burn=-1,
        tau_out=NOISE_PRECISION,
        tau_list=[torch.tensor(1.0) for _ in module.parameters()],
        debug=2,
        verbose=False,
    )
    with (
        CallCounter(importlib.import_module("hamiltorch.samplers")) as counter,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", UserWarning)  # its float() of a tensor with a graph
        start = time.perf_counter()
        if split:
            data = torch.utils.data.TensorDataset(X, y)
            loader = torch.utils.data.DataLoader(data, batch_size=len(X) // N_SPLITS)
            draws, accept = ht.sample_split_model(
                module,
                loader,
                theta0.clone(),
                N_SPLITS,
                integrator=ht.Integrator.SPLITTING,
                **common,
            )
        else:
            draws, accept = ht.sample_model(module, X, y, theta0.clone(), **common)
        seconds = time.perf_counter() - start
    grads = n_transitions * (2 * N_STEPS if split else N_STEPS + 1)
    forwards = 2 * n_transitions
    expected_rows = (grads + forwards) * len(X)
    if counter.rows != expected_rows:
        print(f"  note: hamiltorch evaluated {counter.rows} rows, expected {expected_rows}")
    return seconds, torch.stack(draws[1:]), grads, float(accept)


def hmc_rows(ht, repeats, n_transitions, n_adam):
    """Part 1: our full and split HMC against hamiltorch's, alternating, medians."""
    X, y = izmailov_tensors()
    module = regression_mlp()
    theta0 = posterior_mode(module, X, y, n_adam)
    grid = torch.linspace(-1.5, 1.5, 61)[:, None]
    sides = [("ours", None)] + ([("hamiltorch", ht)] if ht is not None else [])
    sides.append(("bare", None))
    print(f"\nHMC, seeds/000 §5.1: {n_transitions} transitions x {repeats} repeats, L = {N_STEPS}")
    header = (
        f"{'scheme':<10} {'library':<11} {'trans/s':>8} {'grads/tr':>8} {'grads/s':>8} "
        f"{'accept':>6} {'RMSE(data)':>10} {'moved':>7} {'ours/theirs':>11}"
    )
    print(header)
    print("-" * len(header))
    for split in (False, True):
        runs = {name: [] for name, _ in sides}
        for name, peer in sides:  # untimed warm-up call (first-call costs)
            run_one(name, peer, module, X, y, theta0, 2, 0, split)
        for r in range(repeats):
            for name, peer in sides:
                runs[name].append(
                    run_one(name, peer, module, X, y, theta0, n_transitions, r + 1, split)
                )
        report_hmc(runs, module, (X, y, grid, theta0), n_transitions, split)


def run_one(name, peer, module, X, y, theta0, n_transitions, seed, split):
    """One timed run of one side: ``(seconds, draws, full-data gradients, acceptance)``."""
    if name == "bare":
        return bare_gradients(module, X, y, n_transitions * N_STEPS, split)
    if name == "ours":
        return ours_hmc(module, X, y, theta0, n_transitions, seed, split)
    return theirs_hmc(peer, module, X, y, theta0, n_transitions, seed, split)


def bare_gradients(module, X, y, n_grads, split):
    """Plain forward/backward of the likelihood, ``n_grads`` full-data gradients' worth.

    The ceiling for the samplers, as in ``benchmarks/speed/split_speed.py``: an ordinary
    ``nn.Module`` and ``torch.autograd.grad`` of the summed Gaussian log-likelihood, on the full
    data or cycling over the subsets (the prior's gradient, -theta, is left out).
    """
    params = list(module.parameters())
    n_splits = N_SPLITS if split else 1
    subsets = list(zip(X.chunk(n_splits), y.chunk(n_splits), strict=True))
    start = time.perf_counter()
    for i in range(n_grads * n_splits):
        Xm, ym = subsets[i % n_splits]
        log_lik = -0.5 * NOISE_PRECISION * ((module(Xm) - ym) ** 2).sum()
        torch.autograd.grad(log_lik, params)
    return time.perf_counter() - start, None, n_grads, float("nan")


def report_hmc(runs, module, points, n_transitions, split):
    """One row per library, then the bare rate and the agreement of the two libraries' draws."""
    X, y, grid, theta0 = points
    scheme = "symmetric" if split else "full"
    rates, per_run, kept = {}, {}, {}
    bare = runs.pop("bare")
    bare_rate = statistics.median(r[2] / r[0] for r in bare)
    for name, results in runs.items():
        rates[name] = statistics.median(n_transitions / r[0] for r in results)
        grads = results[0][2] / n_transitions
        draws = torch.cat([r[1] for r in results])
        per_run[name] = torch.stack([predictive_mean(module, r[1], grid) for r in results])
        accept = statistics.mean(r[3] for r in results)
        rmse = rms(predictive_mean(module, draws, X) - y[:, 0])
        moved = statistics.median(float((r[1][-1] - theta0).norm()) for r in results)
        ratio = f"{rates['ours'] / rates[name]:>11.2f}" if name != "ours" else f"{'':>11}"
        print(
            f"{scheme:<10} {name:<11} {rates[name]:>8.2f} {grads:>8.1f} "
            f"{rates[name] * grads:>8.0f} {accept:>6.2f} {rmse:>10.3f} {moved:>7.3f} {ratio}",
            flush=True,
        )
        kept[name] = rates[name] * grads / bare_rate
    shares = ", ".join(f"{name} {share:.2f}" for name, share in kept.items())
    print(f"{'':<10} {'bare':<11} {'':>8} {'':>8} {bare_rate:>8.0f}   (grads/s / bare: {shares})")
    if len(per_run) == 2 and len(runs["ours"]) > 1:
        print_agreement(per_run["ours"], per_run["hamiltorch"])


def print_agreement(ours, theirs):
    """RMS gap of the two predictive means on the grid, against its run-to-run standard error.

    ``ours`` and ``theirs`` are (runs, grid) predictive means of single runs; if both libraries
    sample the same chain dynamics, the gap is of the size of the standard error (z about 1).
    """
    gap = ours.mean(0) - theirs.mean(0)
    se = (ours.var(0) / len(ours) + theirs.var(0) / len(theirs)).sqrt()
    print(
        f"{'':<10} predictive means on [-1.5, 1.5]: RMS gap ours - hamiltorch {rms(gap):.4f}, "
        f"its standard error {rms(se):.4f}, RMS z {rms(gap / se):.2f}"
    )


def rms(t):
    return float((t**2).mean().sqrt())


# --------------------------------------------------------------------------- part 2: NUTS


def logistic_density():
    """Bayesian logistic regression on breast cancer: ``(log p, D)``, float64."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X = torch.as_tensor(data.data, dtype=torch.float64)
    X = torch.cat([torch.ones(len(X), 1, dtype=X.dtype), (X - X.mean(0)) / X.std(0)], dim=1)
    y = torch.as_tensor(data.target, dtype=torch.float64)

    def log_p(theta):
        logits = X @ theta
        return (y * logits - nn.functional.softplus(logits)).sum() - 0.5 * (theta**2).sum()

    return log_p, X.shape[1]


def gaussian_density(dim=10, rho=0.9):
    """A correlated Gaussian (correlation ``rho``, sd 0.1 to 10): ``(log p, D)``, float64."""
    sd = torch.logspace(-1, 1, dim, dtype=torch.float64)
    corr = torch.full((dim, dim), rho, dtype=torch.float64).fill_diagonal_(1.0)
    precision = torch.linalg.inv(sd[:, None] * corr * sd[None, :])

    def log_p(theta):
        return -0.5 * theta @ precision @ theta

    return log_p, dim


def ours_nuts(log_p, x0, n_warmup, n_draws, seed):
    """Our NUTS through ``sample``: seconds, log density of the draws, gradient evaluations."""
    start = time.perf_counter()
    result = sample(
        log_p,
        x0[None],
        NUTS(max_tree_depth=10, target_accept=0.8, adapt_mass=True),
        n_warmup=n_warmup,
        n_draws=n_draws,
        n_chains=1,
        random_state=seed,
    )
    seconds = time.perf_counter() - start
    return seconds, result.log_prob[0].numpy(), result.info["n_grad_evals"]


def pyro_nuts(peer, log_p, x0, n_warmup, n_draws, seed):
    """Pyro's NUTS on the same density; gradients counted as calls of the potential."""
    pyro, infer = peer
    pyro.set_rng_seed(seed)
    calls = [0]

    def potential(params):
        calls[0] += 1
        return -log_p(params["theta"])

    kernel = infer.NUTS(
        potential_fn=potential,
        adapt_step_size=True,
        adapt_mass_matrix=True,
        full_mass=False,
        target_accept_prob=0.8,
        max_tree_depth=10,
    )
    mcmc = infer.MCMC(
        kernel,
        num_samples=n_draws,
        warmup_steps=n_warmup,
        initial_params={"theta": x0.clone()},
        disable_progbar=True,
    )
    start = time.perf_counter()
    mcmc.run()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        values = torch.stack([log_p(t) for t in mcmc.get_samples()["theta"]])
    return seconds, values.numpy(), calls[0]


def nuts_rows(peer, repeats, n_warmup, n_draws):
    """Part 2: our NUTS against Pyro's on two densities, alternating, medians."""
    print(f"\nNUTS: {n_warmup} warmup + {n_draws} draws, one chain, {repeats} repeats")
    header = (
        f"{'density':<20} {'library':<8} {'seconds':>8} {'grads':>8} {'ESS(logp)':>9} "
        f"{'ESS/s':>7} {'ESS/1k gr':>9} {'ours/theirs ESS/s':>17} {'per grad':>8}"
    )
    print(header)
    print("-" * len(header))
    sides = [("ours", None)] + ([("pyro", peer)] if peer is not None else [])
    for label, (log_p, dim) in (
        ("breast cancer LR", logistic_density()),
        ("10-D Gaussian 0.9", gaussian_density()),
    ):
        x0 = torch.zeros(dim, dtype=torch.float64)
        runs = {name: [] for name, _ in sides}
        for name, p in sides:  # warm-up call
            nuts_one(name, p, log_p, x0, 10, 10, 0)
        for r in range(repeats):
            for name, p in sides:
                runs[name].append(nuts_one(name, p, log_p, x0, n_warmup, n_draws, r + 1))
        report_nuts(label, runs)


def nuts_one(name, peer, log_p, x0, n_warmup, n_draws, seed):
    if name == "ours":
        return ours_nuts(log_p, x0, n_warmup, n_draws, seed)
    return pyro_nuts(peer, log_p, x0, n_warmup, n_draws, seed)


def report_nuts(label, runs):
    figures = {}
    for name, results in runs.items():
        ess_values = [ess_bulk(r[1]) for r in results]
        per_second = statistics.median(e / r[0] for e, r in zip(ess_values, results, strict=True))
        per_grad = statistics.median(
            1000 * e / r[2] for e, r in zip(ess_values, results, strict=True)
        )
        figures[name] = per_second, per_grad
        ratio = ""
        if name != "ours":
            ours = figures["ours"]
            ratio = f"{ours[0] / per_second:>17.2f} {ours[1] / per_grad:>8.2f}"
        print(
            f"{label:<20} {name:<8} {statistics.median(r[0] for r in results):>8.1f} "
            f"{statistics.median(r[2] for r in results):>8.0f} "
            f"{statistics.median(ess_values):>9.0f} {per_second:>7.1f} {per_grad:>9.2f} {ratio}",
            flush=True,
        )


# --------------------------------------------------------------------------- main


def versions(ht, peer):
    found = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    if ht is not None:
        found.append(f"hamiltorch {ht.__version__}")
    if peer is not None:
        found.append(f"pyro {peer[0].__version__}")
    return ", ".join(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few transitions, one repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--transitions", type=int, default=20, help="HMC transitions a run")
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hamiltorch-path", default=os.environ.get("HAMILTORCH_PATH"))
    parser.add_argument("--part", choices=("all", "hmc", "nuts"), default="all")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.transitions, args.n_warmup, args.n_draws = 1, 3, 50, 50
    torch.set_num_threads(args.threads)
    ht = import_hamiltorch(args.hamiltorch_path) if args.part != "nuts" else None
    peer = import_pyro() if args.part != "hmc" else None
    print(
        f"{versions(ht, peer)}; {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch thread(s)"
    )
    if args.part != "nuts":
        hmc_rows(ht, args.repeats, args.transitions, 100 if args.quick else 2000)
    if args.part != "hmc":
        nuts_rows(peer, args.repeats, args.n_warmup, args.n_draws)


if __name__ == "__main__":
    main()
