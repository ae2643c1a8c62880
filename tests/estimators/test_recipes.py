"""The recipes of docs/architecture.md, followed once from nothing.

"Adding a sampler": a kernel built as ``Kernel(sampler, target)``, a sampler object whose
parameters all have defaults and which declares the warmup settings it wants adapted, registered
by name; then the estimators, the public driver and persistence take it with no other code.
"Adding an MCMC estimator": a family with its constraints and hooks, one public class per task
made a keyword-only dataclass declaring the family's parameters, and ``@register``. Each toy is
unregistered afterwards, so other tests see the package's registries as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.utils._param_validation import Interval

import sklearn_bnn
from sklearn_bnn._persistence_registry import REGISTRY, SAMPLERS
from sklearn_bnn.estimators._base import BaseSamplingEstimator
from sklearn_bnn.estimators._families import FullData
from sklearn_bnn.estimators._tasks import SamplingRegressorMixin
from sklearn_bnn.priors import as_prior
from sklearn_bnn.samplers import Info, Kernel, Sampler, State, register_sampler, sample
from sklearn_bnn.targets import Target


class _LangevinKernel(Kernel):
    """Metropolis-adjusted Langevin (Roberts & Tweedie 1996) at the loop's step size."""

    def __init__(self, sampler, target):
        self.sampler = sampler  # the settings (this toy has none beyond the warmup's)
        self.target = target  # the base's init and the loop read it

    def step(self, state, generator, step_size=None, inv_mass=None):
        q, g = state.position, state.grad
        eps = torch.as_tensor(step_size, dtype=q.dtype, device=q.device).expand(q.shape[0])
        e = eps[:, None]
        noise = torch.randn(q.shape, generator=generator, dtype=q.dtype, device=q.device)
        proposal = q + 0.5 * e**2 * g + e * noise
        log_prob, grad = self.target.value_and_grad(proposal)

        def log_q(to, frm, grad_frm):  # log N(to; frm + eps^2 grad / 2, eps^2 I), up to a constant
            return -((to - frm - 0.5 * e**2 * grad_frm) ** 2).sum(-1) / (2 * eps**2)

        log_ratio = log_prob - state.log_prob + log_q(q, proposal, grad) - log_q(proposal, q, g)
        log_ratio = torch.nan_to_num(log_ratio, nan=-math.inf)
        accept_prob = log_ratio.clamp(max=0).exp()
        u = torch.rand(accept_prob.shape, generator=generator, dtype=q.dtype, device=q.device)
        accepted = u < accept_prob
        keep = accepted[:, None]
        new = State(
            torch.where(keep, proposal, q),
            torch.where(accepted, log_prob, state.log_prob),
            torch.where(keep, grad, g),
        )
        divergent = ~torch.isfinite(log_ratio)
        return new, Info(accept_prob, accepted, -log_ratio, divergent, eps, 1.0)


@dataclass(kw_only=True, eq=False, repr=False)
class _Langevin(Sampler):
    """The recipe's sampler object: settings with defaults, the warmup's declared."""

    step_size: object = "auto"
    target_accept: float = 0.57

    def check_target(self, target) -> None:
        self.warmup_options()

    def build(self, target):
        self.check_target(target)
        return _LangevinKernel(self, target)


@pytest.fixture
def toy_sampler():
    register_sampler("toy_mala")(_Langevin)
    yield _Langevin
    SAMPLERS.pop("toy_mala")


def test_the_sampler_recipe_samples_a_gaussian_through_the_driver(toy_sampler):
    scales = torch.tensor([1.0, 2.0], dtype=torch.float64)
    draws = sample(
        lambda x: -0.5 * ((x / scales) ** 2).sum(),
        torch.zeros(2, dtype=torch.float64),
        "toy_mala",
        n_warmup=400,
        n_draws=3000,
        n_chains=4,
        random_state=0,
    ).draws.reshape(-1, 2)
    assert toy_sampler() is not None  # builds with no argument, as the registry needs
    sd = draws.std(0)
    # MALA's draws are autocorrelated: the margins are 8 % on the means (in sd units) and on
    # the sds, over three times the worst deviation over seeds 0-5 (0.024 on a mean)
    assert torch.all(draws.mean(0).abs() / scales < 0.08)
    assert torch.all((sd / scales - 1).abs() < 0.08)


