import joblib
import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris, make_classification
from sklearn.linear_model import LinearRegression
from sklearn.metrics import accuracy_score, recall_score

import sklearn_bnn
from sklearn_bnn import MCDropoutClassifier, MCDropoutRegressor
from sklearn_bnn.estimators._calibration import calibrated
from sklearn_bnn.estimators.dropout import draw_masks, forward_with_masks

FAST = dict(
    hidden_layer_sizes=(16,),
    max_iter=30,
    learning_rate_init=1e-2,
    n_predict_draws=10,
    random_state=0,
    dtype="float64",  # predictions compared to 1e-7 on permuted rows (tests/README.md)
)
# the fits here stop at a few epochs on purpose: their ConvergenceWarning is expected
# (tests/test_convergence_warnings.py tests it)
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture(scope="module")
def iris():
    return load_iris(return_X_y=True)


@pytest.fixture(scope="module")
def iris_clf(iris):
    X, y = iris
    return MCDropoutClassifier(
        hidden_layer_sizes=(32,),
        max_iter=100,
        learning_rate_init=1e-2,
        n_predict_draws=50,
        random_state=0,
    ).fit(X, y)


def sine_data(n, seed, noise=0.1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 1))
    return X, np.sin(2 * X[:, 0]) + noise * rng.normal(size=n)


def test_classifier_accuracy_and_prediction_shapes(iris, iris_clf):
    X, y = iris
    samples = iris_clf.predict_samples(X)
    assert samples.shape == (50, len(X), 3)
    np.testing.assert_allclose(samples.sum(-1), 1.0, rtol=1e-5)
    # the mean of the draws, tempered by the held-out temperature (calibration="temperature")
    expected = calibrated(samples.mean(0), iris_clf.calibration_posterior_)
    np.testing.assert_allclose(iris_clf.predict_proba(X), expected)
    assert accuracy_score(y, iris_clf.predict(X)) > 0.93
    # dropout stays on: the draws differ from one another
    assert samples.std(axis=0).max() > 1e-3


def test_one_mask_per_draw_shared_across_points(iris, iris_clf):
    """Each draw is one weight sample M diag(z): a point's prediction ignores its neighbours."""
    X = iris[0]
    full = iris_clf.predict_samples(X)
    perm = np.random.default_rng(0).permutation(len(X))
    np.testing.assert_allclose(iris_clf.predict_samples(X[perm]), full[:, perm], rtol=1e-5)
    np.testing.assert_allclose(iris_clf.predict_samples(X[:7]), full[:, :7], rtol=1e-5)


def test_masks_scale_and_rate():
    net = sklearn_bnn.nets.MLP(3, (400,), 2, dropout=0.25)
    gen = torch.Generator().manual_seed(0)
    (mask,) = draw_masks(net, (50,), gen, torch.zeros(1))
    assert mask.shape == (50, 400)
    assert torch.unique(mask).tolist() == [0.0, pytest.approx(1 / 0.75)]
    assert abs(float((mask == 0).float().mean()) - 0.25) < 0.01
    # with all-ones masks the forward pass is the deterministic network
    x = torch.randn(5, 3)
    ones = [torch.ones(400)]
    torch.testing.assert_close(forward_with_masks(net, x, ones), net.eval()(x))


def test_weight_decay_follows_prior_precision():
    """Gal & Ghahramani's KL (eq. 3.21), lambda p ||M||^2 / 2N for weights fed by units kept
    with probability p, lambda ||m||^2 / 2N otherwise, equals the decay applied to torch's
    weights, W = p M under inverted dropout (x z / p) W = (x z) M."""
    clf = MCDropoutClassifier(hidden_layer_sizes=(4, 3), dropout=0.2, prior_precision=4.0)
    clf.n_features_in_, clf.classes_ = 5, np.arange(2)
    net = clf._build_net(torch.float32)
    n = 100
    terms = clf._weight_decay_terms(net, n)
    keep = [1.0, 1.0, 0.8, 1.0, 0.8, 1.0]  # first layer's inputs are not dropped; biases
    for (param, coef), p in zip(terms, keep, strict=True):
        gal = 4.0 * p / (2 * n) * float((param / p).square().sum())
        np.testing.assert_allclose(coef * float(param.square().sum()), gal, rtol=1e-6)
    with pytest.raises(ValueError, match="weight_decay"):  # one name for the prior: refused
        clf.set_params(weight_decay=1e-3)


