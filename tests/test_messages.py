"""Every warning of the package, triggered from a real state, gives advice possible from it.

docs/messages.md lists the warnings (and the errors that give advice) with their triggers; each
test here reaches one of those states through the public interface and checks the message
against it: the divergence warning under ``step_size="auto"`` does not tell to use "auto", the
R-hat warning of a continued fit does not ask for a warmup it cannot run, and so on.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

import sklearn_bnn
from sklearn_bnn import HMCClassifier, SGMCMCClassifier, targets
from sklearn_bnn.estimators._sampling_report import _divergence_advice
from sklearn_bnn.samplers import HMC, NUTS, BridgedHMC, DenseMetric, run_chains, sample
from sklearn_bnn.samplers._base import Info, Kernel, State
from sklearn_bnn.samplers.hamiltonian.s3hmc import S3HMC
from sklearn_bnn.targets import FunctionTarget

PACKAGE_DIR = str(Path(sklearn_bnn.__file__).resolve().parent)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _caught(fn):
    """Run ``fn`` (one call of the package) and return (its result, the messages of the
    warnings it gave), checking that every warning names the line that called the package
    (this file), not a line inside it: the same warning is reached at different depths from
    ``fit``, the calibrated ``fit``, ``sample()`` and the targets. And that the call gave at
    most one ConvergenceWarning, of the package's class: a fit's convergence problems come
    in one warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    # a dependency's deprecation notice may name the package's line that calls it: a newer
    # numpy or scikit-learn is no fault of these messages
    churn = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
    inside = [
        (w.filename, w.lineno, str(w.message)[:60])
        for w in caught
        if w.filename.startswith(PACKAGE_DIR) and not issubclass(w.category, churn)
    ]
    assert not inside, inside
    convergence = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert len(convergence) <= 1, [str(w.message)[:80] for w in convergence]
    assert all(w.category is sklearn_bnn.ConvergenceWarning for w in convergence)
    return result, [str(w.message) for w in caught]


def _one(messages, pattern):
    found = [m for m in messages if re.search(pattern, m)]
    assert len(found) == 1, messages
    return found[0]


# -- divergences ------------------------------------------------------------------------------
SMALL = dict(hidden_layer_sizes=(16,), calibration=None, random_state=0)


def test_divergences_at_an_adapted_step_size_advise_a_higher_target_accept(iris):
    """The issue's case: the step size was adapted (step_size='auto'), so 'use auto' is not a
    remedy; raising target_accept (which shrinks the adapted step) is."""
    X, y = iris
    sampler = HMC(n_steps=10, target_accept=0.3)
    clf = HMCClassifier(**SMALL, sampler=sampler, n_warmup=50, n_draws=50)
    _, messages = _caught(lambda: clf.fit(X, y))
    message = _one(messages, "diverged")
    assert clf.sampler.step_size == "auto" and clf._step_size_origin == "adapted"
    assert "step_size='auto'" not in message and "use auto" not in message
    assert "adapted in warmup" in message
    aim = float(re.search(r"target_accept \(0\.30 now, e\.g\. to ([0-9.]+)\)", message).group(1))
    assert aim > clf.sampler.target_accept  # a higher target: possible, it shrinks the step
    assert "n_warmup" in message


def test_divergences_at_a_given_step_size_advise_lowering_it_or_auto(iris):
    X, y = iris
    clf = HMCClassifier(**SMALL, sampler=HMC(n_steps=10, step_size=0.5), n_warmup=10, n_draws=20)
    _, messages = _caught(lambda: clf.fit(X, y))
    message = _one(messages, "diverged")
    assert clf._step_size_origin == "given"
    assert "step_size given (0.5)" in message and "step_size='auto'" in message
    assert "target_accept" not in message  # it does nothing at a given step size


def test_a_sampler_with_its_own_step_size_is_told_to_take_a_smaller_number(iris):
    """Stochastic-gradient samplers choose their step themselves (adapts_step_size False):
    neither 'auto' (what chose it) nor target_accept (which they ignore) would help."""
    X, y = iris
    clf = SGMCMCClassifier(
        hidden_layer_sizes=(8,), batch_size=32, n_warmup=2, n_draws=2, random_state=0
    )
    _caught(lambda: clf.fit(X, y))
    assert clf._step_size_origin == "kernel"
    message = _divergence_advice("kernel", 0.1, None)
    assert "smaller numeric step_size" in message
    assert "auto" not in message and "target_accept" not in message


