"""Does the held-out temperature cost out-of-distribution detection? (issue 33 item 8)

``HMCClassifier``'s default ``calibration="temperature"`` learns a temperature T of the
predictive on held-out rows (docs/hmc.md, "Calibration"; T < 1 sharpens). A sharper predictive
has lower entropy everywhere, on unseen classes too, so it could detect them worse. One fit
answers both sides: ``predict_proba`` is the calibrated model average, the mean of the per-draw
probabilities (``predict_samples``) the untempered one, so the comparison holds the draws fixed.

Digits, trained on some classes, with the other classes as inputs no model has seen: by default
the demo's split (0-6 seen, 7-9 unseen) and a second one (3-9 seen, 0-2 unseen). Reports, with
and without T: accuracy, NLL, ECE on the seen classes' test rows, and the AUROC of telling unseen
from seen test inputs by the predictive entropy and by the mutual information (the latter does
not depend on T: it is read from the draws).

    python benchmarks/studies/ood_temperature.py --seeds 0 1 2 --out ood_temperature.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import HMCClassifier
from sklearn_bnn._demo_report import score_model
from sklearn_bnn.metrics import predict_samples

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import digits_split, timed_fit  # noqa: E402

HOLDOUTS = {"7-9": (7, 8, 9), "0-2": (0, 1, 2)}


def split(unseen, seed):
    seen = [c for c in range(10) if c not in unseen]
    return digits_split(seed, classes=seen, scale=False)  # the pipeline scales


def run_one(holdout, seed, params):
    X_tr, y_tr, X_te, y_te, X_ood = split(HOLDOUTS[holdout], seed)
    model = make_pipeline(StandardScaler(), HMCClassifier(random_state=seed, **params))
    seconds = timed_fit(model, X_tr, y_tr)
    hmc = model[-1]

    def unit(p):  # float32 draws sum to one within 1e-7; the Brier check wants float64
        p = np.asarray(p, dtype=np.float64)
        return p / p.sum(axis=-1, keepdims=True)

    draws = [unit(predict_samples(model, X)) for X in (X_te, X_ood)]
    tempered = tuple(unit(model.predict_proba(X)) for X in (X_te, X_ood))
    labels = hmc.classes_
    rows = {
        "with T": score_model(y_te, *draws, labels, tempered),
        "without T": score_model(y_te, *draws, labels),
    }
    for row in rows.values():
        row.update(holdout=holdout, seed=seed, temperature=hmc.calibration_temperature_)
        row["fit_s"] = seconds
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--holdouts", nargs="+", default=list(HOLDOUTS), choices=list(HOLDOUTS))
    parser.add_argument("--quick", action="store_true", help="a tiny budget: a smoke test")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    params = {}
    if args.quick:
        params = dict(n_warmup=20, n_draws=20, hidden_layer_sizes=(16,))
    records = []
    for holdout in args.holdouts:
        for seed in args.seeds:
            for variant, row in run_one(holdout, seed, params).items():
                records.append({"variant": variant, **row})
                print(
                    f"unseen {holdout} seed {seed} {variant:9s}: T={row['temperature']:.3f} "
                    f"acc {row['accuracy']:.3f} NLL {row['nll']:.4f} ECE {row['ece']:.4f} "
                    f"AUROC entropy {row['auroc_entropy']:.3f} MI {row['auroc_mi']:.3f} "
                    f"entropy seen/unseen {row['mean_entropy_test']:.3f}/"
                    f"{row['mean_entropy_ood']:.3f}",
                    flush=True,
                )
    keys = ("nll", "ece", "auroc_entropy", "auroc_mi", "mean_entropy_test", "mean_entropy_ood")
    print("\n| unseen | variant | n | " + " | ".join(keys) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in keys) + " |")
    for holdout in args.holdouts:
        for variant in ("with T", "without T"):
            rows = [r for r in records if r["holdout"] == holdout and r["variant"] == variant]
            cells = [
                f"{np.mean([r[k] for r in rows]):.4f} ± "
                f"{np.std([r[k] for r in rows]) / np.sqrt(len(rows)):.4f}"
                for k in keys
            ]
            print(f"| {holdout} | {variant} | {len(rows)} | " + " | ".join(cells) + " |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1, default=float)


if __name__ == "__main__":
    main()
