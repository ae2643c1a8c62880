"""The package's ConvergenceWarning behaves as scikit-learn users expect.

It is scikit-learn's class (filters on either silence it or turn it into an error), a fit
gives at most one, it names the line that called ``fit`` through ``Pipeline`` and
``GridSearchCV``, chains run as joblib jobs report theirs through the caller, the convergence
check separates drifting chains (warned) from chains in different modes (reported), and the
trained family warns when training runs out of epochs (docs/messages.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import joblib
import numpy as np
import pytest
import sklearn.exceptions
import torch
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import sklearn_bnn
from sklearn_bnn import HMCClassifier, MCDropoutClassifier
from sklearn_bnn.diagnostics import format_summary
from sklearn_bnn.estimators._sampling_report import _rhat_message, convergence_check
from sklearn_bnn.estimators._skorch import stopping_epoch
from sklearn_bnn.samplers import HMC, sample

THIS_FILE = os.path.realpath(__file__)


def _unconverged(**params):
    """An HMC classifier far from converged: 5 warmup and 12 kept transitions of one chain.
    Its within-chain R-hat was 1.8-2.5 over random_state 0-9, far past the warning's 1.1."""
    settings = dict(
        hidden_layer_sizes=(4,),
        sampler=HMC(n_steps=5),
        calibration=None,
        init="random",
        n_warmup=5,
        n_draws=12,
        random_state=0,
    )
    return HMCClassifier(**{**settings, **params})


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


def _convergence(caught):
    return [w for w in caught if issubclass(w.category, sklearn.exceptions.ConvergenceWarning)]


def test_the_class_is_scikit_learns():
    assert issubclass(sklearn_bnn.ConvergenceWarning, sklearn.exceptions.ConvergenceWarning)
    assert sklearn_bnn.exceptions.ConvergenceWarning is sklearn_bnn.ConvergenceWarning
    assert "ConvergenceWarning" in sklearn_bnn.__all__


def test_a_pipeline_fit_warns_once_at_the_callers_line(iris):
    X, y = iris
    pipe = make_pipeline(StandardScaler(), _unconverged())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe.fit(X, y)  # the line named
    (warning,) = _convergence(caught)
    assert warning.category is sklearn_bnn.ConvergenceWarning
    assert os.path.realpath(warning.filename) == THIS_FILE, warning.filename
    assert "pipe.fit(X, y)" in open(THIS_FILE).read().splitlines()[warning.lineno - 1]
    assert str(warning.message).startswith("R-hat")


def test_a_grid_search_gives_one_warning_per_fit_each_at_the_callers_line(iris):
    """2 candidates x 2 folds and the refit: five fits, five warnings, each naming the
    ``search.fit`` line (not sklearn/pipeline.py, joblib or the model selection code)."""
    X, y = iris
    pipe = make_pipeline(StandardScaler(), _unconverged())
    grid = {"hmcclassifier__prior_precision": [1.0, 2.0]}
    search = GridSearchCV(pipe, grid, cv=2, n_jobs=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.fit(X, y)  # the line named
    found = _convergence(caught)
    assert len(found) == 5, [str(w.message)[:60] for w in found]
    lines = open(THIS_FILE).read().splitlines()
    for warning in found:
        assert os.path.realpath(warning.filename) == THIS_FILE, warning.filename
        assert "search.fit(X, y)" in lines[warning.lineno - 1]


def test_scikit_learns_filters_silence_it_or_make_it_an_error(iris):
    X, y = iris
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=sklearn.exceptions.ConvergenceWarning)
        _unconverged().fit(X, y)
    assert not caught, [str(w.message)[:60] for w in caught]
    clf = _unconverged(calibration="temperature")
    with warnings.catch_warnings():
        warnings.simplefilter("error", sklearn.exceptions.ConvergenceWarning)
        with pytest.raises(sklearn_bnn.ConvergenceWarning, match="R-hat") as info:
            clf.fit(X, y)
    # raised once the fit is stored, like scikit-learn's estimators: the fit can be inspected;
    # and it is the final stage's (the calibration stage's R-hat is not the fit's)
    within = max(
        clf.diagnostics_["rhat_within_log_prob"], clf.diagnostics_["rhat_within_predictions_max"]
    )
    assert str(info.value).startswith(f"R-hat {within:.2f} > 1.1")
    assert clf.calibration_posterior_.shape[0] == 2