def test_at_the_highest_target_accept_the_advice_does_not_ask_to_raise_it():
    message = _divergence_advice("adapted", 1e-3, 0.99)
    assert "raise" not in message and "n_warmup" in message


# -- convergence -----------------------------------------------------------------------------
def test_rhat_of_a_fresh_fit_and_of_a_continued_one(iris):
    """A fresh fit may run a longer warmup; a warm-started one runs none, so its advice is to
    continue the chains (or start afresh)."""
    X, y = iris
    clf = HMCClassifier(**SMALL, sampler=HMC(n_steps=5), n_warmup=15, n_draws=15, warm_start=True)
    _, messages = _caught(lambda: clf.fit(X, y))
    fresh = _one(messages, "R-hat")
    # more chains would not make a drifting chain converge: not advised
    assert "increase n_warmup or n_draws" in fresh and "n_chains" not in fresh
    assert "warm_start=True" in fresh
    _, messages = _caught(lambda: clf.fit(X, y))
    continued = _one(messages, "R-hat")
    assert "warm_start=True" in continued and "increase n_warmup" not in continued


@pytest.mark.parametrize("estimator", ["HMCRegressor", "SplitHMCRegressor", "SGMCMCClassifier"])
def test_rhat_names_the_fit_call_on_every_estimator_path(iris, estimator):
    """The regressors' and the split and SG estimators' fits reach the R-hat warning through
    other frames than the classifier's (it named sklearn_bnn/estimators/_base.py before);
    ``_caught`` checks that it names this file. At 5 + 12 transitions the within-chain R-hat
    was 1.37-2.12 (HMCRegressor's four chains), 2.1-2.4 and 2.1 over random_state 0-4, far
    past the warning's 1.1."""
    X, y = iris
    model = getattr(sklearn_bnn, estimator)(
        hidden_layer_sizes=(16,), n_warmup=5, n_draws=12, random_state=0
    )
    _, messages = _caught(lambda: model.fit(X, y if estimator.endswith("Classifier") else X[:, 0]))
    # the advice names the budget (the calibrated classifier's final stage continues its
    # chains, so its advice is the continued fit's: fit again, or a larger n_warmup)
    assert "n_warmup" in _one(messages, "R-hat")


# -- warmup ----------------------------------------------------------------------------------
def _nan_trap(theta):
    """A standard normal, except on x0 > 4 where the gradient is NaN: every proposal from
    there diverges (tests/samplers/test_warmup_rescue.py)."""
    x0 = theta[0]
    main = -0.5 * (theta**2).sum()
    inside = x0 > 4.0
    nan_grad = torch.sqrt(torch.where(inside, x0 - x0, torch.ones_like(x0)))
    trapped = -0.5 * ((x0 - 8.0) ** 2 + theta[1] ** 2) - 30.0 + nan_grad
    return torch.where(inside, trapped, main)


def _trapped_starts(n_chains, trapped):
    start = 0.3 * torch.randn(n_chains, 2, generator=torch.Generator().manual_seed(0))
    start = start.double()
    start[trapped, 0] = 8.0
    return start


def _sample_trap(start, **settings):
    return sample(
        _nan_trap,
        start,
        HMC(n_steps=10, adapt_mass=True, **settings),
        n_warmup=200,
        n_draws=50,
        n_chains=start.shape[0],
        random_state=0,
    )


def test_a_restarted_chain_is_reported_without_advice_to_act():
    _, messages = _caught(lambda: _sample_trap(_trapped_starts(4, 2)))
    message = _one(messages, "warmup restarted")
    assert "chain 2" in message and "sampling phase is exact" in message


