"""Peak memory of a regressor's ``predict(X, return_std=True)`` on many rows (issue 19).

200,000 rows x 200 posterior draws, one output: the answer is two float64 vectors (3.2 MB).
Each measurement runs in a fresh subprocess with glibc's mmap and trim thresholds fixed at
128 KiB (see ``split_memory.py``: then the peak RSS follows the peak of live memory). The model
is fitted on 200 rows, the test rows are made, the peak RSS is reset
(``/proc/self/clear_refs``), and one call is measured. Reported: the increase of the peak RSS
over the RSS just before the call, in MiB, for

- ``regressor``: ``HMCRegressor.predict(X, return_std=True)`` (rows in chunks);
- ``all_draws``: the same numbers from ``predict_samples`` (every draw of every row at once,
  what ``predict`` did before);
- ``classifier``: ``HMCClassifier.predict_proba`` on the same rows (streams over draws);
- ``dropout``: ``MCDropoutRegressor.predict(X, return_std=True)`` with 200 dropout draws.

With ``--samples``, ``predict_samples`` itself is measured instead (defaults 10,000 rows x 500
draws, a 114 MiB float64 answer for three classes), for

- ``samples_classifier``: ``HMCClassifier`` on three classes, one chain of ``--draws`` draws;
- ``samples_regressor``: ``HMCRegressor`` with two outputs, one chain;
- ``samples_dropout``: ``MCDropoutClassifier`` on three classes with ``--draws`` dropout draws;

each repeated ``--repeats`` times. ``--default-malloc`` leaves glibc's thresholds as they are:
the peak RSS then also holds freed blocks that glibc has not returned, and varies from run to run.

Run: ``python benchmarks/speed/predict_memory.py [--rows 200000] [--draws 200]`` or
``python benchmarks/speed/predict_memory.py --samples [--rows 10000] [--draws 500] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
from harness import child_env, proc_status_kib, reset_peak_rss, run_child  # noqa: E402


def measure(what: str, rows: int, draws: int) -> dict:
    import torch

    from sklearn_bnn import HMCClassifier, HMCRegressor, MCDropoutClassifier, MCDropoutRegressor
    from sklearn_bnn.samplers import HMC

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    X_fit = rng.normal(size=(200, 10))
    y_fit = X_fit[:, 0] + 0.1 * rng.normal(size=200)
    small = dict(hidden_layer_sizes=(50,), n_draws=draws, n_warmup=20, sampler=HMC(n_steps=5))
    three = np.digitize(y_fit, [-0.5, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if what == "samples_classifier":
            model = HMCClassifier(**small, n_chains=1, random_state=0).fit(X_fit, three)
        elif what == "samples_regressor":
            y2 = np.c_[y_fit, -y_fit]
            model = HMCRegressor(**small, n_chains=1, random_state=0).fit(X_fit, y2)
        elif what == "samples_dropout":
            model = MCDropoutClassifier(
                hidden_layer_sizes=(50,), max_iter=5, n_predict_draws=draws, random_state=0
            ).fit(X_fit, three)
        elif what == "classifier":
            model = HMCClassifier(**small, random_state=0).fit(X_fit, y_fit > 0)
        elif what == "dropout":
            model = MCDropoutRegressor(
                hidden_layer_sizes=(50,), max_iter=5, n_predict_draws=draws, random_state=0
            ).fit(X_fit, y_fit)
        else:
            model = HMCRegressor(**small, random_state=0).fit(X_fit, y_fit)
    X = rng.normal(size=(rows, 10))
    before = proc_status_kib("VmRSS")
    reset_peak_rss()
    if what.startswith("samples_"):
        answer = model.predict_samples(X)
    elif what == "all_draws":
        out = model.predict_samples(X)
        answer = (out.mean(0), np.sqrt(out.var(0) + model.noise_std_**2))
        del out
    elif what == "classifier":
        answer = model.predict_proba(X)
    else:
        answer = model.predict(X, return_std=True)
    peak = proc_status_kib("VmHWM")
    size = sum(a.nbytes for a in (answer if isinstance(answer, tuple) else (answer,)))
    return {"what": what, "added_mib": (peak - before) / 1024, "answer_mib": size / 2**20}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=None, help="200,000 (10,000 with --samples)")
    p.add_argument("--draws", type=int, default=None, help="200 (500 with --samples)")
    p.add_argument("--samples", action="store_true", help="measure predict_samples")
    p.add_argument("--repeats", type=int, default=3, help="runs of each --samples measure")
    p.add_argument(
        "--default-malloc", action="store_true", help="leave glibc's mmap and trim thresholds"
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    rows = args.rows or (10_000 if args.samples else 200_000)
    draws = args.draws or (500 if args.samples else 200)
    if args.child:
        print(json.dumps(measure(args.child, rows, draws)))
        return
    env = child_env(fixed_malloc=not args.default_malloc)
    if args.samples:
        whats = ["samples_classifier", "samples_regressor", "samples_dropout"] * args.repeats
    else:
        whats = ["regressor", "all_draws", "classifier", "dropout"]
    results = []
    for what in whats:
        cmd = [sys.executable, __file__, "--child", what, "--rows", str(rows)]
        cmd += ["--draws", str(draws)]
        results.append(run_child(cmd, env))
        r = results[-1]
        print(
            f"{r['what']:>18}: +{r['added_mib']:8.1f} MiB (answer {r['answer_mib']:.1f} MiB, "
            f"ratio {r['added_mib'] / r['answer_mib']:.2f})"
        )
    if not args.samples:
        base = {r["what"]: r["added_mib"] for r in results}
        print(f"regressor / all_draws = {base['regressor'] / base['all_draws']:.3f}")


if __name__ == "__main__":
    main()
