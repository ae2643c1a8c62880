"""Where the first warmup transitions of the README demo spend their time.

The demo's HMCClassifier (digits, one hidden layer of 100, 50 leapfrog steps, MAP start) took
about 1.5 s per transition for its first ~30 warmup transitions and 0.08 s later. This times
every HMC transition of a short warmup in three fresh processes:

- ``2 threads``: torch's default on a 2-core machine, before ``sklearn_bnn._threads``;
- ``2 threads, workers flush``: the same, with ``torch.set_flush_denormal(True)`` called before
  torch's OpenMP workers exist, so that they inherit it (``flush_subnormals`` sets only the
  calling thread);
- ``fit's choice``: what a fit does now (one thread for this model).

The child processes use torch (one large product) before the fit, as a session that has
done anything with torch has: its OpenMP workers then exist before the fit turns the flush on
(workers created inside the flushed region inherit it, and a fresh process shows nothing).
It prints the median time of the first and of the last 10 transitions, as ratios to the fit's
choice, measured in the same run. Each transition costs the same 50 gradients (divergent ones
end early only where every chain's log density is no longer finite).

Run: ``python benchmarks/speed/warmup_cost.py [--n-warmup 20]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, time, warnings
import torch
mode, n_warmup = sys.argv[1], int(sys.argv[2])
if mode == "flush":
    torch.set_flush_denormal(True)
torch.set_num_threads(2)
torch.randn(1000, 1000) @ torch.randn(1000, 1000)  # torch used before the fit: workers exist
import numpy as np
from sklearn.datasets import load_digits
from sklearn.preprocessing import StandardScaler
from sklearn_bnn import HMCClassifier, fit_threads
from sklearn_bnn.samplers.hamiltonian import hmc
X, y = load_digits(return_X_y=True)
X, y = X[:1257], y[:1257]  # the demo's training-set size, unshuffled
X = StandardScaler().fit_transform(X)
real, times = hmc.HMCKernel.step, []
def step(self, *args, **kwargs):
    start = time.perf_counter()
    out = real(self, *args, **kwargs)
    times.append(time.perf_counter() - start)
    return out
hmc.HMCKernel.step = step
model = HMCClassifier(hidden_layer_sizes=(100,), n_warmup=n_warmup, n_draws=1, random_state=0)
with warnings.catch_warnings(), fit_threads(None if mode == "choice" else 2):
    warnings.simplefilter("ignore")
    model.fit(X, y)
print(json.dumps([float(np.median(times[:10])), float(np.median(times[-10:]))]))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-warmup", type=int, default=20)
    args = parser.parse_args(argv)
    modes = {"2 threads": "plain", "2 threads, workers flush": "flush", "fit's choice": "choice"}
    seconds = {}
    for label, mode in modes.items():
        out = subprocess.run(
            [sys.executable, "-c", CHILD, mode, str(args.n_warmup)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        seconds[label] = json.loads(out.strip().splitlines()[-1])
    base = seconds["fit's choice"][0]
    print(f"HMCClassifier(100,) on digits, seconds per warmup transition (/ {base:.3f} s)\n")
    print("| threads | first 10 (median) | last 10 (median) |")
    print("| --- | --- | --- |")
    for label, (first, last) in seconds.items():
        print(f"| {label} | {first / base:.1f} | {last / base:.1f} |")


if __name__ == "__main__":
    main()
