"""Targets: the log densities the samplers draw from.

Every target gives ``value_and_grad(theta)`` on a (C, D) batch of positions, with ``dim``,
``device`` and ``dtype`` attributes; that is all a kernel uses.

- :class:`Target` (alias :class:`NetworkTarget`): the posterior of a network's weights given
  the full data, prior plus likelihood summed over points;
- :class:`SplitTarget`: the same density evaluated over M data subsets, for split HMC;
- :class:`MinibatchTarget`: an unbiased estimate from one minibatch (likelihood scaled by
  N/|B|, prior once), for stochastic-gradient samplers;
- :class:`FunctionTarget`: any torch function ``theta -> log p``;
- :class:`HierarchicalTarget`: a network's weights jointly with per-group log-precisions
  (S3HMC's, :func:`hierarchical_target`);
- :class:`NoisePrecisionGibbs`, :class:`PriorPrecisionGibbs`: the Gibbs blocks of a learned
  noise precision and of a hierarchical prior's per-tensor precisions
  (``HierarchicalPrior(scheme="gibbs")``), which the network targets declare in
  ``gibbs_blocks()``; :class:`InterweavedPrecisionGibbs`, the precisions' draw followed by a
  non-centred Metropolis move of each tensor's scale (``HierarchicalPrior(interweave=...)``);
- :class:`UnitRescaleGibbs`, :class:`LayerRescaleGibbs`: the exact rescaling of a positively
  homogeneous MLP's hidden units (each unit given the precisions; each layer with a
  hierarchical prior's precisions integrated out) along the directions that leave its function
  unchanged (Gibbs blocks that move the position; ``Target.rescale_moves``).
"""

from ._function import FunctionTarget
from ._gibbs import InterweavedPrecisionGibbs, NoisePrecisionGibbs, PriorPrecisionGibbs
from ._hierarchical import HierarchicalTarget, hierarchical_target
from ._minibatch import MinibatchTarget
from ._network import FunctionalNetwork, Target
from ._protocol import TargetCapabilities, capabilities, require
from ._rescale import LayerRescaleGibbs, UnitRescaleGibbs
from ._split import SplitTarget, split_bounds

NetworkTarget = Target

__all__ = [
    "FunctionTarget",
    "FunctionalNetwork",
    "HierarchicalTarget",
    "InterweavedPrecisionGibbs",
    "LayerRescaleGibbs",
    "MinibatchTarget",
    "NetworkTarget",
    "NoisePrecisionGibbs",
    "PriorPrecisionGibbs",
    "SplitTarget",
    "Target",
    "TargetCapabilities",
    "UnitRescaleGibbs",
    "capabilities",
    "hierarchical_target",
    "require",
    "split_bounds",
]
