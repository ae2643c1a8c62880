"""Uncertainty plots (optional: needs matplotlib, ``pip install -e ".[plot]"`` in a checkout).

Every function draws on ``ax`` (a new figure's axes when None) and returns it.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_classification
from .metrics import (
    accuracy_coverage_curve,
    cumulative_accuracy,
    expected_calibration_error,
    mutual_information,
    mutual_information_matrix,
    predictive_entropy,
    top_label_calibration_curve,
)

__all__ = [
    "plot_reliability_diagram",
    "plot_entropy_cdf",
    "plot_mutual_information_matrix",
    "plot_cumulative_accuracy",
    "plot_accuracy_coverage",
    "plot_entropy_histogram",
    "plot_mutual_information_histogram",
]


def _axes(ax):
    if ax is not None:
        return ax
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "sklearn_bnn.plotting needs matplotlib: pip install matplotlib (or, in a checkout "
            'of sklearn_bnn, pip install -e ".[plot]").'
        ) from exc
    return plt.subplots()[1]


def plot_reliability_diagram(
    y_true,
    y_prob,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    labels=None,
    ax=None,
    label: str | None = None,
    show_counts: bool = True,
):
    """Reliability diagram: accuracy against confidence of the top-label prediction.

    Points on the diagonal are calibrated; below it the model is over-confident. The legend
    gives the ECE (:func:`~sklearn_bnn.metrics.expected_calibration_error`) and sits under the
    axes, where it hides no point; each point is labelled with the number of inputs in its bin
    (a bin of three inputs says little).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    y_prob : array-like of shape (n_samples, n_classes)
    n_bins, strategy, labels
        As in :func:`~sklearn_bnn.metrics.top_label_calibration_curve`.
    ax : matplotlib Axes, optional
    label : str, optional
        Legend entry (the ECE is appended).
    show_counts : bool, default=True
        Write the number of inputs (the total sample weight) of each bin beside its point.

    Returns
    -------
    matplotlib Axes
    """
    accuracy, confidence, weight = top_label_calibration_curve(
        y_true, y_prob, n_bins=n_bins, strategy=strategy, labels=labels
    )
    ece = expected_calibration_error(
        y_true, y_prob, n_bins=n_bins, strategy=strategy, labels=labels
    )
    ax = _axes(ax)
    ax.plot([0, 1], [0, 1], linestyle=":", color="gray", label="perfectly calibrated")
    name = f"{label} " if label else ""
    (line,) = ax.plot(confidence, accuracy, marker="o", label=f"{name}(ECE = {ece:.3f})")
    if show_counts:
        for x, y, n in zip(confidence, accuracy, weight, strict=True):
            ax.annotate(
                f"{n:.0f}",
                (x, y),
                xytext=(-4, 5),
                textcoords="offset points",
                ha="right",
                fontsize=7,
                color=line.get_color(),
            )
    ax.set(
        xlabel="confidence (top-label probability)",
        ylabel="accuracy",
        xlim=(0, 1),
        ylim=(0, 1.05),
        title="Reliability diagram",
    )
    _legend_below(ax)
    return ax


def _legend_below(ax) -> None:
    """The legend under the axes (below the x label), where it covers no data."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, frameon=False)


def plot_entropy_cdf(y_true, y_prob, *, labels=None, ax=None, label: str | None = None):
    """Empirical CDF of the predictive entropy over the misclassified points.

    Cobb & Jalaian 2021, Fig. 2: a model that warns of its errors has high entropy where it is
    wrong, so its curve stays low and rises late (close to the bottom-right corner). Call it once
    per model on the same axes to compare models.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    y_prob : array-like of shape (n_samples, n_classes) or (n_draws, n_samples, n_classes)
        Predictive probabilities, or per-draw probabilities (averaged first).
    labels : array-like, optional
        Class labels of the columns.
    ax : matplotlib Axes, optional
    label : str, optional

    Returns
    -------
    matplotlib Axes
    """
    p = np.asarray(y_prob)
    mean = p.mean(axis=0) if p.ndim == 3 else p
    y_index, mean, _, _ = check_classification(y_true, mean, labels)
    wrong = np.argmax(mean, axis=1) != y_index
    entropy = np.sort(predictive_entropy(mean)[wrong])
    ax = _axes(ax)
    ax.step(
        np.concatenate([[0.0], entropy]),
        np.arange(len(entropy) + 1) / max(len(entropy), 1),
        where="post",
        label=label,
    )
    ax.set(
        xlabel="predictive entropy (nats)",
        ylabel="fraction of misclassified points",
        xlim=(0, np.log(mean.shape[1])),
        ylim=(0, 1.02),
        title="Entropy of misclassified points (lower curve is better)",
    )
    if label:
        ax.legend(loc="upper left")
    return ax


