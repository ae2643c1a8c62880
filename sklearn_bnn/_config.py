"""The package's switches between equivalent execution paths, in one place.

Each switch chooses how a computation runs, never what it computes: the draws are the same
either way (up to the rounding of a different order of operations on a GPU). They exist to
debug, to compare the paths, and for the tests that count what a GPU would see on a CPU.
"""

from __future__ import annotations

from contextlib import contextmanager

_DEFAULTS = {
    # HMC trajectories on a CUDA device recorded and replayed as CUDA graphs.
    "hmc_cuda_graphs": True,
    # SGLD / SGHMC minibatch steps on a CUDA device replayed as CUDA graphs.
    "sg_cuda_graphs": True,
    # The MAP start's Adam steps on a CUDA device replayed as CUDA graphs.
    "map_cuda_graphs": True,
    # Code may read a CPU tensor's value to take a shorter path (a read is free on the CPU;
    # on a GPU it is a synchronisation, and the same code takes a path that reads nothing).
    "host_reads_on_cpu": True,
    # The kept draws staged in device memory and copied in chunks, as on an accelerator,
    # also when they live on the CPU.
    "stage_draws_on_cpu": False,
}

_config = dict(_DEFAULTS)


def get_config() -> dict:
    """The current value of every switch (a copy).

    Returns
    -------
    dict
        ``hmc_cuda_graphs``, ``sg_cuda_graphs``, ``map_cuda_graphs``: whether HMC
        trajectories, SGLD / SGHMC minibatch steps and the MAP start's Adam steps on a CUDA
        device are recorded once and replayed as CUDA graphs (True) or run step by step;
        ``host_reads_on_cpu``: whether code may read a CPU tensor's value to take a shorter
        path; ``stage_draws_on_cpu``: whether the kept draws are staged and copied in chunks
        on the CPU too, as on an accelerator.
    """
    return dict(_config)


def set_config(**switches) -> None:
    """Set switches of :func:`get_config` for the whole process.

    Parameters
    ----------
    **switches : bool
        Any of the names :func:`get_config` returns. The switches hold in this process only:
        chains run in worker processes (``n_jobs``) start from the defaults.

    Raises
    ------
    ValueError
        For a name that is not a switch, or a value that is not a bool.
    """
    for name, value in switches.items():
        if name not in _DEFAULTS:
            raise ValueError(
                f"{name!r} is not a configuration switch; the switches are "
                f"{', '.join(sorted(_DEFAULTS))}."
            )
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}.")
    _config.update(switches)


@contextmanager
def config_context(**switches):
    """Set switches of :func:`get_config` inside a ``with`` block, and restore every switch
    when it ends (also when it raises).

    Parameters
    ----------
    **switches : bool
        As for :func:`set_config`.

    Examples
    --------
    >>> import sklearn_bnn
    >>> with sklearn_bnn.config_context(hmc_cuda_graphs=False):
    ...     sklearn_bnn.get_config()["hmc_cuda_graphs"]
    False
    >>> sklearn_bnn.get_config()["hmc_cuda_graphs"]
    True
    """
    before = get_config()
    set_config(**switches)
    try:
        yield
    finally:
        _config.clear()
        _config.update(before)


def switch(name: str) -> bool:
    """The current value of one switch (for the package's own code)."""
    return _config[name]
