"""What several benchmark scripts share: data sets, networks, integrators, timed fits, memory.

Not a benchmark itself. A script in a folder below ``benchmarks/`` imports it with::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness.py
    from harness import digits_split  # noqa: E402

Everything here is what the scripts computed before it was moved here, with the same
operations in the same order, so a script's figures do not depend on the move.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import warnings

import numpy as np
import torch
from torch import nn

from sklearn_bnn.samplers import leapfrog, naive_split, randomised_split, symmetric_split

#: The full-data leapfrog and the three split schemes of split HMC, by the names the split-HMC
#: scripts print.
SPLIT_SCHEMES = {
    "full": leapfrog,
    "naive": naive_split,
    "randomised": randomised_split,
    "symmetric": symmetric_split,
}

# --- data ---------------------------------------------------------------------------------------


def digits_split(seed=0, classes=None, test_size=0.3, scale=True):
    """scikit-learn's digits, split stratified, standardised on the training rows.

    Parameters
    ----------
    seed : int, default=0
        ``random_state`` of ``train_test_split``.
    classes : iterable of int, optional
        Keep only these digits (the others are returned as ``X_out``); all ten when None.
    test_size : float, default=0.3
        Share of the kept rows in the test part.
    scale : bool, default=True
        Standardise every returned input with a ``StandardScaler`` fitted on the training rows;
        False returns them unscaled (for a pipeline that scales).

    Returns
    -------
    X_train, y_train, X_test, y_test : ndarray
    X_out : ndarray of shape (n_out, 64)
        The rows of the digits not in ``classes`` (none when ``classes`` is None), scaled as the
        others.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    inside = np.ones(len(y), dtype=bool) if classes is None else np.isin(y, list(classes))
    X_tr, X_te, y_tr, y_te = train_test_split(
        X[inside], y[inside], test_size=test_size, stratify=y[inside], random_state=seed
    )
    X_out = X[~inside]
    if scale:
        scaler = StandardScaler().fit(X_tr)
        X_tr, X_te = scaler.transform(X_tr), scaler.transform(X_te)
        X_out = scaler.transform(X_out) if len(X_out) else X_out
    return X_tr, y_tr, X_te, y_te, X_out


def izmailov_data(n=400, seed=0):
    """The two-cluster 1-D regression of Izmailov et al. (2019), as split HMC's first experiment
    uses it: x uniform on [-1, -0.7] and on [0.5, 1], y = cos(4x + 0.8) + N(0, 0.1^2), the rows
    in random order. Returns ``x`` of shape (n, 1) and ``y`` of shape (n,), numpy float64."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(-1, -0.7, n // 2), rng.uniform(0.5, 1, n - n // 2)])
    x = rng.permutation(x)
    y = np.cos(4 * x + 0.8) + rng.normal(scale=0.1, size=n)
    return x[:, None], y


# --- networks -----------------------------------------------------------------------------------


def regression_mlp(seed=0):
    """MLP [1, 100, 100, 1] with ReLU (10,401 parameters), initialised after
    ``torch.manual_seed(seed)``: the network of split HMC's first experiment."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(1, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, 1)
    )


class DigitsCNN(nn.Module):
    """A small CNN for 8x8 digits: 64 pixels -> 1x8x8 -> two 3x3 convolutions (8 and 16
    channels, SELU, 2x2 max-pooling) -> dense 64-32-n_out (3,658 parameters for 10 classes).

    Parameters
    ----------
    n_in : int, default=64
        Input width (always 64; taken for the estimators' ``module(n_in, n_out)`` protocol).
    n_out : int, default=10
        Number of classes.
    dropout : float or None, default=0.0
        Rate of a dropout layer after the flattened features and after the hidden dense layer;
        None leaves those two layers out.
    """

    def __init__(self, n_in: int = 64, n_out: int = 10, dropout: float | None = 0.0):
        super().__init__()
        self.features = nn.Sequential(
            nn.Unflatten(1, (1, 8, 8)),
            nn.Conv2d(1, 8, 3, padding=1),
            nn.SELU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.SELU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        if dropout is None:
            self.head = nn.Sequential(nn.Linear(64, 32), nn.SELU(), nn.Linear(32, n_out))
        else:
            self.head = nn.Sequential(
                nn.Dropout(dropout),
                nn.Linear(64, 32),
                nn.SELU(),
                nn.Dropout(dropout),
                nn.Linear(32, n_out),
            )

    def forward(self, x):
        return self.head(self.features(x))


# --- timing -------------------------------------------------------------------------------------


def timed_fit(model, X, y) -> float:
    """Wall-clock seconds of ``model.fit(X, y)``, runtime warnings (convergence, divergences)
    silenced: the scripts that call it report those figures themselves."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        start = time.perf_counter()
        model.fit(X, y)
        return time.perf_counter() - start


# --- memory: one measure per fresh process ------------------------------------------------------

#: glibc's mmap and trim thresholds for the measuring children: every block above 128 KiB is its
#: own mapping, returned when freed, so that the peak RSS follows the peak of live memory.
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def proc_status_kib(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmRSS``: now, ``VmHWM``: the peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def reset_peak_rss() -> None:
    """Reset the peak RSS (``VmHWM``) to the current RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def child_env(fixed_malloc: bool = True) -> dict:
    """This process's environment for a measuring child, with :data:`FIXED_MALLOC` unless
    ``fixed_malloc`` is False."""
    env = dict(os.environ)
    if fixed_malloc:
        env.update(FIXED_MALLOC)
    return env


def run_child(cmd, env) -> dict:
    """Run ``cmd`` and return the JSON object on the last line of its output."""
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
