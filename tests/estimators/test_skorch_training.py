"""The gradient-trained estimators on skorch: callbacks, parameter names, bad input."""

import numpy as np
import pytest
from sklearn.datasets import load_iris
from skorch.callbacks import Callback, EarlyStopping, LRScheduler

from sklearn_bnn import MCDropoutClassifier, MCDropoutRegressor, PlanNetRegressor

SMALL = dict(hidden_layer_sizes=(8,), n_predict_draws=5, random_state=0)
PLAN = dict(hidden_layer_sizes=(8,), n_estimators=1, n_predict_draws=4, random_state=0)


def sine(n=256, noise=0.05, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 1))
    return X, np.sin(2 * X[:, 0]) + noise * rng.normal(size=n)


class LearningRates(Callback):
    """Records the optimizer's learning rate at the start of every epoch."""

    def __init__(self):
        self.seen = []

    def on_epoch_begin(self, net, **kwargs):
        self.seen.append(net.optimizer_.param_groups[0]["lr"])


SEEN = []


class SharedLearningRates(LearningRates):
    """Callbacks are copied at fit, so this one reports to a module-level list."""

    def on_epoch_begin(self, net, **kwargs):
        SEEN.append(net.optimizer_.param_groups[0]["lr"])


@pytest.mark.parametrize(
    "make",
    [
        lambda cb: MCDropoutRegressor(max_iter=6, learning_rate_init=0.1, callbacks=cb, **SMALL),
        lambda cb: PlanNetRegressor(
            max_iter=6, learning_rate_init=0.1, early_stopping=False, callbacks=cb, **PLAN
        ),
    ],
)
def test_user_lr_scheduler_takes_effect(make):
    SEEN.clear()
    sched = LRScheduler(policy="StepLR", step_size=2, gamma=0.5)
    est = make([sched, SharedLearningRates()])
    est.fit(*sine(64))
    np.testing.assert_allclose(SEEN, [0.1, 0.1, 0.05, 0.05, 0.025, 0.025])
    # the estimator's own parameter is not changed by the fit (callbacks are copied)
    assert est.callbacks[0] is sched and not hasattr(sched, "lr_scheduler_")


def test_user_early_stopping_takes_effect_and_holds_out_data():
    X, y = sine(200, noise=0.5)
    stop = EarlyStopping(monitor="valid_loss", patience=3, threshold=0.0)
    reg = MCDropoutRegressor(max_iter=500, learning_rate_init=0.05, callbacks=[stop], **SMALL)
    reg.fit(X, y)  # early_stopping=False: the callback alone asks for validation data
    assert reg.n_iter_ < 500
    assert len(reg.validation_loss_curve_) == reg.n_iter_
    best = int(np.argmin(reg.validation_loss_curve_))
    assert reg.n_iter_ == best + 1 + 3

    stop = EarlyStopping(monitor="train_loss", patience=2, threshold=10.0, threshold_mode="abs")
    plan = PlanNetRegressor(max_iter=50, early_stopping=False, callbacks=[stop], **PLAN)
    assert plan.fit(X, y).n_iter_[0] == 3


def test_bad_callbacks_refused():
    X, y = sine(30)
    with pytest.raises(ValueError, match="callbacks"):
        MCDropoutRegressor(callbacks=["nope"], **SMALL).fit(X, y)


def test_learned_noise_converges_in_the_default_budget():
    """Sine + 0.05 noise, 256 points, defaults: the learned noise is the ELBO's optimum.

    Before, log tau started at 0 and moved by about the learning rate per Adam step (learned
    noise sd 0.50, train RMSE 0.27). Now it is the maximiser given the network: the RMS of the
    training residuals with dropout on (what the dropout draws reproduce); without dropout that
    is the true noise.
    """
    X, y = sine()
    reg = MCDropoutRegressor(random_state=0).fit(X, y)
    sd = 1 / np.sqrt(reg.noise_precision_[0])
    mc_rms = np.sqrt(np.mean((reg.predict_samples(X) - y) ** 2))
    assert sd == pytest.approx(mc_rms, rel=0.2)
    assert np.sqrt(np.mean((reg.predict(X) - y) ** 2)) < 0.15
    plain = MCDropoutRegressor(dropout=0.0, random_state=0).fit(X, y)
    assert 1 / np.sqrt(plain.noise_precision_[0]) == pytest.approx(0.05, rel=0.2)


def test_noise_is_in_units_of_y():
    X, y = sine(100)
    a = MCDropoutRegressor(max_iter=20, noise_precision=4.0, **SMALL).fit(X, y)
    b = MCDropoutRegressor(max_iter=20, noise_precision=4.0 / 100, **SMALL).fit(X, 10 * y)
    np.testing.assert_allclose(a.noise_precision_, [4.0])
    np.testing.assert_allclose(b.noise_precision_, [0.04])
    np.testing.assert_allclose(10 * a.predict(X), b.predict(X), rtol=1e-4, atol=1e-4)


def test_huge_inputs_fail_loudly():
    X, y = sine(64)
    with pytest.raises(FloatingPointError, match="not finite|became"):
        MCDropoutRegressor(max_iter=5, **SMALL).fit(X * 1e30, y)
    reg = PlanNetRegressor(max_iter=3, early_stopping=False, **PLAN).fit(X, y)
    with pytest.raises(ValueError, match="outside the range of the training data"):
        reg.predict(X * 1e30)
    with pytest.raises(ValueError, match="learning_rate_init"):
        PlanNetRegressor(max_iter=20, learning_rate_init=1e6, early_stopping=False, **PLAN).fit(
            X, y
        )


def test_class_weight_and_validation_fraction_messages():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="class_weight"):
        MCDropoutClassifier(class_weight={0: 1.0, 1: -1.0, 2: 1.0}, **SMALL).fit(X, y)
    with pytest.raises(ValueError, match="validation_fraction"):
        MCDropoutClassifier(early_stopping=True, validation_fraction=0.99, **SMALL).fit(X, y)
    with pytest.raises(ValueError, match="validation_fraction"):
        PlanNetRegressor(validation_fraction=0.999, **PLAN).fit(X, y.astype(float))


def test_predict_proba_is_float64():
    X, y = load_iris(return_X_y=True)
    clf = MCDropoutClassifier(max_iter=2, **SMALL).fit(X, y)
    assert clf.predict_proba(X).dtype == np.float64
    assert clf.predict_samples(X).dtype == np.float64
