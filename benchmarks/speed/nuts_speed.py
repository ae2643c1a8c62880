"""NUTS gradient evaluations per second against a bare torch forward+backward of the same loss.

Set-up of seeds/000 §5.1 (REFERENCE §2): an MLP [1, 100, 100, 1] (10,401 parameters), 400 points
of 1-D regression, prior N(0, I), noise precision 100. The bare rate is a plain ``nn.Module``
forward and backward of the same log posterior density; the NUTS rate counts the gradient
evaluations of whole NUTS transitions (started at a mode, step size from a short dual-averaging
warmup), so it
includes the tree building, the U-turn checks and the functional target; the rate of the
target's own ``value_and_grad`` is shown too (the ceiling of any sampler built on it). Rates are
per second of CPU time (one intra-op thread, so the machine's other load matters less), measured
in alternation in the same run; the ratio uses the mean of the bare rates around each NUTS
measurement.

Run: ``python benchmarks/speed/nuts_speed.py`` (about a minute). Target: ratio >= 0.8.
"""

from __future__ import annotations

import time

import torch

from sklearn_bnn._utils import seeded_torch
from sklearn_bnn.likelihoods import Gaussian
from sklearn_bnn.nets import make_mlp
from sklearn_bnn.priors import GaussianPrior
from sklearn_bnn.samplers import NUTS, run_chains
from sklearn_bnn.samplers.starts import find_mode
from sklearn_bnn.targets import FunctionalNetwork, Target

NOISE_PRECISION = 100.0


def data(n: int = 400, seed: int = 0):
    """1-D regression: two clusters of inputs, a smooth function, noise sd 0.1."""
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.rand(n // 2, generator=g) - 1.5, torch.rand(n - n // 2, generator=g)])
    y = torch.sin(2.5 * x) + x**2 / 4 + torch.randn(n, generator=g) / NOISE_PRECISION**0.5
    return x[:, None], y[:, None]


def rate(once, seconds: float) -> float:
    """Calls of ``once`` (returning the gradients it evaluated) per second of CPU time."""
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        n += once()
    return n / (time.process_time() - start)


def bare_step(module, X, y):
    """One forward+backward of the same log density, on the module itself."""
    params = list(module.parameters())

    def once():
        for p in params:
            p.grad = None
        out = module(X)
        log_lik = -0.5 * NOISE_PRECISION * ((out - y) ** 2).sum()
        log_prior = -0.5 * sum((p * p).sum() for p in params)
        (-(log_lik + log_prior)).backward()
        return 1

    return once


def main(rounds: int = 3, seconds: float = 8.0) -> None:
    torch.set_num_threads(1)
    X, y = data()
    with seeded_torch(0):
        module = make_mlp(1, [100, 100], 1)
    network = FunctionalNetwork(module)
    target = Target(network, X, y, Gaussian(NOISE_PRECISION), GaussianPrior(1.0))
    kernel = NUTS().build(target)
    generator = torch.Generator().manual_seed(0)
    warm = run_chains(
        kernel,
        kernel.init(find_mode(target, network.initial_position()[None])),
        generator,
        n_warmup=20,
        n_draws=0,
        step_size="auto",
    )
    state, eps = warm.state, warm.step_size
    depths = []

    def nuts_transition():
        nonlocal state
        state, info = kernel.step(state, generator, step_size=eps)
        depths.append(float(info.extra["tree_depth"].float().mean()))
        return info.n_grad

    def target_gradient():
        target.value_and_grad(state.position)
        return 1

    bare = bare_step(module, X, y)
    rows = []
    for _ in range(rounds):
        before = rate(bare, seconds / 4)
        target_rate = rate(target_gradient, seconds / 4)
        nuts = rate(nuts_transition, seconds)
        baseline = 0.5 * (before + rate(bare, seconds / 4))
        rows.append((baseline, target_rate, nuts, nuts / baseline, nuts / target_rate))

    print(f"NUTS on MLP [1, 100, 100, 1] ({target.dim} parameters), 400 points, 1 thread")
    print(
        f"step size {float(eps[0]):.2e} (dual averaging, 20 warmup transitions from a mode), "
        f"mean tree depth {sum(depths) / len(depths):.1f}\n"
    )
    print(
        "| round | bare fwd+bwd /s | Target.value_and_grad /s | NUTS grads /s | NUTS / bare "
        "| NUTS / Target |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for i, (b, t, r, ratio, own) in enumerate(rows):
        print(f"| {i + 1} | {b:.0f} | {t:.0f} | {r:.0f} | {ratio:.2f} | {own:.2f} |")
    ratios = sorted(row[3] for row in rows)
    print(f"\nmedian NUTS / bare: {ratios[len(ratios) // 2]:.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
