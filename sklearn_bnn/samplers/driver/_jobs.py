"""Running chains: all together on one device, or as independent joblib jobs.

``n_jobs=None`` runs every chain as one batched computation with one generator. An int runs
one job per chain (1: one after another in this process; more: that many joblib workers,
through scikit-learn's :class:`~sklearn.utils.parallel.Parallel`, which gives the workers the
caller's warning filters; their convergence warnings come back to the caller with the results),
each with its own generator seeded from child c of the run's
:class:`numpy.random.SeedSequence` (``_seeding.py``), so the draws do not depend on where, in
which order or in how many workers the jobs run: ``joblib.parallel_config(backend="dask")`` (or
Ray's backend) spreads them over a cluster with identical results.
"""

from __future__ import annotations

import contextlib
import signal
import threading

import torch
from sklearn.utils.parallel import Parallel, delayed

from ..._seeding import root_seed, torch_seed
from ..._warnings import collecting, reissue
from ...targets import capabilities
from ..gibbs import kernel_for
from ._loop import run_chains, warmup_length
from ._records import ChainRun, RunConfig, chain_seeds, merge_runs

__all__ = ["DRIVER", "check_n_jobs", "run_all_chains", "run_sampler"]


def check_n_jobs(n_jobs) -> None:
    """Raise ``ValueError`` unless ``n_jobs`` is None or a nonzero int (joblib's meaning)."""
    if n_jobs is not None and (
        isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0
    ):
        raise ValueError(
            "n_jobs must be None (the chains as one batched computation) or a nonzero int (one "
            f"joblib job per chain, that many at a time; -1 one per core), got {n_jobs!r}."
        )


def run_chain_job(
    kernel,
    position: torch.Tensor,
    generator_state: torch.Tensor | None,
    seed: int | None,
    start,
    config: RunConfig,
    desc: str,
    verbose: bool,
) -> tuple[ChainRun, torch.Tensor]:
    """Start (at a mode when ``start`` is a :class:`~sklearn_bnn.samplers.starts.MAPStart`),
    warm up and sample some chains; one joblib job.

    Returns the run, on the CPU, and the generator's final state (for warm starts).
    """
    # a target may leave device and dtype implicit: those of the positions then
    found = kernel.capabilities
    device = position.device if found.device is None else found.device
    generator = torch.Generator(device=device)
    if generator_state is not None:
        generator.set_state(generator_state)
    else:
        generator.manual_seed(seed)
    position = position.to(device, position.dtype if found.dtype is None else found.dtype)
    if start is not None:
        position, _ = start.find(kernel.target, position, desc=desc, verbose=verbose)
    n_warmup, _ = warmup_length(config.n_warmup, kernel, config.loop_options()["adapt_mass"])
    state = kernel.init(position, generator, n_warmup=n_warmup)
    run = run_chains(kernel, state, generator, verbose=verbose, desc=desc, **config.loop_options())
    run.state = type(run.state)(*(t.detach().cpu() for t in run.state))
    return run, generator.get_state()


