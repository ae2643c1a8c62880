"""The metric protocol shared by constant (Euclidean) and position-dependent (Riemannian) metrics.

A metric fixes the kinetic energy of Hamiltonian Monte Carlo. At a point of the parameter space
every metric gives the same three things (BlackJAX's ``Metric`` has the same shape: a momentum
draw, a kinetic energy and the velocity the U-turn criterion and the position update use):

- ``velocity(p)``: M^-1 p, or G(theta)^-1 p;
- ``kinetic_energy(p)``;
- ``sample_momentum(shape, generator, dtype=..., device=...)``: p ~ N(0, M), or N(0, G(theta)).

A Euclidean metric is its own local geometry (M does not depend on the position); a Riemannian
metric is a configuration whose ``evaluate(derivatives, theta)`` returns the geometry at theta
(Cobb 2019, §5.3), with the same three methods plus the derivative terms the generalized leapfrog
needs. What the sampling loop asks of any metric is only what this base class defines: whether it
depends on the position, its constant diagonal (the inverse mass reported in the diagnostics, and
the one the step-size search uses), the number of chains it is made for, and a move to a device.
"""

from __future__ import annotations

__all__ = ["Metric"]


class Metric:
    """Base class of every metric (see the module docstring)."""

    #: True for a metric G(theta) evaluated at each position (RMHMC's), False for a constant M.
    position_dependent = False

    def to(self, device=None, dtype=None) -> Metric:
        """This metric on ``device`` with ``dtype`` (itself when nothing changes)."""
        return self

    def diagonal(self):
        """The diagonal of a constant M^-1, (D,) or (C, D); None where there is none (the
        identity, or a position-dependent metric)."""
        return None

    @property
    def n_chains(self) -> int | None:
        """The number of chains of a per-chain metric; None when all chains share it."""
        return None

    def check_n_chains(self, n_chains: int) -> None:
        """Raise ``ValueError`` if this metric is per chain for another number of chains."""
        if self.n_chains not in (None, n_chains):
            raise ValueError(
                f"the metric holds one inverse mass for each of {self.n_chains} chains, but "
                f"{n_chains} chains are sampled here (a per-chain metric needs that many "
                "chains run as one batched computation, n_jobs=None)."
            )
