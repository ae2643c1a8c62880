"""S3HMC: semi-separable HMC over weights and per-group precisions.

Cobb et al. (2019); Cobb (2019), ch. 6.

The positions are theta = [w (D_w), log tau (K)]: the weights, then one log-precision per group
of weights (per layer, weights and biases separately) and, for regression, the log output noise
precision last. The Hamiltonian (Cobb et al. 2019, eq. 1-2, block metric, constants dropped) is

    H = U(w, tau) + log|G_w(tau)|/2 + p_w^T G_w(tau)^-1 p_w / 2
                  + log|G_tau(tau)|/2 + p_tau^T G_tau(tau)^-1 p_tau / 2,
    U = -log p(y | w, lambda) - log p(w | tau) - log p(tau),

with G_w(tau) = diag(tau of each weight's group) (Cobb 2019, eq. 6.7) and G_tau diagonal with
entries c_l / tau_l^2, c_l = Q_l/2 + alpha_l - 1 (Cobb et al. 2019, eq. 6/7; c = alpha - 1 for the
output precision, footnote 1). With (tau, p_tau) fixed H is separable in (w, p_w): a leapfrog with
inverse mass 1/tau. With (w, p_w) fixed, per group,

    H_tau = a tau - b log tau + d / tau + p^2 tau^2 / (2 c),
    a = S_l/2 + beta_l, b = alpha_l (+ N_out/2 for the noise), d = P_l / 2,

with S_l the sum of the group's squared weights and P_l of its squared momenta (the weight-
momentum term of eq. 4 enters through G_w(tau)^-1): not separable, integrated by the generalized
leapfrog (fixed-point iterations). ALBA (Cobb et al. 2019, App. A, Algorithm 1): half a leapfrog
step in (w, p_w), a generalized-leapfrog step in (tau, p_tau), half a step in (w, p_w); one MH test
on H.

Deviations from the seeds' text, on purpose: the seeds write A(p|.) = p^T G p / 2 and test MH on
H_w + H_tau, which double counts the terms the two blocks share; we use the kinetic energy
p^T G^-1 p / 2 of their eq. 1 and the joint H of Zhang & Sutton (2014), which each block conserves.
The dynamics run in tau (positivity: a step that leaves tau > 0 is a divergence) and the chain
stores log tau; the target's density in log tau includes the Jacobian.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..._utils import check_scalar_param
from ...priors import HierarchicalPrior
from ...targets import capabilities
from ...targets._hierarchical import HierarchicalTarget, hierarchical_target
from .._base import (
    Info,
    Kernel,
    State,
    chain_step_size,
    default_step_size,
    sampler_setting,
)
from .._by_name import register_sampler
from ._settings import EuclideanSampler

__all__ = ["HierarchicalTarget", "S3HMC", "S3HMCKernel"]


@register_sampler("s3hmc")
@dataclass(kw_only=True, eq=False, repr=False)
class S3HMC(EuclideanSampler):
    """Semi-separable HMC over weights and precisions (Cobb et al. 2019; Cobb 2019, ch. 6).

    Samples a :class:`~sklearn_bnn.targets.HierarchicalTarget`. Given a network
    :class:`~sklearn_bnn.targets.Target` instead (an estimator with a plain
    ``prior_precision``), :meth:`prepare_target` makes one with the default
    :class:`~sklearn_bnn.priors.HierarchicalPrior` (the run then returns the weights as the
    draws and the precisions as per-draw statistics, by the target's ``split_draws``).

    Parameters
    ----------
    n_steps : int, default=20
        ALBA steps per trajectory L.
    tol : float, default=1e-8
        Fixed-point tolerance of the (tau, p_tau) generalized leapfrog (relative change),
        floored at four machine epsilons of the positions' dtype: a smaller change cannot be
        resolved, and float32 iterations would stall one rounding step apart and count as
        divergent.
    max_iter : int, default=50
        Fixed-point iterations at most; non-convergence is a divergence (rejected, counted).
    divergence_threshold : float, default=1000
        Energy error above which a trajectory counts as divergent.

    step_size, target_accept, adapt_mass
        The warmup's settings, as for :class:`~sklearn_bnn.samplers.HMC` (defaults "auto",
        0.8, False); a numeric ``step_size`` is also the built kernel's default step.

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import S3HMC, sample
    >>> from sklearn_bnn.targets import HierarchicalTarget
    >>> t = HierarchicalTarget(lambda w: (-0.5 * (w**2).sum(-1), -w), torch.zeros(3, dtype=int),
    ...                        torch.tensor([2.0]), torch.tensor([1.0]))
    >>> res = sample(t, torch.zeros(4, dtype=torch.float64), S3HMC(n_steps=5), n_warmup=20,
    ...              n_draws=20, n_chains=2, random_state=0)
    >>> res.draws.shape
    torch.Size([2, 20, 4])
    """

    n_steps: int = 20
    tol: float = 1e-8
    max_iter: int = 50

    def check_target(self, target) -> None:
        self._check_shared()
        check_scalar_param(self.n_steps, "n_steps", kind="int", low=1)
        check_scalar_param(self.tol, "tol", low=0, low_inclusive=False)
        check_scalar_param(self.max_iter, "max_iter", kind="int", low=1)
        if not isinstance(target, HierarchicalTarget):
            raise ValueError(
                "S3HMC samples a network's weights jointly with their precisions: it needs a "
                "network Target (which it extends itself, as the estimators' sampler='s3hmc') "
                "or a HierarchicalTarget (sklearn_bnn.targets.hierarchical_target), got "
                f"{type(target).__name__}."
            )
        temperature = capabilities(target).temperature
        if float(temperature) != 1.0:
            raise ValueError(
                "temperature must be 1 with a hierarchical prior (S3HMC does not temper its "
                f"hyperparameters), got temperature={temperature!r}."
            )

    def prepare_target(self, target):
        """A network target becomes the joint target of its weights and per-tensor
        log-precisions under its own :class:`~sklearn_bnn.priors.HierarchicalPrior` (whatever
        its ``scheme``: S3HMC samples jointly) or the default one; a hierarchical target (or
        any other) is sampled as it is."""
        found = capabilities(target)
        if isinstance(target, HierarchicalTarget) or found.network is None:
            return target
        prior = found.prior
        if not isinstance(prior, HierarchicalPrior):
            prior = HierarchicalPrior()
        return hierarchical_target(target, prior)

    def build(self, target) -> S3HMCKernel:
        """The S3HMC kernel of this configuration on ``target`` (a hierarchical target: see
        :meth:`prepare_target`), once the settings are checked."""
        self.check_target(target)
        return S3HMCKernel(self, target)


class S3HMCKernel(Kernel):
    """The S3HMC transition kernel (ALBA integrator, one MH test on the joint H): an
    :class:`S3HMC` sampler bound to a hierarchical target (``S3HMC(...).build(target)``).

    ``n_steps``, ``tol``, ``max_iter`` and ``divergence_threshold`` are the sampler's.

    Parameters
    ----------
    sampler : S3HMC
        The configuration.
    target : HierarchicalTarget
    step_size : float or tensor (C,), optional
        The step size of a ``step`` given none: by default the sampler's ``step_size`` when it
        is a number; with ``"auto"`` none, and ``step`` must be given one.
    """

    n_steps = sampler_setting("n_steps")
    tol = sampler_setting("tol")
    max_iter = sampler_setting("max_iter")
    divergence_threshold = sampler_setting("divergence_threshold")

    def __init__(self, sampler, target, *, step_size=None):
        self.sampler = sampler
        self.target = target
        self.step_size = default_step_size(sampler, step_size)

    # -- the Hamiltonian in (w, tau) --------------------------------------------------------
    def _energy(self, w, tau, pw, pt, ll, ll_grad, c):
        t = self.target
        U, _ = t.potential_terms(w, tau, ll, ll_grad)
        tau_w = tau[:, : t.n_groups]
        Q = t.group_sizes.to(w.device, w.dtype)
        kin_w = 0.5 * (pw * pw / t._per_weight(tau_w)).sum(-1) + 0.5 * (Q * torch.log(tau_w)).sum(
            -1
        )
        kin_t = 0.5 * (pt * pt * tau * tau / c).sum(-1) + 0.5 * torch.log(c / tau**2).sum(-1)
        return U + kin_w + kin_t

    def _tau_step(self, w, pw, tau, pt, ll, eps, c):
        """Generalized leapfrog in (tau, p_tau) at fixed (w, p_w), per group (Cobb 2019, Alg. 2).

        H_tau = a tau - b log tau + d / tau + p^2 tau^2 / (2 c)."""
        t = self.target
        dtype, device = w.dtype, w.device
        beta = t.beta.to(device, dtype)
        a = beta.expand_as(tau).clone()
        b = t.alpha.to(device, dtype).expand_as(tau).clone()
        d = torch.zeros_like(tau)
        a[:, : t.n_groups] += 0.5 * t.group_sums(w * w)
        d[:, : t.n_groups] = 0.5 * t.group_sums(pw * pw)
        if t.noise:
            a[:, -1] += -ll  # SSE / 2
            b[:, -1] += 0.5 * t.n_obs

        def dH_dtau(x, p):
            return a - b / x - d / x**2 + p * p * x / c

        half = 0.5 * eps
        tol = max(float(self.tol), 4 * torch.finfo(dtype).eps)  # resolvable in this dtype
        ok = torch.ones(tau.shape[0], dtype=torch.bool, device=device)
        p_half = pt
        for _ in range(self.max_iter):
            new = pt - half * dH_dtau(tau, p_half)
            change = ((new - p_half).abs() / (1.0 + new.abs())).amax(-1)
            p_half = new
            if bool((change < tol).all()):
                break
        ok &= change < tol
        v0 = p_half * tau**2 / c
        x = tau
        for _ in range(self.max_iter):
            new = tau + half * (v0 + p_half * x**2 / c)
            change = ((new - x).abs() / (1.0 + new.abs())).amax(-1)
            x = torch.where(torch.isfinite(new), new, tau)
            if bool((change < tol).all()):
                break
        ok &= (change < tol) & (x > 0).all(-1)
        x = torch.where(x > 0, x, tau)  # keep tau positive; the chain is rejected anyway
        p_new = p_half - half * dH_dtau(x, p_half)
        return x, p_new, ok

    def step(self, state: State, generator: torch.Generator, step_size=None, inv_mass=None):
        """One S3HMC transition per chain (ALBA; Cobb et al. 2019, Alg. 1); ``inv_mass`` ignored."""
        t = self.target
        theta = state.position
        C = theta.shape[0]
        dtype, device = theta.dtype, theta.device
        eps = chain_step_size(step_size, self.step_size, theta)
        e = eps[:, None]
        c = t.metric_constants(dtype, device)
        w0, eta0 = t.split(theta)
        tau0 = torch.exp(eta0)
        z = torch.randn(theta.shape, generator=generator, dtype=dtype, device=device)
        pw = z[:, : t.n_weights] * t._per_weight(tau0[:, : t.n_groups]).sqrt()
        pt = z[:, t.n_weights :] * c.sqrt() / tau0
        ll, ll_grad = t.log_likelihood(w0)
        h0 = self._energy(w0, tau0, pw, pt, ll, ll_grad, c)
        w, tau = w0, tau0
        ok = torch.ones(C, dtype=torch.bool, device=device)
        n_grad = 0
        with torch.no_grad():
            for _ in range(self.n_steps):
                # half a leapfrog step (eps/2) in (w, p_w) given tau: kick eps/4, drift, kick
                for _half in range(2):
                    if _half == 1:
                        tau, pt, ok_t = self._tau_step(w, pw, tau, pt, ll, e, c)
                        ok &= ok_t
                    inv_m = 1.0 / t._per_weight(tau[:, : t.n_groups])
                    _, g = t.potential_terms(w, tau, ll, ll_grad)
                    pw = pw - 0.25 * e * g
                    w = w + 0.5 * e * inv_m * pw
                    ll, ll_grad = t.log_likelihood(w)
                    n_grad += 1
                    _, g = t.potential_terms(w, tau, ll, ll_grad)
                    pw = pw - 0.25 * e * g
        h1 = self._energy(w, tau, pw, pt, ll, ll_grad, c)
        h1 = torch.where(ok, h1, torch.full_like(h1, math.inf))
        energy_error = h1 - h0
        finite = torch.isfinite(energy_error) & torch.isfinite(w).all(-1)
        energy_error = torch.where(finite, energy_error, torch.full_like(h1, math.inf))
        divergent = energy_error > self.divergence_threshold
        accept_prob = torch.exp(torch.clamp(-energy_error, max=0.0))
        u = torch.rand(C, generator=generator, dtype=dtype, device=device)
        accepted = (u < accept_prob) & ~divergent
        new_theta = torch.where(accepted[:, None], torch.cat([w, torch.log(tau)], 1), theta)
        if accepted.any():
            lp, grad = t.value_and_grad(new_theta)
            lp = torch.where(accepted, lp, state.log_prob)
            grad = torch.where(accepted[:, None], grad, state.grad)
        else:
            lp, grad = state.log_prob, state.grad
        extra = {"not_converged": ~ok}
        return State(new_theta, lp, grad), Info(
            accept_prob, accepted, energy_error, divergent, eps, float(n_grad), extra
        )