def run_all_chains(
    kernel,
    positions: torch.Tensor,
    *,
    n_jobs,
    seed: int | None,
    generator_states,
    start=None,
    config: RunConfig,
    desc: str,
    verbose: bool,
) -> tuple[ChainRun, list[torch.Tensor]]:
    """Run every chain, all as one batched computation (``n_jobs`` None) or one joblib job
    each (``n_jobs`` at a time; 1 in this process, one after another); merge the results along
    the chain axis.

    ``generator_states`` (from a previous fit) continues the same random streams; otherwise
    ``seed`` (the run's ``numpy.random.SeedSequence``, or an int) starts them: the vectorized
    chains' one generator from ``seed`` itself, chain c's job from its child c.
    """
    seed = None if seed is None else root_seed(seed)
    C = positions.shape[0]
    if generator_states and len(generator_states) != (1 if n_jobs is None else C):
        # the way the chains run changed since the streams were stored (one stream for vectorized
        # chains, one per chain otherwise): start new streams drawn from the stored one
        carried = torch.Generator().set_state(generator_states[0])
        seed = root_seed(int(torch.randint(2**62, (1,), generator=carried)))
        generator_states = None
    if n_jobs is None:
        state = generator_states[0] if generator_states else None
        first = None if seed is None else torch_seed(seed)
        run, gen_state = run_chain_job(
            kernel, positions, state, first, start, config, desc, verbose
        )
        run.stats.update(kernel.describe(run.draw_stats))
        return run, [gen_state]
    seeds = chain_seeds(seed, C) if seed is not None else [None] * C
    states = generator_states if generator_states else [None] * C
    jobs = []
    for c in range(C):
        own = {}
        for name in ("step_size", "inv_mass"):  # per-chain values from a previous fit
            value = getattr(config, name)
            if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == C:
                own[name] = value[c : c + 1]
        jobs.append(
            (
                kernel,
                positions[c : c + 1],
                states[c],
                seeds[c],
                start,
                config.replace(**own),
                f"{desc} chain {c}",
                verbose,
            )
        )
    # each job's convergence warnings come back with its result, to join the caller's one
    # warning per fit, saying which chain (a job samples one chain, which it calls "the chain")
    job = collecting(run_chain_job)
    if n_jobs == 1:
        collected = []
        for args in jobs:
            collected.append(job(*args))
            if collected[-1][0][0].interrupted:  # Ctrl-C: stop here, keep the chains that ran
                break
    else:
        # scikit-learn's Parallel hands the caller's warning filters (and its configuration)
        # to the workers, for the warnings they give themselves
        with _first_interrupt_reaches_the_workers():
            collected = Parallel(n_jobs=n_jobs)(delayed(job)(*args) for args in jobs)
    results = []
    for c, (result, problems) in enumerate(collected):
        reissue(problems, prefix=f"chain {c}: " if C > 1 else "")
        results.append(result)
    # After an interruption chains differ in length: keep those that keep the most draws.
    interrupted = any(r.interrupted for r, _ in results)
    keep, _ = _rectangle([r.draws.shape[1] for r, _ in results])
    results = [results[c] for c in keep]
    run = merge_runs([r for r, _ in results])
    run.interrupted = interrupted
    run.stats.update(kernel.describe(run.draw_stats))
    return run, [s for _, s in results]


class _Driver:
    """What a sampler's ``run`` hook is handed: the loop and the chain runners, so that a
    sampler driving its own runs (bridged HMC) does not import them."""

    run_chains = staticmethod(run_chains)
    run_all_chains = staticmethod(run_all_chains)
    chain_seeds = staticmethod(chain_seeds)
    kernel_for = staticmethod(kernel_for)


DRIVER = _Driver()


def run_sampler(sampler, target, positions: torch.Tensor, **kwargs):
    """Run ``sampler`` on ``target`` from ``positions`` (C, D); keyword arguments as for
    :func:`run_all_chains`. Returns ``(run, generator_states)``.

    ``config`` (a :class:`RunConfig`) is the run's budget; its warmup settings left at None
    (``step_size``, ``target_accept``, ``adapt_mass``) are those the sampler declares
    (:meth:`~sklearn_bnn.samplers.Sampler.warmup_options`). Through the sampler protocol only:
    ``sampler.prepare_target(target)`` gives the density it
    samples (positions with fewer coordinates are extended by its ``extend_positions``), then
    ``sampler.run(target, positions, DRIVER, ...)`` (by default: its kernel, with the target's
    Gibbs blocks, through :func:`run_all_chains`), then ``sampler.postprocess(run, target)``.
    """
    kwargs["config"] = kwargs.get("config", RunConfig()).with_warmup_of(sampler)
    target = sampler.prepare_target(target)
    dim = capabilities(target).dim
    if dim is not None and positions.shape[-1] < dim:
        positions = target.extend_positions(positions)
    run, states = sampler.run(target, positions, DRIVER, **kwargs)
    return sampler.postprocess(run, target), states


@contextlib.contextmanager
def _first_interrupt_reaches_the_workers():
    """While parallel chains run, a first Ctrl-C does not raise in this (the parent) process.

    A terminal's Ctrl-C reaches every process of the foreground group: each worker's loop stops
    and returns the draws it has, which joblib then hands back here. Were the parent to raise,
    joblib would drop every worker's result. A second Ctrl-C raises as usual.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    count = 0

    def handler(signum, frame):
        nonlocal count
        count += 1
        if count > 1:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _rectangle(lengths: list[int]) -> tuple[list[int], int]:
    """The chains to keep and their common length, keeping the most draws: chains of unequal
    length (some interrupted) are cut to a common length or, when that loses more, left out."""
    best = max(set(lengths), key=lambda n: (n * sum(m >= n for m in lengths), n))
    return [c for c, m in enumerate(lengths) if m >= best], best
