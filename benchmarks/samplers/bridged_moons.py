"""Table 4.2 of seeds/001 (§4.2), reduced: a BNN on moons, plain HMC against bridged HMC.

Moons (scikit-learn, noise 0.2), 500 training and 500 test points, network [2, 5, 5, 2] tanh
(51 parameters: one logit for two classes; the paper's softmax has 57), Gaussian prior of
precision 1, L = 20, dual averaging in warmup. Plain HMC with ``n_draws`` draws in one chain
against bridged HMC with 4, 8 and 16 boxes (2, 3, 4 coordinates split at zero, chosen at random
from the seed), ``n_draws / boxes`` draws each. Reported: test
accuracy and NLL of the posterior predictive, seconds per chain or box (the paper's "time"),
the total wall time with the boxes run in parallel (``n_jobs``), and how the box weights vary
over seeds: the largest weight and the effective number of boxes exp(-sum w log w) (mean and sd;
the split coordinates are drawn from the seed, so the boxes themselves differ between seeds),
with the largest bridge overlap of any box (1 = perfect proposal, 0 = none). "s/box" is the wall
time times the workers over the boxes (even load assumed). Paper (20,000 draws; GTX 1070):
accuracy 96.5 / 95.8 / 94.4 / 95.2, time per chain 57 / 42 / 23 / 13 s.

Run: ``python benchmarks/samplers/bridged_moons.py [--n-draws 20000] [--n-warmup 1000]
[--seeds 3]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import make_moons
from sklearn.metrics import accuracy_score, log_loss

from sklearn_bnn import HMCClassifier
from sklearn_bnn.samplers import HMC, BridgedHMC

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import timed_fit  # noqa: E402

PAPER = {1: (96.5, 57), 4: (95.8, 42), 8: (94.4, 23), 16: (95.2, 13)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-draws", type=int, default=20_000)
    parser.add_argument("--n-warmup", type=int, default=1_000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--boxes", type=int, nargs="+", default=[1, 4, 8, 16])
    args = parser.parse_args()
    X, y = make_moons(1000, noise=0.2, random_state=0)
    X = X - X[:500].mean(0)
    Xtr, ytr, Xte, yte = X[:500], y[:500], X[500:], y[500:]
    print(
        f"moons 500/500, [2, 5, 5, 2] tanh, {args.n_draws} draws in all, "
        f"{args.n_warmup} warmup per chain/box, {args.seeds} seeds, n_jobs={args.n_jobs}"
    )
    print(
        f"{'boxes':>5} {'acc %':>6} {'NLL':>6} {'s/box':>7} {'wall s':>7} {'ratio':>6} "
        f"{'max w (sd)':>12} {'eff. boxes':>11} {'overlap':>8}  paper acc, s/chain"
    )
    base = None
    for n_boxes in args.boxes:
        accs, nlls, per_box, walls, top, eff, overlap = [], [], [], [], [], [], []
        for seed in range(args.seeds):
            params = dict(
                hidden_layer_sizes=(5, 5),
                activation="tanh",
                n_warmup=args.n_warmup,
                random_state=seed,
                n_jobs=args.n_jobs,
            )
            if n_boxes == 1:
                clf = HMCClassifier(n_draws=args.n_draws, sampler=HMC(n_steps=20), **params)
            else:
                s = int(np.log2(n_boxes))
                sampler = BridgedHMC(n_split_params=s, n_steps=20)
                clf = HMCClassifier(
                    n_draws=args.n_draws // n_boxes,
                    sampler=sampler,
                    **params,
                )
            wall = timed_fit(clf, Xtr, ytr)  # the overlap warning is expected
            proba = clf.predict_proba(Xte)
            accs.append(100 * accuracy_score(yte, proba.argmax(1)))
            nlls.append(log_loss(yte, proba))
            walls.append(wall)
            per_box.append(wall * min(args.n_jobs, n_boxes) / n_boxes)
            if n_boxes > 1:
                w = clf.diagnostics_["box_weight"]
                top.append(w.max())
                eff.append(float(np.exp(-np.sum(w[w > 0] * np.log(w[w > 0])))))
                overlap.append(float(clf.diagnostics_["box_bridge_overlap"].max()))
                print(
                    f"      seed {seed}: weights {np.round(np.sort(w)[::-1][:4], 3)}..., "
                    f"converged {int(clf.diagnostics_['box_bridge_converged'].sum())}/{n_boxes}, "
                    f"overlap max {overlap[-1]:.1e}, acc {accs[-1]:.1f}, wall {wall:.0f} s",
                    flush=True,
                )
        wall = float(np.mean(walls))
        base = base or wall
        w = f"{np.mean(top):.2f} ({np.std(top):.2f})" if top else "-"
        e = f"{np.mean(eff):.2f} ({np.std(eff):.2f})" if eff else "-"
        o = f"{np.max(overlap):.0e}" if overlap else "-"
        acc_p, t_p = PAPER.get(n_boxes, ("-", "-"))
        print(
            f"{n_boxes:>5} {np.mean(accs):>6.1f} {np.mean(nlls):>6.3f} "
            f"{np.mean(per_box):>7.1f} {wall:>7.1f} {wall / base:>6.2f} {w:>12} {e:>11} {o:>8}  "
            f"{acc_p}, {t_p}",
            flush=True,
        )


if __name__ == "__main__":
    main()