def plot_mutual_information_matrix(
    y_true,
    y_prob_samples,
    *,
    labels=None,
    display_labels=None,
    ax=None,
    cmap: str = "viridis",
):
    """Average mutual information per (true, predicted) cell, as a confusion-style matrix.

    Cobb & Jalaian 2021, Fig. 3: cells with no points are blank, the diagonal (correct predictions)
    is outlined in red. Low values on the diagonal and high values off it are desirable.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    y_prob_samples : array-like of shape (n_draws, n_samples, n_classes)
    labels : array-like, optional
        Class labels of the columns.
    display_labels : array-like of str, optional
        Tick labels; by default the class labels.
    ax : matplotlib Axes, optional
    cmap : str, default="viridis"

    Returns
    -------
    matplotlib Axes
    """
    matrix, _ = mutual_information_matrix(y_true, y_prob_samples, labels=labels)
    n_classes = matrix.shape[0]
    if display_labels is None:
        display_labels = np.unique(y_true if labels is None else labels)
    ax = _axes(ax)
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap=cmap)
    ax.figure.colorbar(image, ax=ax, label="mean mutual information (nats)")
    middle = np.nanmean([np.nanmin(matrix), np.nanmax(matrix)])
    for i, j in zip(*np.nonzero(np.isfinite(matrix)), strict=True):
        color = "white" if matrix[i, j] < middle else "black"
        ax.text(
            j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize="small", color=color
        )
    for k in range(n_classes):
        ax.add_patch(_square(k, edgecolor="red"))
    ticks = np.arange(n_classes)
    ax.set(
        xticks=ticks,
        yticks=ticks,
        xticklabels=display_labels,
        yticklabels=display_labels,
        xlabel="predicted class",
        ylabel="true class",
        title="Mean mutual information",
    )
    return ax


def _square(k: int, **style):
    from matplotlib.patches import Rectangle

    return Rectangle((k - 0.5, k - 0.5), 1, 1, fill=False, linewidth=2, **style)


def plot_cumulative_accuracy(
    y_true, y_prob_samples, *, labels=None, ax=None, label: str | None = None
):
    """Accuracy of the first ``s`` draws' average against ``s`` (Cobb & Jalaian 2021, App. B.4).

    A curve still rising at the last draw suggests more draws would help; a plateau that more
    draws do not lift is what the ensemble can reach (see also
    :class:`~sklearn_bnn.ensemble.EnsembleReducer`).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    y_prob_samples : array-like of shape (n_draws, n_samples, n_classes)
    labels : array-like, optional
    ax : matplotlib Axes, optional
    label : str, optional

    Returns
    -------
    matplotlib Axes
    """
    accuracy = cumulative_accuracy(y_true, y_prob_samples, labels=labels)
    ax = _axes(ax)
    ax.plot(np.arange(1, len(accuracy) + 1), accuracy, label=label)
    ax.set(xlabel="number of draws", ylabel="accuracy", title="Cumulative accuracy")
    if label:
        ax.legend(loc="lower right")
    return ax


def plot_accuracy_coverage(
    y_true, y_prob, *, uncertainty=None, labels=None, ax=None, label: str | None = None, **style
):
    """Accuracy on the inputs kept against the fraction kept, the most uncertain refused first.

    The curve of :func:`~sklearn_bnn.metrics.accuracy_coverage_curve` (risk-coverage, read as
    accuracy): a model whose uncertainty flags its errors rises towards 1 as coverage falls.
    Call it once per model on the same axes to compare models.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
    y_prob : array-like of shape (n_samples, n_classes) or (n_draws, n_samples, n_classes)
        Predictive probabilities, or per-draw probabilities (averaged first).
    uncertainty : array-like of shape (n_samples,), optional
        Ranking score, higher refused first; by default the predictive entropy.
    labels : array-like, optional
        Class labels of the columns.
    ax : matplotlib Axes, optional
    label : str, optional
    **style
        Passed to ``ax.plot`` (``linestyle``, ``marker``, ``markevery``, ...): give each model
        its own, so that curves that coincide stay visible.

    Returns
    -------
    matplotlib Axes
    """
    coverage, accuracy, _ = accuracy_coverage_curve(
        y_true, y_prob, uncertainty=uncertainty, labels=labels
    )
    ax = _axes(ax)
    ax.plot(100 * coverage, accuracy, label=label, **style)
    ax.set(
        xlabel="inputs kept (%), the most uncertain refused first",
        ylabel="accuracy on the inputs kept",
        xlim=(0, 100),
        title="Accuracy against coverage",
    )
    if label:
        ax.legend(loc="lower left")
    return ax


