"""Sampling: sampler objects, their kernels, the one sampling loop and the public driver.

``sample(logdensity, initial_position, sampler)`` draws from any log density (a torch function
or a target object). A sampler object (``HMC(n_steps=50)``, ``NUTS(max_tree_depth=8)``) is a
configuration; ``sampler.build(target)`` gives the kernel the loop drives, built as
``XKernel(sampler, target)`` (it reads its settings from the sampler):
``state = kernel.init(position, generator, n_warmup=...)``, then
``state, info = kernel.step(state, generator)``. Metrics (:mod:`.geometry`), warmup adaptation
(:mod:`.warmup`) and Gibbs blocks (:mod:`.gibbs`) are separate pieces that compose with it.
"""

from ._base import (
    Info,
    Kernel,
    Sampler,
    State,
    kinetic_energy,
    sample_momentum,
    sampler_setting,
)
from ._chains import run_all_chains, run_sampler
from ._driver import sample
from ._loop import run_chains
from ._registry import (
    SAMPLERS,
    register_sampler,
    register_setup,
    resolve_sampler,
    setup_sampler,
)
from ._run import ChainRun, RunConfig, chain_seeds
from .adaptation import DualAveraging, find_reasonable_step_size
from .bridged import BridgedHMC
from .constrained import ConstrainedHMC, ConstrainedHMCKernel
from .geometry import (
    DenseMetric,
    DiagonalMetric,
    DiagonalSoftAbsMetric,
    EuclideanMetric,
    FisherMetric,
    IdentityMetric,
    Metric,
    SoftAbsMetric,
    as_metric,
)
from .gibbs import BlockSequence, GibbsKernel, GibbsState
from .hmc import HMC, HMCKernel, metropolis_hastings
from .integrators import (
    INTEGRATORS,
    drift,
    kick,
    leapfrog,
    naive_split,
    randomised_split,
    resolve_integrator,
    symmetric_split,
)
from .nuts import NUTS, NUTSKernel
from .rmhmc import RMHMC, RMHMCKernel
from .s3hmc import S3HMC, S3HMCKernel
from .sgmcmc import AMAGOLD, GSGHMC, HTE, SGHMC, SGLD
from .warmup import WindowAdaptation

__all__ = [
    "AMAGOLD",
    "GSGHMC",
    "HTE",
    "SGHMC",
    "SGLD",
    "BridgedHMC",
    "ConstrainedHMC",
    "ConstrainedHMCKernel",
    "DenseMetric",
    "DiagonalMetric",
    "DiagonalSoftAbsMetric",
    "EuclideanMetric",
    "FisherMetric",
    "BlockSequence",
    "GibbsKernel",
    "GibbsState",
    "IdentityMetric",
    "HMC",
    "INTEGRATORS",
    "NUTS",
    "SAMPLERS",
    "ChainRun",
    "RunConfig",
    "DualAveraging",
    "HMCKernel",
    "Info",
    "Kernel",
    "Metric",
    "NUTSKernel",
    "RMHMC",
    "RMHMCKernel",
    "S3HMC",
    "S3HMCKernel",
    "Sampler",
    "SoftAbsMetric",
    "State",
    "WindowAdaptation",
    "as_metric",
    "chain_seeds",
    "drift",
    "find_reasonable_step_size",
    "kick",
    "kinetic_energy",
    "leapfrog",
    "metropolis_hastings",
    "naive_split",
    "randomised_split",
    "register_sampler",
    "register_setup",
    "resolve_integrator",
    "resolve_sampler",
    "run_all_chains",
    "run_chains",
    "run_sampler",
    "sample",
    "sample_momentum",
    "sampler_setting",
    "setup_sampler",
    "symmetric_split",
]
