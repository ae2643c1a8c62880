"""Stochastic-gradient MCMC for classification against full HMC, MC dropout and a deep ensemble.

Two parts, each with a held-out set of classes the models never see, on which a good predictor
is uncertain (high predictive entropy):

* ``digits``: scikit-learn's digits, classes 0-7 for training (stratified 70/30 split, seed 0;
  a stratified 20 % of the training part is kept back as validation data), classes 8-9 held
  out. A small CNN (64 -> 1x8x8, two 3x3 convolutions with SELU and 2x2 max-pooling, dense
  64-32-8). Methods: SGHMC, GSGHMC and HTE (``SGMCMCClassifier`` with the CNN as ``module``),
  full-batch HMC (``HMCClassifier`` with the same CNN), MC dropout (the CNN with dropout,
  trained and sampled here in torch, as ``MCDropoutClassifier`` builds MLPs only) and a deep
  ensemble of 5 CNNs trained by Adam.
* ``tabular``: ``make_classification`` with 200,000 rows, 50 features (20 informative),
  5 classes, seed 0; class 4 held out; classes 0-3 split 70/30 (seed 0), 10 % of the training
  part kept back as validation data; features standardised on the training rows; float32
  throughout. An MLP 50-100-100-4. Methods: SGHMC, GSGHMC, HTE, ``MCDropoutClassifier`` and a
  deep ensemble of 5 MLPs. No full HMC: every leapfrog step would need a gradient over all
  ~100,000 training rows, and a useful chain needs thousands of them (hours on one CPU thread).

Every SG-MCMC run starts at a mode found by full-data Adam (``init="map"``), burns in for a few
epochs and keeps a draw per epoch. Reported on the in-distribution test set: accuracy,
negative log-likelihood (NLL) and expected calibration error (ECE, 15 bins); the mean
predictive entropy (nats) on that test set and on the held-out classes; the fit time.

Then ensemble-size reduction (``EnsembleReducer`` around the frozen SG-MCMC classifiers,
selection on the validation data): the fewest draws whose ensemble stays within 1 % of the full
ensemble's validation accuracy (a tolerance of 0.01 x accuracy), and within 1 % of its
validation ECE (0.01 x ECE), each with the test figures of the reduced ensemble. seeds/004
(Fig. 5) found that accuracy needs under half of the ensemble and calibration almost all of
it; this measures whether that holds on these draws. As the greedy selection on a small
validation set also fits its noise, the test accuracy and ECE of ensembles of k random draws
(20 subsets per k) are reported too: the smallest k from which the accuracy stays within 1 %
of all draws' and the ECE no more than 1 % above it, and, as the ECE may approach its
all-draws value from below, the smallest k from which it stays within 5 % either side
(``--plot PNG`` draws these curves).

Reduced for a budget of about 20 minutes on one CPU thread (both parts; 584 s measured on a
shared machine): few epochs (digits:
20 burn-in + 60 sampling epochs; tabular: 2 + 20), HMC with 100 + 100 transitions of 20
leapfrog steps, ensemble members trained for a fixed number of epochs without early stopping.
``--tune`` instead runs the step-size grids of the SG samplers on the validation data (shorter
runs for the tabular part) and prints validation accuracy / NLL / acceptance.

Run: ``OMP_NUM_THREADS=1 python benchmarks/studies/sgmcmc_classification.py
[--part digits|tabular|both] [--tune] [--plot docs/sgmcmc_reduction.png]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits, make_classification
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import train_test_split
from torch import nn

from sklearn_bnn import HMCClassifier, MCDropoutClassifier, SGMCMCClassifier
from sklearn_bnn.ensemble import EnsembleReducer
from sklearn_bnn.metrics import (
    expected_calibration_error,
    negative_log_likelihood,
    predictive_entropy,
)
from sklearn_bnn.samplers import GSGHMC, HMC, HTE, SGHMC
from sklearn_bnn.samplers.starts import MAPStart

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import DigitsCNN  # noqa: E402

warnings.simplefilter("ignore", RuntimeWarning)  # R-hat of single-chain runs

# Step sizes chosen with --tune: the lowest validation NLL among settings with acceptance >= 0.5
# (tabular GSGHMC: no setting moves; the largest step with acceptance near 0.5). See
# docs/sgmcmc.md, "Classification benchmark".
STEPS = {
    "digits": {"SGHMC": 0.003, "GSGHMC": 0.001, "HTE": 0.003},
    "tabular": {"SGHMC": 1e-3, "GSGHMC": 3e-5, "HTE": 1e-3},
}
GRIDS = {
    "digits": {
        "SGHMC": (0.003, 0.01, 0.03),
        "GSGHMC": (0.001, 0.003, 0.01),
        "HTE": (0.003, 0.01, 0.03),
    },
    "tabular": {
        "SGHMC": (3e-4, 1e-3, 3e-3),
        "GSGHMC": (1e-5, 3e-5, 1e-4, 3e-4, 1e-3),
        "HTE": (3e-4, 1e-3, 3e-3),
    },
}


def tabular_mlp(n_in: int, n_out: int) -> nn.Module:
    """The tabular MLP, ``n_in -> 100 -> 100 -> n_out`` with ReLU.

    Parameters
    ----------
    n_in, n_out : int
        Input and output widths.

    Returns
    -------
    nn.Sequential
    """
    return nn.Sequential(
        nn.Linear(n_in, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, n_out)
    )


# --------------------------------------------------------------------------- data


def digits_data():
    """Digits scaled to [0, 1]: train / validation / test on classes 0-7, and classes 8-9.

    Returns
    -------
    dict
        ``train``, ``val``, ``test`` and ``ood`` as (X, y) pairs (``ood`` without labels).
    """
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    inside = y < 8
    X_in, y_in = X[inside], y[inside]
    X_tr, X_te, y_tr, y_te = train_test_split(
        X_in, y_in, test_size=0.3, stratify=y_in, random_state=0
    )
    X_fit, X_val, y_fit, y_val = train_test_split(
        X_tr, y_tr, test_size=0.2, stratify=y_tr, random_state=0
    )
    return {
        "train": (X_fit, y_fit),
        "val": (X_val, y_val),
        "test": (X_te, y_te),
        "ood": (X[~inside], None),
    }


def tabular_data(n_rows: int = 200_000):
    """``make_classification`` data, class 4 held out, standardised, float32.

    Parameters
    ----------
    n_rows : int, default=200_000
        Rows generated (all five classes).

    Returns
    -------
    dict
        As :func:`digits_data`.
    """
    X, y = make_classification(
        n_samples=n_rows,
        n_features=50,
        n_informative=20,
        n_redundant=5,
        n_classes=5,
        random_state=0,
    )
    inside = y < 4
    X_in, y_in = X[inside], y[inside]
    X_tr, X_te, y_tr, y_te = train_test_split(
        X_in, y_in, test_size=0.3, stratify=y_in, random_state=0
    )
    X_fit, X_val, y_fit, y_val = train_test_split(
        X_tr, y_tr, test_size=0.1, stratify=y_tr, random_state=0
    )
    mean, std = X_fit.mean(axis=0), X_fit.std(axis=0)

    def scale(A):
        return np.ascontiguousarray((A - mean) / std, dtype=np.float32)

    return {
        "train": (scale(X_fit), y_fit),
        "val": (scale(X_val), y_val),
        "test": (scale(X_te), y_te),
        "ood": (scale(X[~inside]), None),
    }


# --------------------------------------------------------------------------- metrics


def scores(proba_test, y_test, proba_ood) -> dict:
    """Accuracy, NLL, ECE and mean predictive entropies of one predictor.

    Parameters
    ----------
    proba_test : ndarray of shape (n_test, n_classes)
    y_test : ndarray of shape (n_test,)
    proba_ood : ndarray of shape (n_ood, n_classes)

    Returns
    -------
    dict
    """
    labels = np.arange(proba_test.shape[1])
    return {
        "accuracy": float(np.mean(proba_test.argmax(1) == y_test)),
        "nll": negative_log_likelihood(y_test, proba_test, labels=labels),
        "ece": expected_calibration_error(y_test, proba_test, labels=labels),
        "entropy_in": float(predictive_entropy(proba_test).mean()),
        "entropy_out": float(predictive_entropy(proba_ood).mean()),
    }


def subset_curve(stack, y, *, n_subsets: int = 20, seed: int = 0):
    """Test accuracy and ECE of ensembles of k random draws, k = 1 .. n_draws.

    Parameters
    ----------
    stack : ndarray of shape (n_draws, n_samples, n_classes)
        Per-draw probabilities on the test set.
    y : ndarray of shape (n_samples,)
    n_subsets : int, default=20
        Random subsets (without replacement) averaged per size.
    seed : int, default=0

    Returns
    -------
    sizes, accuracy, ece : ndarray of shape (n_draws,)
        Mean accuracy and mean ECE over the subsets of each size.
    """
    rng = np.random.default_rng(seed)
    labels = np.arange(stack.shape[2])
    sizes = np.arange(1, len(stack) + 1)
    acc, ece = np.zeros(len(sizes)), np.zeros(len(sizes))
    for i, k in enumerate(sizes):
        draws = 1 if k == len(stack) else n_subsets
        for _ in range(draws):
            proba = stack[rng.choice(len(stack), size=k, replace=False)].mean(axis=0)
            acc[i] += np.mean(proba.argmax(1) == y) / draws
            ece[i] += expected_calibration_error(y, proba, labels=labels) / draws
    return sizes, acc, ece


def first_within(sizes, values, full, side: str, tol: float = 0.01) -> int:
    """Smallest size from which the curve stays within ``tol`` (relative) of ``full``.

    ``side="above"``: no lower than ``(1 - tol) full`` (accuracy); ``"below"``: no higher than
    ``(1 + tol) full`` (ECE no worse); ``"both"``: within ``tol`` either side.
    """
    ok = np.ones(len(values), dtype=bool)
    if side in ("above", "both"):
        ok &= values >= (1 - tol) * full
    if side in ("below", "both"):
        ok &= values <= (1 + tol) * full
    bad = np.flatnonzero(~ok)
    return int(sizes[0] if len(bad) == 0 else sizes[min(bad[-1] + 1, len(sizes) - 1)])


# --------------------------------------------------------------------------- torch baselines


def train_net(net, X, y, *, epochs, lr, batch_size, seed):
    """Adam on the mean cross-entropy plus the Gaussian prior's weight decay (precision 1).

    Parameters
    ----------
    net : nn.Module
    X, y : ndarray
        Training data (float32 features, integer labels).
    epochs, batch_size : int
    lr : float
        Adam learning rate.
    seed : int
        Seeds the batch order.

    Returns
    -------
    nn.Module
        ``net``, trained, in eval mode.
    """
    n = len(X)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y, dtype=torch.long)
    # The MAP of the posterior the samplers target: sum of the log-likelihood plus a N(0, 1)
    # prior, i.e. a weight decay of 1 / n on the mean loss.
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=1.0 / n)
    gen = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(n // batch_size):
            rows = perm[i * batch_size : (i + 1) * batch_size]
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(net(Xt[rows]), yt[rows]).backward()
            opt.step()
    return net.eval()


@torch.no_grad()
def net_proba(net, X, *, n_passes: int = 1, seed: int = 0) -> np.ndarray:
    """Softmax outputs of ``net`` on ``X``; with ``n_passes > 1``, per-pass dropout samples.

    Parameters
    ----------
    net : nn.Module
    X : ndarray
    n_passes : int, default=1
        1: one deterministic pass (eval mode). More: that many passes with dropout active.
    seed : int, default=0
        Seeds the dropout masks.

    Returns
    -------
    ndarray of shape (n_passes, n_samples, n_classes)
    """
    Xt = torch.as_tensor(X)
    if n_passes == 1:
        return torch.softmax(net.eval()(Xt), -1).numpy()[None]
    torch.manual_seed(seed)
    net.train()
    out = np.stack([torch.softmax(net(Xt), -1).numpy() for _ in range(n_passes)])
    net.eval()
    return out


# --------------------------------------------------------------------------- runs


def sg_classifier(part: str, name: str, step: float, cfg: dict) -> SGMCMCClassifier:
    """The SG-MCMC classifier of one part and sampler, at time step ``step``."""
    sampler = {
        "SGHMC": SGHMC(step_size=step),
        "GSGHMC": GSGHMC(step_size=step),
        "HTE": HTE(step_size=step, max_tries=3),
    }[name]
    return SGMCMCClassifier(
        module=cfg["module"],
        sampler=sampler,
        batch_size=cfg["batch_size"],
        init=cfg["init"],
        n_warmup=cfg["n_warmup"],
        n_draws=cfg["n_draws"],
        random_state=0,
    )


CONFIG = {
    "digits": {
        "module": DigitsCNN,
        "batch_size": 64,
        "init": MAPStart(n_steps=300),
        "n_warmup": 20,
        "n_draws": 60,
        "tune_epochs": (20, 60),
        "adam": {"epochs": 60, "lr": 3e-3, "batch_size": 64},
        "dropout": 0.1,
        "n_mc": 60,
    },
    "tabular": {
        "module": tabular_mlp,
        "batch_size": 256,
        "init": MAPStart(n_steps=100),
        "n_warmup": 2,
        "n_draws": 20,
        "tune_epochs": (2, 4),
        "adam": {"epochs": 8, "lr": 1e-3, "batch_size": 256},
        "dropout": 0.1,
        "n_mc": 30,
    },
}


def timed(fn):
    """Call ``fn()``; return its result and the wall-clock seconds it took."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def tune(part: str, data: dict) -> None:
    """Print validation accuracy / NLL / acceptance over each SG sampler's step-size grid."""
    cfg = dict(CONFIG[part])
    cfg["n_warmup"], cfg["n_draws"] = cfg["tune_epochs"]
    (X, y), (X_val, y_val) = data["train"], data["val"]
    labels = np.unique(y)
    print(f"[{part}] step-size grid, {cfg['n_warmup']} + {cfg['n_draws']} epochs")
    print(f"{'sampler':<8}{'eps':>9}{'val acc':>9}{'val NLL':>9}{'accept':>8}{'s':>7}")
    for name, grid in GRIDS[part].items():
        for step in grid:
            clf, secs = timed(lambda n=name, s=step: sg_classifier(part, n, s, cfg).fit(X, y))
            proba = clf.predict_proba(X_val)
            acc = np.mean(proba.argmax(1) == y_val)
            nll = negative_log_likelihood(y_val, proba, labels=labels)
            print(
                f"{name:<8}{step:>9.0e}{acc:>9.3f}{nll:>9.3f}"
                f"{clf.acceptance_rate_:>8.2f}{secs:>7.0f}",
                flush=True,
            )


