"""The settings the Hamiltonian samplers share, each declared once with its default.

Every sampler of the family tests its proposals on the energy error (``divergence_threshold``)
and has its step size adapted by the sampling loop's warmup (``step_size``, ``target_accept``);
those on a Euclidean metric also let the warmup adapt a diagonal mass (``adapt_mass``). Each
sampler documents them in its own Parameters section.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._utils import check_scalar_param
from .._base import Sampler
from ..defaults import DIVERGENCE_THRESHOLD, TARGET_ACCEPT

__all__ = ["EuclideanSampler", "HamiltonianSampler"]


@dataclass(kw_only=True, eq=False, repr=False)
class HamiltonianSampler(Sampler):
    """Base of the Hamiltonian samplers: the divergence threshold and the warmup's step-size
    settings (:data:`~sklearn_bnn.samplers._base.WARMUP_SETTINGS`)."""

    divergence_threshold: float = DIVERGENCE_THRESHOLD
    step_size: object = "auto"
    target_accept: float = TARGET_ACCEPT

    def _check_shared(self) -> None:
        """Raise ``ValueError`` naming the first shared setting out of its range."""
        self.warmup_options()
        check_scalar_param(self.divergence_threshold, "divergence_threshold", low=0)


@dataclass(kw_only=True, eq=False, repr=False)
class EuclideanSampler(HamiltonianSampler):
    """Base of the Hamiltonian samplers on a Euclidean metric, whose diagonal mass the warmup
    may adapt."""

    adapt_mass: bool = False
