"""Samplers as estimator parameters: objects, names, nested parameters, a kernel of the user's."""

import numpy as np
import pytest
import torch
from conftest import assert_draws_match_gaussian, blr_posterior
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV
from sklearn.preprocessing import StandardScaler
from torch import nn

from sklearn_bnn import HMCClassifier, HMCRegressor, SplitHMCRegressor
from sklearn_bnn.samplers import HMC, NUTS, Info, Kernel, Sampler, State
from sklearn_bnn.samplers.starts import MAPStart

TINY = dict(
    hidden_layer_sizes=(4,), n_draws=15, n_warmup=15, init=MAPStart(n_steps=20), random_state=0
)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_sampler_object_and_name_give_identical_draws(iris):
    X, y = iris
    by_name = HMCClassifier(sampler="nuts", **TINY).set_params(sampler__max_tree_depth=6)
    assert isinstance(by_name.sampler, NUTS)  # a sampler by name became an object to set
    by_name.fit(X, y)
    by_object = HMCClassifier(sampler=NUTS(max_tree_depth=6), **TINY).fit(X, y)
    assert torch.equal(by_name.samples_.draws, by_object.samples_.draws)
    assert "mean_tree_depth" in by_object.diagnostics_


def test_clone_and_nested_parameters():
    est = HMCRegressor(sampler=HMC(n_steps=7), **TINY)
    copy = clone(est)
    assert copy.sampler is not est.sampler
    assert copy.get_params()["sampler__n_steps"] == 7
    assert not hasattr(copy, "samples_")
    copy.set_params(sampler__n_steps=3)
    assert copy.sampler.n_steps == 3 and est.sampler.n_steps == 7


def test_grid_search_over_samplers(iris):
    X, y = iris
    search = GridSearchCV(
        HMCClassifier(**TINY),
        {"sampler": [HMC(n_steps=3), NUTS(max_tree_depth=3)]},
        cv=2,
    ).fit(X, y)
    assert len(search.cv_results_["params"]) == 2
    assert isinstance(search.best_estimator_.sampler, Sampler)


def test_split_estimator_takes_a_sampler_object_with_its_own_integrator():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 2)), rng.normal(size=40)
    reg = SplitHMCRegressor(n_splits=2, sampler=HMC(n_steps=3, integrator="randomised"), **TINY)
    reg.fit(X, y)
    assert reg.samples_.draws.shape[1] == 15
    with pytest.raises(ValueError, match="split target"):
        HMCRegressor(sampler=HMC(integrator="symmetric"), **TINY).fit(X, y)


def test_bad_sampler_is_a_valueerror_naming_it(iris):
    X, y = iris
    with pytest.raises(ValueError, match="sampler"):
        HMCClassifier(sampler="gibbs", **TINY).fit(X, y)
    with pytest.raises(ValueError, match="sampler"):
        HMCClassifier(sampler=object(), **TINY).fit(X, y)


# -- a kernel the package does not know: random-walk Metropolis, defined here -------------------


class _RandomWalkKernel(Kernel):
    adapts_step_size = False

    def __init__(self, target, scale):
        self.target, self.scale = target, scale

    def step(self, state, generator, step_size=None, inv_mass=None):
        q = state.position
        noise = torch.randn(q.shape, generator=generator, dtype=q.dtype, device=q.device)
        proposal = q + self.scale * noise
        log_prob, grad = self.target.value_and_grad(proposal)
        log_ratio = torch.nan_to_num(log_prob - state.log_prob, nan=-torch.inf)
        accept_prob = log_ratio.clamp(max=0).exp()
        u = torch.rand(accept_prob.shape, generator=generator, dtype=q.dtype, device=q.device)
        accepted = u < accept_prob
        keep = accepted[:, None]
        new = State(
            torch.where(keep, proposal, q),
            torch.where(accepted, log_prob, state.log_prob),
            torch.where(keep, grad, state.grad),
        )
        scale = torch.full_like(accept_prob, self.scale)
        info = Info(accept_prob, accepted, -log_ratio, ~torch.isfinite(log_ratio), scale, 1.0)
        return new, info


class RandomWalk(Sampler):
    """Random-walk Metropolis with a fixed proposal scale."""

    def __init__(self, scale=0.1):
        self.scale = scale

    def build(self, target):
        return _RandomWalkKernel(target, self.scale)


def test_a_kernel_defined_outside_the_package_samples_the_blr_posterior():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 2))
    y = X @ np.array([1.0, -2.0]) + 0.3 + rng.normal(scale=0.5, size=40)
    alpha, beta = 2.0, 4.0
    reg = HMCRegressor(
        module=lambda n_in, n_out: nn.Linear(n_in, n_out),
        prior_precision=alpha,
        noise_precision=beta,
        sampler=RandomWalk(scale=0.08),
        n_draws=4000,
        n_warmup=500,
        init="random",
        n_chains=4,
        dtype="float64",
        random_state=0,
    ).fit(X, y)
    mean, cov = blr_posterior(X, y, alpha, beta)
    assert_draws_match_gaussian(reg.samples_.draws.numpy(), mean, cov)
    assert 0.2 < reg.acceptance_rate_ < 0.8