def _nan_trap(theta):
    """A standard normal, except on x0 > 4 where the gradient is NaN: every proposal from
    there diverges (tests/samplers/test_warmup_rescue.py)."""
    x0 = theta[0]
    inside = x0 > 4.0
    nan_grad = torch.sqrt(torch.where(inside, x0 - x0, torch.ones_like(x0)))
    trapped = -0.5 * ((x0 - 8.0) ** 2 + theta[1] ** 2) - 30.0 + nan_grad
    return torch.where(inside, trapped, -0.5 * (theta**2).sum())


def test_chains_run_as_jobs_give_one_warning_naming_each_chain():
    """Chains 1 and 2 start in the trap and, each alone in its job, cannot be restarted from a
    healthy chain: their warmups stall. The jobs run in worker threads, where the caller's
    collection does not reach; their warnings come back with the results, as one."""
    start = torch.zeros(3, 2, dtype=torch.float64)
    start[1:, 0] = 8.0
    with warnings.catch_warnings(record=True) as caught, joblib.parallel_config("threading"):
        warnings.simplefilter("always")
        sample(
            _nan_trap, start, HMC(n_steps=5), n_warmup=60, n_draws=5, n_chains=3, n_jobs=2,
            random_state=0,
        )  # fmt: skip
    (warning,) = _convergence(caught)
    message = str(warning.message)
    assert "chain 1: the chain ended warmup stalled" in message
    assert "chain 2: the chain ended warmup stalled" in message
    assert "chain 0" not in message
    assert os.path.realpath(warning.filename) == THIS_FILE


