"""Why bridge sampling fails on a network's boxes: proposal/posterior overlap (seeds/001 §3.2).

One box of the moons network of ``bridged_moons.py`` ([2, 5, 5, 2] tanh, 57 parameters; the box
is one weight >= 0) is sampled alone with constrained HMC as a bridged box is (L = 20, step jitter
0.2, dual averaging in warmup). On its draws, for the first ``n`` of them (several n), the
bridge-sampling terms of eq. 3.6 are formed as BridgedHMC forms them (Gaussian proposal fitted to
the first half, posterior draws the second half) and reported:

- ll1 = log q - log g on the posterior draws and ll2 on the proposal draws (mean, sd, min/max),
  and how many proposal draws reach the smallest ll1: the two samples' overlap;
- the overlap O of :func:`sklearn_bnn.samplers.hamiltonian.bridge_sampling.bridge_log_masses`;
- the plain iteration of eq. 3.6 (its iterates 1-4 and 999-1000: a swing with period two when
  the samples do not overlap) and the fixed point found by bisection;
- ll1 with an interleaved split (even draws fit, odd draws evaluate), which removes the chain's
  drift between halves but not the lack of overlap;
- log q at the mean of the draws and along the straight segment between an early and a late
  draw: how far from Gaussian (convex) the box's posterior is;
- for comparison, the same terms for independent draws from a Gaussian of the same dimension
  and covariance as the box's draws (unbounded): what the overlap would be if the box's
  posterior were Gaussian.

Run: ``python benchmarks/samplers/bridged_overlap.py [--n-draws 2500] [--n-warmup 300]``.
"""

from __future__ import annotations

import argparse
import math
import warnings

import numpy as np
import torch
from scipy.special import logsumexp
from sklearn.datasets import make_moons

from sklearn_bnn import HMCClassifier
from sklearn_bnn.samplers import BridgedHMC, ConstrainedHMC, sample
from sklearn_bnn.samplers.hamiltonian.bridge_sampling import (
    _log_density,
    bridge_log_masses,
    bridge_terms,
)
from sklearn_bnn.samplers.hamiltonian.constrained import to_box


class _KeepTarget(BridgedHMC):
    """BridgedHMC that keeps the target and starting positions the estimator hands it."""

    def run(self, target, positions, driver, **kwargs):
        self.target_, self.positions_ = target, positions
        return super().run(target, positions, driver, **kwargs)


class _Gaussian:
    """Unnormalised N(mean, cov) as a target (log density and gradient)."""

    dtype, device = torch.float64, torch.device("cpu")

    def __init__(self, mean, cov):
        self.mean, self.precision, self.dim = mean, torch.linalg.inv(cov), len(mean)

    def value_and_grad(self, theta):
        g = -(theta - self.mean) @ self.precision
        return 0.5 * (g * (theta - self.mean)).sum(1), g


