"""Ctrl-C keeps what was computed, whatever runs the chains (issue 19, part 4)."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import HMCClassifier
from sklearn_bnn.samplers import HMC, HMCKernel

SMALL = dict(
    hidden_layer_sizes=(4,), n_draws=30, n_warmup=20, sampler=HMC(n_steps=3), random_state=0
)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_sequential_chains_stop_at_the_interrupt_and_keep_the_chains_that_ran(iris, monkeypatch):
    X, y = iris
    original = HMCKernel.step
    calls = {"n": 0}

    def interrupting_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2 * (20 + 30) + 20 + 5:  # chains 0 and 1 done, chain 2 at draw 5
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HMCKernel, "step", interrupting_step)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        clf = HMCClassifier(n_chains=4, chain_method="sequential", calibration=None, **SMALL)
        clf.fit(X, y)
    # chain 3 never started; chain 2's 4 draws are fewer than the 2 x 30 of the complete ones
    assert calls["n"] == 2 * 50 + 25
    assert clf.samples_.draws.shape[:2] == (2, 30)
    assert clf.diagnostics_["interrupted"]
    assert clf.predict(X).shape == (len(X),)


_SCRIPT = textwrap.dedent(
    """
    import sys, warnings
    import numpy as np
    from sklearn.datasets import load_iris
    from sklearn_bnn import HMCClassifier
    from sklearn_bnn.samplers import HMC
    X, y = load_iris(return_X_y=True)
    clf = HMCClassifier(hidden_layer_sizes=(8,), n_draws=100000, n_warmup=10,
                        sampler=HMC(n_steps=3), n_chains=2, chain_method="parallel",
                        n_jobs=2, init="random", verbose=True, random_state=0)
    print("fitting", flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)
    print("kept", clf.samples_.draws.shape[0], clf.samples_.draws.shape[1],
          clf.diagnostics_["interrupted"], flush=True)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT are POSIX")
def test_ctrl_c_with_parallel_chains_keeps_every_workers_draws(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        env=env,
    )
    err_chunks = []
    reader = threading.Thread(target=lambda: err_chunks.extend(iter(proc.stderr.readline, "")))
    reader.start()
    try:
        assert proc.stdout.readline().strip() == "fitting"
        # wait until both workers' progress bars are past warmup (loky workers take a while
        # to import torch on a loaded machine), then interrupt
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            text = "".join(err_chunks)
            if all(f"chain {c}" in text for c in (0, 1)) and text.count("sampling acc") >= 2:
                break
            time.sleep(0.5)
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out = proc.stdout.read()
        proc.wait(timeout=120)
        reader.join(timeout=10)
        err = "".join(err_chunks)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    kept = out.split()
    assert kept[0] == "kept" and kept[1] == "2" and kept[3] == "True", out
    assert 0 < int(kept[2]) < 100000
    assert np.isfinite(int(kept[2]))


def test_ctrl_c_during_the_map_start_leaves_the_estimator_unfitted(iris, monkeypatch):
    from sklearn.exceptions import NotFittedError

    import sklearn_bnn.samplers._chains as chains

    def interrupted_find_mode(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(chains, "find_mode", interrupted_find_mode)
    X, y = iris
    clf = HMCClassifier(**SMALL, calibration=None)
    with pytest.raises(KeyboardInterrupt):
        clf.fit(X, y)
    assert not hasattr(clf, "n_features_in_") and not hasattr(clf, "n_outputs_")
    with pytest.raises(NotFittedError):
        clf.predict(X)
