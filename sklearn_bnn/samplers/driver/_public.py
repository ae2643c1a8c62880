"""The public driver: sample any log density with any sampler object.

:func:`sample` is what the estimators do, without a network: build the kernel, start the chains,
warm up (step size by dual averaging and, by default, a diagonal mass), draw, with a progress
bar, interrupts and ``n_jobs`` exactly as the estimators have them (they share the loop).
"""

from __future__ import annotations

import numpy as np
import torch

from ..._seeding import child, root_seed, torch_seed
from ..._utils import check_scalar_param, resolve_device, resolve_dtype
from ..._warnings import one_convergence_warning
from ...samples import PosteriorSamples
from ...targets import capabilities
from .._by_name import resolve_sampler
from ._jobs import check_n_jobs, run_sampler
from ._records import RunConfig
from ._summary import run_summary
from .budget import DrawRule, WarmupRule, is_auto

__all__ = ["sample"]


def _checked_target(logdensity, dim: int, device, dtype):
    """The target of ``logdensity`` (a function is wrapped in a ``FunctionTarget``), checked to
    have ``dim`` coordinates."""
    if hasattr(logdensity, "value_and_grad"):
        target = logdensity
    elif callable(logdensity):
        from ...targets import FunctionTarget

        target = FunctionTarget(logdensity, dim, device=device, dtype=dtype)
    else:
        raise ValueError(
            "logdensity must be a callable theta -> log p(theta) or an object with "
            f"value_and_grad(theta); got {type(logdensity).__name__}."
        )
    if capabilities(target).dim not in (None, dim):
        raise ValueError(f"initial_position has {dim} coordinates but the target has {target.dim}.")
    return target


def sample(
    logdensity,
    initial_position,
    sampler="nuts",
    *,
    n_warmup: int | str = 500,
    n_draws: int | str = 500,
    n_chains: int = 4,
    n_jobs=None,
    thin: int = 1,
    init_jitter: float = 0.5,
    names=None,
    random_state=None,
    verbose: bool = False,
    device=None,
    dtype=None,
) -> PosteriorSamples:
    """Draw from a log density with MCMC.

    Parameters
    ----------
    logdensity : callable or target
        A torch function ``theta (D,) -> log p(theta)`` (up to a constant, differentiable by
        autograd; batched over chains by :func:`torch.func.vmap` where it allows, chain by
        chain otherwise), or a target with ``value_and_grad(theta (C, D)) -> ((C,), (C, D))``,
        ``dim``, ``device`` and ``dtype`` (e.g. :class:`sklearn_bnn.targets.Target`).
    initial_position : array-like of shape (D,) or (n_chains, D)
        Where the chains start: one (D,) start for every chain, jittered (``init_jitter``) so
        that they start apart, as R-hat needs; or one row per chain, used as it is.
    sampler : str or Sampler, default="nuts"
        A name registered in :data:`sklearn_bnn.samplers.SAMPLERS` ({full_samplers}, and
        for a minibatch target {minibatch_samplers}), built with its
        defaults, or a configured sampler object (``HMC(n_steps=30)``,
        ``NUTS(max_tree_depth=8)``, your own :class:`Sampler`). The warmup's settings are the
        sampler's: ``NUTS(step_size=0.1)`` fixes the step, ``NUTS(target_accept=0.9)`` sets the
        acceptance that dual averaging aims for. A sampler given by name adapts a diagonal
        mass in Stan's warmup windows here (``adapt_mass=True``, as Stan, NumPyro and BlackJAX
        do by default), so that on a badly scaled target the step size is no longer set by its
        narrowest direction; a sampler object adapts it only with ``adapt_mass=True``
        (the estimators' default is False: docs/sampling.md says why).
    n_warmup, n_draws : int or "auto"
        Adaptation transitions (discarded) and sampling transitions per chain. "auto": the
        adaptive budgets of :mod:`sklearn_bnn.samplers.driver.budget` (a warmup that ends once the
        step size has settled, for a sampler that adapts no mass; draws that stop once the
        chains are stationary and the log density's ESS reaches 50).
    n_chains : int
        Chains.
    n_jobs : int, optional
        None: all chains as one batched computation. An int: one joblib job per chain, that
        many at a time (1: one after another in this process; -1: one per core; any joblib
        backend, Dask or Ray, spreads them), with per-chain seeds, so the draws do not depend
        on where or how many jobs run.
    thin : int, default=1
        Keep every ``thin``-th draw.
    init_jitter : float, default=0.5
        Half-width of the uniform jitter added to a single (D,) start.
    names : list of str, optional
        Names of the D coordinates for ``as_dict()`` and the ArviZ export (``"theta"``, one
        parameter of shape (D,), by default).
    random_state : int, RandomState or None
        Seeds every random number (start jitter, momenta, acceptance tests).
    verbose : bool
        A progress bar with acceptance, step size and divergences.
    device, dtype : optional
        Where and in which precision to sample (by default: the target's, or those of
        ``initial_position`` when it is a floating tensor, else the CPU and float64).

    Returns
    -------
    PosteriorSamples
        ``draws`` (n_chains, n_draws, D), ``log_prob``, per-draw ``stats`` (acceptance
        probability, divergences, energy error, and whatever the kernel reports), ``info``
        (step sizes, acceptance rates, divergences, gradient evaluations), ``summary()`` with
        ESS and R-hat of each coordinate, and ``to_inference_data()``.

    Warns
    -----
    sklearn_bnn.exceptions.ConvergenceWarning
        At most once per call, listing the run's problems: chains restarted during warmup or
        left stalled by it, and the samplers' own (bridged HMC's bridge sampling not converged).

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import sample
    >>> def log_p(theta):  # a correlated 2-D Gaussian
    ...     prec = torch.tensor([[2.0, -1.0], [-1.0, 2.0]], dtype=theta.dtype)
    ...     return -0.5 * theta @ prec @ theta
    >>> result = sample(log_p, torch.zeros(2, dtype=torch.float64), "nuts", n_warmup=200,
    ...                 n_draws=200, n_chains=2, random_state=0)
    >>> result.draws.shape
    torch.Size([2, 200, 2])
    """
    _check_arguments(n_warmup, n_draws, n_chains, thin, init_jitter, n_jobs)
    start, device, dtype = _start(initial_position, n_chains, logdensity, device, dtype)
    target = _checked_target(logdensity, start.shape[-1], device, dtype)
    seeds = root_seed(random_state)  # one SeedSequence: "jitter" and "sampling" children
    positions = _jittered(start, n_chains, init_jitter, child(seeds, "jitter")).to(dtype)
    config = RunConfig(
        n_warmup=WarmupRule() if is_auto(n_warmup) else n_warmup,
        n_draws=DrawRule() if is_auto(n_draws) else n_draws,
        thin=thin,
    )
    # a sampler named by a string adapts a diagonal mass here, where the log density is any
    # function (Stan's default); the network estimators' samplers do not by default
    sampler = resolve_sampler(sampler, adapt_mass=True)
    with one_convergence_warning():  # the run's problems in one ConvergenceWarning
        run, _ = run_sampler(
            sampler,
            target,
            positions,
            n_jobs=n_jobs,
            seed=child(seeds, "sampling"),
            generator_states=None,
            start=None,
            config=config,
            desc=type(sampler).__name__,
            verbose=verbose,
        )
    return _as_samples(run, names, start.shape[-1])


