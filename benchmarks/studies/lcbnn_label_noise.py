"""Label-corruption experiment of seeds/003, section 4.3.1, on scikit-learn's digits.

A fraction of the training labels is reassigned uniformly at random; the test labels stay clean.
Three MC-dropout networks with one hidden layer of 20 to 100 units decide with the utility of
Table 4.3 (1 on the diagonal; 0.3 for every other decision when the truth is 3 or 8; 0
elsewhere): the loss-calibrated BNN, plain MC dropout and MC dropout with the weighted
cross-entropy of eq. 4.12 (weight 0.7 on 3 and 8). All three take the Bayes action under the
utility; the table gives the mean utility of those decisions on the clean test labels, mean and
standard deviation over seeds.

    python benchmarks/studies/lcbnn_label_noise.py            # 5 seeds, sizes 20-100 (~10 min)
    python benchmarks/studies/lcbnn_label_noise.py --seeds 3 --hidden 20 60 100
    python benchmarks/studies/lcbnn_label_noise.py --quick              # one seed, two sizes
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from sklearn_bnn import LossCalibratedBNN, MCDropoutClassifier
from sklearn_bnn.decision import bayes_decision


def table_4_3_utility() -> np.ndarray:
    """Utility of seeds/003 Table 4.3: rows the true digit, columns the decision."""
    u = np.eye(10)
    u[[3, 8]] = 0.3
    u[3, 3] = u[8, 8] = 1.0
    return u


def corrupt_labels(y, fraction, rng):
    """Reassign ``fraction`` of the labels uniformly over the classes (they may stay the same)."""
    y = y.copy()
    flip = rng.random(len(y)) < fraction
    y[flip] = rng.integers(0, 10, flip.sum())
    return y


def models(hidden, seed, utility, settings):
    kw = dict(hidden_layer_sizes=(hidden,), random_state=seed, **settings)
    return {
        "LCBNN": LossCalibratedBNN(utility=utility, utility_bound=1e-4, **kw),
        "MC dropout": MCDropoutClassifier(**kw),
        "weighted CE": MCDropoutClassifier(class_weight={3: 0.7, 8: 0.7}, **kw),
    }


def run(noises, hiddens, seeds, settings):
    utility = table_4_3_utility()
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    results = {}  # (noise, hidden, model) -> list of utilities
    for seed in seeds:
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=0.5, stratify=y, random_state=seed
        )
        for noise in noises:
            y_noisy = corrupt_labels(y_train, noise, np.random.default_rng(seed))
            for hidden in hiddens:
                for name, est in models(hidden, seed, utility, settings).items():
                    est.fit(X_train, y_noisy)
                    h = bayes_decision(est.predict_proba(X_test), utility)
                    results.setdefault((noise, hidden, name), []).append(utility[y_test, h].mean())
    return results


def print_table(results, noises, hiddens, names):
    print("| noise | hidden | " + " | ".join(names) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in names) + " |")
    for noise in noises:
        for hidden in hiddens:
            cells = []
            for name in names:
                v = np.array(results[(noise, hidden, name)])
                cells.append(f"{v.mean():.3f} ± {v.std():.3f}")
            print(f"| {noise:.0%} | {hidden} | " + " | ".join(cells) + " |")
    print()
    print("| noise | " + " | ".join(names) + " | LCBNN - MC dropout |")
    print("| --- | " + " | ".join("---" for _ in names) + " | --- |")
    for noise in noises:
        means = {n: np.mean([results[(noise, h, n)] for h in hiddens]) for n in names}
        lc = np.array([results[(noise, h, "LCBNN")] for h in hiddens])
        diff = (lc - np.array([results[(noise, h, "MC dropout")] for h in hiddens])).ravel()
        print(
            f"| {noise:.0%} | "
            + " | ".join(f"{means[n]:.3f}" for n in names)
            + f" | {diff.mean():+.3f} (wins {np.mean(diff > 0):.0%}) |"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, two network sizes")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--hidden", type=int, nargs="+", default=[20, 40, 60, 80, 100])
    args = parser.parse_args()
    torch.set_num_threads(1)
    noises = [0.0, 0.2, 0.4, 0.6]
    hiddens = [20, 100] if args.quick else args.hidden
    seeds = range(1 if args.quick else args.seeds)
    settings = dict(
        dropout=0.2, max_iter=100, batch_size=128, learning_rate_init=3e-3, n_predict_draws=100
    )
    start = time.perf_counter()
    results = run(noises, hiddens, seeds, settings)
    print(
        f"digits, Table 4.3 utility, {len(seeds)} seed(s), settings {settings}, "
        f"{time.perf_counter() - start:.0f} s\n"
    )
    print_table(results, noises, hiddens, ["LCBNN", "MC dropout", "weighted CE"])


if __name__ == "__main__":
    main()
