"""How the prior sets the calibration of HMCClassifier on digits.

Fits ``HMCClassifier`` (one hidden layer, 100 units unless ``--hidden``, 500 warmup + 500
draws, temperature 1) on scikit-learn's digits (stratified 70/30 split, seed 0,
standardised) under several Gaussian priors, and prints test accuracy, NLL, Brier, ECE and
mean confidence of the posterior predictive beside an ``MLPClassifier`` of the same size.
Two more columns explain the result: the mean accuracy and mean confidence of single draws.

A prior is given as ``prior_precision``: one float, or one value per parameter tensor in
``named_parameters()`` order (first-layer weight, first-layer bias, output weight, output bias).

Run: ``python benchmarks/studies/hmc_digits_prior.py [--configs n01 tanh ...] [--hidden 100]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.neural_network import MLPClassifier

from sklearn_bnn import HMCClassifier
from sklearn_bnn.metrics import brier_score, expected_calibration_error, negative_log_likelihood

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split  # noqa: E402

CONFIGS = {
    "n01": dict(prior_precision=1.0),
    "in64_out1": dict(prior_precision=[64.0, 1.0, 1.0, 1.0]),
    "in16_out1": dict(prior_precision=[16.0, 1.0, 1.0, 1.0]),
    "in64_out0.25": dict(prior_precision=[64.0, 1.0, 0.25, 1.0]),
    "in64_out100": dict(prior_precision=[64.0, 1.0, 100.0, 1.0]),
    "tanh": dict(activation="tanh"),
}


def scores(y, proba):
    return {
        "acc": float(np.mean(proba.argmax(1) == y)),
        "nll": negative_log_likelihood(y, proba),
        "brier": brier_score(y, proba),
        "ece": expected_calibration_error(y, proba),
        "conf": float(proba.max(1).mean()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS))
    parser.add_argument("--hidden", type=int, default=100, help="hidden units (one layer)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-draws", type=int, default=500)
    parser.add_argument("--n-warmup", type=int, default=500)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    Xtr, ytr, Xte, yte, _ = digits_split(args.seed)

    header = (
        f"{'prior':<14}{'acc':>7}{'NLL':>8}{'Brier':>8}{'ECE':>8}{'conf':>7}"
        f"{'draw acc':>10}{'draw conf':>10}{'accept':>8}{'fit s':>7}"
    )
    print(header)
    print("-" * len(header))
    mlp = MLPClassifier(hidden_layer_sizes=(args.hidden,), max_iter=500, random_state=args.seed)
    r = scores(yte, mlp.fit(Xtr, ytr).predict_proba(Xte))
    print(
        f"{'MLP':<14}{r['acc']:>7.3f}{r['nll']:>8.3f}{r['brier']:>8.3f}{r['ece']:>8.3f}"
        f"{r['conf']:>7.3f}"
    )
    for name in args.configs:
        start = time.perf_counter()
        clf = HMCClassifier(
            hidden_layer_sizes=(args.hidden,), n_draws=args.n_draws,
            n_warmup=args.n_warmup, random_state=args.seed,
            **CONFIGS[name],
        ).fit(Xtr, ytr)
        seconds = time.perf_counter() - start
        r = scores(yte, clf.predict_proba(Xte))
        draws = clf.predict_samples(Xte)  # (S, n, 10)
        draw_acc = float(np.mean(draws.argmax(-1) == yte[None]))
        draw_conf = float(draws.max(-1).mean())
        print(
            f"{name:<14}{r['acc']:>7.3f}{r['nll']:>8.3f}{r['brier']:>8.3f}{r['ece']:>8.3f}"
            f"{r['conf']:>7.3f}{draw_acc:>10.3f}{draw_conf:>10.3f}"
            f"{clf.acceptance_rate_:>8.2f}{seconds:>7.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
