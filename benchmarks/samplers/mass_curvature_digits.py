"""Issue 33 item 3: can a mass matrix from the curvature raise digits' ESS per gradient?

The default ``HMCClassifier`` (MLP [64, 100, 10], N(0, 1) prior, one chain, MAP start, 50
leapfrog steps, identity mass) on all ten digit classes (stratified 70/30 split,
standardised). Two parts:

``--spectrum``: at a MAP found by the package's :class:`MAPStart`, the generalised Gauss-Newton
matrix (GGN) of the log posterior, H = sum_i J_i^T Lambda_i J_i + tau I (J_i: row i's Jacobian
of the logits in the weights, autograd; Lambda_i = diag(p_i) - p_i p_i^T; Martens 2020, §8), is
formed whole (D = 7,510) and its eigenvalues are printed for three mass matrices: the identity
(the default), the diagonal of H (a "curvature" diagonal mass) and H with its top k
eigen-directions removed (what a low-rank plus diagonal mass could reach at best). For a
Gaussian with these precisions, sqrt(lambda_max / lambda_min) is how many times more steps the
widest direction needs than the narrowest allows, and the leapfrog step at which the mean
energy error reaches 0.1 is about (32 x 0.1 / sum_j lambda_j^2)^(1/4) (the mean error over a
trajectory of lambda^2 eps^4 / 32 per direction), to be compared with the step the sampler
adapts.

``--fits``: ``HMCClassifier(calibration=None, random_state=s)`` with the identity mass against
``sampler=HMC(metric=DiagonalMetric(1 / diag H))``, diag H taken at a MAP of the same data;
the bulk ESS of the log density per 1,000 gradients of the whole fit. One torch thread.

    python benchmarks/samplers/mass_curvature_digits.py --spectrum
    python benchmarks/samplers/mass_curvature_digits.py --fits --seeds 0 1 2
    python benchmarks/samplers/mass_curvature_digits.py --precisions  # under HierarchicalPrior

``--precisions``: seed 0, ``prior_precision=HierarchicalPrior()``, the identity and the diagonal
GGN mass with ReLU and the identity mass with tanh; the ESS of each tensor's precision per
1,000 draws and its R-hat.
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
from torch.func import functional_call, jacrev, vmap

from sklearn_bnn import HMCClassifier
from sklearn_bnn.likelihoods import Categorical
from sklearn_bnn.metrics import negative_log_likelihood
from sklearn_bnn.nets import MLP
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import HMC, DiagonalMetric
from sklearn_bnn.samplers.starts import MAPStart
from sklearn_bnn.targets import FunctionalNetwork, Target

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split  # noqa: E402


def digits():
    return digits_split()[:4]


def gauss_newton_at_map(X, y, seed=0):
    """The GGN of the log posterior (D, D), float64, at a MAP of the default network."""
    torch.manual_seed(seed)
    net = FunctionalNetwork(MLP(X.shape[1], (100,), 10))
    Xt = torch.tensor(X, dtype=torch.float32)
    target = Target(net, Xt, torch.tensor(y), Categorical(), GaussianPrior(1.0))
    position, _ = MAPStart().find(target, net.initial_position()[None].clone(), desc="map",
                                  verbose=False)  # fmt: skip
    theta = position[0].double()
    module = net.module.double()
    shapes = [p.shape for p in module.parameters()]

    def logits(th, x):
        params, i = {}, 0
        for name, size, shape in zip(net.names, net.sizes, shapes, strict=True):
            params[name] = th[i : i + size].view(shape)
            i += size
        return functional_call(module, params, (x[None],))[0]

    Xd = Xt.double()
    J = vmap(jacrev(logits), in_dims=(None, 0))(theta, Xd)  # (n, K, D)
    p = torch.softmax(vmap(lambda x: logits(theta, x))(Xd), 1)
    root = p.sqrt()  # Lambda = L L^T, L = diag(sqrt p) - p sqrt(p)^T
    factor = torch.diag_embed(root) - p[:, :, None] * root[:, None, :]
    G = torch.einsum("nkd,nkr->dnr", J, factor).reshape(J.shape[2], -1)
    del J
    H = G @ G.T
    H += torch.eye(H.shape[0], dtype=H.dtype)  # the prior's precision, 1
    return H


def figures(eigenvalues: torch.Tensor, name: str) -> dict:
    ev = eigenvalues.flip(0)  # descending
    out = {"mass": name, "lambda_max": float(ev[0]), "lambda_min": float(ev[-1])}
    for k in (0, 10, 50, 200):
        rest = ev[k:]
        out[f"top{k}_removed"] = {
            "sqrt_ratio": float((rest[0] / ev[-1]).sqrt()),
            "gaussian_step": float((3.2 / (rest**2).sum()) ** 0.25 * ev[-1].sqrt()),
        }
    out["top_eigenvalues"] = [round(float(v), 2) for v in ev[:20]]
    return out


def spectrum():
    X, y, _, _ = digits()
    start = time.perf_counter()
    H = gauss_newton_at_map(X, y)
    identity = torch.linalg.eigvalsh(H)
    d = torch.diagonal(H).rsqrt()
    diagonal = torch.linalg.eigvalsh(d[:, None] * H * d[None, :])
    for result in (figures(identity, "identity"), figures(diagonal, "diag(H)")):
        print(json.dumps(result))
    print(f"({time.perf_counter() - start:.0f} s; gaussian_step is in units of the widest "
          "direction's sd, so it compares across masses)")  # fmt: skip


def fits(seeds):
    X, y, X_te, y_te = digits()
    H = gauss_newton_at_map(X, y)
    inv_mass = (1.0 / torch.diagonal(H)).float()
    del H
    masses = {"identity": None, "diag GGN": DiagonalMetric(inv_mass)}
    for seed in seeds:
        for name, metric in masses.items():
            sampler = "hmc" if metric is None else HMC(metric=metric)
            clf = HMCClassifier(random_state=seed, calibration=None, sampler=sampler)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf.fit(X, y)
            d = clf.diagnostics_
            ess, n_grad = float(d["ess_bulk_log_prob"]), int(d["n_grad_evals"])
            record = {
                "seed": seed,
                "mass": name,
                "ess_log_prob": round(ess, 1),
                "per_1k_gradients": round(1000 * ess / n_grad, 2),
                "step_size": float(np.mean(d["step_size"])),
                "rhat_predictions_max": round(float(d["rhat_predictions_max"]), 3),
                "acceptance": float(clf.acceptance_rate_),
                "test_nll": round(float(negative_log_likelihood(y_te, clf.predict_proba(X_te))), 4),
                "fit_s": round(time.perf_counter() - start, 1),
            }
            print(json.dumps(record), flush=True)


def precisions():
    """The same fits under ``prior_precision=HierarchicalPrior()`` (the per-tensor precisions
    drawn by Gibbs steps): each method of item 3 with the ESS of every precision per 1,000
    draws (one chain of 500), beside the log density's ESS per 1,000 gradients."""
    from sklearn_bnn.priors import HierarchicalPrior

    X, y, X_te, y_te = digits()
    H = gauss_newton_at_map(X, y)
    inv_mass = (1.0 / torch.diagonal(H)).float()
    del H
    runs = {
        "relu, identity mass": ("relu", "hmc"),
        "relu, diag GGN mass": ("relu", HMC(metric=DiagonalMetric(inv_mass))),
        "tanh, identity mass": ("tanh", "hmc"),
    }
    for name, (activation, sampler) in runs.items():
        clf = HMCClassifier(random_state=0, calibration=None, activation=activation,
                            sampler=sampler, prior_precision=HierarchicalPrior())  # fmt: skip
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf.fit(X, y)
        d = clf.diagnostics_
        per_1k_draws = 1000 / (clf.n_chains * clf.n_draws)
        ess = float(d["ess_bulk_log_prob"])
        record = {
            "method": name,
            "per_1k_gradients": round(1000 * ess / int(d["n_grad_evals"]), 2),
            "precisions_ess_per_1k_draws": {
                k: round(float(v) * per_1k_draws, 1) for k, v in d["ess_bulk_precisions"].items()
            },
            "precisions_rhat": {k: round(float(v), 2) for k, v in d["rhat_precisions"].items()},
            "test_nll": round(float(negative_log_likelihood(y_te, clf.predict_proba(X_te))), 4),
            "fit_s": round(time.perf_counter() - start, 1),
        }
        print(json.dumps(record), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spectrum", action="store_true")
    parser.add_argument("--fits", action="store_true")
    parser.add_argument("--precisions", action="store_true")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.spectrum:
        spectrum()
    if args.fits:
        fits(args.seeds)
    if args.precisions:
        precisions()


if __name__ == "__main__":
    main()