def test_the_sampler_recipe_reaches_the_estimators_and_persistence(toy_sampler, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    y = X[:, 0] - X[:, 1] + 0.1 * rng.normal(size=50)
    kwargs = dict(hidden_layer_sizes=(4,), noise_precision=100.0, n_warmup=30, n_draws=20)
    reg = sklearn_bnn.HMCRegressor(sampler="toy_mala", random_state=0, **kwargs)
    reg.set_params(sampler__target_accept=0.6)  # the named sampler becomes an object
    assert isinstance(reg.sampler, toy_sampler)
    with pytest.raises(ValueError, match="n_steps"):
        reg.set_params(sampler__n_steps=3)  # a setting it does not take
    reg.fit(X, y)
    assert 0.3 < reg.acceptance_rate_ < 0.9
    sklearn_bnn.save(reg, tmp_path / "m.pt")
    loaded = sklearn_bnn.load(tmp_path / "m.pt")
    assert loaded.sampler.get_params() == reg.sampler.get_params()
    np.testing.assert_array_equal(loaded.predict(X), reg.predict(X))


# -- the estimator recipe: a family whose target reads at most max_rows rows ----------------------


class FirstRowsData(FullData):
    """A toy family: the full-data posterior of the first ``max_rows`` rows."""

    constraints: dict = {"max_rows": [Interval(Integral, 1, None, closed="left")]}

    def make_target(self, estimator, network, X, targets, seed):
        keep = slice(0, estimator.max_rows)
        prior = as_prior(estimator.prior_precision)
        return Target(
            network, X[keep], targets[keep], estimator._likelihood(), prior,
            **self.target_options(estimator),
        )

    def target_options(self, estimator) -> dict:
        return {"temperature": float(estimator.temperature)}


@dataclass(kw_only=True, eq=False, repr=False)
class FirstRowsRegressor(SamplingRegressorMixin, BaseSamplingEstimator):
    """The recipe's public class: the family's parameter as a field, the base's and the task's
    inherited, all stored as given."""

    _family = FirstRowsData()
    _parameter_constraints = {
        **BaseSamplingEstimator._parameter_constraints,
        **SamplingRegressorMixin.task_constraints,
        **FirstRowsData.constraints,
    }

    max_rows: int = 30
    # the base's defaults that differ here, redeclared (a small, quick toy)
    hidden_layer_sizes: tuple = (8,)
    prior_precision: object = 1.0
    n_draws: object = 20
    n_warmup: object = 20


@pytest.fixture
def toy_estimator():
    sklearn_bnn._persistence_registry.register(FirstRowsRegressor)
    yield FirstRowsRegressor
    REGISTRY.pop("FirstRowsRegressor")


def test_the_estimator_recipe_fits_predicts_clones_and_survives_a_file(toy_estimator, tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 2))
    y = np.sin(X[:, 0])
    reg = toy_estimator(random_state=0, noise_precision=100.0).set_params(sampler__n_steps=10)
    reg.fit(X, y)
    assert reg.samples_.draws.shape[:2] == (1, 20)
    mean, std = reg.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5,)
    assert clone(reg).get_params()["sampler__n_steps"] == 10
    with pytest.raises(ValueError, match="max_rows"):
        toy_estimator(max_rows=0).fit(X, y)
    with pytest.raises(TypeError, match="step_size"):
        toy_estimator(step_size=0.1)
    sklearn_bnn.save(reg, tmp_path / "toy.pt")
    np.testing.assert_array_equal(sklearn_bnn.load(tmp_path / "toy.pt").predict(X), reg.predict(X))
