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

from ._demo_report import format_table, reading, score_model, write_figures

IN_CLASSES = (0, 1, 2, 3, 4, 5, 6)
"""Digits the models are trained on; 7, 8 and 9 are the out-of-distribution inputs."""

DEMO_BUDGET = {"n_warmup": 200, "n_draws": 200}
"""Transitions of the demo's HMC fit (the estimator's defaults are 500 and 500)."""

QUICK_BUDGET = {"n_warmup": 10, "n_draws": 10, "sampler__n_steps": 10, "init__n_steps": 50}
"""``--quick``: a smoke test of the whole demo, not a posterior worth reading."""

N_MEMBERS = 5
"""MLPs in the deep ensemble."""


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


def _fit_seconds(model, X, y):
    start = time.perf_counter()
    with warnings.catch_warnings():
        # MLPClassifier() stops at max_iter=200 before its tolerance on some seeds; it is
        # shown at its defaults on purpose. HMC's convergence check (a subclass of the same
        # warning) is printed with its diagnostics (_print_report) instead.
        from sklearn.exceptions import ConvergenceWarning

        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    return time.perf_counter() - start


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

    split = load_split(seed)
    X_train, y_train, X_test, y_test, X_ood = split
    print(
        f"digits: trained on 0-6 ({len(X_train)} images), tested on {len(X_test)} unseen "
        f"images of 0-6 and on {len(X_ood)} images of 7-9, digits no model has seen"
    )
    _print_budget(budget)
    hmc_params = {"random_state": seed, "verbose": True, **budget}
    n_threads = _demo_threads(X_train.shape, hmc_params)
    print(
        f"fit times: every model on {n_threads} thread{'s' * (n_threads > 1)}, the number the "
        "package's rule gives the HMC fit (sklearn_bnn._threads): torch's threads for HMC, and "
        "the BLAS/OpenMP threads of scikit-learn's MLPs, limited to the same with threadpoolctl"
    )
    models, seconds = _fit_models(X_train, y_train, hmc_params, seed, n_threads)
    draws, probas = _probabilities(models, X_test, X_ood)
    labels = np.asarray(IN_CLASSES)
    rows = {}
    for name, (d_test, d_ood) in draws.items():
        rows[name] = score_model(y_test, d_test, d_ood, labels, probas[name])
        rows[name]["seconds"] = seconds[name]
        rows[name]["ratio"] = seconds[name] / seconds["MLP"]
    hmc = models["HMC"]
    _print_report(hmc[-1], rows)

    out_dir.mkdir(parents=True, exist_ok=True)
    print()
    results = _write_results(out_dir, split, seed, hmc, hmc_params, rows)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('matplotlib is not installed: no figures (pip install -e ".[plot]")')
    else:
        for path in write_figures(out_dir, y_test, probas, labels, rows, draws):
            print(f"figure written to {path}")
    return results


def _print_budget(budget: dict) -> None:
    """Say which of the HMC fit's parameters differ from the estimator's defaults."""
    from . import HMCClassifier

    defaults = HMCClassifier().get_params()
    changed = {k: v for k, v in budget.items() if defaults[k] != v}
    if changed:
        shown = ", ".join(f"{k}={v} (default {defaults[k]})" for k, v in changed.items())
        print(f"HMCClassifier at its defaults but for a smaller budget: {shown}")
    else:
        print("HMCClassifier at its defaults")


def _demo_threads(shape, hmc_params: dict) -> int:
    """The torch threads the package's rule (:mod:`sklearn_bnn._threads`) gives the demo's HMC
    fit: one forward pass is rows x weights x chains multiply-adds.

    Parameters
    ----------
    shape : tuple of int
        ``(n_rows, n_features)`` of the training set.
    hmc_params : dict
        The HMC fit's parameters (the others at the estimator's defaults).

    Returns
    -------
    int
    """
    from . import HMCClassifier
    from ._threads import threads_for

    params = {**HMCClassifier().get_params(), **hmc_params}
    sizes = [shape[1], *params["hidden_layer_sizes"], len(IN_CLASSES)]
    n_weights = sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:], strict=False))
    return threads_for(shape[0] * n_weights * params["n_chains"])


