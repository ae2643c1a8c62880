"""Position-dependent metrics G(theta) for Riemannian HMC (Cobb 2019, §5.3).

They follow the protocol of :class:`~._protocol.Metric` (``position_dependent = True``); the
local geometry a metric evaluates at a position has the velocity, kinetic energy and momentum
draw of every metric, plus the derivative terms of the generalized leapfrog.

A metric object is a configuration; ``metric.evaluate(derivs, theta)`` returns a :class:`Geometry`
at positions ``theta`` (C, D): the log density and its gradient there, ``log|G|``, products with
``G^-1`` and ``G^(1/2)``, and the derivative of the metric terms of the Hamiltonian

    H(theta, p) = -log f(theta) + log|G(theta)| / 2 + p^T G(theta)^-1 p / 2     (Cobb 2019, eq. 5.1)

with respect to theta at fixed p (:meth:`Geometry.metric_force`). ``derivs`` gives the log
density's first, second and (contracted) third derivatives (:func:`second_order_derivatives`):
closed forms of the target where it has them, autograd otherwise (:mod:`._autodiff`).

- :class:`SoftAbsMetric`: the dense SoftAbs map of the Hessian of U = -log f, eigenvalues
  lambda -> lambda coth(alpha lambda) (Cobb 2019, eq. 5.9, Betancourt 2013). Its derivative uses
  the divided differences of the SoftAbs function over the eigenvalues, which stay finite where
  eigenvalues coincide (where the derivative of an eigendecomposition does not). It stores D x D
  matrices per chain and differentiates the Hessian: for small models only (it refuses, naming
  the memory, above ``max_memory_gb``).
- :class:`DiagonalSoftAbsMetric`: SoftAbs of the Hessian's diagonal only, computed by chunks of
  Hessian-vector products: O(D) memory, for larger models.
- :class:`FisherMetric`: a positive-definite G(theta) the model gives (e.g. the Fisher information
  plus the prior's precision, Cobb 2019, §5.3), through a function ``theta -> (D, D)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from sklearn.base import BaseEstimator
from torch.func import grad

from ..._utils import check_scalar_param
from ...targets import FunctionTarget, capabilities
from ._autodiff import AutodiffDerivatives, map_rows
from ._protocol import Metric

__all__ = [
    "DiagonalSoftAbsMetric",
    "FisherMetric",
    "Geometry",
    "SoftAbsMetric",
    "AutodiffDerivatives",
    "second_order_derivatives",
    "softabs",
    "softabs_derivative",
]


def second_order_derivatives(target):
    """The derivatives object of ``target`` (see :class:`AutodiffDerivatives`).

    The target's own closed forms when it has ``log_prob_grad_hessian`` and
    ``hessian_contraction``; otherwise autograd (:class:`AutodiffDerivatives`) on its log
    density of one position: a :class:`~sklearn_bnn.targets.FunctionTarget`'s function, a network
    :class:`~sklearn_bnn.targets.Target` with a Gaussian prior (likelihood plus the prior written
    out differentiably), or an object's ``scalar_log_prob(theta)``.
    """
    found = capabilities(target)
    if found.log_prob_grad_hessian is not None and found.hessian_contraction is not None:
        return target
    if found.scalar_log_prob is not None:
        return AutodiffDerivatives(found.scalar_log_prob)
    if isinstance(target, FunctionTarget):
        return AutodiffDerivatives(target._scalar)
    if found.network is not None and found.prior_density is not None:
        precision = getattr(found.prior_density, "precision", None)
        if precision is None:
            raise ValueError("a Riemannian metric needs a target whose prior has a `precision`.")

        def fn(theta):
            out = target.network.forward(theta, target.X)
            return (
                target.likelihood.log_prob(out, target.y) - 0.5 * (precision * theta * theta).sum()
            )

        return AutodiffDerivatives(fn)
    raise ValueError(
        f"a Riemannian metric needs second and third derivatives of the log density: give a "
        f"torch function, a network Target, or an object with scalar_log_prob(theta) or "
        f"log_prob_grad_hessian/hessian_contraction; got {type(target).__name__}."
    )


def _value_and_grad(derivs, theta):
    if callable(getattr(derivs, "log_prob_and_grad", None)):
        return derivs.log_prob_and_grad(theta)
    return derivs.value_and_grad(theta)


def softabs(lam: torch.Tensor, alpha: float) -> torch.Tensor:
    """lambda coth(alpha lambda) (Cobb 2019, eq. 5.9), with its limit 1/alpha at lambda = 0."""
    x = alpha * lam
    small = x.abs() < 1e-4
    safe = torch.where(small, torch.ones_like(x), x)
    return torch.where(small, (1.0 + x * x / 3.0) / alpha, lam / torch.tanh(safe))


def softabs_derivative(lam: torch.Tensor, alpha: float) -> torch.Tensor:
    """d/dlambda [lambda coth(alpha lambda)] = coth(x) - x / sinh(x)^2, x = alpha lambda."""
    x = alpha * lam
    small = x.abs() < 1e-4
    large = x.abs() > 20.0
    mid = torch.where(small | large, torch.ones_like(x), x)
    value = 1.0 / torch.tanh(mid) - mid / torch.sinh(mid) ** 2
    return torch.where(small, 2.0 * x / 3.0, torch.where(large, torch.sign(x), value))


class Geometry:
    """The metric at positions theta (C, D) (built by a metric object's ``evaluate``)."""

    def __init__(self, theta, log_prob, grad_log_prob, logdet):
        self.theta = theta
        self.log_prob = log_prob  # (C,)
        self.grad = grad_log_prob  # (C, D)
        self.logdet = logdet  # (C,)

    def inv(self, p):  # G^-1 p
        raise NotImplementedError

    def velocity(self, p):
        """G(theta)^-1 p, as a Euclidean metric's ``velocity`` (the metric protocol)."""
        return self.inv(p)

    def kinetic_energy(self, p):
        """log|G|/2 + p^T G^-1 p / 2 (C,): the momentum-dependent part of H with its
        normaliser, which depends on the position here."""
        return 0.5 * self.logdet + 0.5 * (p * self.inv(p)).sum(-1)

    def sample_momentum(self, shape, generator, *, dtype, device):
        """p ~ N(0, G(theta)): G^(1/2) z with z standard normal."""
        return self.sqrt_mul(torch.randn(shape, generator=generator, dtype=dtype, device=device))

    def sqrt_mul(self, z):  # G^(1/2) z: p = G^(1/2) z ~ N(0, G) for z ~ N(0, I)
        raise NotImplementedError

    def metric_force(self, p):  # d/dtheta [log|G|/2 + p^T G^-1 p / 2] at fixed p
        raise NotImplementedError

    # -- the Hamiltonian (Cobb 2019, eq. 5.1, constants dropped) ------------------------------
    def energy(self, p):
        """H(theta, p) = -log f + log|G|/2 + p^T G^-1 p / 2 (C,)."""
        return -self.log_prob + 0.5 * self.logdet + 0.5 * (p * self.inv(p)).sum(-1)

    def dH_dtheta(self, p):
        """dH/dtheta at fixed p (C, D)."""
        return -self.grad + self.metric_force(p)


class _DenseSoftAbsGeometry(Geometry):
    def __init__(self, theta, log_prob, grad_log_prob, Q, lam, alpha, derivs):
        lam_t = softabs(lam, alpha)
        super().__init__(theta, log_prob, grad_log_prob, torch.log(lam_t).sum(-1))
        self.Q, self.lam, self.lam_t, self.derivs = Q, lam, lam_t, derivs
        # Divided differences of the SoftAbs function (Betancourt 2013, eq. 19): J_ij =
        # (s(l_i) - s(l_j)) / (l_i - l_j), and s'(l_i) where the two eigenvalues coincide.
        li, lj = lam[..., :, None], lam[..., None, :]
        diff = li - lj
        same = diff.abs() <= 1e-7 * (li.abs() + lj.abs() + 1e-30)
        dd = (lam_t[..., :, None] - lam_t[..., None, :]) / torch.where(
            same, torch.ones_like(diff), diff
        )
        self.J = torch.where(same, softabs_derivative(0.5 * (li + lj), alpha), dd)

    def inv(self, p):
        v = torch.einsum("cji,cj->ci", self.Q, p) / self.lam_t
        return torch.einsum("cij,cj->ci", self.Q, v)

    def sqrt_mul(self, z):
        return torch.einsum("cij,cj->ci", self.Q, self.lam_t.sqrt() * z)

    def metric_force(self, p):
        # d_i [log|G|/2 + p^T G^-1 p/2] = tr(A d_i H_U) / 2 with H_U = -hess log f and
        # A = Q [diag(J_dd / s_d) - J o (v v^T)] Q^T, v = Q^T p / s.
        v = torch.einsum("cji,cj->ci", self.Q, p) / self.lam_t
        inner = -self.J * v[..., :, None] * v[..., None, :]
        inner = inner + torch.diag_embed(torch.diagonal(self.J, dim1=-2, dim2=-1) / self.lam_t)
        A = self.Q @ inner @ self.Q.transpose(-1, -2)
        return -0.5 * self.derivs.hessian_contraction(self.theta, A)


def _robust_eigh(H, value, g):
    """eigh of each chain's H; a chain whose H is not finite or whose decomposition fails gets
    the identity and log density -inf, so its trajectory is rejected as divergent."""
    eye = torch.eye(H.shape[-1], dtype=H.dtype, device=H.device)
    bad = ~(torch.isfinite(H).all((-1, -2)) & torch.isfinite(value) & torch.isfinite(g).all(-1))
    H = torch.where(bad[:, None, None], eye, H)
    try:
        lam, Q = torch.linalg.eigh(H)
    except RuntimeError:  # torch.linalg.LinAlgError: decompose chain by chain
        lam, Q = torch.ones_like(H[..., 0]), eye.expand_as(H).clone()
        for c in range(H.shape[0]):
            try:
                lam[c], Q[c] = torch.linalg.eigh(H[c])
            except RuntimeError:
                bad[c] = True
    value = torch.where(bad, torch.full_like(value, -math.inf), value)
    return lam, Q, value


@dataclass(kw_only=True, eq=False, repr=False)
class SoftAbsMetric(BaseEstimator, Metric):
    """Dense SoftAbs metric: G = Q diag(lambda coth(alpha lambda)) Q^T from the eigen-
    decomposition Q diag(lambda) Q^T of the Hessian of U = -log f (Cobb 2019, §5.3.2, eq. 5.9).

    Positive definite wherever the Hessian is defined, so it can be used away from convex
    regions (the funnel, networks). Costs a Hessian, an eigendecomposition and a
    Hessian-derivative contraction per evaluation: for small models.

    Parameters
    ----------
    alpha : float, default=1e6
        Sharpness of the SoftAbs map (Cobb 2019, footnote 4): as alpha grows, lambda coth(alpha
        lambda) -> |lambda|; eigenvalues near 0 are lifted to 1/alpha.
    max_memory_gb : float, default=1.0
        Refuse models whose dense per-chain D x D matrices would need more than this.
    """

    position_dependent = True

    alpha: float = 1e6
    max_memory_gb: float = 1.0

    def check(self, dim: int, n_chains: int = 1, itemsize: int = 8) -> None:
        check_scalar_param(self.alpha, "alpha", low=0, low_inclusive=False)
        check_scalar_param(self.max_memory_gb, "max_memory_gb", low=0, low_inclusive=False)
        # Hessian, eigenvectors, divided differences, the contraction matrix and the
        # Hessian's derivative graph: about six D x D matrices per chain.
        need = 6 * n_chains * dim * dim * itemsize / 2**30
        if need > self.max_memory_gb:
            raise ValueError(
                f"the dense SoftAbs metric for {dim} parameters and {n_chains} chain(s) needs "
                f"about {need:.3g} GB (six {dim} x {dim} matrices per chain), above "
                f"max_memory_gb={self.max_memory_gb}: dense Riemannian metrics are for small "
                "models; use DiagonalSoftAbsMetric() for larger ones (or raise max_memory_gb)."
            )

    def evaluate(self, derivs, theta: torch.Tensor) -> Geometry:
        theta = theta.detach()
        with torch.no_grad():
            value, g, h = derivs.log_prob_grad_hessian(theta)
            lam, Q, value = _robust_eigh(-0.5 * (h + h.transpose(-1, -2)), value, g)
        return _DenseSoftAbsGeometry(theta, value, g, Q, lam, float(self.alpha), derivs)


class _DiagonalGeometry(Geometry):
    def __init__(self, theta, log_prob, grad_log_prob, h_diag, alpha, derivs, chunk):
        g = softabs(h_diag, alpha)
        super().__init__(theta, log_prob, grad_log_prob, torch.log(g).sum(-1))
        self.h, self.g, self.alpha, self.derivs, self.chunk = h_diag, g, alpha, derivs, chunk

    def inv(self, p):
        return p / self.g

    def sqrt_mul(self, z):
        return self.g.sqrt() * z

    def metric_force(self, p):
        # d_i sum_d [log g_d / 2 + p_d^2 / (2 g_d)] = sum_d c_d d_i h_dd, h = hess U,
        # c_d = s'(h_dd) (1/g_d - p_d^2/g_d^2) / 2.
        c = 0.5 * softabs_derivative(self.h, self.alpha) * (1.0 / self.g - p * p / self.g**2)
        return -self.derivs.diagonal_contraction(self.theta, c, self.chunk)


@dataclass(kw_only=True, eq=False, repr=False)
class DiagonalSoftAbsMetric(BaseEstimator, Metric):
    """Diagonal SoftAbs metric: G = diag(h_dd coth(alpha h_dd)) from the Hessian's diagonal.

    O(D) memory (the diagonal is computed by chunks of Hessian-vector products), D Hessian-vector
    products per evaluation: for models too large for :class:`SoftAbsMetric`.

    Parameters
    ----------
    alpha : float, default=1e6
        Sharpness of the SoftAbs map (Cobb 2019, eq. 5.9).
    chunk_size : int, default=64
        Basis vectors per batch of Hessian-vector products.
    """

    position_dependent = True

    alpha: float = 1e6
    chunk_size: int = 64

    def check(self, dim: int, n_chains: int = 1, itemsize: int = 8) -> None:
        check_scalar_param(self.alpha, "alpha", low=0, low_inclusive=False)
        check_scalar_param(self.chunk_size, "chunk_size", kind="int", low=1)

    def evaluate(self, derivs, theta: torch.Tensor) -> Geometry:
        theta = theta.detach()
        if not callable(getattr(derivs, "hessian_diagonal", None)):
            raise ValueError(
                "DiagonalSoftAbsMetric needs hessian_diagonal/diagonal_contraction: give the log "
                "density as a torch function (or a network Target)."
            )
        with torch.no_grad():
            value, g = _value_and_grad(derivs, theta)
            h = -derivs.hessian_diagonal(theta, int(self.chunk_size))
        return _DiagonalGeometry(
            theta, value, g, h, float(self.alpha), derivs, int(self.chunk_size)
        )


class _CholeskyGeometry(Geometry):
    def __init__(self, theta, log_prob, grad_log_prob, L, metric_fn):
        logdet = 2.0 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
        super().__init__(theta, log_prob, grad_log_prob, logdet)
        self.L, self.metric_fn = L, metric_fn

    def inv(self, p):
        return torch.cholesky_solve(p[..., None], self.L)[..., 0]

    def sqrt_mul(self, z):
        return (self.L @ z[..., None])[..., 0]

    def metric_force(self, p):
        metric_fn = self.metric_fn

        def terms(th, pp):
            G = metric_fn(th)
            return 0.5 * torch.logdet(G) + 0.5 * (pp * torch.linalg.solve(G, pp)).sum()

        return map_rows(grad(terms), self.theta, p)


@dataclass(kw_only=True, eq=False, repr=False)
class FisherMetric(BaseEstimator, Metric):
    """A positive-definite metric the model gives, G(theta) = ``metric_fn(theta)`` (D, D).

    For the Fisher information plus the negative Hessian of the log prior (Cobb 2019, §5.3, after
    eq. 5.7), e.g. X^T diag(s (1 - s)) X + tau I for logistic regression. Its derivative goes
    through autograd of ``log|G|`` and of the solve.

    Parameters
    ----------
    metric_fn : callable or None
        ``theta (D,) -> G (D, D)``, differentiable by :mod:`torch.func`; None uses the target's
        ``fisher_information(theta)``.
    """

    position_dependent = True

    metric_fn: object = None

    def check(self, dim: int, n_chains: int = 1, itemsize: int = 8) -> None:
        if self.metric_fn is not None and not callable(self.metric_fn):
            raise ValueError(f"metric_fn must be callable or None, got {self.metric_fn!r}.")

    def bind(self, target):
        if self.metric_fn is not None:
            return self.metric_fn
        fisher = capabilities(target).fisher_information
        if fisher is None:
            raise ValueError(
                "FisherMetric() needs metric_fn or a target with fisher_information(theta); "
                f"{type(target).__name__} has none."
            )
        return fisher

    def evaluate(self, derivs, theta: torch.Tensor, metric_fn=None) -> Geometry:
        theta = theta.detach()
        metric_fn = self.metric_fn if metric_fn is None else metric_fn
        with torch.no_grad():
            value, g = _value_and_grad(derivs, theta)
            G = map_rows(metric_fn, theta)
            L = torch.linalg.cholesky(0.5 * (G + G.transpose(-1, -2)))
        return _CholeskyGeometry(theta, value, g, L, metric_fn)
