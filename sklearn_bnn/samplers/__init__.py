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
from ._by_name import (
    SAMPLERS,
    register_sampler,
    register_setup,
    resolve_sampler,
    sampler_names,
    setup_sampler,
    with_sampler_names,
)
from .adaptation.step_size_and_mass import DualAveraging, find_reasonable_step_size
from .adaptation.warmup import WindowAdaptation
from .driver._jobs import run_all_chains, run_sampler
from .driver._loop import run_chains
from .driver._public import sample
from .driver._records import ChainRun, RunConfig, chain_seeds
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
from .hamiltonian.bridged_hmc import BridgedHMC
from .hamiltonian.constrained import ConstrainedHMC, ConstrainedHMCKernel
from .hamiltonian.hmc import HMC, HMCKernel, metropolis_hastings
from .hamiltonian.integrators import (
    INTEGRATORS,
    drift,
    kick,
    leapfrog,
    naive_split,
    randomised_split,
    resolve_integrator,
    symmetric_split,
)
from .hamiltonian.nuts import NUTS, NUTSKernel
from .hamiltonian.rmhmc import RMHMC, RMHMCKernel
from .hamiltonian.s3hmc import S3HMC, S3HMCKernel
from .stochastic_gradient.sgmcmc import AMAGOLD, GSGHMC, HTE, SGHMC, SGLD

# every sampler above has registered: sample's docstring lists the registry's names
sample.__doc__ = with_sampler_names(sample.__doc__)

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
    "sampler_names",
    "sampler_setting",
    "setup_sampler",
    "symmetric_split",
]
