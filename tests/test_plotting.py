import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sklearn_bnn import plotting  # noqa: E402
from sklearn_bnn.metrics import (  # noqa: E402
    cumulative_accuracy,
    mutual_information_matrix,
    predictive_entropy,
    top_label_calibration_curve,
)


@pytest.fixture
def draws():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 150)
    logits = rng.normal(size=(20, 150, 3)) + rng.normal(size=(150, 3)) + 1.5 * np.eye(3)[y]
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    yield y, p
    plt.close("all")


def _saves_png(ax, tmp_path):
    path = tmp_path / "plot.png"
    ax.figure.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reliability_diagram(draws, tmp_path):
    y, p = draws
    ax = plotting.plot_reliability_diagram(y, p.mean(0), n_bins=10, label="model")
    acc, conf, _ = top_label_calibration_curve(y, p.mean(0), n_bins=10)
    line = ax.get_lines()[1]
    np.testing.assert_allclose(line.get_xdata(), conf)
    np.testing.assert_allclose(line.get_ydata(), acc)
    assert "ECE" in line.get_label()
    # every bin's count beside its point, and the legend outside the axes (it hides no point)
    _, _, counts = top_label_calibration_curve(y, p.mean(0), n_bins=10)
    assert [t.get_text() for t in ax.texts] == [f"{n:.0f}" for n in counts]
    legend = ax.get_legend()
    assert legend.get_bbox_to_anchor().y1 < ax.get_window_extent().y0
    _saves_png(ax, tmp_path)


def test_entropy_cdf_of_misclassified_points(draws, tmp_path):
    y, p = draws
    ax = plotting.plot_entropy_cdf(y, p, label="a")
    plotting.plot_entropy_cdf(y, p[:1], ax=ax, label="b")  # several models on one axes
    first = ax.get_lines()[0]
    mean = p.mean(0)
    wrong = mean.argmax(1) != y
    assert 10 < wrong.sum() < 100
    np.testing.assert_allclose(first.get_xdata()[1:], np.sort(predictive_entropy(mean)[wrong]))
    assert first.get_ydata()[-1] == pytest.approx(1.0)
    assert len(ax.get_lines()) == 2
    _saves_png(ax, tmp_path)


def test_mutual_information_matrix(draws, tmp_path):
    y, p = draws
    ax = plotting.plot_mutual_information_matrix(y, p, display_labels=["a", "b", "c"])
    matrix, _ = mutual_information_matrix(y, p)
    shown = ax.get_images()[0].get_array()
    np.testing.assert_allclose(shown.filled(np.nan), matrix)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    _saves_png(ax, tmp_path)


def test_cumulative_accuracy(draws, tmp_path):
    y, p = draws
    ax = plotting.plot_cumulative_accuracy(y, p)
    line = ax.get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), np.arange(1, 21))
    np.testing.assert_allclose(line.get_ydata(), cumulative_accuracy(y, p))
    _saves_png(ax, tmp_path)


def test_clear_message_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[plot\]"'):
        plotting.plot_cumulative_accuracy([0, 1], [[[0.9, 0.1], [0.2, 0.8]]])


def test_accuracy_coverage_takes_a_line_style(draws):
    y, p = draws
    ax = plotting.plot_accuracy_coverage(y, p, label="m", linestyle="--", marker="s")
    (line,) = ax.get_lines()
    assert line.get_linestyle() == "--" and line.get_marker() == "s"


def test_mutual_information_histogram(draws, tmp_path):
    from sklearn_bnn.metrics import mutual_information

    y, p = draws
    ax = plotting.plot_mutual_information_histogram(p[:, :100], p[:, 100:])
    heights = [sum(b.get_height() * b.get_width() for b in c) for c in ax.containers]
    np.testing.assert_allclose(heights, 1.0)  # both histograms have unit area
    assert ax.get_xlabel() == "mutual information (nats)"
    assert ax.containers[0].patches[-1].get_x() + ax.containers[0].patches[-1].get_width() == (
        pytest.approx(
            max(mutual_information(p[:, :100]).max(), mutual_information(p[:, 100:]).max())
        )
    )
    _saves_png(ax, tmp_path)
    with pytest.raises(ValueError, match="same number of classes"):
        plotting.plot_mutual_information_histogram(p, p[..., :2])
