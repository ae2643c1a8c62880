"""accuracy_coverage_curve (selective classification) and the plots added for the demo."""

import numpy as np
import pytest

from sklearn_bnn.metrics import accuracy_coverage_curve, mutual_information, predictive_entropy


def _random_problem(seed=0, n=200, n_classes=4):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, n)
    logits = rng.normal(size=(n, n_classes)) + 2.0 * np.eye(n_classes)[y]
    return y, np.exp(logits) / np.exp(logits).sum(1, keepdims=True)


def test_matches_keeping_the_k_least_uncertain_points():
    y, p = _random_problem()
    coverage, accuracy, thresholds = accuracy_coverage_curve(y, p)
    entropy = predictive_entropy(p)
    order = np.argsort(entropy)
    correct = p.argmax(1) == y
    n = len(y)
    # Continuous entropies: no ties, one point per input.
    np.testing.assert_allclose(coverage, np.arange(1, n + 1) / n)
    for k in (1, 10, 100, n):
        assert accuracy[k - 1] == pytest.approx(correct[order[:k]].mean())
        assert thresholds[k - 1] == entropy[order[k - 1]]
    assert accuracy[-1] == pytest.approx(correct.mean())


def test_ties_are_kept_or_refused_together():
    y = [0, 1, 0, 1, 0]
    p = [[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.6, 0.4], [0.6, 0.4]]
    coverage, accuracy, thresholds = accuracy_coverage_curve(y, p)
    np.testing.assert_allclose(coverage, [0.4, 1.0])
    np.testing.assert_allclose(accuracy, [0.5, 0.6])
    assert thresholds[0] < thresholds[1]


def test_custom_uncertainty_and_per_draw_input():
    rng = np.random.default_rng(1)
    y, p = _random_problem(seed=1, n=50, n_classes=3)
    draws = np.clip(p[None] + 0.05 * rng.normal(size=(8, 50, 3)), 1e-3, None)
    draws /= draws.sum(-1, keepdims=True)
    mi = mutual_information(draws)
    by_mi = accuracy_coverage_curve(y, draws, uncertainty=mi)
    correct = draws.mean(0).argmax(1) == y
    assert by_mi[1][0] == correct[np.argmin(mi)]
    by_entropy = accuracy_coverage_curve(y, draws)
    np.testing.assert_array_equal(by_entropy[2], np.sort(predictive_entropy(draws)))
    assert by_mi[1][-1] == by_entropy[1][-1] == pytest.approx(correct.mean())


def test_rejects_bad_uncertainty():
    y, p = _random_problem(n=10)
    with pytest.raises(ValueError, match="finite"):
        accuracy_coverage_curve(y, p, uncertainty=np.r_[np.nan, np.zeros(9)])
    with pytest.raises(ValueError):
        accuracy_coverage_curve(y, p, uncertainty=np.zeros(9))


def test_plots(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sklearn_bnn.plotting import plot_accuracy_coverage, plot_entropy_histogram

    y, p = _random_problem()
    ax = plot_accuracy_coverage(y, p, label="model")
    coverage, accuracy, _ = accuracy_coverage_curve(y, p)
    line = ax.get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), 100 * coverage)
    np.testing.assert_allclose(line.get_ydata(), accuracy)
    ax = plot_entropy_histogram(p[:100], p[100:], bins=10)
    assert len(ax.patches) == 20
    ax.figure.savefig(tmp_path / "h.png")
    with pytest.raises(ValueError, match="same number of classes"):
        plot_entropy_histogram(p, p[:, :3])
    plt.close("all")
