"""Ctrl-C keeps what was computed, whatever runs the chains (issue 19, part 4)."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

import sklearn_bnn
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
        clf = HMCClassifier(n_chains=4, n_jobs=1, calibration=None, **SMALL)
        clf.fit(X, y)
    # chain 3 never started; chain 2's 4 draws are fewer than the 2 x 30 of the complete ones
    assert calls["n"] == 2 * 50 + 25
    assert clf.samples_.draws.shape[:2] == (2, 30)
    assert clf.diagnostics_["interrupted"]
    assert clf.predict(X).shape == (len(X),)


_SCRIPT = textwrap.dedent(
    """
    import os, sys, time, warnings
    import numpy as np
    from sklearn.datasets import load_iris
    from sklearn_bnn import HMCClassifier
    from sklearn_bnn.samplers import HMC, HMCKernel

    N_WARMUP = 10
    READY = os.environ["SKLEARN_BNN_TEST_READY_DIR"]


    class PausingKernel(HMCKernel):
        # HMC's kernel, which pauses its chain once the chain has collected two draws, and
        # leaves a file named after its process to say so: the test sends Ctrl-C once every
        # worker is paused, so every chain stops at the same draw on any machine
        def step(self, state, generator, step_size=None, inv_mass=None):
            self.n_steps_done[0] += 1
            # the loop has recorded draws 1 and 2 when transition N_WARMUP + 3 begins
            if self.n_steps_done[0] == N_WARMUP + 3:
                open(os.path.join(READY, str(os.getpid())), "w").close()
                while True:  # until Ctrl-C raises KeyboardInterrupt here
                    time.sleep(0.01)
            return super().step(state, generator, step_size=step_size, inv_mass=inv_mass)


    class PausingHMC(HMC):
        def build(self, target):
            kernel = super().build(target)
            kernel.__class__ = PausingKernel
            kernel.n_steps_done = [0]  # shared by the kernel's shallow copies (Gibbs blocks)
            return kernel


    X, y = load_iris(return_X_y=True)
    clf = HMCClassifier(hidden_layer_sizes=(8,), n_draws=100000, n_warmup=N_WARMUP,
                        sampler=PausingHMC(n_steps=3), n_chains=2, n_jobs=2, init="random",
                        calibration=None, verbose=True,
                        random_state=0)
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
    """Ctrl-C once both workers hold two draws: each hands its draws back, and both chains
    are kept, with exactly those two draws.

    The interrupt waits on an event, not on elapsed time or progress-bar text: each worker
    pauses its chain after two draws and writes a file, and Ctrl-C goes out once both files
    exist. (Waiting for the progress bars, a fast machine let one chain run far ahead of the
    other, slower to start, and the short chain was then left out, as it should be.) So the
    chains stop at the same draw on fast and slow machines and under pytest-xdist.
    """
    script = tmp_path / "fit.py"
    script.write_text(_SCRIPT)
    ready = tmp_path / "ready"
    ready.mkdir()
    # the script imports the sklearn_bnn these tests import, wherever it is installed
    package_root = os.path.dirname(os.path.dirname(sklearn_bnn.__file__))
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": path,
        "SKLEARN_BNN_TEST_READY_DIR": str(ready),
    }
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
        assert proc.stdout.readline().strip() == "fitting", "".join(err_chunks)[-2000:]
        # the event: two worker processes have each paused after two draws. The time limit
        # only keeps a broken run from hanging the suite; it is not what the test waits for.
        deadline = time.monotonic() + 600
        while len(list(ready.iterdir())) < 2:
            assert proc.poll() is None, "".join(err_chunks)[-2000:]
            assert time.monotonic() < deadline, "the workers never collected two draws"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out = proc.stdout.read()
        proc.wait(timeout=300)
        reader.join(timeout=10)
        err = "".join(err_chunks)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    kept = out.split()
    assert kept == ["kept", "2", "2", "True"], out  # 2 chains of 2 draws, interrupted


def test_ctrl_c_during_the_map_start_leaves_the_estimator_unfitted(iris, monkeypatch):
    from sklearn.exceptions import NotFittedError

    import sklearn_bnn.samplers.starts as init

    def interrupted_find_mode(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(init, "find_mode", interrupted_find_mode)
    X, y = iris
    clf = HMCClassifier(**SMALL, calibration=None)
    with pytest.raises(KeyboardInterrupt):
        clf.fit(X, y)
    assert not hasattr(clf, "n_features_in_") and not hasattr(clf, "n_outputs_")
    with pytest.raises(NotFittedError):
        clf.predict(X)
