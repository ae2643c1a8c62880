"""A fingerprint of the package's draws: fit every estimator family and run ``sample()`` on
fixed seeds, store every number they produce, and check later that a change kept them all.

A refactoring that promises "behaviour and draws unchanged" is checked with it: run ``--out``
on the code before the change, then ``--compare`` on the code after it, in the same
environment (machine, library versions, one torch thread). Every entry must then be equal bit
for bit: the same floating-point operations in the same order give the same bits, so any
difference means the computation changed.

    python benchmarks/draws_fingerprint.py --out /tmp/before.npz
    # ... change the code ...
    python benchmarks/draws_fingerprint.py --compare /tmp/before.npz
    python benchmarks/draws_fingerprint.py --compare /tmp/before.npz --cases hmc_nuts sample_nuts

What is recorded, per case: every public fitted attribute (a name ending in ``_``: the
posterior draws ``samples_`` with their log densities, per-draw statistics and run info,
``diagnostics_``, step sizes, learned noise and prior precisions, calibration temperatures,
trained networks' weights, loss curves) and the predictions on held-out rows
(``predict``, ``predict_proba``, ``predict(return_std=True)``, ``predict_samples``,
plan-net's ``sample_y``); for ``sample()``, the returned draws, log densities, statistics and
info. Objects that are not numbers, strings, arrays, tensors, containers of them or torch
modules are not recorded.

Every case runs with explicit small budgets (no default budget is relied on), seeds given to
every estimator, and torch's and numpy's global generators reset before it, so the cases do not
depend on each other or on their order. The whole run takes about a minute on one core.

``--compare`` prints, for every entry, its shape and the largest absolute difference (``-`` when
equal) and exits with status 1 when any entry differs, is missing, changes shape or dtype, or a
case raises; entries present only in the new run are listed but do not fail the comparison.
The fingerprint file is machine-specific: do not commit it.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import make_classification, make_regression
from torch import nn

# the checkout's own package, not whichever one the environment installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sklearn_bnn  # noqa: E402
from sklearn_bnn import (  # noqa: E402
    HMCClassifier,
    HMCRegressor,
    LossCalibratedBNN,
    MAPStart,
    MCDropoutClassifier,
    MCDropoutRegressor,
    PlanNetRegressor,
    PosteriorSamples,
    SGMCMCClassifier,
    SGMCMCRegressor,
    SplitHMCClassifier,
    SplitHMCRegressor,
)
from sklearn_bnn.likelihoods import Gaussian  # noqa: E402
from sklearn_bnn.priors import HierarchicalPrior  # noqa: E402
from sklearn_bnn.samplers import HMC, NUTS, RMHMC, S3HMC, SGHMC, SGLD, sample  # noqa: E402
from sklearn_bnn.targets import FunctionalNetwork, Target  # noqa: E402

# --- data: small, fixed -----------------------------------------------------------------------


def _classification(n_classes=3):
    X, y = make_classification(
        n_samples=80,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        n_classes=n_classes,
        n_clusters_per_class=1,
        random_state=0,
    )
    return X[:60], y[:60], X[60:]


def _regression():
    X, y = make_regression(n_samples=80, n_features=3, noise=5.0, random_state=1)
    y = y / 30.0  # about unit scale: the MCMC regressors do not standardise y by default
    return X[:60], y[:60], X[60:]


# --- the cases ----------------------------------------------------------------------------------

BUDGET = dict(n_warmup=20, n_draws=20)  # the MCMC estimators' transitions
SMALL = dict(hidden_layer_sizes=(8,), init=MAPStart(n_steps=30))
TRAINED = dict(hidden_layer_sizes=(8,), max_iter=5, batch_size=20, n_predict_draws=10)


def _hmc(**kw):
    return HMC(n_steps=5, **kw)


def _fit(estimator, X, y, X_test):
    """Fit, then every prediction method the estimator has on ``X_test``."""
    estimator.fit(X, y)
    return _predictions(estimator, X_test)


def _predictions(estimator, X_test):
    out = {"fitted": _fitted(estimator)}
    out["predict"] = estimator.predict(X_test)
    if hasattr(estimator, "predict_proba"):
        out["predict_proba"] = estimator.predict_proba(X_test)
    else:
        out["predict_return_std"] = estimator.predict(X_test, return_std=True)
    if hasattr(estimator, "predict_samples"):
        out["predict_samples"] = estimator.predict_samples(X_test)
    return out


def _fitted(estimator):
    return {k: v for k, v in vars(estimator).items() if k.endswith("_") and not k.startswith("_")}


def case_hmc_classifier():  # calibration on (the default), HMC, one chain
    X, y, Xt = _classification()
    return _fit(HMCClassifier(**SMALL, **BUDGET, sampler=_hmc(), random_state=0), X, y, Xt)


def case_hmc_classifier_binary_no_calibration():
    X, y, Xt = _classification(n_classes=2)
    model = HMCClassifier(**SMALL, **BUDGET, sampler=_hmc(), calibration=None, random_state=1)
    return _fit(model, X, y, Xt)


def case_hmc_regressor_learned_noise_batched():  # n_chains=2 vectorized, noise Gibbs block
    X, y, Xt = _regression()
    model = HMCRegressor(**SMALL, **BUDGET, sampler=_hmc(), n_chains=2, random_state=2)
    return _fit(model, X, y, Xt)


def case_hmc_regressor_learned_noise_jobs():  # the same chains as joblib jobs, n_jobs=1
    X, y, Xt = _regression()
    model = HMCRegressor(**SMALL, **BUDGET, sampler=_hmc(), n_chains=2, n_jobs=1, random_state=2)
    return _fit(model, X, y, Xt)


def case_hmc_regressor_fixed_noise_no_rescale():
    X, y, Xt = _regression()
    model = HMCRegressor(
        **SMALL,
        **BUDGET,
        sampler=_hmc(),
        noise_precision=10.0,
        normalize_y=True,
        rescale_moves=False,
        n_chains=1,
        random_state=3,
    )
    return _fit(model, X, y, Xt)


def case_hmc_nuts():
    X, y, Xt = _classification()
    model = HMCClassifier(**SMALL, **BUDGET, sampler=NUTS(max_tree_depth=4), random_state=4)
    return _fit(model, X, y, Xt)


def case_hmc_rmhmc():
    X, y, Xt = _regression()
    model = HMCRegressor(
        hidden_layer_sizes=(3,),
        init=MAPStart(n_steps=30),
        n_warmup=10,
        n_draws=10,
        sampler=RMHMC(n_steps=3),
        n_chains=1,
        noise_precision=10.0,
        random_state=5,
    )
    return _fit(model, X, y, Xt)


def case_hmc_s3hmc():
    X, y, Xt = _classification()
    model = HMCClassifier(**SMALL, **BUDGET, sampler=S3HMC(n_steps=5), random_state=6)
    return _fit(model, X, y, Xt)


def case_hmc_hierarchical_prior():  # prior precisions (and the noise) as Gibbs blocks
    X, y, Xt = _regression()
    model = HMCRegressor(
        **SMALL,
        **BUDGET,
        sampler=_hmc(),
        prior_precision=HierarchicalPrior(),
        n_chains=2,
        random_state=7,
    )
    return _fit(model, X, y, Xt)


def case_hmc_chees():  # trajectory_length="auto": ChEES adapts the integration time
    X, y, Xt = _regression()
    sampler = HMC(trajectory_length="auto", max_steps=16)
    model = HMCRegressor(**SMALL, **BUDGET, sampler=sampler, n_chains=2, random_state=8)
    return _fit(model, X, y, Xt)


def case_hmc_warm_start():  # a fit, then its continuation with warm_start=True
    X, y, Xt = _classification()
    model = HMCClassifier(**SMALL, **BUDGET, sampler=_hmc(), warm_start=True, random_state=9)
    first = _fit(model, X, y, Xt)
    model.set_params(n_draws=10)
    return {"first": first, "continued": _fit(model, X, y, Xt)}


def case_hmc_regressor_warm_start():  # continues the chains and the learned noise
    X, y, Xt = _regression()
    model = HMCRegressor(
        **SMALL, **BUDGET, sampler=_hmc(), n_chains=2, warm_start=True, random_state=10
    )
    first = _fit(model, X, y, Xt)
    model.set_params(n_draws=10)
    return {"first": first, "continued": _fit(model, X, y, Xt)}


def case_split_hmc_classifier():
    X, y, Xt = _classification()
    model = SplitHMCClassifier(**SMALL, **BUDGET, sampler=_hmc(), n_splits=2, random_state=11)
    return _fit(model, X, y, Xt)


def case_split_hmc_regressor():
    X, y, Xt = _regression()
    model = SplitHMCRegressor(
        **SMALL, **BUDGET, sampler=_hmc(), n_splits=3, n_chains=2, random_state=12
    )
    return _fit(model, X, y, Xt)


def _sg(estimator_class, sampler, X, y, Xt, seed, **kw):
    model = estimator_class(
        **SMALL, n_warmup=10, n_draws=10, sampler=sampler, batch_size=20, random_state=seed, **kw
    )
    return _fit(model, X, y, Xt)


def case_sgmcmc_classifier_sghmc():
    return _sg(SGMCMCClassifier, SGHMC(), *_classification(), seed=13)


def case_sgmcmc_classifier_sgld():
    return _sg(SGMCMCClassifier, SGLD(), *_classification(), seed=14, calibration=None)


def case_sgmcmc_regressor_sghmc():
    return _sg(SGMCMCRegressor, SGHMC(), *_regression(), seed=15, n_cycles=2)


def case_sgmcmc_regressor_sgld():
    return _sg(SGMCMCRegressor, SGLD(), *_regression(), seed=16, n_chains=2)


def case_mc_dropout_classifier():  # a fixed rate, calibration on (the default)
    X, y, Xt = _classification()
    return _fit(MCDropoutClassifier(**TRAINED, dropout=0.1, random_state=17), X, y, Xt)


def case_mc_dropout_classifier_concrete():  # dropout="auto", no calibration
    X, y, Xt = _classification()
    model = MCDropoutClassifier(**TRAINED, dropout="auto", calibration=None, random_state=18)
    return _fit(model, X, y, Xt)


def case_mc_dropout_regressor():
    X, y, Xt = _regression()
    return _fit(MCDropoutRegressor(**TRAINED, random_state=19), X, y, Xt)


def case_loss_calibrated_bnn():
    X, y, Xt = _classification()
    utility = np.eye(3) + 0.2 * np.eye(3)[:, ::-1]
    model = LossCalibratedBNN(**TRAINED, utility=utility, n_train_draws=3, random_state=20)
    return _fit(model, X, y, Xt)


def case_plannet_regressor():
    X, y, Xt = _regression()
    model = PlanNetRegressor(
        hidden_layer_sizes=(8,),
        n_estimators=2,
        max_iter=5,
        batch_size=20,
        n_predict_draws=5,
        device="cpu",
        random_state=21,
    )
    out = _fit(model, X, y, Xt)
    out["sample_y"] = model.sample_y(Xt, n_draws=3, random_state=0)
    return out


def _log_density(theta):
    """A correlated 3-D Gaussian with a heavier fourth moment along one axis."""
    prec = torch.tensor([[2.0, -0.8, 0.0], [-0.8, 1.5, 0.3], [0.0, 0.3, 1.0]], dtype=theta.dtype)
    return -0.5 * theta @ prec @ theta - 0.1 * theta[0] ** 4


def _sample(sampler, seed, **kw):
    result = sample(
        _log_density,
        torch.zeros(3, dtype=torch.float64),
        sampler,
        n_warmup=30,
        n_draws=30,
        n_chains=2,
        random_state=seed,
        **kw,
    )
    return {"result": result}


def case_sample_hmc():
    return _sample("hmc", 22)


def case_sample_hmc_object_jobs():
    return _sample(HMC(n_steps=7, step_jitter=0.2), 23, n_jobs=1)


def case_sample_nuts():
    return _sample("nuts", 24)


def case_sample_gibbs():
    """``sample()`` on a network target that declares Gibbs blocks: a linear regression whose
    weight precision and noise precision are drawn exactly between HMC transitions."""
    X, y, _ = _regression()
    net = FunctionalNetwork(nn.Linear(3, 1, bias=False), dtype=torch.float64)
    target = Target(net, X, torch.as_tensor(y)[:, None], Gaussian(1.0), HierarchicalPrior())
    result = sample(
        target,
        torch.zeros(3, dtype=torch.float64),
        HMC(n_steps=5),
        n_warmup=30,
        n_draws=30,
        n_chains=2,
        random_state=25,
    )
    return {"result": result}


CASES = {
    name[len("case_") :]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")
}


# --- flattening what a case returns into named arrays -------------------------------------------


def _flatten(prefix: str, obj, out: dict) -> None:
    """Numeric leaves of ``obj`` as numpy arrays under '/'-joined names."""
    if obj is None:
        return
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj.detach().cpu().numpy()
    elif isinstance(obj, np.ndarray):
        if obj.dtype != object:
            out[prefix] = obj
        else:
            for i, item in enumerate(obj.ravel()):
                _flatten(f"{prefix}/{i}", item, out)
    elif isinstance(obj, (bool, int, float, str, np.generic)):
        out[prefix] = np.asarray(obj)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _flatten(f"{prefix}/{key}", value, out)
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            _flatten(f"{prefix}/{i}", item, out)
    elif isinstance(obj, PosteriorSamples):
        for field in ("draws", "log_prob", "stats", "info", "names", "shapes"):
            _flatten(f"{prefix}/{field}", getattr(obj, field), out)
    elif isinstance(obj, nn.Module):
        _flatten(prefix, dict(obj.state_dict()), out)
    elif hasattr(obj, "module_") and isinstance(obj.module_, nn.Module):  # a skorch net
        _flatten(prefix, dict(obj.module_.state_dict()), out)


def run_case(name: str) -> dict:
    torch.manual_seed(0)
    np.random.seed(0)  # noqa: NPY002 - the legacy global state, in case anything reads it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short runs warn about R-hat and divergences
        raw = CASES[name]()
    out: dict = {}
    _flatten(name, raw, out)
    return out


def run_all(names) -> tuple[dict, dict]:
    """All entries of the given cases, and each case's error text (only for cases that
    raised)."""
    entries, errors = {}, {}
    for name in names:
        start = time.perf_counter()
        try:
            found = run_case(name)
        except Exception:  # noqa: BLE001 - reported per case, the others still run
            errors[name] = traceback.format_exc()
            print(f"{name:48s} ERROR", flush=True)
            continue
        entries.update(found)
        print(
            f"{name:48s} {len(found):4d} entries {time.perf_counter() - start:6.1f} s", flush=True
        )
    return entries, errors


def _meta() -> dict:
    return {
        "__meta__/torch": torch.__version__,
        "__meta__/numpy": np.__version__,
        "__meta__/python": platform.python_version(),
        "__meta__/machine": platform.machine(),
        "__meta__/sklearn_bnn": sklearn_bnn.__version__,
    }


# --- comparison ---------------------------------------------------------------------------------


def _difference(old: np.ndarray, new: np.ndarray) -> str | None:
    """None when equal bit for bit (NaNs in the same places count as equal); otherwise a short
    description with the largest absolute difference."""
    if old.shape != new.shape:
        return f"shape {old.shape} -> {new.shape}"
    if old.dtype != new.dtype:
        return f"dtype {old.dtype} -> {new.dtype}"
    if old.dtype.kind in "fc":
        if np.array_equal(old, new, equal_nan=True):
            return None
        diff = np.abs(old.astype(np.complex128) - new.astype(np.complex128))
        finite = diff[np.isfinite(diff)]
        worst = finite.max() if finite.size else float("nan")
        changed = int((~((old == new) | (np.isnan(old) & np.isnan(new)))).sum())
        return f"max abs diff {worst:.3e} ({changed} of {old.size} values)"
    if np.array_equal(old, new):
        return None
    if old.dtype.kind in "iub":
        diff = np.abs(old.astype(np.float64) - new.astype(np.float64))
        return f"max abs diff {diff.max():.3e} ({int((old != new).sum())} of {old.size} values)"
    return f"{old.ravel()[:3]} -> {new.ravel()[:3]}"


def compare(reference: dict, entries: dict, errors: dict, names, quiet: bool) -> int:
    """Print the comparison; the number of failures."""
    failures = 0
    for name in names:
        if name in errors:
            print(f"FAIL {name}: raised\n{errors[name]}")
            failures += 1
    prefixes = tuple(f"{name}/" for name in names)
    for key in sorted(k for k in reference if k.startswith(prefixes)):
        case = key.split("/", 1)[0]
        if case in errors:
            continue
        old = reference[key]
        if key not in entries:
            print(f"FAIL {key}: missing")
            failures += 1
            continue
        problem = _difference(old, np.asarray(entries[key]))
        if problem is not None:
            print(f"FAIL {key} {old.shape}: {problem}")
            failures += 1
        elif not quiet:
            print(f"ok   {key} {old.shape}: -")
    extra = sorted(k for k in entries if k not in reference)
    for key in extra:
        print(f"new  {key} {np.shape(entries[key])} (not in the reference; not compared)")
    unknown = [n for n in names if not any(k.startswith(f"{n}/") for k in reference)]
    for name in unknown:
        if name not in errors:
            print(f"new  case {name} (not in the reference)")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", help="write the fingerprint to this .npz file")
    mode.add_argument("--compare", help="rerun and compare with this .npz file")
    mode.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), help="only these cases")
    parser.add_argument("--quiet", action="store_true", help="--compare: print only differences")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(sorted(CASES)))
        return 0
    torch.set_num_threads(1)
    names = args.cases or sorted(CASES)
    print(f"sklearn_bnn from {Path(sklearn_bnn.__file__).parent}")
    start = time.perf_counter()
    entries, errors = run_all(names)
    print(f"{len(names)} cases, {len(entries)} entries, {time.perf_counter() - start:.1f} s")
    if args.out:
        if errors:
            for name, text in errors.items():
                print(f"{name} raised:\n{text}", file=sys.stderr)
            print("no fingerprint written", file=sys.stderr)
            return 1
        np.savez(args.out, **entries, **_meta())
        print(f"wrote {args.out}")
        return 0
    with np.load(args.compare, allow_pickle=False) as stored:
        reference = {k: stored[k] for k in stored.files}
    for key, value in _meta().items():
        old = str(reference.pop(key, ""))
        if old != value:
            print(f"warning: {key} was {old!r}, now {value!r}: equality is not expected")
    reference = {k: v for k, v in reference.items() if not k.startswith("__meta__/")}
    failures = compare(reference, entries, errors, names, args.quiet)
    if failures:
        print(f"FAILED: {failures} entries or cases differ")
        return 1
    print(f"PASSED: {sum(k.split('/', 1)[0] in names for k in reference)} entries equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
