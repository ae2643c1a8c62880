"""The digits demo's scores, their table and plain reading, and its figures.

:mod:`sklearn_bnn.__main__` fits the models and calls these; every sentence of the reading is
read from the scores, never assumed.
"""

from __future__ import annotations

import math
from pathlib import Path

#: Bootstrap resamples behind the standard errors of the ECE and of the AUROC differences.
N_BOOT = 200

COLUMNS = ("accuracy", "NLL", "ECE", "Brier", "AUROC H", "AUROC MI", "fit (s)", "x MLP")
"""Columns of the printed table (the test checks them)."""

# Direction of each score: +1 when higher is better, -1 when lower is better.
_BETTER = {
    "accuracy": 1,
    "nll": -1,
    "ece": -1,
    "brier": -1,
    "auroc_entropy": 1,
    "auroc_mi": 1,
}
_NAMES = {
    "accuracy": "accuracy",
    "nll": "NLL",
    "ece": "ECE",
    "brier": "Brier score",
    "auroc_entropy": "OOD AUROC (entropy)",
    "auroc_mi": "OOD AUROC (mutual information)",
}


def score_model(y_test, draws_test, draws_ood, labels, proba=None) -> dict:
    """In-distribution scores and OOD detection of a model from its per-draw probabilities.

    Parameters
    ----------
    y_test : ndarray of shape (n_test,)
    draws_test : ndarray of shape (n_draws, n_test, n_classes)
        Per-draw (or per-member) probabilities on the in-distribution test set; one draw for a
        deterministic model.
    draws_ood : ndarray of shape (n_draws, n_ood, n_classes)
        The same on the out-of-distribution inputs.
    labels : array-like of shape (n_classes,)
    proba : pair of ndarrays, optional
        The model's ``predict_proba`` on the test and the OOD inputs, when it is not the mean
        of the draws (a calibrated model average); the scores and the entropy are read from
        it, the mutual information from the draws.

    Returns
    -------
    dict
        ``accuracy``, ``nll``, ``ece``, ``brier`` on the test set; ``auroc_entropy`` (and
        ``auroc_mi`` when there is more than one draw, else None): the area under the ROC
        curve of telling OOD inputs (positives) from test inputs by that uncertainty;
        ``mean_confidence`` (top-label probability) and the mean predictive entropies
        ``mean_entropy_test`` and ``mean_entropy_ood``; ``se``, the standard error of each
        score from the test set's size (see :func:`standard_errors`); ``_inputs``, the
        per-input predictions the scores came from, with which :func:`reading` pairs two
        models' scores (not for ``results.json``).
    """
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from .metrics import (
        brier_score,
        expected_calibration_error,
        mutual_information,
        negative_log_likelihood,
        predictive_entropy,
    )

    proba_test, proba_ood = proba or (draws_test.mean(axis=0), draws_ood.mean(axis=0))
    proba = proba_test
    is_ood = np.r_[np.zeros(draws_test.shape[1]), np.ones(draws_ood.shape[1])]
    both = np.concatenate([draws_test, draws_ood], axis=1)
    mean_both = np.concatenate([proba_test, proba_ood])[None]
    row = {
        "accuracy": float(np.mean(np.asarray(labels)[proba.argmax(1)] == y_test)),
        "nll": negative_log_likelihood(y_test, proba, labels=labels),
        "ece": expected_calibration_error(y_test, proba, labels=labels),
        "brier": brier_score(y_test, proba, labels=labels),
        "auroc_entropy": float(roc_auc_score(is_ood, predictive_entropy(mean_both))),
        "auroc_mi": None,
        "mean_confidence": float(proba.max(axis=1).mean()),
        "n_test": int(len(y_test)),
        "mean_entropy_test": float(predictive_entropy(proba_test[None]).mean()),
        "mean_entropy_ood": float(predictive_entropy(proba_ood[None]).mean()),
    }
    scores = {"auroc_entropy": predictive_entropy(mean_both)}
    if len(both) > 1:
        scores["auroc_mi"] = mutual_information(both)
        row["auroc_mi"] = float(roc_auc_score(is_ood, scores["auroc_mi"]))
    row["se"] = standard_errors(row, y_test, proba, labels, draws_ood.shape[1])
    row["_inputs"] = {"y": y_test, "proba": proba, "labels": labels, "ood": scores}
    return row


