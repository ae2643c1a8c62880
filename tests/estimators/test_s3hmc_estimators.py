"""Estimators with a hierarchical prior (S3HMC, or Gibbs steps beside HMC) and with RMHMC
(seeds/002, seeds/003 ch. 5-6)."""

import numpy as np
import pytest
import torch
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_bnn import HMCClassifier, HMCRegressor
from sklearn_bnn._persistence import load, save
from sklearn_bnn.estimators.split import SplitHMCRegressor
from sklearn_bnn.priors import HierarchicalPrior
from sklearn_bnn.samplers import HMC, RMHMC, S3HMC
from sklearn_bnn.samplers.starts import MAPStart

FAST = dict(
    hidden_layer_sizes=(4,),
    n_draws=10,
    n_warmup=10,
    init=MAPStart(n_steps=150),
    random_state=0,
)


@parametrize_with_checks(
    [
        # one estimator per prior scheme (the joint one under S3HMC, Gibbs blocks, the
        # interweaving move); the samplers' own correctness is tested in tests/samplers/
        HMCClassifier(prior_precision=HierarchicalPrior(), sampler=S3HMC(n_steps=3), **FAST),
        HMCClassifier(
            prior_precision=HierarchicalPrior(scheme="gibbs"), sampler=HMC(n_steps=3), **FAST
        ),
        HMCRegressor(
            prior_precision=HierarchicalPrior(interweave=2), sampler=HMC(n_steps=3), **FAST
        ),
    ]
)
def test_sklearn_contract_with_a_hierarchical_prior(estimator, check):
    refuses = isinstance(estimator.sampler, S3HMC)  # weights: a ValueError (S3HMC's joint prior)
    if refuses and getattr(check, "func", check).__name__ in REFUSED_WEIGHTS:
        pytest.skip("S3HMC refuses weights (test_sample_weight.py)")
    if getattr(check, "func", check).__name__ in CHECKED_ELSEWHERE:
        pytest.skip("checked in test_sample_weight.py and test_sklearn_checks.py")
    check(estimator)


# weights equal repeated rows in distribution (test_sample_weight.py); the forms weights take
# are read by one helper, checked in test_sklearn_checks.py (a weighted fit with a hierarchical
# prior runs here in check_sample_weights_not_overwritten and check_class_weight_classifiers)
CHECKED_ELSEWHERE = {
    "check_sample_weight_equivalence_on_dense_data",
    "check_sample_weights_pandas_series",
    "check_sample_weights_not_an_array",
    "check_sample_weights_list",
    "check_sample_weights_shape",
}
# checks that fit with weights other than 1: S3HMC refuses them with a ValueError
REFUSED_WEIGHTS = {
    "check_sample_weights_list",
    "check_sample_weights_not_overwritten",
    "check_sample_weight_equivalence_on_dense_data",
    "check_class_weight_classifiers",
}