def plain_iterates(ll1, ll2, n_iter=1000):
    """The undamped iteration of eq. 3.6 on log r (shift l* = mean ll1), every iterate."""
    shift = ll1.mean()
    b, a = ll1 - shift, ll2 - shift
    n1, n2 = len(b), len(a)
    ls1, ls2 = math.log(n1 / (n1 + n2)), math.log(n2 / (n1 + n2))
    lr, out = 0.0, []
    for _ in range(n_iter):
        num = logsumexp(a - np.logaddexp(ls1 + a, ls2 + lr)) - math.log(n2)
        den = logsumexp(-np.logaddexp(ls1 + b, ls2 + lr)) - math.log(n1)
        lr = float(num - den)
        out.append(lr + shift)
    return np.array(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-draws", type=int, default=2500)
    parser.add_argument("--n-warmup", type=int, default=300)
    parser.add_argument("--coord", type=int, default=9)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    X, y = make_moons(1000, noise=0.2, random_state=0)
    X = X - X[:500].mean(0)
    keep = _KeepTarget(split_coords=[args.coord])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        HMCClassifier(
            hidden_layer_sizes=(5, 5),
            activation="tanh",
            sampler=keep,
            n_draws=4,
            n_warmup=2,
            random_state=args.seed,
        ).fit(X[:500], y[:500])
    target = keep.target_
    lower = np.full(target.dim, -np.inf)
    lower[args.coord] = 0.0
    upper = np.full(target.dim, np.inf)
    box = ConstrainedHMC(
        lower=lower, upper=upper, n_steps=20, step_jitter=0.2, adapt_mass=True
    )
    start = keep.positions_[:1].to(target.dtype)
    start = to_box(
        start, torch.as_tensor(lower, dtype=start.dtype), torch.as_tensor(upper, dtype=start.dtype)
    )[0]
    res = sample(
        target,
        start,
        box,
        n_draws=args.n_draws,
        n_warmup=args.n_warmup,
        n_chains=1,
        random_state=args.seed,
        init_jitter=0.0,
    )
    draws = res.draws[0].double()
    log_q = res.log_prob[0].double()
    print(
        f"moons box w_{args.coord} >= 0, D = {target.dim}, {args.n_draws} draws after "
        f"{args.n_warmup} warmup; log q of the draws {log_q.mean():.1f} +- {log_q.std():.1f}"
    )
    gen = torch.Generator().manual_seed(args.seed)
    for n in sorted({args.n_draws // 8, args.n_draws // 2, args.n_draws}):
        ll1, ll2, inside = bridge_terms(target, draws[:n], log_q[:n], lower, upper, gen)
        out = bridge_log_masses([(ll1, ll2)])
        fin = ll2[np.isfinite(ll2)]
        its = plain_iterates(ll1, ll2)
        order = torch.cat([torch.arange(0, n, 2), torch.arange(1, n, 2)])
        il1, _, _ = bridge_terms(target, draws[:n][order], log_q[:n][order], lower, upper, gen)
        print(
            f"n = {n:5d}: ll1 {ll1.mean():7.1f} +- {ll1.std():5.1f} (min {ll1.min():6.1f}); "
            f"ll2 {fin.mean():7.1f} +- {fin.std():5.1f} (max {fin.max():6.1f}), "
            f"{inside:.2f} inside; proposal draws above min ll1: {(fin > ll1.min()).sum()}\n"
            f"           overlap O {out['overlap'][0]:.1e}; plain iterates of log c: "
            f"{np.round(its[:4], 1)} ... {np.round(its[-2:], 1)}; fixed point "
            f"{out['log_mass'][0]:.1f} (converged {bool(out['converged'][0])}); "
            f"interleaved split: ll1 {il1.mean():.1f} +- {il1.std():.1f}",
            flush=True,
        )
    mean = draws.mean(0, keepdim=True)
    a, b = draws[len(draws) // 10], draws[9 * len(draws) // 10]
    t = torch.linspace(0, 1, 11, dtype=torch.float64)[:, None]
    segment = _log_density(target, a + t * (b - a)).numpy()
    print(
        f"log q at the mean of the draws: {_log_density(target, mean).item():.1f}; along the "
        f"segment from draw {len(draws) // 10} to draw {9 * len(draws) // 10}: "
        f"{np.round(segment, 0)}"
    )

    cov = torch.cov(draws.T) + 1e-9 * torch.eye(target.dim, dtype=torch.float64)
    gauss = _Gaussian(draws.mean(0), cov)
    iid = (
        gauss.mean
        + torch.randn((args.n_draws, target.dim), generator=gen, dtype=torch.float64)
        @ torch.linalg.cholesky(cov).T
    )
    free = np.full(target.dim, np.inf)
    for n in sorted({args.n_draws // 8, args.n_draws // 2, args.n_draws}):
        ll1, ll2, _ = bridge_terms(
            gauss, iid[:n], gauss.value_and_grad(iid[:n])[0], -free, free, gen
        )
        out = bridge_log_masses([(ll1, ll2)])
        print(
            f"Gaussian, same covariance, n = {n:5d}: ll1 {ll1.mean():.1f} +- {ll1.std():.1f}, "
            f"ll2 {ll2.mean():.1f} +- {ll2.std():.1f}, overlap O {out['overlap'][0]:.2f}"
        )


if __name__ == "__main__":
    main()