def test_class_weight_is_weighted_cross_entropy():
    """Eq. 4.12 per point: -alpha_y log p(y | x); a heavier minority class is recalled more."""
    clf = MCDropoutClassifier(class_weight={0: 1.0, 1: 3.0})
    clf.classes_ = np.array([0, 1])
    clf.class_weight_ = np.array([1.0, 3.0])
    logits = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    y = torch.tensor([1, 0])
    expected = [3.0 * -np.log(np.e / (1 + np.e)), -np.log(np.exp(2) / (1 + np.exp(2)))]
    np.testing.assert_allclose(clf._nll(logits, y, None).numpy(), expected, rtol=1e-6)

    X, y = make_classification(
        400, 5, n_informative=3, weights=[0.85], flip_y=0.1, class_sep=0.5, random_state=0
    )
    kw = dict(
        hidden_layer_sizes=(16,),
        max_iter=60,
        learning_rate_init=1e-2,
        n_predict_draws=20,
        random_state=0,
    )
    plain = MCDropoutClassifier(**kw).fit(X, y)
    balanced = MCDropoutClassifier(class_weight="balanced", **kw).fit(X, y)
    assert recall_score(y, balanced.predict(X)) > recall_score(y, plain.predict(X)) + 0.1


def test_reproducible_and_global_rng_untouched(iris):
    X, y = iris
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    np_state = np.random.get_state()[1].copy()  # noqa: NPY002 (the global state is the point)
    kw = dict(hidden_layer_sizes=(8,), max_iter=10, n_predict_draws=5)
    a = MCDropoutClassifier(random_state=3, **kw).fit(X, y).predict_proba(X)
    b = MCDropoutClassifier(random_state=3, **kw).fit(X, y).predict_proba(X)
    c = MCDropoutClassifier(random_state=4, **kw).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert torch.equal(torch.random.get_rng_state(), state)
    np.testing.assert_array_equal(np.random.get_state()[1], np_state)  # noqa: NPY002


