"""HierarchicalPrior's two schemes: precisions by Gibbs steps beside HMC, or jointly by S3HMC.

``HierarchicalPrior(scheme="gibbs")``: HMC moves the weights given the per-tensor precisions
(and the noise precision), then each precision is drawn exactly from its conjugate Gamma
conditional (Neal 1996, §3.2). ``scheme="joint"`` with ``sampler="s3hmc"``: weights and
log-precisions in one position, the ALBA integrator of seeds/002. Same hyperpriors (Gamma(2, 1)
per tensor; Gamma(2, 0.1) on the regression noise precision), same budget per chain
(``n_warmup`` + ``n_draws`` transitions of ``n_steps`` steps, step size adapted in warmup,
MAP start); an S3HMC step costs two gradients, an HMC step one (plus one per transition for the
Gibbs re-evaluation), so both ESS per 1,000 draws and per 1,000 gradients are printed.

Problems:

- ``regression``: y = sin(x) + N(0, 0.1^2), 100 training points on [-3, 3], 500 test points, a
  [1, 50, 1] tanh network (``benchmarks/studies/s3hmc_regression.py``); predictive Gaussian NLL and
  RMSE on the test points in y units, the learned noise sd (truth 0.1).
- ``digits``: digits 0-4, 70/30 stratified split, standardised
  (``benchmarks/studies/s3hmc_digits.py``), the default network (100 ReLU units); accuracy, NLL,
  ECE (15 bins) and mean confidence on the test part, beside ``HMCClassifier()`` at its default
  N(0, 1) prior (``fixed``).
- ``panel``: the panel's digits 0-6 split (``benchmarks/scoreboard/panel.py``, 25 % test, seed as
  given), ``make_pipeline(StandardScaler(), HMCClassifier(...))`` with one chain at the defaults:
  the default N(0, 1) prior against ``HierarchicalPrior()``; accuracy, NLL, ECE, mean confidence.

For every sampled precision: posterior mean, bulk ESS of log tau per 1,000 draws (all chains
together) and per 1,000 gradients (the whole fit's, warmup included, summed over chains;
S3HMC counts two per step), and split
R-hat (``sklearn_bnn.diagnostics``); and the bulk ESS of log |w_l|^2, the statistic a precision's
conditional depends on (a precision drawn by Gibbs steps cannot mix faster than it). Times are
only comparable within one run.

Models ``gibbs_rescale`` and ``fixed_rescale``: ``gibbs`` and ``fixed`` with the exact
unit-rescaling move of a ReLU network (``rescale_moves=True``; ``--activation relu`` for the
regression, whose network is tanh by default, where the move does not apply).

A suffix ``_chees`` (``gibbs_rescale_chees``, before any ``_iw<k>``) adapts the integration
time across the chains during warmup (``trajectory_length="auto"``, ChEES; docs/hmc.md).

A suffix ``_iw<k>`` (``gibbs_iw1``, ``gibbs_rescale_iw2``) adds the interweaving move of the
precisions, ``HierarchicalPrior(interweave=k)``: k Metropolis proposals per tensor and
transition of (w_l, tau_l) at fixed w_l sqrt(tau_l), one forward pass each (printed as
``forwards``; not in the gradient count).

Run: ``OMP_NUM_THREADS=1 python benchmarks/samplers/hierarchical_schemes.py --problem regression
[--models gibbs joint] [--n-chains 4] [--n-warmup 500 --n-draws 500 --n-steps 50] [--seed 0]
[--activation relu]``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import HMCClassifier, HMCRegressor
from sklearn_bnn.diagnostics import ess_bulk, rhat
from sklearn_bnn.metrics import expected_calibration_error, gaussian_nll, negative_log_likelihood
from sklearn_bnn.priors import HierarchicalPrior
from sklearn_bnn.samplers import HMC, S3HMC

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split  # noqa: E402

PROBLEMS = ("regression", "digits", "panel")


def regression_data(seed):
    """100 training and 500 test points of y = sin(x) + N(0, 0.1^2), x uniform on [-3, 3]."""
    rng = np.random.default_rng(seed)

    def draw(n):
        X = rng.uniform(-3, 3, (n, 1))
        return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)

    return (*draw(100), *draw(500))


def digits_data(seed):
    """Digits 0-4 split 70/30 (stratified), standardised on the training part."""
    return digits_split(seed, classes=range(5))[:4]


def panel_data(seed):
    """The panel's digits 0-6, 25 % test (stratified), unscaled (the pipeline scales)."""
    return digits_split(seed, classes=range(7), test_size=0.25, scale=False)[:4]


