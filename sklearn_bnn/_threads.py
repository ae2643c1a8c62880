"""How many torch intra-op threads a sampling fit uses, chosen for the model's size.

A sampler runs thousands of small, dependent gradient evaluations. Split over torch's
intra-op (OpenMP) threads, each operation ends at a barrier where every thread waits for the
slowest; on a machine where another process holds a core, one thread is descheduled and the
others wait for it at every barrier. Threads also defeat the package's flush of subnormal
floats: ``torch.set_flush_denormal`` sets the calling thread only, so the OpenMP workers of a
multi-threaded fit still compute on subnormals (a confident softmax near the MAP start makes
them). The measurements are in docs/architecture.md (the bullet on thread counts) and
docs/mc_dropout.md, "Threads"; ``benchmarks/speed/shared_machine.py`` repeats them.

So a fit uses one thread per ``WORK_PER_THREAD`` multiply-adds of one forward pass (rows x
parameters x chains), at least one and at most torch's current setting, and restores the
setting afterwards (on errors too). :func:`fit_threads` overrides the choice for the fits run
inside it.

The trained family (MC dropout, ``LossCalibratedBNN``, ``PlanNetRegressor``) follows the same
rule: its training is just as many small, dependent minibatch steps, and a forward pass there
is one minibatch through the network (:func:`module_work`); its predictions, a chunk of rows
times the Monte Carlo passes.
"""

from __future__ import annotations

import contextlib
import contextvars
import numbers
from collections.abc import Iterator

import torch

__all__ = [
    "WORK_PER_THREAD",
    "fit_threads",
    "in_sampling_threads",
    "module_work",
    "sampling_threads",
    "threads_for",
]

#: Multiply-adds of one forward pass (rows x parameters x chains) per intra-op thread.
WORK_PER_THREAD = 2.5e8

_REQUESTED: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "sklearn_bnn_fit_threads", default=None
)


def threads_for(work: float) -> int:
    """The intra-op threads for a fit of ``work`` multiply-adds per forward pass: one per
    :data:`WORK_PER_THREAD`, at least 1, at most ``torch.get_num_threads()``."""
    return int(max(1, min(torch.get_num_threads(), work // WORK_PER_THREAD)))


@contextlib.contextmanager
def fit_threads(n_threads: int | None) -> Iterator[None]:
    """Fix the number of torch intra-op threads of the sampling fits run inside the block.

    Parameters
    ----------
    n_threads : int or None
        Threads for each fit (``torch.set_num_threads`` during the fit, restored after it);
        None restores the default choice, by the model's size (see :mod:`sklearn_bnn._threads`).

    Examples
    --------
    >>> from sklearn_bnn import HMCClassifier, fit_threads
    >>> with fit_threads(4):  # doctest: +SKIP
    ...     HMCClassifier().fit(X, y)
    """
    if n_threads is not None and (
        isinstance(n_threads, bool) or not isinstance(n_threads, numbers.Integral) or n_threads < 1
    ):
        raise ValueError(f"n_threads must be None or an int >= 1, got {n_threads!r}.")
    token = _REQUESTED.set(None if n_threads is None else int(n_threads))
    try:
        yield
    finally:
        _REQUESTED.reset(token)


@contextlib.contextmanager
def sampling_threads(work: float) -> Iterator[int]:
    """Run the block with the intra-op threads of a fit of ``work`` multiply-adds per forward
    pass (or those of an enclosing :func:`fit_threads`), then restore torch's setting."""
    before = torch.get_num_threads()
    requested = _REQUESTED.get()
    n = requested if requested is not None else threads_for(work)
    if n != before:
        torch.set_num_threads(n)
    try:
        yield n
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def in_sampling_threads(work: float, fn):
    """``fn`` wrapped to run under :func:`sampling_threads` ``(work)``."""

    def wrapper(*args, **kwargs):
        with sampling_threads(work):
            return fn(*args, **kwargs)

    return wrapper


def module_work(module: torch.nn.Module, rows: int) -> float:
    """Multiply-adds of one forward pass of ``rows`` rows through ``module``, counted as rows x
    parameters (what :func:`sampling_threads` takes for a trained network).

    Parameters
    ----------
    module : torch.nn.Module
        The network.
    rows : int
        Rows in one forward pass (a minibatch in training; a chunk of rows times the Monte Carlo
        passes at prediction).

    Returns
    -------
    float
    """
    return float(rows) * sum(p.numel() for p in module.parameters())
