"""Command line: ``python -m sklearn_bnn demo``.

The demo trains on scikit-learn's digits 0-6 and keeps the digits 7-9 out as inputs the models
have never seen. It fits an :class:`~sklearn_bnn.HMCClassifier` beside a deterministic
:class:`~sklearn.neural_network.MLPClassifier` and a deep ensemble of five of them, prints
accuracy, calibration and out-of-distribution detection side by side with a plain reading of
the numbers, and writes figures, the fitted model and the results to a folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

IN_CLASSES = (0, 1, 2, 3, 4, 5, 6)
"""Digits the models are trained on; 7, 8 and 9 are the out-of-distribution inputs."""

DEMO_BUDGET = {"n_warmup": 200, "n_draws": 200}
"""Transitions of the demo's HMC fit (the estimator's defaults are 500 and 500)."""

QUICK_BUDGET = {"n_warmup": 10, "n_draws": 10, "n_steps": 10, "n_init_steps": 50}
"""``--quick``: a smoke test of the whole demo, not a posterior worth reading."""

N_MEMBERS = 5
"""MLPs in the deep ensemble."""

COLUMNS = ("accuracy", "NLL", "ECE", "Brier", "AUROC H", "AUROC MI", "fit (s)", "x MLP")
"""Columns of the printed table (the test checks them)."""

# Direction of each score: +1 when higher is better, -1 when lower is better.
_BETTER = {
    "accuracy": 1,
    "nll": -1,
    "ece": -1,
    "brier": -1,
    "auroc_entropy": 1,
    "auroc_mi": 1,
}
_NAMES = {
    "accuracy": "accuracy",
    "nll": "NLL",
    "ece": "ECE",
    "brier": "Brier score",
    "auroc_entropy": "OOD AUROC (entropy)",
    "auroc_mi": "OOD AUROC (mutual information)",
}


def load_split(seed: int = 0):
    """Digits 0-6 split 70/30 (stratified) for training and testing, and the digits 7-9.

    Parameters
    ----------
    seed : int, default=0
        Seed of the train/test split.

    Returns
    -------
    X_train, y_train, X_test, y_test, X_ood : ndarray
        Raw pixel values (0-16); ``X_ood`` holds every 7, 8 and 9.
    """
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    seen = np.isin(y, IN_CLASSES)
    X_train, X_test, y_train, y_test = train_test_split(
        X[seen], y[seen], test_size=0.3, stratify=y[seen], random_state=seed
    )
    return X_train, y_train, X_test, y_test, X[~seen]


def score_model(y_test, draws_test, draws_ood, labels, proba=None) -> dict:
    """In-distribution scores and OOD detection of a model from its per-draw probabilities.

    Parameters
    ----------
    y_test : ndarray of shape (n_test,)
    draws_test : ndarray of shape (n_draws, n_test, n_classes)
        Per-draw (or per-member) probabilities on the in-distribution test set; one draw for a
        deterministic model.
    draws_ood : ndarray of shape (n_draws, n_ood, n_classes)
        The same on the out-of-distribution inputs.
    labels : array-like of shape (n_classes,)
    proba : pair of ndarrays, optional
        The model's ``predict_proba`` on the test and the OOD inputs, when it is not the mean
        of the draws (a calibrated model average); the scores and the entropy are read from
        it, the mutual information from the draws.

    Returns
    -------
    dict
        ``accuracy``, ``nll``, ``ece``, ``brier`` on the test set; ``auroc_entropy`` (and
        ``auroc_mi`` when there is more than one draw, else None): the area under the ROC
        curve of telling OOD inputs (positives) from test inputs by that uncertainty;
        ``mean_confidence`` (top-label probability) and the mean predictive entropies
        ``mean_entropy_test`` and ``mean_entropy_ood``.
    """
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from .metrics import (
        brier_score,
        expected_calibration_error,
        mutual_information,
        negative_log_likelihood,
        predictive_entropy,
    )

    proba_test, proba_ood = proba or (draws_test.mean(axis=0), draws_ood.mean(axis=0))
    proba = proba_test
    is_ood = np.r_[np.zeros(draws_test.shape[1]), np.ones(draws_ood.shape[1])]
    both = np.concatenate([draws_test, draws_ood], axis=1)
    mean_both = np.concatenate([proba_test, proba_ood])[None]
    row = {
        "accuracy": float(np.mean(np.asarray(labels)[proba.argmax(1)] == y_test)),
        "nll": negative_log_likelihood(y_test, proba, labels=labels),
        "ece": expected_calibration_error(y_test, proba, labels=labels),
        "brier": brier_score(y_test, proba, labels=labels),
        "auroc_entropy": float(roc_auc_score(is_ood, predictive_entropy(mean_both))),
        "auroc_mi": None,
        "mean_confidence": float(proba.max(axis=1).mean()),
        "mean_entropy_test": float(predictive_entropy(proba_test[None]).mean()),
        "mean_entropy_ood": float(predictive_entropy(proba_ood[None]).mean()),
    }
    if len(both) > 1:
        row["auroc_mi"] = float(roc_auc_score(is_ood, mutual_information(both)))
    return row


def format_table(rows: dict) -> str:
    """The results as a fixed-width table, one line per model.

    Parameters
    ----------
    rows : dict
        Model name to the dict of :func:`score_model` plus ``seconds`` and ``ratio``.

    Returns
    -------
    str
    """
    width = max(len(name) for name in rows) + 2
    lines = [f"{'model':<{width}}" + "".join(f"{c:>10}" for c in COLUMNS)]
    for name, r in rows.items():
        mi = "-" if r["auroc_mi"] is None else f"{r['auroc_mi']:.3f}"
        cells = (
            f"{r['accuracy']:.3f}",
            f"{r['nll']:.3f}",
            f"{r['ece']:.3f}",
            f"{r['brier']:.3f}",
            f"{r['auroc_entropy']:.3f}",
            mi,
            f"{r['seconds']:.1f}",
            f"{r['ratio']:.0f}x" if r["ratio"] >= 10 else f"{r['ratio']:.1f}x",
        )
        lines.append(f"{name:<{width}}" + "".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


def _compare(a: dict, b: dict, key: str) -> int:
    """+1 when ``a`` is better than ``b`` on ``key`` at the printed precision, -1 worse, 0 tie."""
    x, y = a[key], b[key]
    if x is None or y is None or round(x, 3) == round(y, 3):
        return 0
    return _BETTER[key] if x > y else -_BETTER[key]


def reading(rows: dict, bayes: str, others: tuple[str, ...]) -> list[str]:
    """Plain sentences saying where ``bayes`` beats each of ``others`` and where it does not.

    Every claim is read from ``rows`` (compared at the three decimals printed), never assumed.

    Parameters
    ----------
    rows : dict
        As for :func:`format_table`.
    bayes : str
        The model to read about.
    others : tuple of str
        The models it is compared with.

    Returns
    -------
    list of str
    """
    lines = []
    b = rows[bayes]
    for other in others:
        o = rows[other]
        better, worse, tied = [], [], []
        for key in _BETTER:
            if o[key] is None or b[key] is None:
                continue
            text = f"{_NAMES[key]} {b[key]:.3f} against {o[key]:.3f}"
            {1: better, -1: worse, 0: tied}[_compare(b, o, key)].append(text)
        # OOD by mutual information against a model that has none: compare with its entropy.
        if b["auroc_mi"] is not None and o["auroc_mi"] is None:
            mi_vs_h = {**b, "auroc_entropy": b["auroc_mi"]}
            text = (
                f"OOD AUROC from its mutual information {b['auroc_mi']:.3f} against "
                f"{o['auroc_entropy']:.3f} from the {other}'s entropy"
            )
            {1: better, -1: worse, 0: tied}[_compare(mi_vs_h, o, "auroc_entropy")].append(text)
        lines.append(f"Against the {other}:")
        lines.append("  better: " + ("; ".join(better) if better else "nowhere"))
        lines.append("  worse:  " + ("; ".join(worse) if worse else "nowhere"))
        if tied:
            lines.append("  equal:  " + "; ".join(tied))
        lines.append(
            f"  fit time: {b['seconds'] / o['seconds']:.0f} times as long "
            f"({b['seconds']:.1f} s against {o['seconds']:.1f} s)"
        )
    gap = b["mean_confidence"] - b["accuracy"]
    if round(gap, 3) != 0:
        side = "over-confident" if gap > 0 else "under-confident"
        lines.append(
            f"{bayes}'s mean confidence on the test set is {b['mean_confidence']:.3f} against an "
            f"accuracy of {b['accuracy']:.3f}: {side} on average."
        )
    entropies = ", ".join(
        f"{name} {r['mean_entropy_ood']:.2f}"
        for name, r in sorted(rows.items(), key=lambda item: -item[1]["mean_entropy_ood"])
    )
    lines.append(f"Mean predictive entropy on the unseen digits 7-9 (nats): {entropies}.")
    return lines


def _fit_seconds(model, X, y):
    start = time.perf_counter()
    with warnings.catch_warnings():
        # MLPClassifier() stops at max_iter=200 before its tolerance on some seeds; it is
        # shown at its defaults on purpose.
        from sklearn.exceptions import ConvergenceWarning

        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    return time.perf_counter() - start


def _write_figures(out_dir, y_test, probas, labels, rows) -> list[Path]:
    """Reliability, risk-coverage and OOD-entropy figures of each model's predictive.

    ``probas[name]`` is the pair (test, OOD) of the probabilities the table scored: the model
    average for the MLPs, HMC's calibrated ``predict_proba``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plotting import plot_accuracy_coverage, plot_entropy_histogram, plot_reliability_diagram

    names = list(probas)
    paths = []
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 4.5))
    for ax, name in zip(axes, names, strict=True):
        plot_reliability_diagram(y_test, probas[name][0], labels=labels, ax=ax, label=name)
        ax.set_title(f"{name}: reliability")
    paths.append(out_dir / "reliability.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for name in names:
        plot_accuracy_coverage(y_test, probas[name][0], labels=labels, ax=ax, label=name)
    ax.set_title("Digits 0-6 test set: accuracy when the most uncertain are refused")
    paths.append(out_dir / "risk_coverage.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)

    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.8), sharey=True)
    for ax, name in zip(axes, names, strict=True):
        title = f"{name} (OOD AUROC {rows[name]['auroc_entropy']:.3f})"
        plot_entropy_histogram(probas[name][0], probas[name][1], ax=ax, title=title)
    axes[0].set_ylabel("density (test 0-6 against unseen 7-9)")
    for ax in axes[1:]:
        ax.set_ylabel("")
    paths.append(out_dir / "entropy_ood.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    return paths


def demo(out_dir: Path, budget: dict, seed: int = 0) -> dict:
    """Run the digits demo: fit, print the table and its reading, write the files.

    Parameters
    ----------
    out_dir : Path
        Folder for the figures, the saved model and ``results.json`` (created if needed).
    budget : dict
        Parameters of :class:`~sklearn_bnn.HMCClassifier` that set the sampling budget
        (``n_warmup``, ``n_draws``, ...); the rest stay at the estimator's defaults.
    seed : int, default=0
        Seed of the split and of every model.

    Returns
    -------
    dict
        The contents of ``results.json``.
    """
    import numpy as np
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from . import HMCClassifier, save
    from .metrics import predict_samples

    X_train, y_train, X_test, y_test, X_ood = load_split(seed)
    print(
        f"digits: trained on 0-6 ({len(X_train)} images), tested on {len(X_test)} unseen "
        f"images of 0-6 and on {len(X_ood)} images of 7-9, digits no model has seen"
    )
    hmc_params = {"random_state": seed, "verbose": True, **budget}
    defaults = HMCClassifier().get_params()
    changed = {k: v for k, v in budget.items() if defaults[k] != v}
    if changed:
        shown = ", ".join(f"{k}={v} (default {defaults[k]})" for k, v in changed.items())
        print(f"HMCClassifier at its defaults but for a smaller budget: {shown}")
    else:
        print("HMCClassifier at its defaults")

    hmc = make_pipeline(StandardScaler(), HMCClassifier(**hmc_params))
    seconds = {"HMC": _fit_seconds(hmc, X_train, y_train)}
    mlp = make_pipeline(StandardScaler(), MLPClassifier(random_state=seed))
    seconds["MLP"] = _fit_seconds(mlp, X_train, y_train)
    members = [
        make_pipeline(StandardScaler(), MLPClassifier(random_state=seed + k))
        for k in range(N_MEMBERS)
    ]
    seconds[f"{N_MEMBERS} MLPs"] = sum(_fit_seconds(m, X_train, y_train) for m in members)

    def _float64(p):
        # float32 draws sum to one within 1e-7 only; scikit-learn's Brier check wants 1e-8.
        p = np.asarray(p, dtype=np.float64)
        return p / p.sum(axis=-1, keepdims=True)

    draws = {
        "HMC": tuple(_float64(predict_samples(hmc, X)) for X in (X_test, X_ood)),
        "MLP": tuple(mlp.predict_proba(X)[None] for X in (X_test, X_ood)),
        f"{N_MEMBERS} MLPs": tuple(
            np.stack([m.predict_proba(X) for m in members]) for X in (X_test, X_ood)
        ),
    }
    # HMC's predict_proba is its calibrated model average (docs/hmc.md, "Calibration")
    probas = {name: (d[0].mean(0), d[1].mean(0)) for name, d in draws.items()}
    probas["HMC"] = tuple(_float64(hmc.predict_proba(X)) for X in (X_test, X_ood))
    labels = np.asarray(IN_CLASSES)
    rows = {}
    for name, (d_test, d_ood) in draws.items():
        rows[name] = score_model(y_test, d_test, d_ood, labels, probas[name])
        rows[name]["seconds"] = seconds[name]
        rows[name]["ratio"] = seconds[name] / seconds["MLP"]

    hmc_step = hmc[-1]
    d = hmc_step.diagnostics_
    print(
        f"\nHMC: {d['n_divergent']} divergences, acceptance {hmc_step.acceptance_rate_:.2f}, "
        f"{len(hmc_step.samples_)} draws, step size {float(np.mean(d['step_size'])):.2e}"
    )
    print(
        "\nTest set: digits 0-6 not trained on; AUROC: telling the digits 7-9 from them by "
        "predictive entropy (H) or mutual information between prediction and weights (MI); "
        "x MLP: fit time over the MLP's"
    )
    print(format_table(rows))
    print()
    for line in reading(rows, "HMC", ("MLP", f"{N_MEMBERS} MLPs")):
        print(line)

    out_dir.mkdir(parents=True, exist_ok=True)
    print()
    model_path = out_dir / "hmc_digits.pt"
    save(hmc_step, model_path)
    print(
        f"HMC model saved (weights only) to {model_path}: sklearn_bnn.load(path) reloads it; "
        "it takes inputs standardised with the scaler stored in results.json"
    )
    results = {
        "data": {
            "train_classes": list(IN_CLASSES),
            "ood_classes": [7, 8, 9],
            "n_train": len(X_train),
            "n_test": len(X_test),
            "n_ood": len(X_ood),
            "seed": seed,
        },
        "hmc_params": {k: v for k, v in hmc_params.items() if k != "verbose"},
        "models": rows,
        "hmc_diagnostics": {
            "acceptance_rate": float(hmc_step.acceptance_rate_),
            "n_divergent": int(d["n_divergent"]),
            "step_size": float(np.mean(d["step_size"])),
        },
        "scaler": {"mean": hmc[0].mean_.tolist(), "scale": hmc[0].scale_.tolist()},
    }
    results_path = out_dir / "results.json"
    results_path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {results_path}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('matplotlib is not installed: no figures (pip install -e ".[plot]")')
    else:
        for path in _write_figures(out_dir, y_test, probas, labels, rows):
            print(f"figure written to {path}")
    return results


def main(argv=None) -> int:
    """Entry point of ``python -m sklearn_bnn`` and of the ``sklearn-bnn`` script.

    Parameters
    ----------
    argv : list of str, optional
        Arguments; by default ``sys.argv[1:]``.

    Returns
    -------
    int
        Exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m sklearn_bnn", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "demo", help="HMC, an MLP and a deep ensemble on digits 0-6, with 7-9 held out"
    )
    p.add_argument("--out", type=Path, default=Path("sklearn_bnn_demo"), help="output folder")
    p.add_argument("--n-draws", type=int, default=None, help="HMC draws after warmup")
    p.add_argument("--n-warmup", type=int, default=None, help="HMC warmup transitions")
    p.add_argument("--quick", action="store_true", help="tiny sampling budget (a smoke test)")
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "demo":
        budget = dict(QUICK_BUDGET if args.quick else DEMO_BUDGET)
        if args.n_draws is not None:
            budget["n_draws"] = args.n_draws
        if args.n_warmup is not None:
            budget["n_warmup"] = args.n_warmup
        demo(args.out, budget, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
