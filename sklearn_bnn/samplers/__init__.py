"""Pure sampling kernels.

``state = kernel.init(position)``, then ``state, info = kernel.step(state, generator)``.
"""

from ._base import Info, State
from .adaptation import DualAveraging, find_reasonable_step_size
from .hmc import HMC
from .integrators import leapfrog, naive_split, randomised_split, symmetric_split
from .nuts import NUTS

__all__ = [
    "HMC",
    "NUTS",
    "DualAveraging",
    "Info",
    "State",
    "find_reasonable_step_size",
    "leapfrog",
    "naive_split",
    "randomised_split",
    "symmetric_split",
]