def _fit_models(X_train, y_train, hmc_params: dict, seed: int, n_threads: int = 1):
    """HMC, one MLP and the deep ensemble, each behind a scaler, and their fit times, every
    fit on ``n_threads`` threads (torch's for HMC, the MLPs' BLAS threads through
    threadpoolctl), so that the times compare."""
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    from . import HMCClassifier, fit_threads

    with fit_threads(n_threads), threadpool_limits(limits=n_threads):
        # set_params routes sampler__n_steps (the quick budget) to the sampler
        hmc = make_pipeline(StandardScaler(), HMCClassifier().set_params(**hmc_params))
        seconds = {"HMC": _fit_seconds(hmc, X_train, y_train)}
        mlp = make_pipeline(StandardScaler(), MLPClassifier(random_state=seed))
        seconds["MLP"] = _fit_seconds(mlp, X_train, y_train)
        members = [
            make_pipeline(StandardScaler(), MLPClassifier(random_state=seed + k))
            for k in range(N_MEMBERS)
        ]
        seconds[f"{N_MEMBERS} MLPs"] = sum(_fit_seconds(m, X_train, y_train) for m in members)
    return {"HMC": hmc, "MLP": mlp, f"{N_MEMBERS} MLPs": members}, seconds


def _probabilities(models: dict, X_test, X_ood):
    """Per-draw probabilities of every model on the test and the OOD inputs, and the
    probabilities the table scores: the model average for the MLPs, HMC's ``predict_proba``
    (its calibrated model average, docs/hmc.md, "Calibration")."""
    import numpy as np

    from .metrics import predict_samples

    def _float64(p):
        # float32 draws sum to one within 1e-7 only; scikit-learn's Brier check wants 1e-8.
        p = np.asarray(p, dtype=np.float64)
        return p / p.sum(axis=-1, keepdims=True)

    hmc, mlp, members = models["HMC"], models["MLP"], models[f"{N_MEMBERS} MLPs"]
    draws = {
        "HMC": tuple(_float64(predict_samples(hmc, X)) for X in (X_test, X_ood)),
        "MLP": tuple(mlp.predict_proba(X)[None] for X in (X_test, X_ood)),
        f"{N_MEMBERS} MLPs": tuple(
            np.stack([m.predict_proba(X) for m in members]) for X in (X_test, X_ood)
        ),
    }
    probas = {name: (d[0].mean(0), d[1].mean(0)) for name, d in draws.items()}
    probas["HMC"] = tuple(_float64(hmc.predict_proba(X)) for X in (X_test, X_ood))
    return draws, probas


def _print_report(hmc_step, rows: dict) -> None:
    """HMC's diagnostics, the table and its reading."""
    import numpy as np

    d = hmc_step.diagnostics_
    print(
        f"\nHMC: {d['n_divergent']} divergences, acceptance {hmc_step.acceptance_rate_:.2f}, "
        f"{len(hmc_step.samples_)} draws, step size {float(np.mean(d['step_size'])):.2e}"
    )
    worst = float(np.nanmax([d["rhat_log_prob"], d["rhat_predictions_max"]]))
    print(
        f"     convergence: R-hat {d['rhat_log_prob']:.2f} for the log density (bulk ESS "
        f"{d['ess_bulk_log_prob']:.0f}), {d['rhat_predictions_max']:.2f} for the worst of the "
        "predictions on 64 training inputs"
        + (
            "; above 1.1, so some predictions have not mixed at this reduced budget (more "
            "draws or chains: n_draws, n_chains)"
            if worst > 1.1
            else ""
        )
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


def _write_results(out_dir: Path, split, seed: int, hmc, hmc_params: dict, rows: dict) -> dict:
    """Save the HMC model and write ``results.json``; returns its contents."""
    import numpy as np

    from . import save

    X_train, _, X_test, _, X_ood = split
    hmc_step = hmc[-1]
    model_path = out_dir / "hmc_digits.pt"
    save(hmc_step, model_path)
    print(
        f"HMC model saved (weights only) to {model_path}: sklearn_bnn.load(path) reloads it; "
        "it takes inputs standardised with the scaler stored in results.json"
    )
    d = hmc_step.diagnostics_
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
        "models": {  # the scores, without the per-input predictions they were read from
            name: {k: v for k, v in row.items() if not k.startswith("_")}
            for name, row in rows.items()
        },
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