def run_part(part: str, data: dict, with_hmc: bool) -> None:
    """Fit every method of one part, print the table and the ensemble-size reduction."""
    cfg = CONFIG[part]
    (X, y), (X_val, y_val) = data["train"], data["val"]
    (X_te, y_te), (X_ood, _) = data["test"], data["ood"]
    n_classes = len(np.unique(y))
    rows, sg = {}, {}

    for name, step in STEPS[part].items():
        clf, secs = timed(lambda n=name, s=step: sg_classifier(part, n, s, cfg).fit(X, y))
        rows[f"{name} (eps {step:g})"] = {
            **scores(clf.predict_proba(X_te), y_te, clf.predict_proba(X_ood)),
            "members": len(clf.samples_),
            "accept": clf.acceptance_rate_,
            "seconds": secs,
        }
        sg[name] = clf
        print(f"  {name} done in {secs:.0f} s", flush=True)

    if with_hmc:
        hmc = HMCClassifier(
            module=cfg["module"],
            n_warmup=100,
            n_draws=100,
            sampler=HMC(n_steps=20),
            init=MAPStart(n_steps=300),
            random_state=0,
        )
        hmc, secs = timed(lambda: hmc.fit(X, y))
        rows["HMC (full batch)"] = {
            **scores(hmc.predict_proba(X_te), y_te, hmc.predict_proba(X_ood)),
            "members": len(hmc.samples_),
            "accept": hmc.acceptance_rate_,
            "seconds": secs,
        }
        print(f"  HMC done in {secs:.0f} s", flush=True)

    adam = cfg["adam"]
    if part == "digits":

        def fit_dropout():
            torch.manual_seed(0)
            net = DigitsCNN(X.shape[1], n_classes, dropout=cfg["dropout"])
            return train_net(net, X, y, seed=0, **adam)

        net, secs = timed(fit_dropout)

        def mc(A):
            return net_proba(net, A, n_passes=cfg["n_mc"]).mean(0)

    else:
        mcd = MCDropoutClassifier(
            hidden_layer_sizes=(100, 100),
            dropout=cfg["dropout"],
            n_predict_draws=cfg["n_mc"],
            max_iter=adam["epochs"],
            batch_size=adam["batch_size"],
            learning_rate_init=adam["lr"],
            random_state=0,
        )
        mcd, secs = timed(lambda: mcd.fit(X, y))
        mc = mcd.predict_proba
    rows[f"MC dropout (p {cfg['dropout']})"] = {
        **scores(mc(X_te), y_te, mc(X_ood)),
        "members": cfg["n_mc"],
        "accept": np.nan,
        "seconds": secs,
    }
    print(f"  MC dropout done in {secs:.0f} s", flush=True)

    def fit_ensemble():
        nets = []
        for seed in range(5):
            torch.manual_seed(seed)
            net = cfg["module"](X.shape[1], n_classes)
            nets.append(train_net(net, X, y, seed=seed, **adam))
        return nets

    nets, secs = timed(fit_ensemble)

    def ens(A):
        return np.mean([net_proba(n, A)[0] for n in nets], axis=0)

    rows["deep ensemble (5)"] = {
        **scores(ens(X_te), y_te, ens(X_ood)),
        "members": 5,
        "accept": np.nan,
        "seconds": secs,
    }
    print(f"  deep ensemble done in {secs:.0f} s", flush=True)

    print(
        f"\n[{part}] train {len(X)}, validation {len(X_val)}, test {len(X_te)}, "
        f"held-out classes {len(X_ood)}"
    )
    print(
        "| method | accuracy | NLL | ECE | entropy test | entropy held-out | members "
        "| acceptance | fit s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    for name, r in rows.items():
        accept = "–" if np.isnan(r["accept"]) else f"{r['accept']:.2f}"
        print(
            f"| {name} | {r['accuracy']:.3f} | {r['nll']:.3f} | {r['ece']:.3f} "
            f"| {r['entropy_in']:.3f} | {r['entropy_out']:.3f} | {r['members']} "
            f"| {accept} | {r['seconds']:.0f} |"
        )

    print(f"\n[{part}] ensemble-size reduction on the validation data (1 % tolerance)")
    print(
        "| sampler | kept for | draws kept (per pass) | val metric full -> reduced "
        "| test accuracy | test NLL | test ECE |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    labels = np.arange(n_classes)
    for name, clf in sg.items():
        full_val = clf.predict_proba(X_val)
        for metric in ("accuracy", "ece"):
            if metric == "accuracy":
                value = np.mean(full_val.argmax(1) == y_val)
            else:
                value = expected_calibration_error(y_val, full_val, labels=labels)
            reducer = EnsembleReducer(
                FrozenEstimator(clf),
                method="greedy",
                metric=metric,
                tolerance=0.01 * value,
                random_state=0,
            ).fit(X_val, y_val)
            proba = reducer.predict_proba(X_te)
            per_pass = ", ".join(str(k) for k in reducer.n_members_per_repeat_)
            print(
                f"| {name} | {metric} | {reducer.n_members_} of {reducer.n_members_full_} "
                f"({per_pass}) | {reducer.score_full_:.4f} -> {reducer.score_reduced_:.4f} "
                f"| {np.mean(proba.argmax(1) == y_te):.3f} "
                f"| {negative_log_likelihood(y_te, proba, labels=labels):.3f} "
                f"| {expected_calibration_error(y_te, proba, labels=labels):.3f} |"
            )

    print(f"\n[{part}] test metrics of k random draws (mean of 20 subsets per k)")
    print(
        "| sampler | draws | k: accuracy >= 99 % of all | k: ECE <= 101 % of all "
        "| k: ECE within 5 % of all | accuracy at k = 1 / 2 / 5 / all "
        "| ECE at k = 1 / 2 / 5 / 10 / all |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    curves = {}
    for name, clf in sg.items():
        sizes, acc, ece = subset_curve(clf.predict_samples(X_te), y_te)
        curves[name] = (sizes, acc, ece)
        k_acc = first_within(sizes, acc, acc[-1], "above")
        k_ece = first_within(sizes, ece, ece[-1], "below")
        k_ece5 = first_within(sizes, ece, ece[-1], "both", tol=0.05)
        at = [k for k in (1, 2, 5, 10) if k < len(sizes)]
        print(
            f"| {name} | {len(sizes)} | {k_acc} | {k_ece} | {k_ece5} "
            f"| {' / '.join(f'{acc[k - 1]:.3f}' for k in at[:3])} / {acc[-1]:.3f} "
            f"| {' / '.join(f'{ece[k - 1]:.3f}' for k in at)} / {ece[-1]:.3f} |"
        )
    print(flush=True)
    return curves


def plot_curves(curves: dict, path: str) -> None:
    """Accuracy and ECE against the number of random draws, relative to all draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for part, by_sampler in curves.items():
        style = "-" if part == "digits" else "--"
        for name, (sizes, acc, ece) in by_sampler.items():
            frac = sizes / sizes[-1]
            axes[0].plot(frac, acc / acc[-1], style, label=f"{part} {name}")
            axes[1].plot(frac, ece / ece[-1], style, label=f"{part} {name}")
    titles = ("accuracy / accuracy of all draws", "ECE / ECE of all draws")
    for ax, title in zip(axes, titles, strict=True):
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("fraction of the draws (random subsets)")
        ax.set_title(title, fontsize=10)
    axes[0].axhline(0.99, color="grey", lw=0.8, ls=":")
    axes[1].axhline(1.01, color="grey", lw=0.8, ls=":")
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("digits", "tabular", "both"), default="both")
    parser.add_argument("--tune", action="store_true", help="run the step-size grids only")
    parser.add_argument("--no-hmc", action="store_true", help="skip full HMC on digits")
    parser.add_argument("--plot", metavar="PNG", help="save the random-subset curves here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    curves = {}
    for part in ("digits", "tabular") if args.part == "both" else (args.part,):
        data = digits_data() if part == "digits" else tabular_data()
        if args.tune:
            tune(part, data)
        else:
            curves[part] = run_part(part, data, with_hmc=part == "digits" and not args.no_hmc)
    if args.plot and curves:
        plot_curves(curves, args.plot)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
