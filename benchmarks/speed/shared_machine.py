"""A fit beside other work: the README demo's HMCClassifier alone and beside one busy process.

The demo's model (digits, one hidden layer of 100, MAP start, step size by dual averaging) is
fitted four times in this process: alone and beside one CPU-bound process
(``python -c "while True: pass"``, started and killed here), each at torch's default thread
count (the behaviour before ``sklearn_bnn._threads``, forced with ``fit_threads``) and at the
fit's own choice for the model's size. Times are reported as ratios against the fit alone
at the fit's own choice, measured in the same run; the machine's load average is printed
beside them (other users count as load too).

Run: ``python benchmarks/speed/shared_machine.py [--n-warmup 30] [--n-draws 30]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings

import torch
from sklearn.datasets import load_digits
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import HMCClassifier, fit_threads
from sklearn_bnn._threads import threads_for


def fit_seconds(X, y, n_warmup, n_draws, n_threads):
    model = HMCClassifier(
        hidden_layer_sizes=(100,), n_warmup=n_warmup, n_draws=n_draws, random_state=0
    )
    start = time.perf_counter()
    with warnings.catch_warnings(), fit_threads(n_threads):
        warnings.simplefilter("ignore")
        model.fit(X, y)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-warmup", type=int, default=30)
    parser.add_argument("--n-draws", type=int, default=30)
    args = parser.parse_args(argv)
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    default = torch.get_num_threads()
    n_params = 64 * 100 + 100 + 100 * 10 + 10
    auto = threads_for(len(X) * n_params)
    print(
        f"digits {X.shape}, HMCClassifier(100,), {args.n_warmup} warmup + {args.n_draws} draws; "
        f"{os.cpu_count()} CPUs; torch default {default} threads, the fit's choice {auto}\n"
    )
    times = {}
    for busy in (False, True):
        other = None
        if busy:
            other = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1.0)
        try:
            for label, n in (("default threads", default), ("fit's choice", None)):
                load = os.getloadavg()[0]
                seconds = fit_seconds(X, y, args.n_warmup, args.n_draws, n)
                times[busy, label] = seconds
                print(
                    f"  {'beside a busy process' if busy else 'alone':<22} {label:<16} "
                    f"{seconds:7.1f} s  (load average {load:.1f})",
                    flush=True,
                )
        finally:
            if other is not None:
                other.kill()
                other.wait()
    base = times[False, "fit's choice"]
    print("\n| threads | alone | beside one busy process | busy / alone |")
    print("| --- | --- | --- | --- |")
    for label in ("default threads", "fit's choice"):
        alone, busy = times[False, label], times[True, label]
        print(f"| {label} | {alone / base:.2f} | {busy / base:.2f} | {busy / alone:.2f} |")
    print("\n(times relative to the fit alone at the fit's choice of threads)")


if __name__ == "__main__":
    main()
