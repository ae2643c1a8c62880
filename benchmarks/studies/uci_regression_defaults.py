"""Issue 33 item 1: where HMCRegressor's test log-likelihood goes on the UCI splits.

Fits ``HMCRegressor`` as ``benchmarks/scoreboard/uci.py`` does (the harness's standardisation, the
"hmc" settings of its ``MODELS``, plus ``--set`` overrides) and, beside the test RMSE and the
Gaussian test log-likelihood (LL) of the harness, splits the LL into its parts:

    LL = -0.5 log(2 pi) - mean(log s_i) - 0.5 mean(z_i^2),   z_i = (y_i - m_i) / s_i

``sd_term`` = -mean(log s_i) (the cost of the predictive spread), ``fit_term`` =
-0.5 mean(z_i^2) (the cost of the errors in units of the spread; -0.5 when calibrated). It also
reports the mean predictive sd beside the test residual sd, the noise sd ``noise_std_`` and the
weight (epistemic) part, the LL under the best single factor c on every s_i (``ll_best_scale``,
an oracle: how much a global miscalibration of the spread costs), and Gal's mixture LL (the
log of the mean over draws of N(y | f_s(x), 1/tau_s), the form his UCI code reports).

    python benchmarks/studies/uci_regression_defaults.py --dataset wine-quality-red --splits 0-9 \\
        --set n_chains=4 --label chains4 --out wine_chains4.json --n-jobs 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from joblib import Parallel, delayed
from scipy.special import logsumexp
from sklearn.base import clone

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scoreboard"))
from uci import (  # noqa: E402
    DATA_DIR,
    DIAGNOSTICS,
    MODELS,
    load_uci,
    parse_override,
    parse_splits,
    standardise,
)


def run_one(params: dict, name: str, split: int, threads: int, seed_is_split: bool = False):
    torch.set_num_threads(threads)
    if seed_is_split:  # the panel's seeding (benchmarks/scoreboard/panel.py: random_state=split)
        params = dict(params, random_state=split)
    X_train, y_train, X_test, y_test = load_uci(name, split, DATA_DIR)
    Xs_train, Xs_test, _, _ = standardise(X_train, X_test)
    ys_train, _, y_mean, y_scale = standardise(y_train, y_test)
    estimator = clone(MODELS["hmc"][0]()).set_params(**params)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        estimator.fit(Xs_train, ys_train)
        fit_time = time.perf_counter() - start
    m_s, s_s = estimator.predict(Xs_test, return_std=True)
    m, s = np.ravel(m_s) * y_scale + y_mean, np.ravel(s_s) * y_scale
    r = y_test - m
    z2 = (r / s) ** 2
    const = -0.5 * np.log(2 * np.pi)
    ll = const - np.mean(np.log(s)) - 0.5 * np.mean(z2)
    c2 = np.mean(z2)  # the best factor c on every s: c^2 = mean(z^2)
    ll_best = const - np.mean(np.log(s)) - 0.5 * np.log(c2) - 0.5
    # Gal's form: a mixture over draws, each with its own noise precision (y units).
    f = estimator.predict_samples(Xs_test) * y_scale + y_mean  # (S, n)
    tau = estimator.samples_.stats.get("noise_precision")
    if tau is not None:
        tau = tau.double().reshape(-1).numpy() / y_scale**2
    else:
        tau = np.full(len(f), 1.0 / (estimator.noise_std_ * y_scale) ** 2)
    logp = 0.5 * np.log(tau[:, None]) + const - 0.5 * tau[:, None] * (y_test[None] - f) ** 2
    ll_mix = float(np.mean(logsumexp(logp, axis=0) - np.log(len(f))))
    diag = estimator.diagnostics_
    record = {
        "dataset": name,
        "split": split,
        "rmse": float(np.sqrt(np.mean(r**2))),
        "log_likelihood": float(ll),
        "sd_term": float(-np.mean(np.log(s))),
        "fit_term": float(-0.5 * np.mean(z2)),
        "ll_best_scale": float(ll_best),
        "best_scale": float(np.sqrt(c2)),
        "ll_mixture": ll_mix,
        "pred_sd_mean": float(np.mean(s)),
        "residual_sd": float(np.std(r)),
        "noise_sd": float(estimator.noise_std_ * y_scale),
        "weight_sd_mean": float(
            np.mean(np.sqrt(np.maximum(s**2 - (estimator.noise_std_ * y_scale) ** 2, 0)))
        ),
        "coverage95": float(np.mean(np.abs(r) <= 1.96 * s)),
        "fit_time_s": fit_time,
        "acceptance_rate": float(estimator.acceptance_rate_),
        "n_divergent": int(diag["n_divergent"]),
        "warnings": sorted({str(w.message).split(":")[0][:80] for w in caught}),
    }
    for key in DIAGNOSTICS:
        record[key] = float(np.max(diag[key]) if key.startswith("rhat") else np.min(diag[key]))
    return record


KEYS = (
    "rmse", "log_likelihood", "ll_mixture", "ll_best_scale", "best_scale", "sd_term", "fit_term",
    "pred_sd_mean", "residual_sd", "noise_sd", "weight_sd_mean", "coverage95", "fit_time_s",
    "rhat_log_prob", "rhat_predictions_max", "ess_bulk_log_prob", "acceptance_rate",
)  # fmt: skip


def summary(records: list[dict]) -> dict:
    out = {"n_splits": len(records)}
    for key in KEYS:
        v = np.array([r[key] for r in records], dtype=np.float64)
        se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
        out[key] = (float(v.mean()), float(se))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="wine-quality-red")
    p.add_argument("--splits", type=parse_splits, default=list(range(10)))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PARAM=VALUE")
    p.add_argument("--label", default="defaults")
    p.add_argument("--seed-is-split", action="store_true", help="random_state=split, as the panel")
    p.add_argument("--n-jobs", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    params = dict(MODELS["hmc"][1])
    for text in args.overrides:
        _, key, value = parse_override("hmc." + text)
        params[key] = value
    start = time.perf_counter()
    records = []
    for r in Parallel(n_jobs=args.n_jobs, return_as="generator")(
        delayed(run_one)(params, args.dataset, split, args.threads, args.seed_is_split)
        for split in args.splits
    ):
        records.append(r)
        print(
            f"split {r['split']:2d}: LL {r['log_likelihood']:.3f} mix {r['ll_mixture']:.3f} "
            f"RMSE {r['rmse']:.3f} sd {r['pred_sd_mean']:.3f} res {r['residual_sd']:.3f} "
            f"noise {r['noise_sd']:.3f} c {r['best_scale']:.2f} R-hat {r['rhat_log_prob']:.2f}/"
            f"{r['rhat_predictions_max']:.2f} ESS {r['ess_bulk_log_prob']:.0f} "
            f"{r['fit_time_s']:.0f} s {r['warnings']}",
            flush=True,
        )
    wall = time.perf_counter() - start
    result = {
        "label": args.label,
        "dataset": args.dataset,
        "settings": {k: repr(v) for k, v in params.items()},
        "wall_time_s": wall,
        "summary": summary(records),
        "runs": records,
    }
    print(
        args.label,
        {k: f"{v[0]:.3f} +- {v[1]:.3f}" for k, v in result["summary"].items() if k != "n_splits"}
        | {"n": len(records)},
        f"wall {wall:.0f} s",
    )
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
