"""The gradient-trained estimators on skorch: callbacks, parameter names, bad input."""

import inspect

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris
from skorch.callbacks import Callback, EarlyStopping, LRScheduler

from sklearn_bnn import (
    LossCalibratedBNN,
    MCDropoutClassifier,
    MCDropoutRegressor,
    PlanNetRegressor,
)

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


# -- skorch's conventions: optimizer__*, callbacks__*, history_ ------------------------------


def test_optimizer_settings_reach_adam_and_survive_clone_and_set_params():
    from sklearn.base import clone

    X, y = sine(64)
    seen = []

    class Groups(Callback):
        def on_epoch_begin(self, net, **kwargs):
            seen.append([(g["weight_decay"], g["betas"]) for g in net.optimizer_.param_groups])

    kw = dict(max_iter=1, dropout=0.1, callbacks=[Groups()], **SMALL)
    MCDropoutRegressor(**kw).fit(X, y)
    MCDropoutRegressor(optimizer__weight_decay=0.5, **kw).fit(X, y)
    plain, decayed = seen
    # the user's decay is added to the prior's (the groups' own), and is the rest's default
    assert [d for d, _ in decayed] == pytest.approx([d + 0.5 for d, _ in plain])
    # set_params and clone keep them, as any parameter
    est = MCDropoutRegressor(**kw).set_params(optimizer__betas=(0.5, 0.6))
    assert clone(est).get_params()["optimizer__betas"] == (0.5, 0.6)
    est.fit(X, y)
    assert {b for _, b in seen[-1]} == {(0.5, 0.6)}


def test_callbacks_settings_and_removal_by_name(capfd):
    X, y = sine(64)
    reg = MCDropoutRegressor(max_iter=50, early_stopping=True, **SMALL)
    # callbacks__<name>__<setting>: the early stopping's patience, in the constructor
    short = MCDropoutRegressor(
        max_iter=50, early_stopping=True, callbacks__early_stopping__patience=1, **SMALL
    ).fit(X, y)
    assert short.n_iter_ < reg.fit(X, y).n_iter_
    # callbacks__<name>=None removes it, here the progress bar verbose=True adds
    capfd.readouterr()
    MCDropoutRegressor(max_iter=2, verbose=True, **SMALL).fit(X, y)
    assert "MCDropoutRegressor" in capfd.readouterr().err  # the bar
    quiet = MCDropoutRegressor(max_iter=2, verbose=True, **SMALL)
    quiet.set_params(callbacks__progress=None).fit(X, y)
    assert "MCDropoutRegressor" not in capfd.readouterr().err
    # skorch's own callbacks by their names; a name the training has not is an error
    assert "dur" not in MCDropoutRegressor(max_iter=1, callbacks__epoch_timer=None, **SMALL).fit(
        X, y
    ).history_[0]
    with pytest.raises(ValueError, match="callbacks__erly_stopping__patience: .* no callback"):
        reg.set_params(callbacks__erly_stopping__patience=1).fit(X, y)


def test_skorch_names_the_package_calls_otherwise_are_refused_naming_them():
    X, y = sine(30)
    est = MCDropoutRegressor(lr=0.01)  # nothing raises in __init__ (scikit-learn's contract)
    with pytest.raises(ValueError, match="'lr' is learning_rate_init"):
        est.fit(X, y)
    with pytest.raises(ValueError, match="'max_epochs' is max_iter"):
        PlanNetRegressor().set_params(max_epochs=3)
    with pytest.raises(ValueError, match="'lr' is learning_rate_init"):
        MCDropoutRegressor().set_params(lr=0.01)


@pytest.mark.parametrize(
    "cls", [MCDropoutClassifier, MCDropoutRegressor, LossCalibratedBNN, PlanNetRegressor]
)
def test_parameters_are_keyword_only_and_skorch_keywords_kept_beside_them(cls):
    params = [p for p in inspect.signature(cls).parameters.values() if p.kind != p.VAR_KEYWORD]
    assert params and all(p.kind == p.KEYWORD_ONLY for p in params)
    est = cls(max_iter=3, optimizer__betas=(0.5, 0.6))
    expected = {p.name: p.default for p in params} | {"max_iter": 3}
    assert est.get_params(deep=False) == expected | {"optimizer__betas": (0.5, 0.6)}
    copy = clone(est)
    assert copy.get_params(deep=False) == est.get_params(deep=False)
    assert copy != est and len({est, copy}) == 2  # identity equality, hashable
    assert repr(est) == f"{cls.__name__}(max_iter=3, optimizer__betas=(0.5, 0.6))"
    with pytest.raises(TypeError, match="positional"):
        cls((8,))


def test_history_is_kept_plain_picklable_and_saved(tmp_path):
    import pickle

    from sklearn_bnn import load, save

    X, y = sine(64)
    reg = MCDropoutRegressor(max_iter=3, **SMALL).fit(X, y)
    assert len(reg.history_) == 3 and [r["epoch"] for r in reg.history_] == [1, 2, 3]
    np.testing.assert_allclose([r["train_loss"] for r in reg.history_], reg.loss_curve_)
    assert type(reg.history_[0]) is dict and type(reg.history_[0]["batches"]) is list
    assert pickle.loads(pickle.dumps(reg)).history_ == reg.history_
    save(reg, tmp_path / "reg.skbnn")
    assert load(tmp_path / "reg.skbnn").history_ == reg.history_
    plan = PlanNetRegressor(max_iter=2, **{**PLAN, "n_estimators": 2}).fit(X, y)
    assert [len(h) for h in plan.history_] == [2, 2]  # one history per member
    save(plan, tmp_path / "plan.skbnn")
    assert load(tmp_path / "plan.skbnn").history_ == plan.history_
