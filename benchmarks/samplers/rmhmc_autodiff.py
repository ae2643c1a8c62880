"""RMHMC on your own torch function against closed-form derivatives, per transition.

Implicit RMHMC (seeds/003 Algorithm 2, SoftAbs metric alpha = 1e6) needs the Hessian of the log
density and the gradient of its contraction with a matrix (the third derivatives) at every
fixed-point iteration. A user who passes a plain function to ``sample`` gets them by autograd
(:class:`~sklearn_bnn.samplers.geometry.AutodiffDerivatives`); the closed-form targets here give
the same quantities written out. Timed in one run, interleaved, the median over the repeats:

- the 10 + 1-D funnel (L = 25, fixed step 0.2, chains started at exact draws of the funnel);
- Bayesian logistic regression, 200 points, D = 10 and 50 weights, prior N(0, I) (L = 10,
  fixed step 0.3, chains started at 0).

Both variants of a case start from the same states with the same seed; the time per geometry
evaluation (Hessian and metric, or one contraction) is reported beside the time per transition,
since the two trajectories can need different numbers of fixed-point iterations. On the funnel
the previous derivatives (nested :mod:`torch.func` transforms) are timed as well, interleaved
with the others.

``neck``: the funnel as a plain function, sampled long enough to see the neck: the fraction of
draws of v below -4.9 (truth 5.1 %) with its Monte Carlo standard error (ESS of the indicator).

Run: ``python benchmarks/samplers/rmhmc_autodiff.py ratios [transitions] [repeats] [nested 0/1]``
and ``python benchmarks/samplers/rmhmc_autodiff.py neck [draws] [chains]``.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np
import torch
from rmhmc_funnel import Funnel
from torch.func import grad, grad_and_value, hessian, vmap

from sklearn_bnn.diagnostics import ess
from sklearn_bnn.samplers import RMHMC, sample
from sklearn_bnn.targets import FunctionTarget

f64 = torch.float64


def funnel_fn(th):
    """The funnel's log density as a user would write it: one position (11,) -> scalar."""
    v, x = th[0], th[1:]
    return -(v**2) / 18 - 5.0 * v - 0.5 * torch.exp(-v) * (x * x).sum()