def _regression(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


def test_precisions_are_kept_beside_the_weights_and_survive_persistence(tmp_path):
    X, y = _regression()
    reg = HMCRegressor(
        prior_precision=HierarchicalPrior(), sampler=S3HMC(n_steps=3), n_chains=2, **FAST
    ).fit(X, y)
    n_weights = sum(p.numel() for p in reg.network_.module.parameters())
    assert reg.samples_.draws.shape == (2, 10, n_weights)  # weights only: prediction unchanged
    assert reg.precisions_.shape == (2, 10, 5)
    assert reg.precision_names_[-1] == "noise_precision"
    assert (reg.precisions_ > 0).all()
    assert set(reg.diagnostics_["rhat_precisions"]) == set(reg.precision_names_)
    assert torch.equal(reg.samples_.stats["noise_precision"], reg.precisions_[..., -1])
    path = tmp_path / "reg.pt"
    save(reg, path)
    back = load(path)
    assert torch.equal(back.precisions_, reg.precisions_)
    assert np.allclose(back.predict(X), reg.predict(X))
    _, std = reg.predict(X, return_std=True)
    assert np.isfinite(std).all()


def test_warm_start_continues_with_the_precisions():
    X, y = _regression()
    reg = HMCRegressor(
        prior_precision=HierarchicalPrior(), sampler=S3HMC(n_steps=3), warm_start=True, **FAST
    ).fit(X, y)
    reg.fit(X, y)
    assert reg.precisions_.shape[1] == 20 and reg.samples_.draws.shape[1] == 20


def test_a_sampler_that_cannot_sample_precisions_is_refused():
    X, y = _regression()
    with pytest.raises(ValueError, match="S3HMC"):
        HMCRegressor(prior_precision=HierarchicalPrior(), sampler=RMHMC(), **FAST).fit(X, y)


def test_bad_hyperprior_is_refused_by_name():
    X, y = _regression()
    with pytest.raises(ValueError, match="noise_alpha"):
        HMCRegressor(
            prior_precision=HierarchicalPrior(noise_alpha=1.0), sampler=S3HMC(n_steps=3), **FAST
        ).fit(X, y)


def test_rmhmc_on_a_small_network():
    X, y = _regression(30)
    reg = HMCRegressor(
        hidden_layer_sizes=(3,),
        sampler=RMHMC(n_steps=2),
        n_draws=4,
        n_warmup=4,
        n_chains=1,
        dtype="float64",
        random_state=0,
        noise_precision=50.0,
    )
    reg.fit(X, y)
    assert reg.samples_.draws.shape == (1, 4, 10)
    assert np.isfinite(reg.predict(X)).all()


@pytest.mark.parametrize("scheme", ["gibbs", "joint"])
def test_both_schemes_report_the_precisions_the_same_way(tmp_path, scheme):
    X, y = _regression()
    sampler = S3HMC(n_steps=3) if scheme == "joint" else HMC(n_steps=3)
    reg = HMCRegressor(
        prior_precision=HierarchicalPrior(scheme=scheme),
        sampler=sampler,
        n_chains=2,
        warm_start=True,
        **FAST,
    ).fit(X, y)
    names = ["precision[0.weight]", "precision[0.bias]", "precision[2.weight]", "precision[2.bias]"]
    assert reg.precision_names_ == names + ["noise_precision"]
    assert reg.precisions_.shape == (2, 10, 5) and (reg.precisions_ > 0).all()
    assert set(reg.diagnostics_["rhat_precisions"]) == set(names + ["noise_precision"])
    for k, name in enumerate(names):
        assert torch.equal(reg.samples_.stats[name], reg.precisions_[..., k])
    path = tmp_path / "reg.pt"
    save(reg, path)
    back = load(path)
    assert torch.equal(back.precisions_, reg.precisions_)
    assert back.prior_precision.scheme == scheme
    np.testing.assert_allclose(back.predict(X), reg.predict(X))
    reg.fit(X, y)  # warm start: the chains continue, the precisions drawn afresh given them
    assert reg.precisions_.shape == (2, 20, 5)


def test_split_hmc_takes_the_gibbs_scheme_and_refuses_the_joint_one():
    X, y = _regression()
    split_hmc = HMC(n_steps=3, integrator="symmetric")  # a split estimator's "hmc"
    kw = dict(hidden_layer_sizes=(4,), n_draws=5, n_warmup=5, sampler=split_hmc, n_splits=2)
    reg = SplitHMCRegressor(prior_precision=HierarchicalPrior(), **kw).fit(X, y)
    assert reg.precisions_.shape == (1, 5, 5)
    with pytest.raises(ValueError, match="scheme"):
        SplitHMCRegressor(prior_precision=HierarchicalPrior(scheme="joint"), **kw).fit(X, y)


def test_bad_scheme_is_refused_by_name():
    X, y = _regression()
    with pytest.raises(ValueError, match="scheme"):
        bad = HierarchicalPrior(scheme="gibs")
        HMCRegressor(prior_precision=bad, sampler=HMC(n_steps=3), **FAST).fit(X, y)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: HMCRegressor(
            prior_precision=p, n_chains=2, warm_start=True, sampler=HMC(n_steps=3), **FAST
        ),
        lambda p: HMCClassifier(prior_precision=p, sampler="nuts", **FAST),
        lambda p: SplitHMCRegressor(
            prior_precision=p, n_splits=2, hidden_layer_sizes=(4,), n_draws=5, n_warmup=5
        ),
    ],
    ids=["hmc-warm-start", "nuts-classifier", "split-hmc"],
)
def test_fit_predict_and_persistence_with_the_interweaving_move(make, tmp_path):
    X, y = _regression()
    est = make(HierarchicalPrior(interweave=2))
    if isinstance(est, HMCClassifier):
        y = (y > 0).astype(int)
    est.fit(X, y)
    accept = est.samples_.stats["interweave_accept"]
    assert ((accept >= 0) & (accept <= 1)).all() and accept.mean() > 0
    assert (est.precisions_ > 0).all() and np.isfinite(est.samples_.draws).all()
    predict = est.predict_proba if isinstance(est, HMCClassifier) else est.predict
    path = tmp_path / "est.pt"
    save(est, path)
    back = load(path)
    assert back.prior_precision.interweave == 2
    assert torch.equal(back.precisions_, est.precisions_)
    np.testing.assert_allclose(
        (back.predict_proba if isinstance(est, HMCClassifier) else back.predict)(X), predict(X)
    )
    plain = make(HierarchicalPrior()).fit(X, y)  # the move changes the chain, same seed
    assert not np.array_equal(plain.samples_.draws, est.samples_.draws)
    if est.warm_start:
        est.fit(X, y)  # the chains continue, the scales start afresh in the new warmup
        assert est.precisions_.shape[1] == 2 * FAST["n_draws"]


def test_a_prior_saved_before_interweave_loads_without_it():
    state = HierarchicalPrior().get_params()
    del state["interweave"]
    HierarchicalPrior._check_state(state)
    assert HierarchicalPrior.from_state(state).interweave == 0
