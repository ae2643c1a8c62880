"""Riemannian manifold HMC with the implicit or the explicit integrator (Cobb 2019, ch. 5).

H(theta, p) = -log f(theta) + log|G(theta)|/2 + p^T G(theta)^-1 p / 2 (Cobb 2019, eq. 5.1 with the
mass matrix replaced by the metric G, §5.3.1) is not separable, so the leapfrog does not apply:

- **implicit**: the generalized leapfrog (Leimkuhler & Reich 2004; Cobb 2019, Algorithm 2), two
  fixed-point iterations per step, run until the largest change is below ``tol`` or
  ``max_iter`` iterations; a chain whose iterations do not converge is a divergence
  (rejected and counted);
- **explicit**: Tao's integrator on the doubled phase space (theta, p, theta~, p~) with binding
  Omega (Cobb 2019, eq. 5.10-5.13, Algorithm 3): H1(eps/2) H2(eps/2) R(eps) H2(eps/2) H1(eps/2),
  with the binding rotation applied to all four variables from their values before it. The
  copies start equal to (theta, p) at the start of each trajectory (Tao 2016), or at every step
  with ``reset_copies=True`` (as Algorithm 4 of Cobb 2019 is written).

Both accept with one Metropolis-Hastings test on the true H, log|G|/2 included (Algorithm 4).
For the explicit integrator that test alone is biased where the metric varies; ``copy_scale > 0``
starts the copies at a Gaussian offset and adds the offsets' energy to the test, which makes it
exact on the doubled phase space (see :class:`RMHMC`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..._utils import check_scalar_param
from ...targets import capabilities
from .._base import (
    Info,
    Kernel,
    State,
    chain_step_size,
    default_step_size,
    sampler_setting,
)
from .._by_name import register_sampler
from ..geometry.riemannian import FisherMetric, SoftAbsMetric, second_order_derivatives
from ._settings import HamiltonianSampler
from .hmc import metropolis_hastings

__all__ = ["RMHMC", "RMHMCKernel", "explicit_step", "implicit_step"]


def implicit_step(evaluate, geo, p, eps, tol, max_iter):
    """One generalized leapfrog step (Cobb 2019, Algorithm 2).

    p' = p - eps/2 dH/dtheta(theta, p')                        (fixed point in p')
    theta' = theta + eps/2 [G^-1(theta) + G^-1(theta')] p'      (fixed point in theta')
    p'' = p' - eps/2 dH/dtheta(theta', p')

    Parameters
    ----------
    evaluate : callable
        theta (C, D) -> Geometry.
    geo : Geometry
        At the current theta.
    p : tensor (C, D)
    eps : tensor (C, 1)

    Returns
    -------
    geo, p, converged (C,) bool, n_evaluations (geometry + metric-force evaluations)
    """
    half = 0.5 * eps
    theta0 = geo.theta
    p_half = p
    n_eval = 0
    converged_p = torch.zeros(p.shape[0], dtype=torch.bool, device=p.device)
    for _ in range(max_iter):
        new = p - half * geo.dH_dtheta(p_half)
        n_eval += 1
        change = (new - p_half).abs().amax(-1)
        p_half = new
        converged_p = change < tol
        if bool(converged_p.all()) or not bool(torch.isfinite(change).any()):
            break
    velocity0 = geo.inv(p_half)
    theta, geo1 = theta0, geo
    converged_q = torch.zeros_like(converged_p)
    for _ in range(max_iter):
        new = theta0 + half * (velocity0 + geo1.inv(p_half))
        change = (new - theta).abs().amax(-1)
        theta = torch.where(torch.isfinite(new), new, theta0)
        geo1 = evaluate(theta)
        n_eval += 1
        converged_q = change < tol
        if bool(converged_q.all()) or not bool(torch.isfinite(change).any()):
            break
    p_new = p_half - half * geo1.dH_dtheta(p_half)
    n_eval += 1
    return geo1, p_new, converged_p & converged_q, n_eval


def _binding_rotation(q, p, qc, pc, eps, omega):
    """phi_{Omega h}^eps of Cobb (2019), eq. 5.12: a simultaneous update of all four variables."""
    c = torch.cos(2.0 * omega * eps)
    s = torch.sin(2.0 * omega * eps)
    sq, sp = q + qc, p + pc
    dq, dp = q - qc, p - pc
    rq = c * dq + s * dp
    rp = -s * dq + c * dp
    return 0.5 * (sq + rq), 0.5 * (sp + rp), 0.5 * (sq - rq), 0.5 * (sp - rp)


def explicit_step(evaluate, state, eps, omega):
    """One step of Tao's explicit integrator on the doubled phase space (Cobb 2019, eq. 5.13).

    ``state`` is ``(geo_q, p, geo_qc, pc)`` with the geometries at theta and at the copy theta~;
    returns the new such tuple and the geometry evaluations spent.

    H1(d): p -= d dH/dtheta(theta, p~), theta~ += d G(theta)^-1 p~;
    H2(d): theta += d G(theta~)^-1 p, p~ -= d dH/dtheta(theta~, p).
    """
    geo_q, p, geo_c, pc = state
    half = 0.5 * eps
    n_eval = 0

    def h1(geo_q, p, geo_c, pc):
        p = p - half * geo_q.dH_dtheta(pc)
        geo_c = evaluate(geo_c.theta + half * geo_q.inv(pc))
        return geo_q, p, geo_c, pc

    def h2(geo_q, p, geo_c, pc):
        pc = pc - half * geo_c.dH_dtheta(p)
        geo_q = evaluate(geo_q.theta + half * geo_c.inv(p))
        return geo_q, p, geo_c, pc

    geo_q, p, geo_c, pc = h1(geo_q, p, geo_c, pc)
    geo_q, p, geo_c, pc = h2(geo_q, p, geo_c, pc)
    q, p, qc, pc = _binding_rotation(geo_q.theta, p, geo_c.theta, pc, eps, omega)
    geo_q, geo_c = evaluate(q), evaluate(qc)
    geo_q, p, geo_c, pc = h2(geo_q, p, geo_c, pc)
    geo_q, p, geo_c, pc = h1(geo_q, p, geo_c, pc)
    n_eval += 10
    return (geo_q, p, geo_c, pc), n_eval


@register_sampler("rmhmc")
@dataclass(kw_only=True, eq=False, repr=False)
class RMHMC(HamiltonianSampler):
    """Riemannian manifold HMC (a sampler object; Cobb 2019, ch. 5).

    Parameters
    ----------
    n_steps : int, default=10
        Integration steps per trajectory L.
    integrator : {"implicit", "explicit"}, default="implicit"
        The generalized leapfrog with fixed-point iterations (Cobb 2019, Algorithm 2), or Tao's
        explicit integrator with binding ``omega`` (Algorithm 3). The implicit one is the
        default because it is exact; the explicit one as published is not (see Notes).
    metric : metric object, default=None
        :class:`~sklearn_bnn.samplers.SoftAbsMetric` (dense, the default),
        :class:`~sklearn_bnn.samplers.DiagonalSoftAbsMetric` for larger models, or
        :class:`~sklearn_bnn.samplers.FisherMetric` (:mod:`.geometry.riemannian`).
    omega : float, default=10.0
        Binding strength Omega of the explicit integrator (Cobb 2019 uses 10 in Table 5.1).
    reset_copies : bool, default=False
        Explicit integrator: restart the copies (theta~, p~) from (theta, p) at every step (as
        Cobb 2019, Algorithm 4 is written) rather than once per trajectory.
    copy_scale : float, default=0.0
        Explicit integrator. 0: the copies start equal to (theta, p) and the test uses H(theta, p)
        alone (Cobb 2019, Algorithm 4), which is biased where the metric varies. s > 0: the
        copies start at (theta, p) plus N(0, s^2 I) noise and the test runs on the doubled phase
        space with the copies' Gaussian energy added, which makes the sampler exact; the price is
        lower acceptance, and the mixing depends on ``omega * step_size`` (docs/rmhmc.md has
        the measurements).
    tol : float, default=1e-6
        Fixed-point tolerance of the implicit integrator (largest absolute change).
    max_iter : int, default=100
        Fixed-point iterations at most; a chain that has not converged is rejected as divergent.
    divergence_threshold : float, default=1000
        Energy error above which a trajectory counts as divergent.

    Notes
    -----
    Exactness of the explicit sampler. Tao's map on (theta, p, theta~, p~) is volume preserving
    and, with both momenta negated, its own inverse; but the map from (theta, p) to the final
    (theta, p) with the copies started equal is neither, so a test on H(theta, p) alone does not
    correct it (on a 2-D logistic regression the variances come out 10-50 % low). Making the
    copies random, theta~ ~ N(theta, s^2 I) and p~ ~ N(p, s^2 I), gives an extended target
    pi(theta) N(p; 0, G) N(theta~; theta, s^2) N(p~; p, s^2) on which the negated map is an
    involution: the test with ``copy_scale=s`` is exact for it, hence for pi.

    Dense metrics hold D x D matrices per chain and differentiate the Hessian: they are for
    models of at most a few hundred parameters; the metric refuses larger ones with the memory it
    would need. The step size is adapted by the sampling loop's dual averaging like HMC's; the
    loop's diagonal mass matrix is ignored (the metric replaces it).

    step_size, target_accept
        The warmup's settings, as for :class:`~sklearn_bnn.samplers.HMC` (defaults "auto" and
        0.8); a numeric ``step_size`` is also the built kernel's default step.

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import RMHMC, sample
    >>> res = sample(lambda x: -0.5 * (x**2).sum(), torch.zeros(2, dtype=torch.float64),
    ...              RMHMC(n_steps=3), n_warmup=20, n_draws=20, n_chains=2, random_state=0)
    >>> res.draws.shape
    torch.Size([2, 20, 2])
    """

    n_steps: int = 10
    integrator: str = "implicit"
    metric: object = None
    omega: float = 10.0
    reset_copies: bool = False
    copy_scale: float = 0.0
    tol: float = 1e-6
    max_iter: int = 100

    def _metric(self):
        return SoftAbsMetric() if self.metric is None else self.metric

    def check_target(self, target) -> None:
        self._check_shared()
        check_scalar_param(self.n_steps, "n_steps", kind="int", low=1)
        if self.integrator not in ("implicit", "explicit"):
            raise ValueError(
                f"integrator must be 'implicit' or 'explicit', got {self.integrator!r}."
            )
        check_scalar_param(self.omega, "omega", low=0)
        check_scalar_param(self.copy_scale, "copy_scale", low=0)
        if self.copy_scale > 0 and self.reset_copies and self.integrator == "explicit":
            raise ValueError(
                "copy_scale > 0 (the exact explicit sampler) needs the copies carried through the "
                "trajectory: set reset_copies=False, or copy_scale=0 for Algorithm 4 of "
                "Cobb (2019) as printed (biased where the metric varies)."
            )
        check_scalar_param(self.tol, "tol", low=0, low_inclusive=False)
        check_scalar_param(self.max_iter, "max_iter", kind="int", low=1)
        metric = self._metric()
        if not callable(getattr(metric, "evaluate", None)):
            raise ValueError(f"metric must be a metric object with evaluate(), got {metric!r}.")
        found = capabilities(target)
        itemsize = torch.finfo(torch.float64 if found.dtype is None else found.dtype).bits // 8
        metric.check(int(target.dim), 1, itemsize)
        blocks = [] if found.gibbs_blocks is None else found.gibbs_blocks()
        if any(hasattr(b, "stat_names") for b in blocks):  # HierarchicalPrior(scheme="gibbs")
            raise ValueError(
                "RMHMC samples the weights under a fixed prior; a HierarchicalPrior's "
                "precisions are sampled by S3HMC (sampler=S3HMC()) or, with "
                "scheme='gibbs', by Gibbs steps beside HMC or NUTS."
            )
        if found.n_hyper:
            raise ValueError(
                "RMHMC samples the weights under a fixed prior; this target also carries "
                f"{target.n_hyper} hyperparameters (a HierarchicalPrior): use sampler=S3HMC()."
            )
        second_order_derivatives(target)

    def build(self, target) -> RMHMCKernel:
        """The RMHMC kernel of this configuration on ``target``, once the settings and the
        metric's size are checked."""
        self.check_target(target)
        return RMHMCKernel(self, target)


