"""Why a default HMC fit mixes or not: the Hessian spectrum of its posterior at a draw.

Fits ``HMCClassifier()`` / ``HMCRegressor()`` at their defaults (in float64) on one of the
panel's data sets, then takes chain 0's last draw and the noise precision sampled with it, and
forms the Hessian of -log p(theta | D) there by central differences of the target's gradient
(one batched gradient per 256 columns). Prints one JSON record: the largest, median and
smallest positive eigenvalues, the count of negative ones, the adapted step beside the stable
step 2 / sqrt(lambda_max), the leapfrog steps that cross a median-curvature direction once
(sqrt(lambda_max / lambda_median)) and the widest (sqrt(lambda_max / lambda_min)), one
trajectory's length over the median width, and the fit's within-chain R-hat and ESS of the
monitored predictions. About 30 s (gap set) to 4 minutes (wine-quality-red) on one core.

    python benchmarks/samplers/hessian_spectrum.py yacht --seed 0
    python benchmarks/samplers/hessian_spectrum.py gap1d --prior-precision fan_in
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
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scoreboard"))
from panel import CLASSIFICATION_SETS, REGRESSION_SETS, load  # noqa: E402

import sklearn_bnn.estimators._base as base  # noqa: E402
from sklearn_bnn import HMCClassifier, HMCRegressor  # noqa: E402
from sklearn_bnn.samplers import HMC  # noqa: E402


def fit_and_capture_target(name: str, seed: int, prior_precision):
    """A default fit in float64 and the target its chains sampled."""
    task, X, y, *_ = load(name, seed)
    X = StandardScaler().fit_transform(X)
    captured = {}
    run_chains = base.BaseSamplingEstimator._run_chains

    def capture(self, target, *args, **kwargs):
        captured["target"] = target
        return run_chains(self, target, *args, **kwargs)

    base.BaseSamplingEstimator._run_chains = capture
    try:
        if task == "regression":
            y = (y - y.mean()) / y.std()
            est = HMCRegressor(random_state=seed, dtype="float64", prior_precision=prior_precision)
        else:
            est = HMCClassifier(
                random_state=seed, dtype="float64", prior_precision=prior_precision,
                calibration=None,
            )
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X, y)
        fit_s = time.perf_counter() - start
    finally:
        base.BaseSamplingEstimator._run_chains = run_chains
    return est, captured["target"], fit_s, bool(caught), len(y)


def hessian(target, theta: torch.Tensor, h: float = 1e-5, block: int = 256) -> torch.Tensor:
    """-d^2 log p / d theta^2 at ``theta`` (D,), by central differences of the gradient."""
    dim = theta.shape[0]
    columns = []
    for first in range(0, dim, block):
        k = min(block, dim - first)
        shift = torch.zeros(block, dim, dtype=theta.dtype)
        shift[torch.arange(k), first + torch.arange(k)] = h
        up = target.value_and_grad(theta + shift)[1]
        down = target.value_and_grad(theta - shift)[1]
        columns.append(-(up - down)[:k] / (2 * h))
    H = torch.cat(columns)
    return 0.5 * (H + H.T)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", choices=CLASSIFICATION_SETS + REGRESSION_SETS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prior-precision", default="auto")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    est, target, fit_s, warned, n = fit_and_capture_target(
        args.dataset, args.seed, args.prior_precision
    )
    samples = est.samples_
    theta = samples.draws[0, -1].double()
    if "noise_precision" in samples.stats:
        tau = samples.stats["noise_precision"][0, -1].double().reshape(1).expand(256).clone()
        target = target.with_noise_precision(tau)
    eigenvalues = torch.linalg.eigvalsh(hessian(target, theta)).numpy()
    positive = eigenvalues[eigenvalues > 0]
    step = float(np.mean(est.diagnostics_["step_size"]))
    n_steps = HMC().n_steps  # the estimators' default sampler
    record = dict(
        dataset=args.dataset, seed=args.seed, prior_precision=args.prior_precision,
        parameters=int(theta.shape[0]), rows=n, fit_s=round(fit_s, 1), warned=warned,
        lambda_max=float(eigenvalues[-1]), lambda_median=float(np.median(positive)),
        lambda_min_positive=float(positive[0]), n_negative=int((eigenvalues < 0).sum()),
        step=step, stable_step=2 / float(np.sqrt(eigenvalues[-1])),
        steps_to_cross_median=float(np.sqrt(eigenvalues[-1] / np.median(positive))),
        steps_to_cross_widest=float(np.sqrt(eigenvalues[-1] / positive[0])),
        trajectory_over_median_width=step * n_steps * float(np.sqrt(np.median(positive))),
        rhat_within_predictions=float(est.diagnostics_["rhat_within_predictions_max"]),
        ess_predictions=float(est.diagnostics_["ess_bulk_predictions_min"]),
    )
    print(json.dumps(record))


if __name__ == "__main__":
    main()