def make_model(problem, name, args):
    """``gibbs`` (``gibbs_mass``: with ``adapt_mass=True``), ``joint`` or ``fixed`` (the
    default N(0, 1) prior) for ``problem``; ``gibbs_rescale`` and ``fixed_rescale`` add the
    exact unit-rescaling move (``rescale_moves=True``), the others run without it."""
    budget = dict(
        n_warmup=args.n_warmup,
        n_draws=args.n_draws,
        n_chains=args.n_chains,
        random_state=args.seed,
    )
    settings = dict(n_steps=args.n_steps)  # the sampler's
    if problem == "regression":
        cls = HMCRegressor
        budget.update(hidden_layer_sizes=(50,), activation=args.activation)
    else:
        cls = HMCClassifier
    interweave = 0
    match = re.fullmatch(r"(.+)_iw(\d+)", name)
    if match:  # the interweaving move, that many rounds: "gibbs_iw1", "gibbs_rescale_iw2"
        name, interweave = match[1], int(match[2])
    if name.endswith("_chees"):  # the integration time adapted across the chains (ChEES)
        settings["trajectory_length"], name = "auto", name.removesuffix("_chees")
    if name.endswith("_rescale"):  # the exact unit-rescaling move (ReLU / identity MLPs)
        budget["rescale_moves"], name = True, name.removesuffix("_rescale")
    elif name in ("fixed", "gibbs", "gibbs_mass"):
        budget["rescale_moves"] = False
    if name == "fixed":
        model = cls(sampler=HMC(**settings), **budget)
    elif name in ("gibbs", "gibbs_mass"):
        settings["adapt_mass"] = name == "gibbs_mass"
        prior = HierarchicalPrior(scheme="gibbs", interweave=interweave)
        model = cls(prior_precision=prior, sampler=HMC(**settings), **budget)
    elif name == "joint":  # S3HMC takes the step count (no trajectory_length, no mass)
        sampler = S3HMC(n_steps=settings["n_steps"])
        model = cls(prior_precision=HierarchicalPrior(scheme="joint"), sampler=sampler, **budget)
    else:
        raise ValueError(f"unknown model {name!r}")
    return make_pipeline(StandardScaler(), model) if problem == "panel" else model


def scores(problem, model, X, y):
    """Predictive scores on the test data, as a dict."""
    if problem == "regression":
        mean, std = model.predict(X, return_std=True)
        return {
            "NLL": gaussian_nll(y, mean, std),
            "RMSE": float(np.sqrt(np.mean((mean - y) ** 2))),
            "noise sd": float(np.mean(model.noise_std_)),
        }
    proba = model.predict_proba(X)
    return {
        "accuracy": float(np.mean(model.classes_[proba.argmax(1)] == y)),
        "NLL": negative_log_likelihood(y, proba),
        "ECE": expected_calibration_error(y, proba),
        "mean confidence": float(proba.max(1).mean()),
    }


