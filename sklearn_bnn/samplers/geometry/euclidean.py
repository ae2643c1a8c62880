"""Euclidean metrics: constant mass matrices of Hamiltonian Monte Carlo, as objects.

A Euclidean metric fixes the kinetic energy K(p) = p^T M^-1 p / 2 with a mass matrix M that does
not depend on the position. The integrators and kernels of this package only ask three things of
it: the velocity M^-1 p (the position step of the leapfrog, and the U-turn criterion of NUTS), the
kinetic energy, and a momentum draw p ~ N(0, M). Each object is given by its inverse mass M^-1,
the quantity mass adaptation estimates (the posterior covariance).

- :class:`DiagonalMetric`: M^-1 diagonal, a tensor (D,) or (C, D) (one per chain). What the
  sampling loop adapts; a bare tensor passed as ``inv_mass`` anywhere in this package means it.
- :class:`DenseMetric`: M^-1 a symmetric positive-definite matrix (D, D) or (C, D, D). Its Cholesky
  factor is computed once, at construction, so a momentum draw is a triangular solve.
- :class:`IdentityMetric`: M = I, which some kernels switch to so as to skip a product.

The Riemannian metrics of :mod:`.riemannian` (SoftAbs, Fisher) are the position-dependent
counterpart, used by RMHMC; both families follow the protocol of :class:`~._protocol.Metric`.
"""

from __future__ import annotations

import torch

from ..._persistence_registry import register
from ._protocol import Metric

__all__ = [
    "DenseMetric",
    "DiagonalMetric",
    "EuclideanMetric",
    "IdentityMetric",
    "as_metric",
    "check_n_chains",
]


class EuclideanMetric(Metric):
    """Base class of the constant metrics: velocity, kinetic energy and momentum draws.

    Momenta are (C, D) (C chains); a per-chain metric holds one inverse mass per chain.
    """

    #: True when M is the identity (then the velocity is the momentum itself).
    is_unit = False

    def velocity(self, momentum: torch.Tensor) -> torch.Tensor:
        """M^-1 p, shape (C, D)."""
        raise NotImplementedError

    def kinetic_energy(self, momentum: torch.Tensor) -> torch.Tensor:
        """K(p) = p^T M^-1 p / 2 over the last axis, shape (C,)."""
        raise NotImplementedError

    def sample_momentum(self, shape, generator: torch.Generator, *, dtype, device) -> torch.Tensor:
        """A draw p ~ N(0, M) of ``shape`` (C, D) from ``generator``."""
        raise NotImplementedError

    def select(self, idx: torch.Tensor) -> EuclideanMetric:
        """The metric of the chains ``idx`` only (itself when shared by all chains)."""
        return self

    def step_factor(self, eps: torch.Tensor) -> torch.Tensor | None:
        """eps M^-1 (``eps`` (C, 1)) as an elementwise factor (C, D) or (C, 1) when M^-1 is
        diagonal, so that a position step is one multiply-add ``w + factor * p``; None for a
        dense metric."""
        return None


class IdentityMetric(EuclideanMetric):
    """M = I: the velocity is the momentum and a momentum draw is standard normal.

    Bit for bit the arithmetic of a :class:`DiagonalMetric` of ones, with fewer operations.
    """

    is_unit = True

    def velocity(self, momentum):
        return momentum

    def kinetic_energy(self, momentum):
        return 0.5 * (momentum * momentum).sum(-1)

    def sample_momentum(self, shape, generator, *, dtype, device):
        return torch.randn(shape, generator=generator, dtype=dtype, device=device)

    def diagonal(self):
        return None

    def step_factor(self, eps):
        return eps

    def __repr__(self) -> str:
        return "IdentityMetric()"


def _tensor(value, name: str, owner: str) -> torch.Tensor:
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if not tensor.is_floating_point():
        tensor = tensor.to(torch.float64)
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{owner}: {name} must be finite.")
    return tensor.detach()