def standard_errors(row: dict, y_test, proba, labels, n_ood: int) -> dict:
    """Standard error of each score of ``row``, from the inputs it was measured on.

    The sampling error of a score over a test set of this size: ``sqrt(p (1 - p) / n)`` for the
    accuracy; the standard deviation of the per-input loss over ``sqrt(n)`` for the NLL and the
    Brier score (means of per-input terms); the standard deviation of :data:`N_BOOT` bootstrap
    resamples of the test inputs (seeded) for the ECE, which is not such a mean; Hanley &
    McNeil's (1982) formula for an AUROC of ``n_test`` negatives and ``n_ood`` positives.

    Returns
    -------
    dict
        Score name to its standard error (None where the score is None).
    """
    import numpy as np

    from .metrics import expected_calibration_error

    n = len(y_test)
    index = np.searchsorted(np.asarray(labels), y_test)
    p_true = np.clip(proba[np.arange(n), index], np.finfo(np.float64).eps, 1.0)
    onehot = np.eye(proba.shape[1])[index]
    brier = ((proba - onehot) ** 2).sum(axis=1)
    rng = np.random.default_rng(0)
    boot = [
        expected_calibration_error(y_test[i], proba[i], labels=labels)
        for i in (rng.integers(0, n, n) for _ in range(N_BOOT))
    ]
    acc = row["accuracy"]
    return {
        "accuracy": math.sqrt(acc * (1 - acc) / n),
        "nll": float(np.std(-np.log(p_true), ddof=1) / math.sqrt(n)),
        "ece": float(np.std(boot, ddof=1)),
        "brier": float(np.std(brier, ddof=1) / math.sqrt(n)),
        "auroc_entropy": _auroc_se(row["auroc_entropy"], n_ood, n),
        "auroc_mi": None if row["auroc_mi"] is None else _auroc_se(row["auroc_mi"], n_ood, n),
    }


def _auroc_se(area: float, n_positive: int, n_negative: int) -> float:
    """Hanley & McNeil (1982, eq. 2): the standard error of an area under the ROC curve."""
    q1, q2 = area / (2 - area), 2 * area**2 / (1 + area)
    var = (
        area * (1 - area)
        + (n_positive - 1) * (q1 - area**2)
        + (n_negative - 1) * (q2 - area**2)
    ) / (n_positive * n_negative)
    return math.sqrt(max(var, 0.0))