def _check_arguments(n_warmup, n_draws, n_chains, thin, init_jitter, n_jobs):
    if not is_auto(n_warmup):
        check_scalar_param(n_warmup, "n_warmup", kind="int", low=0)
    if not is_auto(n_draws):
        check_scalar_param(n_draws, "n_draws", kind="int", low=1)
    check_scalar_param(n_chains, "n_chains", kind="int", low=1)
    check_scalar_param(thin, "thin", kind="int", low=1, high=None if is_auto(n_draws) else n_draws)
    check_scalar_param(init_jitter, "init_jitter", low=0)
    check_n_jobs(n_jobs)


def _start(initial_position, n_chains: int, logdensity, device, dtype):
    """The start as a tensor (D,) or (n_chains, D), checked, and the device and dtype to sample
    in (by default the target's, else those of a floating tensor start, else CPU float64)."""
    start = initial_position
    if isinstance(start, torch.Tensor):
        start = start.detach()
    else:
        start = torch.as_tensor(np.asarray(start, dtype=np.float64))
    if start.ndim not in (1, 2) or start.shape[-1] == 0:
        raise ValueError(
            f"initial_position must have shape (D,) or (n_chains, D), got {tuple(start.shape)}."
        )
    if start.ndim == 2 and start.shape[0] != n_chains:
        raise ValueError(
            f"initial_position has {start.shape[0]} rows but n_chains={n_chains}: give one "
            "row per chain, or a single (D,) start."
        )
    floating = start.is_floating_point() and isinstance(initial_position, torch.Tensor)
    if device is None:
        device = getattr(logdensity, "device", None) or "cpu"
    if dtype is None:
        dtype = getattr(logdensity, "dtype", None) or (start.dtype if floating else torch.float64)
    return start, resolve_device(device), resolve_dtype(dtype)


def _jittered(start: torch.Tensor, n_chains: int, init_jitter: float, seed):
    """One start per chain: a single (D,) start plus uniform noise in [-init_jitter,
    init_jitter] from ``seed``, so that the chains start apart; an (n_chains, D) one as it is."""
    if start.ndim == 2:
        return start
    jitter = torch.Generator().manual_seed(torch_seed(seed))
    noise = torch.rand((n_chains, start.shape[-1]), generator=jitter, dtype=torch.float64)
    return start.to(torch.float64) + init_jitter * (2 * noise - 1)


def _as_samples(run, names, dim: int) -> PosteriorSamples:
    """The run as :class:`PosteriorSamples` with its summary in ``info``."""
    if names is None:
        names, shapes = ["theta"], [(dim,)]
    else:
        names = [str(n) for n in names]
        if len(names) != dim:
            raise ValueError(f"names has {len(names)} entries for {dim} coordinates.")
        shapes = [()] * dim
    samples = PosteriorSamples(run.draws, run.log_prob, names, shapes, run.draw_stats)
    samples.info = run_summary(run)
    return samples
