"""Metrics of Hamiltonian Monte Carlo: one protocol (:class:`Metric`), two families.

- :mod:`.euclidean`: constant mass matrices (:class:`DiagonalMetric`, :class:`DenseMetric`,
  :class:`IdentityMetric`), used by HMC, NUTS, constrained and split HMC;
- :mod:`.riemannian`: position-dependent metrics G(theta) (:class:`SoftAbsMetric`,
  :class:`DiagonalSoftAbsMetric`, :class:`FisherMetric`), used by RMHMC (Cobb 2019, §5.3).
"""

from ._protocol import Metric
from .euclidean import DenseMetric, DiagonalMetric, EuclideanMetric, IdentityMetric, as_metric
from .riemannian import (
    AutodiffDerivatives,
    DiagonalSoftAbsMetric,
    FisherMetric,
    Geometry,
    SoftAbsMetric,
    second_order_derivatives,
)

__all__ = [
    "AutodiffDerivatives",
    "DenseMetric",
    "DiagonalMetric",
    "DiagonalSoftAbsMetric",
    "EuclideanMetric",
    "FisherMetric",
    "Geometry",
    "IdentityMetric",
    "Metric",
    "SoftAbsMetric",
    "as_metric",
    "second_order_derivatives",
]