class _InverseMassMetric(EuclideanMetric):
    """A Euclidean metric given by one tensor, ``inv_mass``: its repr, and its persistence
    (:func:`sklearn_bnn.save` / :func:`sklearn_bnn.load`) as that tensor alone.

    A subclass checks a loaded tensor's shape and values in :meth:`_check_saved_inv_mass`;
    what a file holds is checked before the metric is rebuilt from it.
    """

    inv_mass: torch.Tensor

    def __repr__(self) -> str:
        return f"{type(self).__name__}(inv_mass=<tensor of shape {tuple(self.inv_mass.shape)}>)"

    def to_state(self) -> dict:
        return {"inv_mass": self.inv_mass.cpu()}

    @classmethod
    def _check_state(cls, state) -> None:
        """A saved metric holds exactly one floating-point tensor ``inv_mass``, which the
        subclass then checks.

        Parameters
        ----------
        state : object
            The state read from the file for the metric.

        Raises
        ------
        ValueError
            Naming the class, when ``state`` holds anything else.
        """
        if not isinstance(state, dict) or set(state) != {"inv_mass"}:
            raise ValueError(f"a {cls.__name__} state must hold exactly 'inv_mass'.")
        inv_mass = state["inv_mass"]
        if not isinstance(inv_mass, torch.Tensor) or not inv_mass.is_floating_point():
            raise ValueError(f"{cls.__name__} inv_mass must be a floating-point tensor.")
        cls._check_saved_inv_mass(inv_mass)

    @classmethod
    def _check_saved_inv_mass(cls, inv_mass: torch.Tensor) -> None:
        raise NotImplementedError

    @classmethod
    def from_state(cls, state):
        return cls(state["inv_mass"])


@register
class DiagonalMetric(_InverseMassMetric):
    """A diagonal Euclidean metric: M^-1 = diag(``inv_mass``).

    Parameters
    ----------
    inv_mass : tensor of shape (D,) or (C, D)
        The positive diagonal of the inverse mass matrix (the posterior variances, for a
        well-tuned sampler); (C, D) gives each of C chains its own.

    Examples
    --------
    >>> import torch
    >>> metric = DiagonalMetric(torch.tensor([1.0, 4.0]))
    >>> metric.velocity(torch.tensor([[1.0, 1.0]]))
    tensor([[1., 4.]])
    """

    def __init__(self, inv_mass):
        inv_mass = _tensor(inv_mass, "inv_mass", "DiagonalMetric")
        if inv_mass.ndim not in (1, 2):
            raise ValueError(
                f"DiagonalMetric: inv_mass must have shape (D,) or (C, D), got "
                f"{tuple(inv_mass.shape)}."
            )
        if not bool((inv_mass > 0).all()):
            raise ValueError("DiagonalMetric: inv_mass must be positive.")
        self.inv_mass = inv_mass
        self._unit = None

    @property
    def is_unit(self) -> bool:
        """Whether every entry is 1 (computed once: a device synchronisation)."""
        if self._unit is None:
            self._unit = bool((torch.as_tensor(self.inv_mass) == 1).all())
        return self._unit

    def velocity(self, momentum):
        return self.inv_mass * momentum

    def kinetic_energy(self, momentum):
        return 0.5 * (momentum * momentum * self.inv_mass).sum(-1)

    def sample_momentum(self, shape, generator, *, dtype, device):
        z = torch.randn(shape, generator=generator, dtype=dtype, device=device)
        return z / self.inv_mass.sqrt()

    def to(self, device=None, dtype=None):
        inv_mass = self.inv_mass.to(device=device, dtype=dtype)
        return self if inv_mass is self.inv_mass else DiagonalMetric(inv_mass)

    def select(self, idx):
        if getattr(self.inv_mass, "ndim", 0) < 2:
            return self
        return as_metric(self.inv_mass[idx])

    def diagonal(self):
        return self.inv_mass

    def step_factor(self, eps):
        return eps * self.inv_mass

    @property
    def n_chains(self):
        return self.inv_mass.shape[0] if getattr(self.inv_mass, "ndim", 0) == 2 else None

    @classmethod
    def _check_saved_inv_mass(cls, inv_mass: torch.Tensor) -> None:
        """A saved diagonal metric holds one finite positive (D,) or (C, D) float tensor."""
        if inv_mass.ndim not in (1, 2) or not bool((inv_mass > 0).all()):
            raise ValueError("DiagonalMetric inv_mass must be positive, of shape (D,) or (C, D).")