class RMHMCKernel(Kernel):
    """The RMHMC transition kernel: an :class:`RMHMC` sampler bound to a target
    (``RMHMC(...).build(target)``).

    Every setting (``n_steps``, ``integrator``, ``omega``, ``tol``, ...) is the sampler's. The
    kernel holds the metric (the sampler's, or :class:`~sklearn_bnn.samplers.SoftAbsMetric`)
    with the target's derivatives it evaluates.

    Parameters
    ----------
    sampler : RMHMC
        The configuration.
    target : target object
        A log density with second and third derivatives (see :class:`RMHMC`).
    step_size : float or tensor (C,), optional
        The step size of a ``step`` given none: by default the sampler's ``step_size`` when it
        is a number; with ``"auto"`` none, and ``step`` must be given one.
    """

    n_steps = sampler_setting("n_steps")
    integrator = sampler_setting("integrator")
    omega = sampler_setting("omega")
    reset_copies = sampler_setting("reset_copies")
    copy_scale = sampler_setting("copy_scale")
    tol = sampler_setting("tol")
    max_iter = sampler_setting("max_iter")
    divergence_threshold = sampler_setting("divergence_threshold")

    def __init__(self, sampler, target, *, step_size=None):
        self.sampler = sampler
        self.target = target
        self.metric = sampler._metric()
        self.step_size = default_step_size(sampler, step_size)
        self._bind(target)

    def _bind(self, target) -> None:
        """The target's derivatives, and the model's metric function for a Fisher metric."""
        self.derivs = second_order_derivatives(target)
        fisher = isinstance(self.metric, FisherMetric)
        self._metric_fn = self.metric.bind(target) if fisher else None

    def evaluate(self, theta: torch.Tensor):
        """The geometry (:class:`~.geometry.riemannian.Geometry`) at ``theta`` (C, D)."""
        if self._metric_fn is not None:
            return self.metric.evaluate(self.derivs, theta, self._metric_fn)
        return self.metric.evaluate(self.derivs, theta)

    def with_target(self, target):
        kernel = super().with_target(target)
        kernel._bind(target)
        return kernel

    def init(self, position: torch.Tensor, generator=None, *, n_warmup: int = 0) -> State:
        if position.ndim == 1:
            position = position[None]
        itemsize = torch.finfo(position.dtype).bits // 8
        self.metric.check(position.shape[-1], position.shape[0], itemsize)
        return super().init(position, generator, n_warmup=n_warmup)

    def trajectory(self, geo, p, eps, copies=None):
        """Integrate ``n_steps`` steps from (geo.theta, p).

        Returns (geo, p, converged, n_eval, copies): ``copies`` is the explicit integrator's final
        (geometry at theta~, p~), started from ``copies`` (default: equal to (theta, p)); None
        for the implicit integrator.
        """
        n_eval = 0
        converged = torch.ones(p.shape[0], dtype=torch.bool, device=p.device)
        if self.integrator == "implicit":
            for _ in range(self.n_steps):
                geo, p, ok, n = implicit_step(self.evaluate, geo, p, eps, self.tol, self.max_iter)
                converged &= ok
                n_eval += n
            return geo, p, converged, n_eval, None
        aug = (geo, p, geo, p) if copies is None else (geo, p, *copies)
        for _ in range(self.n_steps):
            if self.reset_copies:
                aug = (aug[0], aug[1], aug[0], aug[1])
            aug, n = explicit_step(self.evaluate, aug, eps, self.omega)
            n_eval += n
        return aug[0], aug[1], converged, n_eval, (aug[2], aug[3])

    def step(self, state: State, generator: torch.Generator, step_size=None, inv_mass=None):
        """One RMHMC transition per chain (Cobb 2019, Algorithm 4); ``inv_mass`` is ignored.

        With ``copy_scale`` s > 0 (explicit integrator) the copies start at theta~ = theta +
        s z1, p~ = p + s z2 (z standard normal) and the test is on the doubled phase space: H plus
        (|theta~ - theta|^2 + |p~ - p|^2) / (2 s^2), the energy of the copies' Gaussian given
        (theta, p), at both ends. Tao's map with both momenta negated is a volume-preserving
        involution there, so this test is exact (see the class notes); the binding rotation
        leaves that quadratic unchanged.
        """
        q = state.position
        eps = chain_step_size(step_size, self.step_size, q)
        geo0 = self.evaluate(q)
        z = torch.randn(q.shape, generator=generator, dtype=q.dtype, device=q.device)
        p0 = geo0.sqrt_mul(z)
        h0 = geo0.energy(p0)
        copies, extended = None, self.integrator == "explicit" and self.copy_scale > 0
        with torch.no_grad():
            if extended:
                s = float(self.copy_scale)
                z1 = torch.randn(q.shape, generator=generator, dtype=q.dtype, device=q.device)
                z2 = torch.randn(q.shape, generator=generator, dtype=q.dtype, device=q.device)
                copies = (self.evaluate(q + s * z1), p0 + s * z2)
                h0 = h0 + 0.5 * ((z1 * z1).sum(-1) + (z2 * z2).sum(-1))
            geo1, p1, converged, n_eval, copies = self.trajectory(geo0, p0, eps[:, None], copies)
        h1 = geo1.energy(p1)
        if extended:
            dq, dp = copies[0].theta - geo1.theta, copies[1] - p1
            h1 = h1 + ((dq * dq).sum(-1) + (dp * dp).sum(-1)) / (2.0 * s * s)
            n_eval += 1
        h1 = torch.where(converged & torch.isfinite(h1), h1, torch.full_like(h1, math.inf))
        proposal = State(geo1.theta, geo1.log_prob, geo1.grad)
        new_state, accept_prob, accepted, energy_error, divergent = metropolis_hastings(
            state, proposal, h0, h1, generator, self.divergence_threshold
        )
        extra = {"not_converged": ~converged}
        return new_state, Info(
            accept_prob, accepted, energy_error, divergent, eps, float(n_eval), extra
        )

    def describe(self, stats: dict) -> dict:
        nc = stats.get("not_converged")
        if nc is None or self.integrator != "implicit":
            return {}
        return {"fixed_point_failures": int(nc.sum())}
