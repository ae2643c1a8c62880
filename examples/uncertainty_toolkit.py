"""The uncertainty toolkit on handwritten digits: report, scorers, decisions, ensemble reduction.

Any classifier with ``predict_samples`` (per-draw probabilities) works here; this script builds
a cheap one, 200 logistic regressions on bootstrap resamples, so that it runs in well under a
minute. Swap in ``HMCClassifier`` (its ``predict_samples`` gives one probability matrix per
posterior draw) for the real thing.

Run: ``python examples/uncertainty_toolkit.py [output_dir]`` (plots need matplotlib).
"""

import sys
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.datasets import load_digits
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data
from threadpoolctl import threadpool_limits

from sklearn_bnn import BayesDecisionClassifier, EnsembleReducer, uncertainty_report
from sklearn_bnn.metrics import get_scorer, mean_utility


class BootstrapEnsemble(ClassifierMixin, BaseEstimator):
    """Logistic regressions on stratified bootstrap resamples, exposing ``predict_samples``."""

    def __init__(self, n_members=200, C=50.0, random_state=None):
        self.n_members = n_members
        self.C = C
        self.random_state = random_state

    def fit(self, X, y):
        X, y = validate_data(self, X, y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        rng = check_random_state(self.random_state)
        by_class = [np.flatnonzero(y_index == c) for c in range(len(self.classes_))]
        self.members_ = []
        for _ in range(self.n_members):
            rows = np.concatenate([rng.choice(idx, size=len(idx)) for idx in by_class])
            member = LogisticRegression(C=self.C, max_iter=200, tol=1e-3)
            self.members_.append(member.fit(X[rows], y_index[rows]))
        return self

    def predict_samples(self, X):
        X = validate_data(self, X, reset=False)
        return np.stack([member.predict_proba(X) for member in self.members_])

    def predict_proba(self, X):
        return self.predict_samples(X).mean(axis=0)


def show(title, rows):
    keys = list(next(iter(rows.values())))
    print(f"\n{title}\n{'':>22}" + "".join(f"{k[:10]:>11}" for k in keys))
    for name, row in rows.items():
        print(f"{name:>22}" + "".join(f"{row[k]:>11.4f}" for k in keys))


def main(out_dir: Path | None) -> None:
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    X_rest, X_test, y_rest, y_test = train_test_split(
        X, y, test_size=0.3, random_state=0, stratify=y
    )
    X_fit, X_val, y_fit, y_val = train_test_split(
        X_rest, y_rest, test_size=0.4, random_state=0, stratify=y_rest
    )

    # 1. One report for a point estimate and for an ensemble of 200 members.
    # Cobb 2019, Table 4.3: utility 1 on the diagonal, 0.3 for any decision when the truth is 3
    # or 8 (rows: true digit, columns: decision).
    U = np.eye(10)
    U[[3, 8], :] = np.maximum(U[[3, 8], :], 0.3)
    single = LogisticRegression(C=50.0, max_iter=500).fit(X_fit, y_fit)
    ensemble = BootstrapEnsemble(n_members=200, random_state=0).fit(X_fit, y_fit)
    show(
        "Test-set report (mean_mutual_information is NaN without predict_samples)",
        {
            "single LR": uncertainty_report(single, X_test, y_test, utility=U),
            "200-member ensemble": uncertainty_report(ensemble, X_test, y_test, utility=U),
        },
    )

    # 2. Ensemble-size reduction: selection on validation data, scores on test data. The greedy
    # passes of Schmal & Mäder 2026 (tolerance 0) against the default, a prefix of a random order.
    rows = {"all 200 members": {"members": 200, **_scores(ensemble, X_test, y_test)}}
    for method, metric in (("greedy", "accuracy"), ("greedy", "ece"), ("random_order", "accuracy")):
        tolerance = 0.0 if method == "greedy" else 0.005
        reducer = EnsembleReducer(
            FrozenEstimator(ensemble),
            method=method,
            scoring=metric,
            tolerance=tolerance,
            random_state=0,
        )
        reducer.fit(X_val, y_val)
        rows[f"{method}, kept for {metric}"] = {
            "members": reducer.n_members_,
            **_scores(reducer, X_test, y_test),
        }
        if method == "greedy":
            per_pass = reducer.n_members_per_repeat_.tolist()
            print(f"greedy, {metric}: members kept per pass {per_pass}")
    show("Ensemble-size reduction (test set)", rows)

    # 3. Decisions: Bayes actions of the ensemble under the utility, against argmax decisions.
    bayes = BayesDecisionClassifier(FrozenEstimator(ensemble), utility=U).fit(X_fit, y_fit)
    argmax = mean_utility(y_test, bayes.predict_proba(X_test).argmax(axis=1), U)
    print(
        f"\nmean utility on test: Bayes actions {bayes.score(X_test, y_test):.4f}, "
        f"most probable class {argmax:.4f}"
    )

    # 4. Model selection on calibration and on utility.
    for scoring in ("neg_expected_calibration_error", "expected_utility"):
        kwargs = {"utility": U} if scoring == "expected_utility" else {}
        grid = GridSearchCV(
            LogisticRegression(max_iter=300),
            {"C": [0.1, 1.0, 10.0, 100.0]},
            scoring=get_scorer(scoring, **kwargs),
            cv=3,
        ).fit(X_rest, y_rest)
        print(f"GridSearchCV on {scoring}: best C = {grid.best_params_['C']}")

    if out_dir is not None:
        _plots(ensemble, single, X_test, y_test, out_dir)


def _scores(model, X, y):
    report = uncertainty_report(model, X, y)
    return {k: report[k] for k in ("accuracy", "nll", "ece", "mce")}


def _plots(ensemble, single, X, y, out_dir: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots.")
        return
    from sklearn_bnn import plotting

    out_dir.mkdir(parents=True, exist_ok=True)
    draws = ensemble.predict_samples(X)
    fig, axes = plt.subplots(2, 2, figsize=(12, 10))
    plotting.plot_reliability_diagram(y, draws.mean(0), ax=axes[0, 0], label="ensemble")
    plotting.plot_entropy_cdf(y, draws, ax=axes[0, 1], label="ensemble")
    plotting.plot_entropy_cdf(y, single.predict_proba(X), ax=axes[0, 1], label="single LR")
    plotting.plot_mutual_information_matrix(y, draws, ax=axes[1, 0])
    plotting.plot_cumulative_accuracy(y, draws, ax=axes[1, 1])
    fig.tight_layout()
    fig.savefig(out_dir / "uncertainty_toolkit.png", dpi=80)
    print(f"\nplots written to {out_dir / 'uncertainty_toolkit.png'}")


if __name__ == "__main__":
    with threadpool_limits(1):  # many small fits: BLAS threads only add overhead
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("uncertainty_toolkit_plots"))