class Logistic:
    """Bayesian logistic regression, prior N(0, I / tau), closed-form Hessian and contraction."""

    def __init__(self, dim, n=200, tau=1.0, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.X = torch.randn(n, dim, generator=g, dtype=f64)
        w = torch.randn(dim, generator=g, dtype=f64) / math.sqrt(dim)
        self.y = (torch.rand(n, generator=g, dtype=f64) < torch.sigmoid(self.X @ w)).to(f64)
        self.tau, self.dim = tau, dim
        self.dtype, self.device = f64, torch.device("cpu")

    def value_and_grad(self, theta):
        z = theta @ self.X.T
        ll = (self.y * z - torch.nn.functional.softplus(z)).sum(-1)
        grad = (self.y - torch.sigmoid(z)) @ self.X - self.tau * theta
        return ll - 0.5 * self.tau * (theta * theta).sum(-1), grad

    def log_prob_grad_hessian(self, theta):
        value, grad = self.value_and_grad(theta)
        s = torch.sigmoid(theta @ self.X.T)
        h = -torch.einsum("cn,ni,nj->cij", s * (1 - s), self.X, self.X)
        return value, grad, h - self.tau * torch.eye(self.dim, dtype=f64)

    def hessian_contraction(self, theta, A):
        s = torch.sigmoid(theta @ self.X.T)
        quad = torch.einsum("ni,cij,nj->cn", self.X, A, self.X)
        return (-s * (1 - s) * (1 - 2 * s) * quad) @ self.X

    def scalar_log_prob(self, th):
        z = self.X @ th
        ll = (self.y * z - torch.nn.functional.softplus(z)).sum()
        return ll - 0.5 * self.tau * (th * th).sum()


class NestedTransforms:
    """The derivatives as the previous code took them, for comparison: ``vmap(hessian(fn))``
    (forward over reverse) and the contraction as ``vmap(grad(sum(hessian(fn) * A)))``."""

    def __init__(self, fn, dim):
        self.fn, self.dim = fn, dim
        self.dtype, self.device = f64, torch.device("cpu")

    def value_and_grad(self, theta):
        g, v = vmap(grad_and_value(self.fn))(theta)
        return v, g

    def log_prob_grad_hessian(self, theta):
        v, g = self.value_and_grad(theta)
        return v, g, vmap(hessian(self.fn))(theta)

    def hessian_contraction(self, theta, A):
        fn = self.fn
        return vmap(grad(lambda th, a: (hessian(fn)(th) * a).sum()))(theta, A)


def _funnel_starts(n_chains, seed=1):
    g = torch.Generator().manual_seed(seed)
    v = 3.0 * torch.randn(n_chains, 1, generator=g, dtype=f64)
    return torch.cat([v, torch.exp(v / 2) * torch.randn(n_chains, 10, generator=g, dtype=f64)], 1)


def _time(target, start, sampler, eps, n):
    """Seconds per transition and per geometry evaluation over n transitions from ``start``."""
    kernel = sampler.build(target)
    gen = torch.Generator().manual_seed(0)
    state = kernel.init(start.clone(), gen)
    n_eval = 0.0
    t0 = time.perf_counter()
    for _ in range(n):
        state, info = kernel.step(state, gen, eps)
        n_eval += info.n_grad
    dt = time.perf_counter() - t0
    return dt / n, dt / n_eval


def ratios(n=6, repeats=3, nested=1, n_chains=2):
    cases = [
        ("funnel 10 + 1", Funnel(), funnel_fn, 11, _funnel_starts(n_chains), 25, 0.2),
    ]
    for d in (10, 50):
        lr = Logistic(d)
        cases.append((f"logistic D = {d}", lr, lr.scalar_log_prob, d, None, 10, 0.3))
    print(f"{n_chains} chains, {n} transitions, median of {repeats} interleaved repeats\n")
    print(
        "| target | closed form: s / transition | plain function: s / transition "
        "| ratio per transition | ratio per geometry evaluation |"
    )
    print("|---|---|---|---|---|")
    for name, closed, fn, dim, start, n_steps, eps in cases:
        start = torch.zeros(n_chains, dim, dtype=f64) if start is None else start
        variants = {"closed": closed, "plain": FunctionTarget(fn, dim, dtype=f64)}
        if nested and name.startswith("funnel"):
            variants["nested torch.func (previous code)"] = NestedTransforms(fn, dim)
        sampler = RMHMC(n_steps=n_steps, integrator="implicit", max_iter=50)
        runs = {key: [] for key in variants}
        for _ in range(repeats):
            for key, target in variants.items():
                runs[key].append(_time(target, start, sampler, eps, n))
        c = np.median(np.array(runs.pop("closed")), 0)
        for key, times in runs.items():
            p = np.median(np.array(times), 0)
            label = name if key == "plain" else f"{name}, {key}"
            print(
                f"| {label} | {c[0]:.3f} | {p[0]:.3f} | {p[0] / c[0]:.2f} | {p[1] / c[1]:.2f} |",
                flush=True,
            )


def neck(n_draws=300, n_chains=4, n_warmup=50, seed=0):
    start = torch.zeros(11, dtype=f64)
    sampler = RMHMC(n_steps=25, integrator="implicit", max_iter=50)
    t0 = time.perf_counter()
    res = sample(
        funnel_fn,
        start,
        sampler,
        n_warmup=n_warmup,
        n_draws=n_draws,
        n_chains=n_chains,
        random_state=seed,
    )
    dt = time.perf_counter() - t0
    v = res.draws[..., 0].numpy()
    below = (v < -4.9).astype(float)
    n_eff = float(ess(below))
    frac = below.mean()
    se = math.sqrt(frac * (1 - frac) / n_eff)
    print(
        f"funnel as a plain function, implicit RMHMC L = 25 (adapted step), {n_chains} x "
        f"{n_draws} draws after {n_warmup} warmup: v < -4.9 in {100 * frac:.1f} % "
        f"+- {100 * se:.1f} % (MC s.e., ESS of the indicator {n_eff:.0f}; truth 5.1 %), "
        f"min v {v.min():.2f}, ESS(v) {float(ess(v)):.0f}, accept "
        f"{float(res.stats['accept_prob'].mean()):.2f}, divergent "
        f"{int(res.stats['divergent'].sum())}, time {dt:.0f} s "
        f"({dt / (n_warmup + n_draws):.2f} s per transition)"
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, args = (sys.argv[1] if len(sys.argv) > 1 else "ratios"), sys.argv[2:]
    (neck if mode == "neck" else ratios)(*(int(a) for a in args))