def test_regressor_std_combines_noise_and_draws():
    X, y = sine_data(300, 0)
    reg = MCDropoutRegressor(
        hidden_layer_sizes=(50,),
        dropout=0.1,  # the conservative intervals below are a fixed rate's (a learned one: 0.949)
        max_iter=200,
        learning_rate_init=1e-2,
        random_state=0,
    ).fit(X, y)
    samples = reg.predict_samples(X)
    mean, std = reg.predict(X, return_std=True)
    assert samples.shape == (100, 300)
    np.testing.assert_allclose(mean, samples.mean(0))
    np.testing.assert_allclose(std**2, 1 / reg.noise_precision_[0] + samples.var(0), rtol=1e-6)
    parts = reg.predict_variance_parts(X)
    np.testing.assert_allclose(parts.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(parts.total_std, std, rtol=1e-12)
    np.testing.assert_allclose(parts.noise_std**2, np.full(300, 1 / reg.noise_precision_[0]))
    np.testing.assert_allclose(parts.weight_std**2, samples.var(0), rtol=1e-6, atol=1e-12)
    X_test, y_test = sine_data(1000, 1)
    mean, std = reg.predict(X_test, return_std=True)
    assert reg.score(X_test, y_test) > 0.9
    # the noise precision maximising the ELBO absorbs the spread of the dropout draws, which
    # the predictive std adds again: intervals are conservative, never too narrow
    coverage = np.mean(np.abs(y_test - mean) < 1.96 * std)
    assert coverage > 0.95
    assert np.median(std) < 0.5


def test_learned_noise_matches_least_squares():
    """Linear model (no hidden layer): the learned precision is 1 / mean squared residual."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 2))
    y = X @ [2.0, -1.0] + 0.5 * rng.normal(size=500)
    reg = MCDropoutRegressor(
        hidden_layer_sizes=(), max_iter=300, learning_rate_init=2e-2, random_state=0
    ).fit(X, y)
    mse = np.mean((LinearRegression().fit(X, y).predict(X) - y) ** 2)
    assert reg.noise_precision_[0] == pytest.approx(1 / mse, rel=0.05)
    fixed = MCDropoutRegressor(
        hidden_layer_sizes=(), max_iter=5, noise_precision=7.0, random_state=0
    ).fit(X, y)
    np.testing.assert_allclose(fixed.noise_precision_, [7.0])


def test_regressor_multi_output_shapes():
    X, y = sine_data(100, 0)
    Y = np.column_stack([y, 10 * y + 3])
    reg = MCDropoutRegressor(
        hidden_layer_sizes=(16,), max_iter=20, n_predict_draws=7, random_state=0
    ).fit(X, Y)
    mean, std = reg.predict(X[:4], return_std=True)
    assert mean.shape == std.shape == (4, 2)
    assert reg.predict_samples(X[:4]).shape == (7, 4, 2)
    assert reg.noise_precision_.shape == (2,)


def test_early_stopping_keeps_best_weights():
    X, y = sine_data(300, 0, noise=0.5)
    reg = MCDropoutRegressor(
        hidden_layer_sizes=(64,),
        max_iter=400,
        learning_rate_init=3e-2,
        early_stopping=True,
        n_iter_no_change=5,
        random_state=0,
    ).fit(X, y)
    assert reg.n_iter_ < 400
    assert len(reg.validation_loss_curve_) == reg.n_iter_
    assert reg.best_validation_loss_ == min(reg.validation_loss_curve_)
    assert reg.validation_loss_curve_.index(reg.best_validation_loss_) == reg.n_iter_ - 6


@pytest.mark.parametrize(
    "param, value",
    [
        ("dropout", 1.0),
        ("dropout", -0.1),
        ("prior_precision", 0.0),
        ("n_predict_draws", 0),
        ("max_iter", 1.5),
        ("batch_size", 0),
        ("learning_rate_init", 0.0),
        ("validation_fraction", 1.0),
        ("n_iter_no_change", 0),
        ("activation", "nope"),
        ("hidden_layer_sizes", (0,)),
        ("dtype", "float16"),
    ],
)
def test_bad_parameters_named_at_fit(iris, param, value):
    X, y = iris
    clf = MCDropoutClassifier(**{param: value})
    with pytest.raises(ValueError, match=param):
        clf.fit(X, y)


def test_noise_precision_validated():
    X, y = sine_data(20, 0)
    with pytest.raises(ValueError, match="noise_precision"):
        MCDropoutRegressor(noise_precision=0.0).fit(X, y)


def test_verbose_progress_bar(iris, capsys):
    X, y = iris
    MCDropoutClassifier(hidden_layer_sizes=(4,), max_iter=3, verbose=True, random_state=0).fit(X, y)
    err = capsys.readouterr().err
    # the calibrated fit trains twice: each bar says which stage it is (they were identical)
    assert "MCDropoutClassifier calibration stage (120 rows, 30 held out)" in err
    assert "MCDropoutClassifier training (all 150 rows)" in err
    MCDropoutClassifier(
        hidden_layer_sizes=(4,), max_iter=3, verbose=True, calibration=None, random_state=0
    ).fit(X, y)
    err = capsys.readouterr().err
    assert "MCDropoutClassifier" in err and "stage" not in err and "all 150" not in err


@pytest.mark.parametrize("Est", [MCDropoutClassifier, MCDropoutRegressor])
def test_persistence_round_trips(tmp_path, iris, Est):
    X, y = iris
    est = Est(hidden_layer_sizes=(8,), max_iter=10, n_predict_draws=20, random_state=0)
    est.fit(X, y.astype(float) if Est is MCDropoutRegressor else y)
    method = est.predict_proba if Est is MCDropoutClassifier else est.predict
    expected = method(X)
    assert next(est.module_.parameters()).device.type == "cpu"

    joblib.dump(est, tmp_path / "model.joblib")
    loaded = joblib.load(tmp_path / "model.joblib")
    np.testing.assert_array_equal(getattr(loaded, method.__name__)(X), expected)

    sklearn_bnn.save(est, tmp_path / "model.pt")
    restored = sklearn_bnn.load(tmp_path / "model.pt")
    assert type(restored) is Est
    np.testing.assert_array_equal(getattr(restored, method.__name__)(X), expected)


def test_float64_and_string_labels(iris):
    X, y = iris
    labels = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = MCDropoutClassifier(
        hidden_layer_sizes=(8,),
        max_iter=30,
        learning_rate_init=1e-2,
        dtype="float64",
        random_state=0,
    ).fit(X, labels)
    assert next(clf.module_.parameters()).dtype == torch.float64
    assert set(clf.predict(X)) <= set(labels)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fit_predict_and_pickle_on_cpu(iris):
    X, y = iris
    clf = MCDropoutClassifier(
        hidden_layer_sizes=(16,),
        max_iter=50,
        learning_rate_init=1e-2,
        device="cuda",
        random_state=0,
    ).fit(X, y)
    assert next(clf.module_.parameters()).device.type == "cpu"
    assert clf.score(X, y) > 0.9


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_learned_dropout_rate_falls_as_the_data_grow(seed):
    """dropout="auto" learns the rate on the ELBO: the entropy term (weight 1/N) pulls it up
    on small data, the data term down on larger data. From 0.1, over seeds 0-2: 0.110-0.114
    on 100 rows (200 epochs, 200 Adam steps), 0.083-0.085 on 4,000 rows (10 epochs, 320)."""
    rates = []
    for n, epochs in [(100, 200), (4000, 10)]:
        X, y = make_classification(
            n_samples=n, n_features=10, n_informative=6, n_classes=3, random_state=seed
        )
        clf = MCDropoutClassifier(
            dropout="auto", hidden_layer_sizes=(16,), max_iter=epochs, random_state=seed
        ).fit(X, y)
        (rate,) = clf.dropout_
        # prediction draws Bernoulli masks at the learned rate
        assert [m.p for m in clf.module_ if isinstance(m, torch.nn.Dropout)] == [rate]
        rates.append(rate)
    assert rates[0] > 0.1 > rates[1] + 0.01


def test_learned_dropout_rate_persists(tmp_path, iris):
    X, y = iris
    est = MCDropoutRegressor(
        dropout="auto", hidden_layer_sizes=(8, 8), max_iter=10, n_predict_draws=20,
        random_state=0,
    ).fit(X, y.astype(float))
    assert len(est.dropout_) == 2 and all(r != 0.1 for r in est.dropout_)
    expected = est.predict(X, return_std=True)
    sklearn_bnn.save(est, tmp_path / "model.pt")
    restored = sklearn_bnn.load(tmp_path / "model.pt")
    assert restored.dropout_ == est.dropout_
    for a, b in zip(restored.predict(X, return_std=True), expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    # a state whose rates do not fit the network is refused
    state = est._get_state()
    for bad in ([0.1], [0.1, 1.5]):
        with pytest.raises(ValueError, match="dropout_"):
            est.__class__(**est.get_params())._check_loaded_state({**state, "dropout_": bad})


def test_loss_calibrated_network_takes_a_fixed_rate_only(iris):
    from sklearn.utils._param_validation import InvalidParameterError

    from sklearn_bnn import LossCalibratedBNN

    X, y = iris
    with pytest.raises(InvalidParameterError, match="dropout"):
        LossCalibratedBNN(dropout="auto", max_iter=1).fit(X, y)


def test_held_out_temperature_tempers_the_network_calibration_none_gives(iris):
    from sklearn_bnn import LossCalibratedBNN

    X, y = iris
    assert MCDropoutClassifier().calibration == "temperature"
    plain = MCDropoutClassifier(**FAST, calibration=None).fit(X, y)
    clf = MCDropoutClassifier(**FAST).fit(X, y)
    assert plain.calibration_temperature_ == 1.0
    t = clf.calibration_temperature_
    assert np.isfinite(t) and t > 0 and t != 1.0
    # the final fit is the one on every row, the same network as calibration=None's
    np.testing.assert_array_equal(clf.predict_samples(X), plain.predict_samples(X))
    expected = calibrated(plain.predict_proba(X), clf.calibration_posterior_)
    np.testing.assert_allclose(clf.predict_proba(X), expected, rtol=1e-12)
    np.testing.assert_array_equal(clf.predict(X), plain.predict(X))  # tempering keeps argmax
    # a utility's Bayes actions are not tempered: the loss-calibrated network takes none
    assert "calibration" not in LossCalibratedBNN().get_params()
    lc = LossCalibratedBNN(hidden_layer_sizes=(8,), max_iter=2, random_state=0).fit(X, y)
    np.testing.assert_allclose(lc.predict_proba(X), lc.predict_samples(X).mean(0))
