"""S3HMC against fixed-prior HMC and MC dropout on digits 0-4, with entropy on digits 5-9.

Set-up: scikit-learn's digits, classes 0-4 only (901 images), stratified 70/30 split (seed 0),
features standardised with the training part's mean and standard deviation. The
out-of-distribution set is every image of classes 5-9 (896), scaled the same way. Every model is
the estimators' default network (one hidden layer of 100 ReLU units) and every HMC model gets
the same budget: ``n_warmup`` + ``n_draws`` transitions of ``n_steps`` steps per chain,
``n_chains`` chains, step size adapted in warmup (``step_size="auto"``), MAP start.

Models:

- ``hmc_default``: ``HMCClassifier()`` at its default ``prior_precision=1.0``;
- ``hmc_p10``: ``HMCClassifier(prior_precision=10.0)``, the other candidate for the best fixed
  precision of the 10-class digits table in docs/hmc.md (10 had the best accuracy there, 1 the
  best NLL);
- ``s3hmc``: ``HMCClassifier(prior_precision=HierarchicalPrior(), sampler="s3hmc")``, one
  precision per weight/bias tensor sampled with the weights under Gamma(2, 1) hyperpriors;
- ``s3hmc_a1b0.01`` style names (``--s3-variants``): S3HMC with other hyperpriors
  ``alpha``/``beta``, and ``s3hmc_L20`` style names with another ``n_steps``;
- ``dropout``: ``MCDropoutClassifier()`` defaults.

An ALBA step of S3HMC costs two likelihood gradients and a leapfrog step of HMC one, so at equal
``n_steps`` S3HMC spends twice the gradients (both are printed).

Reported, on the 0-4 test part: accuracy, NLL, ECE (15 equal-width bins); mean predictive
entropy (nats) on the 0-4 test part and on the 5-9 set, and the AUROC of the entropy for
telling 5-9 images from 0-4 test images; for the MCMC models the bulk ESS and R-hat of the
log density (for S3HMC the joint density of weights and log-precisions), the smallest bulk ESS
of the predictions, acceptance rate, adapted step size, divergent transitions (warmup and
sampling), likelihood gradients per chain and fit seconds; for S3HMC the precisions' posterior
means, bulk ESS and R-hat (of log tau) and their means over blocks of draws per chain (the
trajectory).
Times are only comparable within one run (shared machine).

``--flush-denormal`` flushes float32 subnormal numbers to zero, which makes the fits at prior
precision 1 about 4x faster on a CPU (see docs/rmhmc.md).

Run: ``OMP_NUM_THREADS=1 python benchmarks/studies/s3hmc_digits.py [--models hmc_default s3hmc ...]
[--n-warmup 500 --n-draws 500 --n-steps 50 --n-chains 2] [--s3-variants a1b0.01 L20]
[--flush-denormal]``.
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
from sklearn.metrics import roc_auc_score

from sklearn_bnn import HMCClassifier, MCDropoutClassifier
from sklearn_bnn.metrics import (
    expected_calibration_error,
    negative_log_likelihood,
    predictive_entropy,
)
from sklearn_bnn.priors import HierarchicalPrior
from sklearn_bnn.samplers import HMC, S3HMC

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split  # noqa: E402

BASE_MODELS = ["hmc_default", "hmc_p10", "s3hmc", "dropout"]


def load(seed):
    """Digits 0-4 split 70/30 (stratified) and all of 5-9, standardised on the training part.

    Parameters
    ----------
    seed : int
        Seed of the split.

    Returns
    -------
    Xtr, Xte, ytr, yte, Xood : ndarray
    """
    Xtr, ytr, Xte, yte, Xood = digits_split(seed, classes=range(5))
    return Xtr, Xte, ytr, yte, Xood


def make_model(name, args):
    """The estimator a model name stands for.

    Parameters
    ----------
    name : str
        ``hmc_default``, ``hmc_p10``, ``s3hmc``, ``s3hmc_a<alpha>b<beta>``, ``s3hmc_L<steps>``
        or ``dropout``.
    args : argparse.Namespace
        Budget and seed.

    Returns
    -------
    estimator
    """
    if name == "dropout":
        return MCDropoutClassifier(random_state=args.seed)
    budget = dict(
        n_warmup=args.n_warmup,
        n_draws=args.n_draws,
        n_chains=args.n_chains,
        random_state=args.seed,
    )
    n_steps = args.n_steps  # the sampler's setting
    if name == "hmc_default":
        return HMCClassifier(sampler=HMC(n_steps=n_steps), **budget)
    if name == "hmc_p10":
        return HMCClassifier(prior_precision=10.0, sampler=HMC(n_steps=n_steps), **budget)
    if name == "s3hmc":
        prior = HierarchicalPrior()
        return HMCClassifier(prior_precision=prior, sampler=S3HMC(n_steps=n_steps), **budget)
    match = re.fullmatch(r"s3hmc_a([0-9.e-]+)b([0-9.e-]+)", name)
    if match:
        prior = HierarchicalPrior(alpha=float(match[1]), beta=float(match[2]))
        return HMCClassifier(prior_precision=prior, sampler=S3HMC(n_steps=n_steps), **budget)
    match = re.fullmatch(r"s3hmc_L(\d+)", name)
    if match:
        prior = HierarchicalPrior()
        return HMCClassifier(prior_precision=prior, sampler=S3HMC(n_steps=int(match[1])), **budget)
    raise ValueError(f"unknown model {name!r}")


def evaluate(name, clf, seconds, data):
    """Scores of one fitted model, as a dict of numbers.

    Parameters
    ----------
    name : str
    clf : fitted classifier
    seconds : float
        Fit time.
    data : tuple
        What :func:`load` returns.

    Returns
    -------
    dict
    """
    _, Xte, _, yte, Xood = data
    proba = clf.predict_proba(Xte)
    h_in = predictive_entropy(proba)
    h_out = predictive_entropy(clf.predict_proba(Xood))
    labels = np.r_[np.zeros(len(h_in)), np.ones(len(h_out))]
    row = {
        "model": name,
        "acc": float(np.mean(clf.classes_[proba.argmax(1)] == yte)),
        "nll": negative_log_likelihood(yte, proba),
        "ece": expected_calibration_error(yte, proba),
        "h_in": float(h_in.mean()),
        "h_out": float(h_out.mean()),
        "auroc": float(roc_auc_score(labels, np.r_[h_in, h_out])),
        "seconds": seconds,
    }
    d = getattr(clf, "diagnostics_", None)
    if d is not None:
        row.update(
            ess_lp=float(d["ess_bulk_log_prob"]),
            rhat_lp=float(d["rhat_log_prob"]),
            ess_pred=float(d["ess_bulk_predictions_min"]),
            accept=float(np.mean(d["acceptance_rate"])),
            step=float(np.mean(d["step_size"])),
            div=int(d["n_divergent"]),
            div_warmup=int(d["n_divergent_warmup"]),
            grads=float(np.sum(d["n_grad_evals"])),
        )
    return row


def print_row(r):
    """One markdown table row (MCMC columns blank for MC dropout)."""
    mc = (
        f"{r['ess_lp']:.0f} / {r['rhat_lp']:.2f} | {r['ess_pred']:.0f} | {r['accept']:.2f} | "
        f"{r['step']:.2g} | {r['div_warmup']} + {r['div']} | {r['grads']:.0f}"
        if "ess_lp" in r
        else " |  |  |  |  | "
    )
    print(
        f"| {r['model']} | {r['acc']:.3f} | {r['nll']:.3f} | {r['ece']:.3f} | {r['h_in']:.3f} "
        f"| {r['h_out']:.3f} | {r['auroc']:.3f} | {mc} | {r['seconds']:.0f} |",
        flush=True,
    )


def print_precisions(name, clf, n_blocks=5):
    """Posterior means, ESS and R-hat of the sampled precisions, and block means per chain."""
    d = clf.diagnostics_
    tau = clf.precisions_.double().numpy()  # (chains, draws, K)
    print(f"\n{name}: precisions (posterior mean, bulk ESS and R-hat of log tau)")
    for k, p in enumerate(clf.precision_names_):
        print(
            f"  {p:22s} {tau[..., k].mean():9.3f}  ESS {d['ess_bulk_precisions'][p]:7.1f}  "
            f"R-hat {d['rhat_precisions'][p]:.3f}"
        )
    print(f"  trajectory: mean over {n_blocks} consecutive blocks of draws, per chain")
    for c in range(tau.shape[0]):
        blocks = np.array_split(tau[c], n_blocks)
        for k, p in enumerate(clf.precision_names_):
            means = " ".join(f"{b[:, k].mean():8.2f}" for b in blocks)
            print(f"  chain {c} {p:22s} {means}")
    jumps = np.abs(np.diff(np.log(tau), axis=1)).mean(axis=(0, 1))
    print(
        "  mean |change of log tau| between consecutive draws: "
        + ", ".join(f"{p} {j:.4f}" for p, j in zip(clf.precision_names_, jumps, strict=True))
    )
    stats = clf.samples_.stats
    if "not_converged" in stats:
        print(f"  fixed point not converged (kept draws): {int(stats['not_converged'].sum())}")
    print(
        f"  step size per chain {np.round(d['step_size'], 5).tolist()}, acceptance per chain "
        f"{np.round(d['acceptance_rate'], 3).tolist()}",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=BASE_MODELS)
    parser.add_argument("--s3-variants", nargs="*", default=[], help="e.g. a1b0.01 L20")
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--n-steps", type=int, default=50)
    parser.add_argument("--n-chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--flush-denormal", action="store_true", help="torch.set_flush_denormal(True) (speed)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(args.flush_denormal)
    data = load(args.seed)
    models = list(args.models) + [f"s3hmc_{v}" for v in args.s3_variants]
    print(
        f"train {len(data[0])}, test {len(data[1])}, OOD {len(data[4])}; budget "
        f"{args.n_chains} chains x ({args.n_warmup} + {args.n_draws}) transitions, "
        f"L = {args.n_steps}\n"
    )
    print(
        "| model | accuracy | NLL | ECE | entropy 0-4 | entropy 5-9 | AUROC | ESS / R-hat "
        "(log density) | min ESS (predictions) | accept | step | divergent (warmup + kept) "
        "| gradients per chain | fit s |"
    )
    print("|" + "---|" * 14, flush=True)
    fitted = {}
    for name in models:
        clf = make_model(name, args)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clf.fit(data[0], data[2])
        seconds = time.perf_counter() - start
        print_row(evaluate(name, clf, seconds, data))
        for w in caught:
            print(f"  ({name}) {w.category.__name__}: {w.message}", flush=True)
        fitted[name] = clf
    for name, clf in fitted.items():
        if hasattr(clf, "precisions_"):
            print_precisions(name, clf)


if __name__ == "__main__":
    main()