def plot_entropy_histogram(y_prob_in, y_prob_out, *, bins: int = 20, ax=None, title=None):
    """Histograms of the predictive entropy on in-distribution and out-of-distribution inputs.

    A model that knows what it has not seen puts the out-of-distribution inputs at high
    entropy and the in-distribution ones near zero, so the two histograms barely overlap.
    Both are normalised to unit area and share bins over ``[0, log(n_classes)]``.

    Parameters
    ----------
    y_prob_in, y_prob_out : array-like of shape (n_samples, n_classes) or \
(n_draws, n_samples, n_classes)
        Predictive (or per-draw) probabilities on in- and out-of-distribution inputs, with the
        same classes.
    bins : int, default=20
    ax : matplotlib Axes, optional
    title : str, optional

    Returns
    -------
    matplotlib Axes
    """
    n_classes = _same_classes(y_prob_in, y_prob_out)
    entropy_in = predictive_entropy(y_prob_in)
    entropy_out = predictive_entropy(y_prob_out)
    return _in_out_histograms(
        entropy_in,
        entropy_out,
        np.log(n_classes),
        bins=bins,
        ax=ax,
        xlabel="predictive entropy (nats)",
        title=title or "Predictive entropy",
        legend_loc="upper center",
    )


def plot_mutual_information_histogram(
    y_prob_samples_in, y_prob_samples_out, *, bins: int = 20, ax=None, title=None
):
    """Histograms of the mutual information on in- and out-of-distribution inputs.

    The mutual information between the prediction and the weights
    (:func:`~sklearn_bnn.metrics.mutual_information`) is the part of the predictive entropy
    that comes from the draws (or members) disagreeing: a model that knows what it has not
    seen puts the out-of-distribution inputs at high values. Both histograms are normalised to
    unit area and share bins over ``[0, max]``.

    Parameters
    ----------
    y_prob_samples_in, y_prob_samples_out : array-like of shape (n_draws, n_samples, n_classes)
        Per-draw probabilities on in- and out-of-distribution inputs, with the same classes
        and at least two draws.
    bins : int, default=20
    ax : matplotlib Axes, optional
    title : str, optional

    Returns
    -------
    matplotlib Axes
    """
    _same_classes(y_prob_samples_in, y_prob_samples_out)
    mi_in = mutual_information(y_prob_samples_in)
    mi_out = mutual_information(y_prob_samples_out)
    top = max(float(np.max(mi_in)), float(np.max(mi_out)), 1e-12)
    return _in_out_histograms(
        mi_in,
        mi_out,
        top,
        bins=bins,
        ax=ax,
        xlabel="mutual information (nats)",
        title=title or "Mutual information",
        legend_loc="upper right",
    )


def _same_classes(y_prob_in, y_prob_out) -> int:
    """The number of classes (last axis) of two probability arrays, which must agree.

    Parameters
    ----------
    y_prob_in, y_prob_out : array-like of shape (..., n_classes)

    Returns
    -------
    int
    """
    n_classes = np.shape(y_prob_in)[-1]
    if np.shape(y_prob_out)[-1] != n_classes:
        raise ValueError("y_prob_in and y_prob_out must have the same number of classes.")
    return n_classes


def _in_out_histograms(values_in, values_out, top, *, bins, ax, xlabel, title, legend_loc):
    """Histograms of a per-input value on in- and out-of-distribution inputs, on one Axes.

    Both are normalised to unit area and share ``bins`` equal bins over ``[0, top]``.

    Parameters
    ----------
    values_in, values_out : ndarray of shape (n_in,) and (n_out,)
        The value of each in- and out-of-distribution input.
    top : float
        The upper end of the bins.
    bins : int
    ax : matplotlib Axes or None
        None draws on a new figure's Axes.
    xlabel, title : str
    legend_loc : str
        Matplotlib's ``loc`` of the legend.

    Returns
    -------
    matplotlib Axes
    """
    edges = np.linspace(0.0, top, bins + 1)
    ax = _axes(ax)
    style = {"bins": edges, "density": True, "alpha": 0.6}
    ax.hist(values_in, label=f"in distribution (n = {len(values_in)})", **style)
    ax.hist(values_out, label=f"out of distribution (n = {len(values_out)})", **style)
    ax.set(xlabel=xlabel, ylabel="density", title=title)
    ax.legend(loc=legend_loc)
    return ax
