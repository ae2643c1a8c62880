"""plan-net against HELA's random forest on the HELA WFC3 spectra (seeds/003 Table 7.1).

One fixed split of the 20,001 shipped spectra: 15,000 train / 5,001 test (seed 0). For each
model: test R^2 per parameter and their mean, the test negative log-likelihood of the joint
5-D predictive (nats per spectrum, original units), and the coverage of the 68 % / 95 %
intervals (per parameter, averaged; and joint ellipsoids). Models:

- ``PlanNetRegressor`` with ``n_estimators`` networks ("plan-net ens"), and its first network
  alone ("plan-net x1");
- the diagonal (heteroscedastic) variant, one network;
- ``RandomForestRegressor`` with HELA's settings (1000 trees, max_features="sqrt",
  min_impurity_decrease=0.01 on targets scaled to 0-100). Its predictive Gaussian pools, over
  trees, the training targets in the leaf a spectrum reaches (law of total variance).

Sizes are flags, so the run fits the machine; the defaults are plan-net's (4 x 1024 units):

    python benchmarks/studies/plannet_hela.py --hidden 256 --max-iter 100 --n-trees 300

Published (80,000 training spectra): forest mean R^2 0.651, one plan-net 0.669, ensemble 0.673.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
from scipy import stats
from sklearn.ensemble import RandomForestRegressor
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split

from sklearn_bnn import PlanNetRegressor
from sklearn_bnn.datasets import load_exoplanet_spectra, load_wasp12b


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", type=int, default=1024, help="units per layer")
    p.add_argument("--layers", type=int, default=4, help="concrete-dropout hidden layers")
    p.add_argument("--n-estimators", type=int, default=5, help="networks in the ensemble")
    p.add_argument("--max-iter", type=int, default=200, help="maximum epochs per network")
    p.add_argument("--patience", type=int, default=20, help="n_iter_no_change")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--n-mc", type=int, default=30, help="MC dropout passes per network")
    p.add_argument("--n-trees", type=int, default=1000, help="random-forest trees (0: skip)")
    p.add_argument("--no-diagonal", action="store_true", help="skip the diagonal variant")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1, help="torch threads and forest n_jobs")
    p.add_argument("--verbose", type=int, default=0)
    return p.parse_args()


def gaussian_scores(y, mean, cov):
    """NLL (nats per point), marginal and joint coverage of the 68 % / 95 % regions."""
    d = y.shape[1]
    r = y - mean
    chol = np.linalg.cholesky(cov)
    white = np.linalg.solve(chol, r[..., None])[..., 0]
    maha = (white**2).sum(1)
    logdet = 2 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(1)
    nll = 0.5 * (maha + logdet + d * np.log(2 * np.pi)).mean()
    z = np.abs(r) / np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
    out = {"nll": nll}
    for level in (0.68, 0.95):
        out[f"cov{int(level * 100)}"] = (z < stats.norm.ppf(0.5 + level / 2)).mean()
        out[f"joint{int(level * 100)}"] = (maha < stats.chi2.ppf(level, d)).mean()
    return out


def member(ensemble: PlanNetRegressor, m: int) -> PlanNetRegressor:
    """Network ``m`` of a fitted ensemble as a one-network estimator."""
    one = copy.deepcopy(ensemble)
    one.n_estimators = 1
    one.estimators_ = one.estimators_[m : m + 1]
    one.mc_seeds_ = one.mc_seeds_[m : m + 1]
    return one


class ForestGaussian:
    """HELA's forest on targets scaled to 0-100, with a Gaussian built from its leaves."""

    def __init__(self, n_trees, n_jobs, random_state=0):
        self.forest = RandomForestRegressor(
            n_estimators=n_trees,
            max_features="sqrt",
            min_impurity_decrease=0.01,
            n_jobs=n_jobs,
            random_state=random_state,
        )

    def fit(self, X, y):
        self.low, self.span = y.min(0), np.ptp(y, axis=0)
        scaled = 100 * (y - self.low) / self.span
        self.forest.fit(X, scaled)
        # per tree and leaf: count, sum and sum of outer products of the training targets
        leaves = self.forest.apply(X)
        self.leaf_stats = []
        outer = scaled[:, :, None] * scaled[:, None, :]
        for t in range(leaves.shape[1]):
            ids, inverse = np.unique(leaves[:, t], return_inverse=True)
            count = np.bincount(inverse).astype(float)
            first = np.stack([np.bincount(inverse, scaled[:, j]) for j in range(y.shape[1])], 1)
            second = np.stack(
                [
                    np.bincount(inverse, outer[:, i, j])
                    for i in range(y.shape[1])
                    for j in range(y.shape[1])
                ],
                1,
            ).reshape(len(ids), y.shape[1], y.shape[1])
            self.leaf_stats.append((ids, first / count[:, None], second / count[:, None, None]))
        return self

    def predict(self, X):
        return self.forest.predict(X) / 100 * self.span + self.low

    def predict_gaussian(self, X):
        """Mean and covariance of all training targets in the reached leaves, trees weighted
        equally (the spread of leaf means plus the mean within-leaf covariance)."""
        leaves = self.forest.apply(X)
        d = len(self.span)
        m1, m2 = np.zeros((len(X), d)), np.zeros((len(X), d, d))
        for t, (ids, first, second) in enumerate(self.leaf_stats):
            k = np.searchsorted(ids, leaves[:, t])
            m1 += first[k]
            m2 += second[k]
        m1 /= len(self.leaf_stats)
        m2 /= len(self.leaf_stats)
        cov = m2 - m1[:, :, None] * m1[:, None, :]
        cov += 1e-6 * np.eye(d)  # leaves holding a single value give a zero variance
        scale = self.span / 100
        return m1 * scale + self.low, cov * scale[:, None] * scale[None, :]


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    data = load_exoplanet_spectra()
    X, y = data.data.astype(np.float64), data.target.astype(np.float64)
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, train_size=15000, test_size=5001, random_state=0
    )
    wasp = load_wasp12b().data
    hidden = (args.hidden,) * args.layers
    print(
        f"train {len(X_tr)}, test {len(X_te)}; plan-net {args.layers} x {args.hidden} units, "
        f"batch {args.batch_size}, lr {args.lr}, max_iter {args.max_iter}, patience "
        f"{args.patience}, T = {args.n_mc} passes; forest {args.n_trees} trees; "
        f"torch threads {torch.get_num_threads()}"
    )

    rows, retrievals = {}, {}

    def evaluate(name, model, seconds_per_net, mean=None, cov=None):
        if mean is None:
            mean, cov = model.predict(X_te, return_cov=True)
        scores = gaussian_scores(y_te, mean, cov)
        scores["r2"] = r2_score(y_te, mean, multioutput="raw_values")
        scores["time"] = seconds_per_net
        rows[name] = scores

    common = dict(
        hidden_layer_sizes=hidden,
        n_predict_draws=args.n_mc,
        batch_size=args.batch_size,
        learning_rate_init=args.lr,
        max_iter=args.max_iter,
        n_iter_no_change=args.patience,
        device=args.device,
        verbose=args.verbose,
        random_state=0,
    )
    start = time.perf_counter()
    ens = PlanNetRegressor(n_estimators=args.n_estimators, **common).fit(X_tr, y_tr)
    per_net = (time.perf_counter() - start) / args.n_estimators
    print(
        f"ensemble: epochs {ens.n_iter_.tolist()}, learned drop rates of network 1 "
        f"{np.round(ens.dropout_rates_[0], 4).tolist()}"
    )
    evaluate("plan-net x1", member(ens, 0), per_net)
    evaluate(f"plan-net ens{args.n_estimators}", ens, per_net)
    retrievals[f"plan-net ens{args.n_estimators}"] = ens.predict(wasp, return_std=True)

    if not args.no_diagonal:
        start = time.perf_counter()
        diag = PlanNetRegressor(n_estimators=1, covariance="diagonal", **common).fit(X_tr, y_tr)
        evaluate("diagonal x1", diag, time.perf_counter() - start)
        retrievals["diagonal x1"] = diag.predict(wasp, return_std=True)

    if args.n_trees:
        start = time.perf_counter()
        forest = ForestGaussian(args.n_trees, args.threads).fit(X_tr, y_tr)
        seconds = time.perf_counter() - start
        mean, cov = forest.predict_gaussian(X_te)
        evaluate(f"forest {args.n_trees}", forest, seconds, mean, cov)
        rows[f"forest {args.n_trees}"]["r2"] = r2_score(
            y_te, forest.predict(X_te), multioutput="raw_values"
        )
        m, c = forest.predict_gaussian(wasp)
        retrievals[f"forest {args.n_trees}"] = (m, np.sqrt(np.diagonal(c, axis1=1, axis2=2)))

    names = data.target_names
    header = (
        f"{'model':<16}" + "".join(f"{n:>12}" for n in names) + f"{'mean R2':>9}"
        f"{'NLL':>8}{'cov68':>7}{'cov95':>7}{'jnt68':>7}{'jnt95':>7}{'s/fit':>8}"
    )
    print(
        "\nTest R^2 per parameter; NLL of the 5-D predictive (nats/spectrum); coverage of the "
        "marginal intervals (mean over parameters) and of the joint ellipsoids; seconds per "
        "fitted network (forest: whole fit)"
    )
    print(header)
    print("-" * len(header))
    for name, s in rows.items():
        print(
            f"{name:<16}" + "".join(f"{v:>12.3f}" for v in s["r2"]) + f"{s['r2'].mean():>9.3f}"
            f"{s['nll']:>8.2f}{s['cov68']:>7.3f}{s['cov95']:>7.3f}{s['joint68']:>7.3f}"
            f"{s['joint95']:>7.3f}{s['time']:>8.1f}"
        )
    print("\nWASP-12b, mean +- std")
    for name, (m, s) in retrievals.items():
        print(
            f"{name:<16}"
            + "".join(f"{mi:>9.2f}+-{si:<6.2f}" for mi, si in zip(m[0], s[0], strict=True))
        )
    published = load_wasp12b().published["ensemble of 5 plan-nets (Cobb 2019)"]
    print(
        f"{'published ens5':<16}"
        + "".join(f"{published[n][0]:>9.2f}+-{published[n][1]:<6.2f}" for n in names)
    )


if __name__ == "__main__":
    main()