@register
class DenseMetric(_InverseMassMetric):
    """A dense Euclidean metric: M^-1 = ``inv_mass``, a symmetric positive-definite matrix.

    With M^-1 the posterior covariance, the leapfrog sees a target whitened to unit covariance:
    strong linear correlations stop limiting the step size. Momenta are drawn as p = L^-T z with
    M^-1 = L L^T (so Cov p = (L L^T)^-1 = M), a triangular solve with the factor L computed once
    here; no inverse is ever formed. Each velocity is one matrix-vector product per chain, O(D^2):
    meant for models of up to a few thousand parameters.

    Parameters
    ----------
    inv_mass : tensor of shape (D, D) or (C, D, D)
        The inverse mass matrix (e.g. a covariance estimate of the posterior); (C, D, D) gives
        each of C chains its own.

    Raises
    ------
    ValueError
        If ``inv_mass`` is not square, not symmetric, or not positive definite.

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import NUTS, sample
    >>> cov = torch.tensor([[1.0, 0.9], [0.9, 1.0]], dtype=torch.float64)
    >>> logp = lambda x: -0.5 * x @ torch.linalg.solve(cov, x)
    >>> result = sample(logp, torch.zeros(2, dtype=torch.float64), NUTS(metric=DenseMetric(cov)),
    ...                 n_warmup=100, n_draws=100, n_chains=2, random_state=0)
    >>> result.draws.shape
    torch.Size([2, 100, 2])
    """

    def __init__(self, inv_mass):
        inv_mass = _tensor(inv_mass, "inv_mass", "DenseMetric")
        if inv_mass.ndim not in (2, 3) or inv_mass.shape[-1] != inv_mass.shape[-2]:
            raise ValueError(
                "DenseMetric: inv_mass must be a square matrix of shape (D, D) or (C, D, D), "
                f"got shape {tuple(inv_mass.shape)}."
            )
        scale = inv_mass.abs().amax(dim=(-2, -1), keepdim=True).clamp(min=1e-300)
        asymmetry = (inv_mass - inv_mass.mT).abs() / scale
        if bool((asymmetry > 1e-8).any()):
            raise ValueError("DenseMetric: inv_mass must be symmetric.")
        cholesky, info = torch.linalg.cholesky_ex(inv_mass)
        if bool((info != 0).any()):
            raise ValueError("DenseMetric: inv_mass must be positive definite (Cholesky failed).")
        self.inv_mass = inv_mass
        self._cholesky = cholesky

    @classmethod
    def _from_parts(cls, inv_mass, cholesky):
        metric = cls.__new__(cls)
        metric.inv_mass, metric._cholesky = inv_mass, cholesky
        return metric

    def velocity(self, momentum):
        if self.inv_mass.ndim == 2:
            return momentum @ self.inv_mass  # M^-1 symmetric: (M^-1 p)^T = p^T M^-1
        return torch.linalg.vecdot(self.inv_mass, momentum[..., None, :])

    def kinetic_energy(self, momentum):
        return 0.5 * torch.linalg.vecdot(momentum, self.velocity(momentum))

    def sample_momentum(self, shape, generator, *, dtype, device):
        z = torch.randn(shape, generator=generator, dtype=dtype, device=device)
        factor = self._cholesky.to(device=device, dtype=dtype).mT  # L^T, upper triangular
        if factor.ndim == 2:
            factor = factor.expand(z.shape[0], *factor.shape)
        return torch.linalg.solve_triangular(factor, z[..., None], upper=True).squeeze(-1)

    def to(self, device=None, dtype=None):
        inv_mass = self.inv_mass.to(device=device, dtype=dtype)
        if inv_mass is self.inv_mass:
            return self
        return DenseMetric._from_parts(inv_mass, self._cholesky.to(device=device, dtype=dtype))

    def select(self, idx):
        if self.inv_mass.ndim == 2:
            return self
        return DenseMetric._from_parts(self.inv_mass[idx], self._cholesky[idx])

    def diagonal(self):
        return torch.diagonal(self.inv_mass, dim1=-2, dim2=-1)

    @property
    def n_chains(self):
        return self.inv_mass.shape[0] if self.inv_mass.ndim == 3 else None

    @classmethod
    def _check_saved_inv_mass(cls, inv_mass: torch.Tensor) -> None:
        """A saved dense metric holds one symmetric positive-definite float tensor."""
        cls(inv_mass)  # shape, symmetry and positive definiteness


def check_n_chains(metric: Metric, n_chains: int) -> None:
    """Raise ``ValueError`` if ``metric`` is per chain for another number of chains."""
    metric.check_n_chains(n_chains)


def as_metric(inv_mass) -> EuclideanMetric:
    """The metric meant by ``inv_mass``: a metric object as it is, a tensor as a
    :class:`DiagonalMetric` (a (C, D) tensor is always C diagonals, even when C == D).

    Parameters
    ----------
    inv_mass : EuclideanMetric or tensor of shape (D,) or (C, D)
        A tensor (or number) is taken as it is, unchecked: anything that broadcasts against the
        (C, D) momenta; other array-likes are checked by :class:`DiagonalMetric`.

    Returns
    -------
    EuclideanMetric
    """
    if isinstance(inv_mass, EuclideanMetric):
        return inv_mass
    if isinstance(inv_mass, (torch.Tensor, int, float)):
        # the hot path (a tensor each step, as the loop passes): no validation, no copy; any
        # shape that broadcasts against (C, D) momenta works, as it always has
        metric = DiagonalMetric.__new__(DiagonalMetric)
        metric.inv_mass, metric._unit = inv_mass, None
        return metric
    return DiagonalMetric(inv_mass)