def test_a_stalled_chain_is_told_to_give_a_numeric_step_size_which_it_did_not():
    start = _trapped_starts(1, 0)
    _, messages = _caught(lambda: _sample_trap(start))  # step_size="auto": adapted
    message = _one(messages, "ended warmup stalled")
    assert "give a numeric step_size" in message
    # and the remedy is possible: a numeric step is not adapted, so nothing stalls in warmup
    _, messages = _caught(lambda: _sample_trap(start, step_size=0.1))
    assert not [m for m in messages if "stalled" in m]


def test_mass_adaptation_beside_a_fixed_metric_says_the_metric_wins():
    cov = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    _, messages = _caught(
        lambda: sample(
            lambda t: -0.5 * t @ torch.linalg.solve(cov, t),
            torch.zeros(2, dtype=torch.float64),
            NUTS(metric=DenseMetric(cov), adapt_mass=True),
            n_warmup=20,
            n_draws=5,
            n_chains=1,
            random_state=0,
        )
    )
    assert "the sampler has a fixed metric, which wins" in _one(messages, "adapt_mass=True")


# -- interruption and fallbacks --------------------------------------------------------------
class _Interrupting(Kernel):
    """Stays put; the third sampling transition raises KeyboardInterrupt (Ctrl-C)."""

    adapts_step_size = False
    step_size = 0.1

    def __init__(self):
        self.n = 0

    def init(self, position, generator=None, *, n_warmup=0):
        position = position.reshape(1, -1)
        return State(position, torch.zeros(1), torch.zeros_like(position))

    def step(self, state, generator, step_size=None, inv_mass=None):
        self.n += 1
        if self.n == 3:
            raise KeyboardInterrupt
        one = torch.ones(1)
        return state, Info(one, one.bool(), 0 * one, 0 * one.bool(), 0.1 * one, 1)


def test_an_interruption_says_what_is_kept():
    kernel = _Interrupting()
    run, messages = _caught(
        lambda: run_chains(kernel, kernel.init(torch.zeros(2)), None, n_warmup=0, n_draws=10)
    )
    message = _one(messages, "interrupted")
    assert "after 2 of 10 draws" in message and "keeps the 2 draws" in message
    assert run.interrupted and run.draws.shape[1] == 2


def test_a_function_vmap_cannot_batch_is_evaluated_chain_by_chain():
    def with_item(theta):
        return -0.5 * (theta**2).sum() * (1.0 if theta.sum().item() > 0 else 2.0)

    target = FunctionTarget(with_item, 2, dtype=torch.float64)
    _, messages = _caught(lambda: target.value_and_grad(torch.ones(2, 2, dtype=torch.float64)))
    assert "one at a time" in _one(messages, "could not be batched")


# -- bridged HMC ----------------------------------------------------------------------------
def _bridged(split_coords):
    sampler = BridgedHMC(split_coords=split_coords, n_steps=5, min_overlap=1.0)
    return _caught(
        lambda: sample(
            lambda t: -0.5 * (t**2 * torch.tensor([1.0, 0.25], dtype=t.dtype)).sum(),
            torch.zeros(2, dtype=torch.float64),
            sampler,
            n_warmup=20,
            n_draws=20,
            n_chains=1,
            random_state=0,
        )
    )[1]


def test_bridged_boxes_with_few_draws_are_told_to_draw_more():
    assert "increase n_draws" in _one(_bridged([0]), "min_box_draws")


def test_bridged_overlap_advice_fits_the_number_of_boxes():
    two = _one(_bridged([0]), "barely overlaps")  # one split: already the fewest boxes
    assert "fewer boxes" not in two and "plain HMC chains" in two
    four = _one(_bridged([0, 1]), "barely overlaps")
    assert "fewer boxes (split_coords or n_split_params)" in four


# -- errors that give advice -----------------------------------------------------------------
def test_s3hmc_on_a_plain_function_names_targets_it_can_take():
    """Only the public driver reaches this error (the estimators hand S3HMC a network target,
    which it extends): the advice names targets, not an estimator's parameter."""
    with pytest.raises(ValueError, match="network Target") as info:
        sample(lambda t: -(t**2).sum(), torch.zeros(2), S3HMC(), n_warmup=2, n_draws=2)
    assert "hierarchical_target" in str(info.value)
    assert callable(targets.hierarchical_target)  # the function the message names exists