def format_table(rows: dict) -> str:
    """The results as a fixed-width table, one line per model.

    Parameters
    ----------
    rows : dict
        Model name to the dict of :func:`score_model` plus ``seconds`` and ``ratio``.

    Returns
    -------
    str
    """
    width = max(len(name) for name in rows) + 2
    lines = [f"{'model':<{width}}" + "".join(f"{c:>10}" for c in COLUMNS)]
    for name, r in rows.items():
        mi = "-" if r["auroc_mi"] is None else f"{r['auroc_mi']:.3f}"
        cells = (
            f"{r['accuracy']:.3f}",
            f"{r['nll']:.3f}",
            f"{r['ece']:.3f}",
            f"{r['brier']:.3f}",
            f"{r['auroc_entropy']:.3f}",
            mi,
            f"{r['seconds']:.1f}",
            f"{r['ratio']:.0f}x" if r["ratio"] >= 10 else f"{r['ratio']:.1f}x",
        )
        lines.append(f"{name:<{width}}" + "".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


def _margin(a: dict, b: dict, key: str) -> float:
    """Two standard errors of the difference of ``a``'s and ``b``'s ``key``, or 0 without them.

    Paired where both rows keep their per-input predictions (``_inputs``, from
    :func:`score_model` on the same inputs): the standard error of the mean per-input
    difference for the accuracy, the NLL and the Brier score, and of :data:`N_BOOT` bootstrap
    resamples of the difference for the ECE and the AUROCs (the same resampled inputs for both
    models, test and OOD inputs resampled apart). Pairing removes the difficulty of the inputs
    that the two models share. Otherwise the rows' own standard errors (``se``) as if
    independent, ``sqrt(se_a^2 + se_b^2)``, which over-states the error of the difference.
    """
    if "_inputs" in a and "_inputs" in b:
        return 2 * _paired_se(a["_inputs"], b["_inputs"], key)
    se_a, se_b = (r.get("se", {}).get(key) for r in (a, b))
    if se_a is None or se_b is None:
        return 0.0
    return 2 * math.sqrt(se_a**2 + se_b**2)


def _per_input(inputs: dict, key: str):
    """Per-input terms whose mean is the score ``key`` (accuracy, NLL, Brier score)."""
    import numpy as np

    y, proba = inputs["y"], inputs["proba"]
    index = np.searchsorted(np.asarray(inputs["labels"]), y)
    if key == "accuracy":
        return (proba.argmax(axis=1) == index).astype(np.float64)
    if key == "nll":
        p_true = proba[np.arange(len(y)), index]
        return -np.log(np.clip(p_true, np.finfo(np.float64).eps, 1.0))
    return ((proba - np.eye(proba.shape[1])[index]) ** 2).sum(axis=1)


def _paired_se(a: dict, b: dict, key: str) -> float:
    """Standard error of the difference of a score of two models on the same inputs."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from .metrics import expected_calibration_error

    n = len(a["y"])
    if key in ("accuracy", "nll", "brier"):
        diff = _per_input(a, key) - _per_input(b, key)
        return float(np.std(diff, ddof=1) / math.sqrt(n))
    rng = np.random.default_rng(0)
    if key == "ece":
        diffs = [
            expected_calibration_error(a["y"][i], a["proba"][i], labels=a["labels"])
            - expected_calibration_error(b["y"][i], b["proba"][i], labels=b["labels"])
            for i in (rng.integers(0, n, n) for _ in range(N_BOOT))
        ]
        return float(np.std(diffs, ddof=1))
    s_a, s_b = a["ood"][key], b["ood"][key]
    n_ood = len(s_a) - n
    is_ood = np.r_[np.zeros(n), np.ones(n_ood)]
    diffs = []
    for _ in range(N_BOOT):
        i = np.r_[rng.integers(0, n, n), n + rng.integers(0, n_ood, n_ood)]
        diffs.append(roc_auc_score(is_ood, s_a[i]) - roc_auc_score(is_ood, s_b[i]))
    return float(np.std(diffs, ddof=1))


def _compare(a: dict, b: dict, key: str) -> int:
    """+1 when ``a`` is better than ``b`` on ``key``, -1 worse, 0 a tie: equal at the printed
    precision, or apart by no more than two standard errors of the difference (:func:`_margin`),
    the test set's luck rather than the models'."""
    x, y = a[key], b[key]
    if x is None or y is None or round(x, 3) == round(y, 3) or abs(x - y) <= _margin(a, b, key):
        return 0
    return _BETTER[key] if x > y else -_BETTER[key]


def _tie_note(a: dict, b: dict, key: str) -> str:
    """`` (within +-m, two standard errors)`` for a tie whose printed numbers differ."""
    if round(a[key], 3) == round(b[key], 3):
        return ""
    return f" (within +-{_margin(a, b, key):.3f}, two standard errors)"


def _fit_time(mine: float, theirs: float) -> str:
    """How a fit time compares with another, in words that fit the ratio.

    Parameters
    ----------
    mine, theirs : float
        Fit seconds of the model read about and of the one it is compared with.

    Returns
    -------
    str
        "N times as long" when slower, "N times as fast" when faster, "about as long" within
        5 %, followed by both times.
    """
    both = f"({mine:.1f} s against {theirs:.1f} s)"
    ratio = mine / theirs
    if 1 / 1.05 <= ratio <= 1.05:
        return f"about as long {both}"
    if ratio > 1:
        return f"{_times(ratio)} times as long {both}"
    return f"faster, {_times(1 / ratio)} times as fast {both}"


def _times(ratio: float) -> str:
    """A ratio as printed: no decimals from 10 on, one below."""
    return f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.1f}"


def reading(rows: dict, bayes: str, others: tuple[str, ...]) -> list[str]:
    """Plain sentences saying where ``bayes`` beats each of ``others`` and where it does not.

    Every claim is read from ``rows``, never assumed: a score is better or worse only when the
    two differ by more than two standard errors of their difference (:func:`_margin`: paired
    on the inputs both were scored on; at the three decimals printed where a row has neither
    its inputs nor ``se``), and otherwise equal, as the confidence sentence treats a gap within
    the accuracy's sampling error.

    Parameters
    ----------
    rows : dict
        As for :func:`format_table`.
    bayes : str
        The model to read about.
    others : tuple of str
        The models it is compared with.

    Returns
    -------
    list of str
    """
    lines = []
    b = rows[bayes]
    for other in others:
        o = rows[other]
        better, worse, tied = [], [], []
        for key in _BETTER:
            if o[key] is None or b[key] is None:
                continue
            text = f"{_NAMES[key]} {b[key]:.3f} against {o[key]:.3f}"
            verdict = _compare(b, o, key)
            text += _tie_note(b, o, key) if verdict == 0 else ""
            {1: better, -1: worse, 0: tied}[verdict].append(text)
        # OOD by mutual information against a model that has none: compare with its entropy.
        if b["auroc_mi"] is not None and o["auroc_mi"] is None:
            se = {**b.get("se", {}), "auroc_entropy": b.get("se", {}).get("auroc_mi")}
            mi_vs_h = {**b, "auroc_entropy": b["auroc_mi"], "se": se}
            if "_inputs" in b:  # its MI scores paired with the other's entropy
                ood = {**b["_inputs"]["ood"], "auroc_entropy": b["_inputs"]["ood"]["auroc_mi"]}
                mi_vs_h["_inputs"] = {**b["_inputs"], "ood": ood}
            text = (
                f"OOD AUROC from its mutual information {b['auroc_mi']:.3f} against "
                f"{o['auroc_entropy']:.3f} from the {other}'s entropy"
            )
            verdict = _compare(mi_vs_h, o, "auroc_entropy")
            text += _tie_note(mi_vs_h, o, "auroc_entropy") if verdict == 0 else ""
            {1: better, -1: worse, 0: tied}[verdict].append(text)
        lines.append(f"Against the {other}:")
        lines.append("  better: " + ("; ".join(better) if better else "nowhere"))
        lines.append("  worse:  " + ("; ".join(worse) if worse else "nowhere"))
        if tied:
            lines.append("  equal:  " + "; ".join(tied))
        lines.append(f"  fit time: {_fit_time(b['seconds'], o['seconds'])}")
    lines += _confidence_reading(b, bayes)
    entropies = ", ".join(
        f"{name} {r['mean_entropy_ood']:.2f}"
        for name, r in sorted(rows.items(), key=lambda item: -item[1]["mean_entropy_ood"])
    )
    lines.append(f"Mean predictive entropy on the unseen digits 7-9 (nats): {entropies}.")
    return lines


def _confidence_reading(row: dict, name: str) -> list[str]:
    """A sentence on the model's mean confidence against its accuracy: over- or
    under-confident only where the gap exceeds two standard errors of the accuracy of
    ``row["n_test"]`` inputs (a gap within them is the test set's luck, not the model's)."""
    gap = row["mean_confidence"] - row["accuracy"]
    if round(gap, 3) == 0:
        return []
    acc, n = row["accuracy"], row.get("n_test")
    margin = 2 * math.sqrt(acc * (1 - acc) / n) if n else 0.0
    said = (
        f"{name}'s mean confidence on the test set is {row['mean_confidence']:.3f} against an "
        f"accuracy of {acc:.3f}"
    )
    if abs(gap) <= margin:
        return [f"{said}: as confident as it is accurate, within the accuracy's sampling error "
                f"on {n} test inputs (+-{margin:.3f} at two standard errors)."]  # fmt: skip
    return [f"{said}: {'over' if gap > 0 else 'under'}-confident on average."]


_STYLES = (
    {"linestyle": "-", "linewidth": 1.6, "marker": "o", "markevery": (0.0, 0.09), "zorder": 3},
    {"linestyle": "--", "linewidth": 1.6, "marker": "s", "markevery": (0.03, 0.09), "zorder": 2},
    {
        "linestyle": "-",
        "linewidth": 5,
        "alpha": 0.45,
        "marker": "^",
        "markersize": 8,
        "markevery": (0.06, 0.09),
        "zorder": 1,
    },
)
"""Line styles of the first, second and third model in the risk-coverage plot: each its own
line and markers (at staggered places), the third a wide pale band under the others, so that
curves that coincide (HMC's and the ensemble's at 100 % accuracy) both stay visible."""


def write_figures(out_dir, y_test, probas, labels, rows, draws=None) -> list[Path]:
    """Reliability, risk-coverage and OOD-uncertainty figures of each model's predictive.

    ``probas[name]`` is the pair (test, OOD) of the probabilities the table scored: the model
    average for the MLPs, HMC's calibrated ``predict_proba``; ``draws[name]``, when given, the
    pair of per-draw (or per-member) probabilities, from which the mutual information is read.

    Parameters
    ----------
    out_dir : Path
        Folder the PNG files go to.
    y_test : ndarray of shape (n_test,)
    probas : dict
        Model name to the pair (test, OOD) of predictive probabilities.
    labels : array-like of shape (n_classes,)
    rows : dict
        Model name to its scores (:func:`score_model`).
    draws : dict, optional
        Model name to the pair (test, OOD) of per-draw probabilities (n_draws, n, n_classes).

    Returns
    -------
    list of Path
        ``reliability.png`` (one panel per model, each bin's count beside its point),
        ``risk_coverage.png`` and ``entropy_ood.png`` (predictive entropy, and beneath it the
        mutual information of the models that have several draws or members).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plotting import (
        plot_accuracy_coverage,
        plot_entropy_histogram,
        plot_mutual_information_histogram,
        plot_reliability_diagram,
    )

    names = list(probas)
    paths = []
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 5.2))
    for ax, name in zip(axes, names, strict=True):
        plot_reliability_diagram(y_test, probas[name][0], labels=labels, ax=ax, label=name)
        ax.set_title(f"{name}: reliability (inputs per bin beside each point)", fontsize=9)
    paths.append(out_dir / "reliability.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    for name, style in zip(names, _STYLES, strict=False):
        plot_accuracy_coverage(y_test, probas[name][0], labels=labels, ax=ax, label=name, **style)
    ax.set_xlim(50, 100)  # below half the inputs kept, every model is at 100 %
    ax.set_title("Digits 0-6 test set: accuracy when the most uncertain are refused", fontsize=10)
    paths.append(out_dir / "risk_coverage.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)

    n_rows = 1 if draws is None else 2
    fig, axes = plt.subplots(
        n_rows, len(names), figsize=(4.5 * len(names), 3.8 * n_rows), squeeze=False
    )
    for ax, name in zip(axes[0], names, strict=True):
        title = f"{name}: entropy (OOD AUROC {rows[name]['auroc_entropy']:.3f})"
        plot_entropy_histogram(probas[name][0], probas[name][1], ax=ax, title=title)
    if draws is not None:
        for ax, name in zip(axes[1], names, strict=True):
            d_test, d_ood = draws[name]
            if len(d_test) < 2:  # one network: no disagreement to measure
                ax.text(
                    0.5,
                    0.5,
                    f"{name}: one network,\nno mutual information",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
                ax.set_axis_off()
                continue
            title = f"{name}: mutual information (OOD AUROC {rows[name]['auroc_mi']:.3f})"
            plot_mutual_information_histogram(d_test, d_ood, ax=ax, title=title)
    for row in axes:
        row[0].set_ylabel("density (test 0-6 against unseen 7-9)")
        for ax in row[1:]:
            ax.set_ylabel("")
    fig.tight_layout()
    paths.append(out_dir / "entropy_ood.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    return paths