def test_worker_processes_follow_the_callers_filter():
    """A grid search over processes (scikit-learn's Parallel hands them the caller's filters)
    and chains run as loky jobs (theirs come back to the caller): nothing is printed."""
    script = textwrap.dedent(
        """
        import warnings
        from sklearn.datasets import load_iris
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.model_selection import GridSearchCV
        from sklearn_bnn import HMCClassifier
        from sklearn_bnn.samplers import HMC

        warnings.filterwarnings("ignore", category=ConvergenceWarning)
        X, y = load_iris(return_X_y=True)
        est = HMCClassifier(hidden_layer_sizes=(4,), sampler=HMC(n_steps=5), calibration=None,
                            init="random", n_warmup=5, n_draws=12, random_state=0)
        GridSearchCV(est, {"prior_precision": [1.0, 2.0]}, cv=2, n_jobs=2).fit(X, y)
        est.set_params(n_chains=2, n_jobs=2).fit(X, y)
        print("done")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    assert "ConvergenceWarning" not in done.stderr and "R-hat" not in done.stderr, done.stderr


# -- the check ---------------------------------------------------------------------------
def _chains(offsets, trend=0.0, n_draws=400, n_quantities=3, seed=0):
    """Log densities (C, S) and quantities (C, S, Q): stationary AR(1) draws around each
    chain's offset, plus a trend of ``trend`` (per chain) over the run."""
    rng = np.random.default_rng(seed)
    offsets, trend = np.asarray(offsets, float), np.broadcast_to(trend, len(offsets))
    e = rng.normal(size=(len(offsets), n_draws, n_quantities + 1))
    x = np.zeros_like(e)
    for t in range(1, n_draws):
        x[:, t] = 0.5 * x[:, t - 1] + e[:, t]
    x += offsets[:, None, None] + trend[:, None, None] * np.linspace(0, 1, n_draws)[:, None]
    return x[..., 0], x[..., 1:]


def _diag(check, n_chains):
    return {
        **check,
        "n_chains": n_chains,
        "n_draws": 400 * n_chains,
        "n_grad_evals": 0,
        "step_size": np.ones(n_chains),
        "acceptance_rate": np.ones(n_chains),
        "n_divergent": 0,
        "n_divergent_warmup": 0,
        "ess_bulk_log_prob": 100.0,
        "ess_tail_log_prob": 100.0,
        "ess_bulk_predictions_min": 100.0,
    }


@pytest.mark.parametrize("seed", range(3))
def test_chains_in_different_modes_are_reported_not_warned(seed):
    """Two stationary chains 4 sd apart: each has converged, together they disagree. Running
    longer would not change that, so no warning; diagnostics_ and summary() say it."""
    check = convergence_check(*_chains([0.0, 4.0], seed=seed))
    assert check["rhat_log_prob"] > 1.5 and check["rhat_predictions_max"] > 1.5
    assert check["rhat_within_predictions_max"] < 1.05 and max(check["rhat_per_chain"]) < 1.05
    assert check["converged"] and check["chains_disagree"]
    diag = _diag(check, 2)
    assert _rhat_message(diag, continuing=False) is None
    assert "the chains settled in different modes" in format_summary("M", diag)


@pytest.mark.parametrize("seed", range(3))
def test_drifting_chains_are_warned_and_named(seed):
    """Chain 0 drifts by 6 sd over its run, chain 1 does not: both the within-chain R-hat and
    chain 0's own flag it."""
    check = convergence_check(*_chains([0.0, 0.0], trend=[6.0, 0.0], seed=seed))
    assert check["rhat_per_chain"][0] > 1.3 > 1.05 > check["rhat_per_chain"][1]
    assert check["rhat_within_predictions_max"] > 1.1
    assert not check["converged"] and not check["chains_disagree"]
    diag = _diag(check, 2)
    message = _rhat_message(diag, continuing=False)
    assert "the draws have not converged" in message and "within chain 0 of 2" in message
    assert "increase n_warmup or n_draws" in message
    summary = format_summary("M", diag)
    assert "not converged" in summary and "chain(s) 0)" in summary


@pytest.mark.parametrize("seed", range(3))
def test_one_drifting_chain_among_stationary_ones_is_not_diluted(seed):
    """Chain 0 of 4 drifts (its own R-hat 1.18 or more over seeds 0-39): pooling the four
    chains' halves dilutes it under 1.1 within the chains (at most 1.09), but with the chains
    together above 1.1 (1.13 or more) the drifting chain is not taken for a mode."""
    check = convergence_check(*_chains([0.0] * 4, trend=[2.5, 0, 0, 0], seed=seed))
    assert check["rhat_per_chain"][0] > 1.15 and max(check["rhat_per_chain"][1:]) < 1.1
    assert check["rhat_within_predictions_max"] < 1.1 < check["rhat_predictions_max"]
    assert not check["converged"] and not check["chains_disagree"]
    assert "within chain 0 of 4" in _rhat_message(_diag(check, 4), continuing=False)


def test_for_one_chain_the_check_is_the_split_rhat():
    """One chain: the within-chain and the chain's own R-hat are the split R-hat, which warns
    above 1.1 as it always has."""
    lp, ref = _chains([0.0], trend=2.0)
    check = convergence_check(lp, ref)
    assert check["rhat_within_log_prob"] == check["rhat_log_prob"]
    assert check["rhat_within_predictions_max"] == check["rhat_predictions_max"] > 1.1
    assert check["rhat_per_chain"][0] == max(check["rhat_log_prob"], check["rhat_predictions_max"])
    assert not check["chains_disagree"]
    assert _rhat_message(_diag(check, 1), continuing=True).startswith("R-hat")


# -- the trained family ------------------------------------------------------------------
def test_the_stopping_rule_is_early_stoppings():
    assert stopping_epoch([3.0, 2.0, 1.0], patience=1) is None
    assert stopping_epoch([1.0, 2.0, 1.0, 1.5], patience=2) == 3
    assert stopping_epoch([1.0, 2.0, 0.5, 1.5, 0.7], patience=2) == 5
    # an improvement by no more than tol does not count
    assert stopping_epoch([1.0, 0.99995], patience=1, tol=1e-4) == 2
    assert stopping_epoch([1.0, 0.9998], patience=1, tol=1e-4) is None
    assert stopping_epoch([], patience=1) is None


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_training_cut_by_max_iter_warns_as_mlpclassifier_does(cancer):
    """30 epochs of MC dropout on breast cancer: the training loss still falls at the end
    (new lows within the last 10 epochs on seeds 0 and 1)."""
    X, y = cancer
    clf = MCDropoutClassifier(hidden_layer_sizes=(16,), max_iter=30, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y)
    (warning,) = _convergence(caught)  # one, though calibration trains twice
    assert warning.category is sklearn_bnn.ConvergenceWarning
    assert os.path.realpath(warning.filename) == THIS_FILE
    message = str(warning.message)
    assert message.startswith("MCDropoutClassifier stopped at max_iter=30 epochs")
    assert "training loss" in message and "raise max_iter" in message
    assert clf.n_iter_ == 30 and stopping_epoch(clf.loss_curve_, 10) is None


def test_training_stopped_by_its_rule_does_not_warn(cancer):
    """Early stopping ends this training after 9-29 epochs (seeds 0-4), with no warning."""
    X, y = cancer
    clf = MCDropoutClassifier(
        hidden_layer_sizes=(16,),
        learning_rate_init=0.01,
        early_stopping=True,
        n_iter_no_change=3,
        random_state=0,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y)
    assert not _convergence(caught)
    assert clf.n_iter_ < clf.max_iter
