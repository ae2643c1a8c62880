"""Choosing the HMC defaults by measurement: UCI regression (four data sets) and digits.

Configurations compared on the standard UCI splits (Hernandez-Lobato & Adams 2015, as shipped in
../shared/data/uci; X and y standardised with the training split's statistics, RMSE and the
Gaussian test log-likelihood per point reported in the original units of y):

- ``before``: the settings of issue 18's trial, noise precision fixed at 25 in standardised
  units (given here in y units: 25 / Var(y_train)), 50 leapfrog steps, unit mass;
- ``learned``: the same sampler, noise precision learned (Gamma prior, Gibbs step);
- ``traj``: learned noise, a jittered integration time (``trajectory_length``) over an adapted
  diagonal mass matrix (settling windows, shrinkage toward the prior variance).

Then the digits demo's classifier (``python -m sklearn_bnn demo``: 100 hidden units, digits
70/30) before and after, as bulk ESS of the log density and of the predictions per 1,000
gradient evaluations.

The machine of the recorded run had 2 cores shared with other jobs: splits and draws are
reduced (see ``--help``) and the figures are indicative, not the 20-split protocol
(``benchmarks/scoreboard/uci.py`` runs that).

Usage: ``python benchmarks/studies/hmc_defaults_study.py --splits 2 --n-draws 300 --n-warmup 300``
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from sklearn_bnn import HMCClassifier, HMCRegressor
from sklearn_bnn.samplers import HMC

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split, timed_fit  # noqa: E402

DATA = Path(os.environ.get("UCI_DATA", Path(__file__).resolve().parents[3] / "shared/data/uci"))
DATASETS = ("concrete", "energy", "yacht", "wine-quality-red")
PUBLISHED_LL = {"concrete": -2.93, "energy": -1.21, "yacht": -1.25, "wine-quality-red": -0.93}
PUBLISHED_RMSE = {"concrete": 4.82, "energy": 0.54, "yacht": 0.67, "wine-quality-red": 0.62}


def configs(trajectory_length: float) -> dict:
    return {
        "before": lambda var_y: dict(noise_precision=25.0 / var_y, sampler=HMC(n_steps=50)),
        "learned": lambda var_y: dict(sampler=HMC(n_steps=50)),
        "traj": lambda var_y: dict(
            sampler=HMC(trajectory_length=trajectory_length, adapt_mass=True)
        ),
    }


def load_split(name: str, k: int):
    folder = DATA / name
    data = np.loadtxt(folder / "data.txt")
    features = np.loadtxt(folder / "index_features.txt").astype(int)
    target = int(np.loadtxt(folder / "index_target.txt"))
    train = np.loadtxt(folder / f"index_train_{k}.txt").astype(int)
    test = np.loadtxt(folder / f"index_test_{k}.txt").astype(int)
    X, y = data[:, features], data[:, target]
    mu, sd = X[train].mean(0), X[train].std(0)
    sd[sd == 0] = 1.0
    return (X[train] - mu) / sd, y[train], (X[test] - mu) / sd, y[test]


def uci(args) -> list[dict]:
    rows = []
    for name in args.datasets:
        for k in range(args.splits):
            X, y, Xt, yt = load_split(name, k)
            for label, make in configs(args.trajectory_length).items():
                if label not in args.configs:
                    continue
                reg = HMCRegressor(
                    hidden_layer_sizes=(50,),
                    normalize_y=True,
                    n_draws=args.n_draws,
                    n_warmup=args.n_warmup,
                    random_state=k,
                    **make(y.var()),
                )
                seconds = timed_fit(reg, X, y)
                mean, std = reg.predict(Xt, return_std=True)
                ll = -0.5 * np.log(2 * np.pi * std**2) - 0.5 * ((yt - mean) / std) ** 2
                d = reg.diagnostics_
                rows.append(
                    dict(
                        data=name,
                        split=k,
                        config=label,
                        rmse=float(np.sqrt(np.mean((yt - mean) ** 2))),
                        ll=float(ll.mean()),
                        noise_std=float(reg.noise_std_),
                        rhat_pred=d["rhat_predictions_max"],
                        ess_lp=d["ess_bulk_log_prob"],
                        n_grad=d["n_grad_evals"],
                        seconds=seconds,
                    )
                )
                print(_fmt(rows[-1]), flush=True)
    return rows


def _fmt(r: dict) -> str:
    return (
        f"{r['data']:<17}{r['split']:>3} {r['config']:<8}{r['rmse']:>8.3f}{r['ll']:>8.3f}"
        f"{r['noise_std']:>8.3f}{r['rhat_pred']:>7.2f}{r['ess_lp']:>7.1f}{r['n_grad']:>9.0f}"
        f"{r['seconds']:>8.1f}"
    )


def summarise(rows: list[dict]) -> None:
    print(
        "\n| data set | config | RMSE | test LL | R-hat pred < 1.1 | bulk ESS lp | fit time "
        "(x before) | published MC dropout RMSE / LL |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in dict.fromkeys(r["data"] for r in rows):
        base = np.mean(
            [r["seconds"] for r in rows if r["data"] == name and r["config"] == "before"]
            or [np.nan]
        )
        for label in dict.fromkeys(r["config"] for r in rows):
            sel = [r for r in rows if r["data"] == name and r["config"] == label]
            if not sel:
                continue
            rm, ll = (np.array([r[key] for r in sel]) for key in ("rmse", "ll"))
            se = lambda v: v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else np.nan  # noqa: E731
            ok = np.mean([r["rhat_pred"] < 1.1 for r in sel])
            ess = np.mean([r["ess_lp"] for r in sel])
            t = np.mean([r["seconds"] for r in sel]) / base
            print(
                f"| {name} | {label} | {rm.mean():.3f} +- {se(rm):.3f} | {ll.mean():.3f} +- "
                f"{se(ll):.3f} | {ok:.0%} | {ess:.0f} | {t:.2f} | {PUBLISHED_RMSE[name]} / "
                f"{PUBLISHED_LL[name]} |"
            )


def digits(args) -> None:
    from sklearn_bnn.diagnostics import ess_bulk
    from sklearn_bnn.metrics import negative_log_likelihood

    X, y, Xt, yt, _ = digits_split()
    print(
        "\n| digits | bulk ESS lp / 1k grad | min bulk ESS pred / 1k grad | test NLL | "
        "accuracy | gradients | fit (x before) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = None
    for label, kw in (
        ("before", dict(sampler=HMC(n_steps=50))),
        ("traj", dict(sampler=HMC(trajectory_length=args.trajectory_length, adapt_mass=True))),
    ):
        if label not in args.configs:
            continue
        clf = HMCClassifier(
            hidden_layer_sizes=(100,), n_draws=args.n_draws, n_warmup=args.n_warmup,
            random_state=0, **kw,
        )  # fmt: skip
        seconds = timed_fit(clf, X, y)
        base = base or (seconds if label == "before" else np.nan)
        d = clf.diagnostics_
        proba = clf.predict_proba(Xt)
        samples = clf.predict_samples(Xt[:64])  # (S, 64, K): probability of the true class
        p_true = samples[:, np.arange(64), yt[:64]].reshape(clf.samples_.n_chains, -1, 64)
        ess_pred = min(ess_bulk(p_true[..., j]) for j in range(64))
        k = d["n_grad_evals"] / 1000
        print(
            f"| {label} | {d['ess_bulk_log_prob'] / k:.2f} | {ess_pred / k:.2f} | "
            f"{negative_log_likelihood(yt, proba):.4f} | "
            f"{np.mean(clf.classes_[proba.argmax(1)] == yt):.4f} | {d['n_grad_evals']:.0f} | "
            f"{seconds / base:.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--configs", nargs="+", default=["before", "learned", "traj"])
    parser.add_argument("--splits", type=int, default=2)
    parser.add_argument("--n-draws", type=int, default=300)
    parser.add_argument("--n-warmup", type=int, default=300)
    parser.add_argument("--trajectory-length", type=float, default=1.0)
    parser.add_argument("--skip-uci", action="store_true")
    parser.add_argument("--skip-digits", action="store_true")
    args = parser.parse_args()
    if not args.skip_uci:
        summarise(uci(args))
    if not args.skip_digits:
        digits(args)


if __name__ == "__main__":
    main()
