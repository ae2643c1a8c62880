"""One way to configure a sampler: its settings live on the sampler object only.

Every estimator refuses a sampler's setting given flat with a TypeError at construction
(Python's own, as for any unknown keyword), every nested ``sampler__<setting>`` that the
chosen sampler does not take is a ValueError naming it, and a ``GridSearchCV`` over
``sampler__n_steps`` changes the fit.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import (
    HMCClassifier,
    HMCRegressor,
    LossCalibratedBNN,
    MCDropoutClassifier,
    MCDropoutRegressor,
    PlanNetRegressor,
    SGMCMCClassifier,
    SGMCMCRegressor,
    SplitHMCClassifier,
    SplitHMCRegressor,
)
from sklearn_bnn.samplers import HMC, SAMPLERS
from sklearn_bnn.samplers.starts import MAPStart

SAMPLING_ESTIMATORS = [
    HMCClassifier,
    HMCRegressor,
    SplitHMCClassifier,
    SplitHMCRegressor,
    SGMCMCClassifier,
    SGMCMCRegressor,
]
TRAINED_ESTIMATORS = [MCDropoutClassifier, MCDropoutRegressor, LossCalibratedBNN, PlanNetRegressor]

# every setting of every registered sampler, with a value some sampler takes (its default)
ALL_SETTINGS = {}
for _cls in SAMPLERS.values():
    for _name, _value in _cls().get_params(deep=False).items():
        ALL_SETTINGS.setdefault(_name, _value)


def _samplers_for(estimator_cls) -> list[str]:
    access = estimator_cls._family.data_access
    return sorted(n for n, c in SAMPLERS.items() if getattr(c, "data_access", "full") == access)


pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
]

CASES = [(est, name) for est in SAMPLING_ESTIMATORS for name in _samplers_for(est)]


@pytest.mark.parametrize(("estimator_cls", "sampler"), CASES)
def test_a_setting_the_chosen_sampler_does_not_take_is_refused_naming_it(estimator_cls, sampler):
    taken = set(SAMPLERS[sampler]().get_params(deep=False))
    own = set(estimator_cls._get_param_names())
    foreign = sorted(set(ALL_SETTINGS) - taken - own)
    assert foreign, "every registered sampler takes every setting: the test checks nothing"
    X, y = _tiny_data(estimator_cls)
    for name in foreign:
        # flat: not a parameter of the estimator
        with pytest.raises(TypeError, match=name):
            estimator_cls(sampler=sampler, **{name: ALL_SETTINGS[name]})
        # nested, through set_params (the route of GridSearchCV and Pipeline)
        with pytest.raises(ValueError, match=name):
            estimator_cls(sampler=sampler).set_params(**{f"sampler__{name}": ALL_SETTINGS[name]})


@pytest.mark.parametrize(("estimator_cls", "sampler"), CASES)
def test_a_setting_the_chosen_sampler_takes_is_routed_to_it(estimator_cls, sampler):
    taken = SAMPLERS[sampler]().get_params(deep=False)
    X, y = _tiny_data(estimator_cls)
    for name, value in taken.items():
        # flat: not a parameter of the estimator
        if name not in estimator_cls._get_param_names():
            with pytest.raises(TypeError, match=name):
                estimator_cls(sampler=sampler, **{name: value})
    est = estimator_cls(sampler=sampler)
    deep = est.get_params(deep=True)
    assert {f"sampler__{k}" for k in taken} <= set(deep)
    name = next(iter(taken))
    est.set_params(**{f"sampler__{name}": taken[name]})
    assert isinstance(est.sampler, SAMPLERS[sampler])
    assert est.get_params(deep=False)["sampler"].get_params()[name] == taken[name]


def test_a_sampler_setting_given_flat_is_a_typeerror_at_construction():
    for kwargs in ({"n_steps": 7}, {"sampler": "nuts", "max_tree_depth": 3},
                   {"sampler": HMC(n_steps=5), "n_steps": 7}, {"n_draw": 5},
                   {"sampler__n_steps": 10}):
        with pytest.raises(TypeError, match=next(k for k in kwargs if k != "sampler")):
            HMCClassifier(**kwargs)


@pytest.mark.parametrize("estimator_cls", TRAINED_ESTIMATORS)
def test_the_trained_family_takes_no_sampler_setting(estimator_cls):
    # kept by __init__ (scikit-learn's contract: nothing raises there), refused by fit
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 3)), np.tile([0, 1], 10)
    estimator = estimator_cls(n_steps=7)
    with pytest.raises(ValueError, match="n_steps"):
        estimator.fit(X, y)


def test_a_named_sampler_becomes_a_fresh_object_never_a_shared_one():
    first = HMCClassifier()
    first.set_params(sampler__n_steps=9)
    assert first.sampler.n_steps == 9
    second = HMCClassifier()
    assert second.sampler == "hmc"
    assert second.set_params(sampler__step_jitter=0.0).sampler.n_steps == HMC().n_steps
    # a split target is integrated by its symmetric split leapfrog unless the sampler says
    split = SplitHMCRegressor().set_params(sampler__n_steps=5).sampler
    assert split.integrator is None
    # clone copies the object: setting the clone's leaves the original alone
    copy = clone(first).set_params(sampler__n_steps=3)
    assert (first.sampler.n_steps, copy.sampler.n_steps) == (9, 3)


def test_nested_settings_reach_the_sampler_through_a_pipeline():
    pipe = make_pipeline(StandardScaler(), HMCRegressor())
    pipe.set_params(hmcregressor__sampler__n_steps=12, hmcregressor__sampler__target_accept=0.9)
    sampler = pipe[-1].sampler
    assert (sampler.n_steps, sampler.target_accept) == (12, 0.9)


def _tiny_data(estimator_cls):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    if estimator_cls().__sklearn_tags__().estimator_type == "classifier":
        return X, (X[:, 0] > 0).astype(int)
    return X, X[:, 0]


def _regression_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
    return X, y


def test_grid_search_over_sampler_n_steps_changes_the_fit():
    X, y = _regression_data()
    base = HMCRegressor(
        hidden_layer_sizes=(8,),
        noise_precision=100.0,
        n_warmup=20,
        n_draws=20,
        init=MAPStart(n_steps=50),
        random_state=0,
    )
    search = GridSearchCV(base, {"sampler__n_steps": [1, 25]}, cv=2).fit(X, y)
    assert base.sampler == "hmc"  # the search's clones are configured, not the original
    assert search.best_estimator_.sampler.n_steps in (1, 25)
    scores = search.cv_results_["mean_test_score"]
    assert scores[0] != scores[1]
    # the setting reaches the kernel: gradients per transition follow n_steps
    fits = {
        n: clone(base).set_params(sampler__n_steps=n, sampler__step_jitter=0.0).fit(X, y)
        for n in (1, 25)
    }
    grads = {n: fit.diagnostics_["n_grad_evals"] for n, fit in fits.items()}
    assert grads[25] > 10 * grads[1]


def test_warmup_settings_of_the_sampler_drive_the_run():
    X, y = _regression_data()
    kwargs = dict(hidden_layer_sizes=(8,), noise_precision=100.0, n_warmup=0, n_draws=5)
    fixed = HMCRegressor(sampler=HMC(step_size=0.003, step_jitter=0.0), **kwargs).fit(X, y)
    np.testing.assert_allclose(fixed.diagnostics_["step_size"], 0.003, rtol=1e-6)
    with pytest.raises(ValueError, match="target_accept"):
        HMCRegressor(sampler=HMC(target_accept=1.5), **kwargs).fit(X, y)
    with pytest.raises(ValueError, match="step_size"):
        HMCRegressor(sampler=HMC(step_size=-1.0), **kwargs).fit(X, y)


def test_a_split_target_is_integrated_by_its_split_leapfrog_unless_the_sampler_says():
    import torch

    from sklearn_bnn.likelihoods import Gaussian
    from sklearn_bnn.priors import GaussianPrior
    from sklearn_bnn.samplers import NUTS, symmetric_split
    from sklearn_bnn.samplers.hamiltonian.integrators import leapfrog, naive_split
    from sklearn_bnn.targets import FunctionalNetwork, SplitTarget, Target

    X, y = (torch.as_tensor(a, dtype=torch.float32) for a in _regression_data())
    net = FunctionalNetwork(torch.nn.Linear(2, 1))
    args = (net, X, y[:, None], Gaussian(precision=1.0), GaussianPrior(1.0))
    split, full = SplitTarget(*args, n_splits=3), Target(*args)
    assert HMC().build(split).integrator is symmetric_split
    assert HMC().build(full).integrator is leapfrog
    assert HMC(integrator="naive").build(split).integrator is naive_split
    assert NUTS().build(split).integrator is symmetric_split
    assert NUTS().build(full).integrator is None  # the fused leapfrog
    with pytest.raises(ValueError, match="split target"):
        HMC(integrator="symmetric").build(full)


# -- the MAP start and the way chains run: one parameter each -------------------------------------
def test_the_map_start_is_reached_as_init_settings_and_changes_the_fit():
    """init="map" is a MAPStart at its defaults; init__n_steps sets its budget through
    set_params and GridSearchCV, and reaches the search (a start of 0 steps is no search)."""
    X, y = _regression_data()
    base = HMCRegressor(hidden_layer_sizes=(8,), noise_precision=100.0, n_warmup=0, n_draws=2,
                        sampler=HMC(n_steps=2, step_size=1e-4), random_state=0)  # fmt: skip
    assert base.get_params()["init__n_steps"] == "auto"
    short = clone(base).set_params(init__n_steps=0)
    assert isinstance(short.init, MAPStart) and base.init == "map"
    # the MAP start's gradients are not the sampler's, but its steps move where sampling starts
    fits = {n: clone(base).set_params(init__n_steps=n).fit(X, y) for n in (0, 40)}
    assert not np.allclose(fits[0].samples_.flat()[0], fits[40].samples_.flat()[0])
    assert fits[0].diagnostics_["n_grad_evals"] == fits[40].diagnostics_["n_grad_evals"]
    search = GridSearchCV(base, {"init__n_steps": [0, 40]}, cv=2).fit(X, y)
    assert search.cv_results_["mean_test_score"][0] != search.cv_results_["mean_test_score"][1]
    with pytest.raises(ValueError, match="init='random' has no settings"):
        HMCRegressor(init="random").set_params(init__n_steps=5)
    with pytest.raises(ValueError, match="n_steps"):
        clone(base).set_params(init__n_steps=-1).fit(X, y)


def test_n_jobs_zero_is_refused_naming_it():
    X, y = _regression_data()
    with pytest.raises(ValueError, match="n_jobs"):
        HMCRegressor(n_jobs=0).fit(X, y)


# samplers that take both a step size and the acceptance its adaptation aims at
_ADAPTING = sorted(
    name
    for name, cls in SAMPLERS.items()
    if {"step_size", "target_accept"} <= set(cls().get_params(deep=False))
)


@pytest.mark.parametrize("name", _ADAPTING)
def test_target_accept_with_a_fixed_step_size_is_refused(name):
    cls = SAMPLERS[name]
    default = cls().target_accept
    with pytest.raises(ValueError, match=r"target_accept=0\.95 .* step_size=0\.01 is fixed"):
        cls(step_size=0.01, target_accept=0.95).warmup_options()
    # the declared default never triggers it, and an adapted step size takes any target
    assert cls(step_size=0.01).warmup_options()["target_accept"] == default
    assert cls(step_size=0.01, target_accept=default).warmup_options()["step_size"] == 0.01
    assert cls(target_accept=0.95).warmup_options()["target_accept"] == 0.95


def test_an_estimator_refuses_the_pair_at_fit_before_sampling():
    from sklearn_bnn.samplers import NUTS

    X, y = _tiny_data(HMCClassifier)
    for sampler in (
        HMC(step_size=0.01, target_accept=0.95),
        NUTS(step_size=0.05, target_accept=0.9),
    ):
        with pytest.raises(ValueError, match="target_accept"):
            HMCClassifier(sampler=sampler).fit(X, y)


@pytest.mark.parametrize("estimator_cls", SAMPLING_ESTIMATORS)
def test_an_unknown_sampler_name_lists_only_the_samplers_the_estimator_runs(estimator_cls):
    X, y = _tiny_data(estimator_cls)
    runs = set(_samplers_for(estimator_cls))
    other = set(SAMPLERS) - runs
    assert runs and other
    for given in ("foo", sorted(other)[0]):
        with pytest.raises(ValueError, match="sampler must be one of") as info:
            estimator_cls(sampler=given).fit(X, y)
        listed = set(re.findall(r"'(\w+)'", str(info.value).split(" or ")[0]))
        assert listed == runs, (given, str(info.value))


@pytest.mark.parametrize("estimator_cls", SAMPLING_ESTIMATORS)
def test_every_parameter_has_one_constraint_and_the_estimator_few_parts(estimator_cls):
    # the constraints join the base's, the task's and the family's: none missing, none extra
    assert set(estimator_cls._parameter_constraints) == set(estimator_cls._get_param_names())
    own = [k for k in estimator_cls.__mro__ if k.__module__.startswith("sklearn_bnn")]
    assert len(own) <= 4, own


@pytest.mark.parametrize("estimator_cls", SAMPLING_ESTIMATORS)
def test_the_parameters_are_keyword_only_and_stored_as_given(estimator_cls):
    params = inspect.signature(estimator_cls).parameters.values()
    assert {p.kind for p in params} == {inspect.Parameter.KEYWORD_ONLY}
    with pytest.raises(TypeError, match="positional"):
        estimator_cls((5,))
    given = {p.name: object() for p in params}
    est = estimator_cls(**given)
    assert all(getattr(est, name) is value for name, value in given.items())
    # identity equality and hashing, and scikit-learn's repr of the changed parameters only
    fresh = estimator_cls()
    assert fresh != clone(fresh) and hash(fresh) != hash(clone(fresh))
    assert repr(estimator_cls(n_draws=7)) == f"{estimator_cls.__name__}(n_draws=7)"
