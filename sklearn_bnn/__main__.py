"""Command line: ``python -m sklearn_bnn demo``.

The demo fits an :class:`~sklearn_bnn.HMCClassifier` on scikit-learn's digits, compares it with
a deterministic :class:`~sklearn.neural_network.MLPClassifier` of the same size, saves the
model (weights only) and, when matplotlib is installed, a reliability diagram.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def demo(out_dir: Path, n_draws: int, n_warmup: int, seed: int) -> dict:
    """Run the digits demo; return the scores of both models."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    from . import HMCClassifier, save
    from .metrics import (
        brier_score,
        expected_calibration_error,
        negative_log_likelihood,
    )

    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.3, stratify=y, random_state=seed
    )
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    print(f"digits: {len(X_train)} training and {len(X_test)} test images, 64 features, 10 classes")

    start = time.perf_counter()
    hmc = HMCClassifier(
        hidden_layer_sizes=(100,),
        n_draws=n_draws,
        n_warmup=n_warmup,
        verbose=True,
        random_state=seed,
    ).fit(X_train, y_train)
    hmc_time = time.perf_counter() - start
    start = time.perf_counter()
    mlp = MLPClassifier(hidden_layer_sizes=(100,), max_iter=500, random_state=seed)
    mlp.fit(X_train, y_train)
    mlp_time = time.perf_counter() - start

    rows = {}
    for name, model, seconds in (
        ("HMCClassifier", hmc, hmc_time),
        ("MLPClassifier", mlp, mlp_time),
    ):
        proba = model.predict_proba(X_test)
        rows[name] = {
            "accuracy": float(np.mean(model.classes_[proba.argmax(1)] == y_test)),
            "nll": negative_log_likelihood(y_test, proba),
            "brier": brier_score(y_test, proba),
            "ece": expected_calibration_error(y_test, proba),
            "seconds": seconds,
        }
    print()
    print(f"{'model':<15}{'accuracy':>10}{'NLL':>8}{'Brier':>8}{'ECE':>8}{'fit (s)':>9}")
    for name, r in rows.items():
        print(
            f"{name:<15}{r['accuracy']:>10.4f}{r['nll']:>8.4f}{r['brier']:>8.4f}"
            f"{r['ece']:>8.4f}{r['seconds']:>9.1f}"
        )
    d = hmc.diagnostics_
    print(
        f"\nHMC: {len(hmc.samples_)} draws, acceptance {hmc.acceptance_rate_:.2f}, "
        f"step size {float(d['step_size'].mean()):.2e}, divergences {d['n_divergent']}"
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = out_dir / "hmc_digits.pt"
    save(hmc, model_path)
    print(f"model saved (weights only) to {model_path}; reload with sklearn_bnn.load(path)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from .plotting import plot_reliability_diagram
    except ImportError:
        print("matplotlib is not installed: no reliability plot (pip install sklearn-bnn[plot])")
    else:
        fig, ax = plt.subplots(figsize=(5, 5))
        plot_reliability_diagram(y_test, hmc.predict_proba(X_test), ax=ax, label="HMC")
        plot_reliability_diagram(y_test, mlp.predict_proba(X_test), ax=ax, label="MLP")
        plot_path = out_dir / "reliability_digits.png"
        fig.savefig(plot_path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        print(f"reliability diagram written to {plot_path}")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sklearn_bnn", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="fit HMCClassifier on digits and compare with an MLP")
    p.add_argument("--out", type=Path, default=Path("sklearn_bnn_demo"), help="output folder")
    p.add_argument("--n-draws", type=int, default=500)
    p.add_argument("--n-warmup", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(args.out, args.n_draws, args.n_warmup, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