def precision_rows(est):
    """Per sampled precision: name, mean, ESS per 1,000 draws and gradients, R-hat."""
    if not hasattr(est, "precisions_"):  # a fixed prior: the weights' statistic alone
        draws = est.samples_.draws.double()
        return [
            (
                f"(fixed) {n}",
                float("nan"),
                float("nan"),
                float("nan"),
                float("nan"),
                1000 * ess_bulk(np.log(w.square().sum(-1).numpy())) / w[..., 0].numel(),
            )
            for n, w in zip(est.samples_.names, draws.split(est.network_.sizes, -1), strict=True)
        ]
    tau = est.precisions_.double().numpy()  # (chains, draws, K), fitted units
    grads = float(np.sum(est.diagnostics_["n_grad_evals"]))
    if est.n_jobs is None:  # counted once per batched step of all chains
        grads *= est.samples_.n_chains
    draws = est.samples_.draws.double()
    sum_sq = {
        f"precision[{n}]": np.log(w.square().sum(-1).numpy())
        for n, w in zip(est.samples_.names, draws.split(est.network_.sizes, -1), strict=True)
    }
    rows = []
    for k, name in enumerate(est.precision_names_):
        log_tau = np.log(tau[..., k])
        e = ess_bulk(log_tau)
        s = sum_sq.get(name)
        s_ess = float("nan") if s is None else 1000 * ess_bulk(s) / s.size
        rows.append(
            (
                name,
                tau[..., k].mean(),
                1000 * e / log_tau.size,
                1000 * e / grads,
                rhat(log_tau),
                s_ess,
            )
        )
    return rows


def interweave_figures(est):
    """The interweaving move's mean acceptance and its forward passes, or nothing."""
    accept = est.samples_.stats.get("interweave_accept")
    prior = est.prior_precision
    rounds = getattr(prior, "interweave", 0)
    if accept is None or not rounds:
        return ""
    K = len(est.network_.sizes)
    transitions = est.n_warmup + est.n_draws + 1  # the chains' first draw included
    if est.n_jobs is not None:  # counted as the gradients are: once per batched pass
        transitions *= est.n_chains
    return (
        f"interweave accept {float(np.mean(np.asarray(accept))):.2f}, "
        f"forwards {transitions * (rounds * K + 1)}; "
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=PROBLEMS, default="regression")
    parser.add_argument("--models", nargs="*", default=None)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--n-steps", type=int, default=50)
    parser.add_argument("--n-chains", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--activation", default="tanh", help="regression: the hidden activation")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.n_chains is None:
        args.n_chains = {"regression": 4, "digits": 2, "panel": 1}[args.problem]
    if args.models is None:
        args.models = {
            "regression": ["gibbs", "joint"],
            "digits": ["gibbs", "joint", "fixed"],
            "panel": ["fixed", "gibbs"],
        }[args.problem]
    load = {"regression": regression_data, "digits": digits_data, "panel": panel_data}
    Xtr, ytr, Xte, yte = load[args.problem](args.seed)
    print(
        f"{args.problem}: train {len(Xtr)}, test {len(Xte)}; {args.n_chains} chains x "
        f"({args.n_warmup} + {args.n_draws}) transitions, n_steps {args.n_steps}, "
        f"seed {args.seed}\n",
        flush=True,
    )
    for name in args.models:
        model = make_model(args.problem, name, args)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.fit(Xtr, ytr)
        seconds = time.perf_counter() - start
        est = model[-1] if hasattr(model, "steps") else model
        d = est.diagnostics_
        lp = np.asarray(est.samples_.log_prob, dtype=np.float64)
        figures = scores(args.problem, model, Xte, yte)
        print(
            f"## {name}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in figures.items())
            + f"; log density ESS {ess_bulk(lp):.0f} R-hat {rhat(lp):.3f}; accept "
            f"{np.mean(d['acceptance_rate']):.2f}; step {np.mean(d['step_size']):.3g}; "
            f"divergent {d['n_divergent']}; gradients {np.sum(d['n_grad_evals']):.0f}; "
            f"{interweave_figures(est)}"
            f"fit {seconds:.0f} s",
            flush=True,
        )
        for w in caught:
            print(f"  ({name}) {w.category.__name__}: {w.message}", flush=True)
        rows = precision_rows(est)
        if rows:
            print(
                "| precision | mean | bulk ESS / 1,000 draws | ESS / 1,000 gradients | R-hat "
                "| bulk ESS of log |w_l|^2 / 1,000 draws |"
            )
            print("|---|---|---|---|---|---|")
            for p, m, per_draw, per_grad, r, s_ess in rows:
                print(
                    f"| {p} | {m:.3g} | {per_draw:.0f} | {per_grad:.2f} | {r:.3f} | {s_ess:.0f} |"
                )
        print(flush=True)


if __name__ == "__main__":
    main()
