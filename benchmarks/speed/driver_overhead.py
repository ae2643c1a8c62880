"""Overhead of the public driver's function adapter: eight schools, NUTS, 4 vectorized chains.

The same non-centred eight-schools posterior is sampled twice with the same seed and settings:
from the plain torch function (``sample(f, ...)``, gradients by ``torch.func``) and from a target
object whose ``value_and_grad`` is written by hand on the (C, D) batch. Reported: ESS per second
of each parameter (bulk ESS over wall time of the whole ``sample`` call), their ratio, and the
time of one gradient evaluation of each form on a (4, 10) batch.

Run: python benchmarks/speed/driver_overhead.py [--n-draws 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sklearn_bnn.samplers import NUTS, sample

torch.set_num_threads(1)
Y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], dtype=torch.float64)
SIGMA = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], dtype=torch.float64)
NAMES = ["mu", "log_tau"] + [f"eta_{j}" for j in range(1, 9)]


def log_density(params):
    mu, log_tau, eta = params[0], params[1], params[2:]
    tau = log_tau.exp()
    resid = (Y - mu - tau * eta) / SIGMA
    return (
        -0.5 * (resid**2).sum()
        - 0.5 * (mu / 5.0) ** 2
        - torch.log1p((tau / 5.0) ** 2)
        + log_tau
        - 0.5 * (eta**2).sum()
    )


class EightSchools:
    """The same log density with its gradient written out, on a (C, 10) batch."""

    dim, device, dtype = 10, torch.device("cpu"), torch.float64

    def value_and_grad(self, theta):
        mu, log_tau, eta = theta[:, 0], theta[:, 1], theta[:, 2:]
        tau = log_tau.exp()
        resid = (Y - mu[:, None] - tau[:, None] * eta) / SIGMA  # (C, 8)
        r_over_s = resid / SIGMA
        cauchy = (tau / 5.0) ** 2
        value = (
            -0.5 * (resid**2).sum(1)
            - 0.5 * (mu / 5.0) ** 2
            - torch.log1p(cauchy)
            + log_tau
            - 0.5 * (eta**2).sum(1)
        )
        d_mu = r_over_s.sum(1) - mu / 25.0
        d_log_tau = tau * (r_over_s * eta).sum(1) - 2 * cauchy / (1 + cauchy) + 1.0
        d_eta = tau[:, None] * r_over_s - eta
        return value, torch.cat([d_mu[:, None], d_log_tau[:, None], d_eta], 1)


def gradient_time(logdensity, rounds=200):
    from sklearn_bnn.targets import FunctionTarget

    target = (
        logdensity
        if hasattr(logdensity, "value_and_grad")
        else FunctionTarget(logdensity, 10, dtype=torch.float64)
    )
    theta = torch.randn(4, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    target.value_and_grad(theta)
    start = time.perf_counter()
    for _ in range(rounds):
        target.value_and_grad(theta)
    return (time.perf_counter() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-draws", type=int, default=1000)
    parser.add_argument("--n-warmup", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    # check the hand-written gradient against autograd once
    theta = torch.randn(3, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    v, g = EightSchools().value_and_grad(theta)
    ref = torch.stack([torch.func.grad(log_density)(t) for t in theta])
    assert torch.allclose(g, ref, atol=1e-10), "hand-written gradient disagrees with autograd"

    forms = {"function": log_density, "target": EightSchools()}
    ess_rate = {name: [] for name in forms}
    for _ in range(args.rounds):  # alternate the forms: the machine's load drifts
        for name, logdensity in forms.items():
            start = time.perf_counter()
            result = sample(
                logdensity,
                torch.zeros(10, dtype=torch.float64),
                NUTS(adapt_mass=True),  # sample()'s adaptation of a diagonal mass
                n_warmup=args.n_warmup,
                n_draws=args.n_draws,
                n_chains=4,
                random_state=0,
            )
            seconds = time.perf_counter() - start
            ess_rate[name].append(result.summary()["ess_bulk"][:10] / seconds)
    print(
        f"eight schools, NUTS, 4 vectorized chains, {args.n_warmup} + {args.n_draws} draws, "
        f"median of {args.rounds} alternating rounds"
    )
    print(f"{'parameter':<10}{'ESS/s function':>16}{'ESS/s target':>14}{'ratio':>8}")
    for k, name in enumerate(NAMES):
        f = statistics.median(r[k] for r in ess_rate["function"])
        t = statistics.median(r[k] for r in ess_rate["target"])
        print(f"{name:<10}{f:>16.1f}{t:>14.1f}{f / t:>8.2f}")
    tf, tt = gradient_time(log_density), gradient_time(EightSchools())
    print(
        f"one gradient on (4, 10): function {tf * 1e6:.0f} us, target {tt * 1e6:.0f} us "
        f"(ratio {tt / tf:.2f})"
    )


if __name__ == "__main__":
    main()
