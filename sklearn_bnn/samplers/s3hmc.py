"""Semi-separable HMC over weights and per-group precisions: S3HMC (seeds/002, seeds/003 ch. 6).

The positions are theta = [w (D_w), log tau (K)]: the weights, then one log-precision per group
of weights (per layer, weights and biases separately) and, for regression, the log output noise
precision last. The Hamiltonian (seeds/002 eq. 1-2, block metric, constants dropped) is

    H = U(w, tau) + log|G_w(tau)|/2 + p_w^T G_w(tau)^-1 p_w / 2
                  + log|G_tau(tau)|/2 + p_tau^T G_tau(tau)^-1 p_tau / 2,
    U = -log p(y | w, lambda) - log p(w | tau) - log p(tau),

with G_w(tau) = diag(tau of each weight's group) (seeds/003 eq. 6.7) and G_tau diagonal with
entries c_l / tau_l^2, c_l = Q_l/2 + alpha_l - 1 (seeds/002 eq. 6/7; c = alpha - 1 for the output
precision, footnote 1). With (tau, p_tau) fixed H is separable in (w, p_w): a leapfrog with inverse
mass 1/tau. With (w, p_w) fixed, per group,

    H_tau = a tau - b log tau + d / tau + p^2 tau^2 / (2 c),
    a = S_l/2 + beta_l, b = alpha_l (+ N_out/2 for the noise), d = P_l / 2,

with S_l the sum of the group's squared weights and P_l of its squared momenta (the weight-
momentum term of eq. 4 enters through G_w(tau)^-1): not separable, integrated by the generalized
leapfrog (fixed-point iterations). ALBA (seeds/002 App. A, Algorithm 1): half a leapfrog step in
(w, p_w), a generalized-leapfrog step in (tau, p_tau), half a step in (w, p_w); one MH test on H.

Deviations from the seeds' text, on purpose: the seeds write A(p|.) = p^T G p / 2 and test MH on
H_w + H_tau, which double counts the terms the two blocks share; we use the kinetic energy
p^T G^-1 p / 2 of their eq. 1 and the joint H of Zhang & Sutton (2014), which each block conserves.
The dynamics run in tau (positivity: a step that leaves tau > 0 is a divergence) and the chain
stores log tau; the target's density in log tau includes the Jacobian.
"""

from __future__ import annotations

import math

import torch

from .._utils import check_scalar_param
from ._base import Info, Kernel, Sampler, State
from ._registry import register_sampler

__all__ = [
    "HierarchicalTarget",
    "S3HMC",
    "S3HMCKernel",
    "hierarchical_prior_for",
    "network_hierarchical_target",
]


class HierarchicalTarget:
    """Joint log density of weights and log-precisions, theta = [w, log tau] (C, D_w + K).

    log f(w, eta) = log p(y | w, lambda) + sum_i log N(w_i | 0, 1/tau_g(i))
                    + sum_l [log Gamma(tau_l | alpha_l, beta_l) + eta_l],   tau = exp(eta)

    Parameters
    ----------
    log_likelihood : callable
        ``w (C, D_w) -> (value (C,), grad (C, D_w))``. With ``noise=True`` it must be -SSE/2,
        the Gaussian log-likelihood at unit precision without its constant, so that the
        likelihood at precision lambda is lambda * value + n_out_total/2 * log lambda.
    groups : tensor of int (D_w,)
        The precision group of each weight, 0..K_w-1.
    alpha, beta : tensor (K,)
        Gamma shape and rate per group (the noise's last when ``noise``).
    noise : bool
        Whether the last log-precision is the output noise precision.
    n_obs : int
        Number of observed values (rows times outputs) for the noise term.
    base : object, optional
        The weights-only target this was built from (network, X, y, likelihood...), kept for the
        estimators.
    """

    def __init__(self, log_likelihood, groups, alpha, beta, noise=False, n_obs=0, base=None):
        self.log_likelihood = log_likelihood
        self.groups = torch.as_tensor(groups, dtype=torch.long)
        self.n_groups = int(self.groups.max()) + 1 if self.groups.numel() else 0
        self.noise = bool(noise)
        self.n_hyper = self.n_groups + int(self.noise)
        self.alpha = torch.as_tensor(alpha, dtype=torch.float64)
        self.beta = torch.as_tensor(beta, dtype=torch.float64)
        if self.alpha.shape != (self.n_hyper,) or self.beta.shape != (self.n_hyper,):
            raise ValueError(
                f"alpha and beta need {self.n_hyper} entries (one per precision), got "
                f"{tuple(self.alpha.shape)} and {tuple(self.beta.shape)}."
            )
        self.n_obs = int(n_obs)
        self.n_weights = int(self.groups.numel())
        self.dim = self.n_weights + self.n_hyper
        self.base = base
        self.hyper_names = [f"precision[{k}]" for k in range(self.n_hyper)]
        self.initial_hyper = torch.zeros(self.n_hyper)
        self.dtype = getattr(base, "dtype", torch.float64)
        self.device = getattr(base, "device", torch.device("cpu"))
        self.group_sizes = torch.bincount(self.groups, minlength=self.n_groups).double()
        low = torch.full((self.n_hyper,), 0.5, dtype=torch.float64)
        if self.noise:
            low[-1] = 1.0
        if (self.beta <= 0).any() or (self.alpha <= low).any():
            raise ValueError(
                "the Gamma hyperpriors need beta > 0 and alpha > 1/2 (alpha > 1 for the output "
                "precision), so that G_tau is positive definite (seeds/002 eq. 6 and footnote "
                f"1); got alpha={self.alpha.tolist()}, beta={self.beta.tolist()}."
            )

    def extend_positions(self, weights):
        """Starting positions (C, D) from weights (C, D_w): the log-precisions appended."""
        hyper = self.initial_hyper.to(weights.device, weights.dtype).expand(weights.shape[0], -1)
        return torch.cat([weights, hyper], 1)

    # -- pieces shared with the kernel ----------------------------------------------------------
    def split(self, theta):
        return theta[:, : self.n_weights], theta[:, self.n_weights :]

    def _per_weight(self, tau_w):  # (C, K_w) -> (C, D_w)
        return tau_w[:, self.groups]

    def group_sums(self, x):  # (C, D_w) -> (C, K_w) sums of x over each group
        out = torch.zeros(x.shape[0], self.n_groups, dtype=x.dtype, device=x.device)
        return out.index_add_(1, self.groups.to(x.device), x)

    def metric_constants(self, dtype, device):
        """c_l with G_tau = diag(c_l / tau_l^2) (seeds/002 eq. 6/7; alpha - 1 for the noise)."""
        c = self.alpha.clone()
        c[: self.n_groups] += self.group_sizes / 2 - 1
        if self.noise:
            c[-1] -= 1
        return c.to(device, dtype)

    def potential_terms(self, w, tau, ll, ll_grad):
        """U(w, tau) (C,) and its gradient in w (C, D_w), from the raw log-likelihood pieces."""
        alpha = self.alpha.to(w.device, w.dtype)
        beta = self.beta.to(w.device, w.dtype)
        Q = self.group_sizes.to(w.device, w.dtype)
        tau_w = tau[:, : self.n_groups]
        lik, lik_grad = ll, ll_grad
        if self.noise:
            lam = tau[:, -1]
            lik = lam * ll + 0.5 * self.n_obs * torch.log(lam)
            lik_grad = lam[:, None] * ll_grad
        S = self.group_sums(w * w)
        log_prior_w = (0.5 * Q * torch.log(tau_w) - 0.5 * tau_w * S).sum(-1)
        log_hyper = ((alpha - 1) * torch.log(tau) - beta * tau).sum(-1)
        U = -(lik + log_prior_w + log_hyper)
        grad_w = -(lik_grad - self._per_weight(tau_w) * w)
        return U, grad_w

    # -- the target interface ------------------------------------------------------------------
    def value_and_grad(self, theta):
        """log f(w, log tau) with the Jacobian of tau = exp(eta), and its gradient."""
        w, eta = self.split(theta.detach())
        tau = torch.exp(eta)
        ll, ll_grad = self.log_likelihood(w)
        U, grad_w = self.potential_terms(w, tau, ll, ll_grad)
        alpha = self.alpha.to(w.device, w.dtype)
        beta = self.beta.to(w.device, w.dtype)
        S = self.group_sums(w * w)
        g_eta = alpha - beta * tau
        g_eta[:, : self.n_groups] += 0.5 * self.group_sizes.to(w.device, w.dtype) - 0.5 * (
            tau[:, : self.n_groups] * S
        )
        if self.noise:
            g_eta[:, -1] += 0.5 * self.n_obs + tau[:, -1] * ll
        return -U + eta.sum(-1), torch.cat([-grad_w, g_eta], 1)

    def log_prob(self, theta):
        if theta.ndim == 1:
            return self.value_and_grad(theta[None])[0][0]
        return self.value_and_grad(theta)[0]


@register_sampler("s3hmc")
class S3HMC(Sampler):
    """Semi-separable HMC over weights and precisions (seeds/002; seeds/003 ch. 6).

    Needs a :class:`HierarchicalTarget` (estimators build one with
    ``prior=HierarchicalPrior(...)``).

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

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import S3HMC, sample
    >>> from sklearn_bnn.samplers.s3hmc import HierarchicalTarget
    >>> t = HierarchicalTarget(lambda w: (-0.5 * (w**2).sum(-1), -w), torch.zeros(3, dtype=int),
    ...                        torch.tensor([2.0]), torch.tensor([1.0]))
    >>> res = sample(t, torch.zeros(4, dtype=torch.float64), S3HMC(n_steps=5), n_warmup=20,
    ...              n_draws=20, n_chains=2, random_state=0)
    >>> res.draws.shape
    torch.Size([2, 20, 4])
    """

    def __init__(self, n_steps=20, tol=1e-8, max_iter=50, divergence_threshold=1000.0):
        self.n_steps = n_steps
        self.tol = tol
        self.max_iter = max_iter
        self.divergence_threshold = divergence_threshold

    def check_target(self, target) -> None:
        check_scalar_param(self.n_steps, "n_steps", kind="int", low=1)
        check_scalar_param(self.tol, "tol", low=0, low_inclusive=False)
        check_scalar_param(self.max_iter, "max_iter", kind="int", low=1)
        check_scalar_param(self.divergence_threshold, "divergence_threshold", low=0)
        if not isinstance(target, HierarchicalTarget):
            raise ValueError(
                "S3HMC samples weights jointly with their precisions: it needs a hierarchical "
                f"target (prior=HierarchicalPrior(...) on the estimators), got "
                f"{type(target).__name__}."
            )

    def build(self, target) -> S3HMCKernel:
        self.check_target(target)
        return S3HMCKernel(
            target,
            n_steps=self.n_steps,
            tol=self.tol,
            max_iter=self.max_iter,
            divergence_threshold=self.divergence_threshold,
        )


class S3HMCKernel(Kernel):
    """The S3HMC transition kernel (ALBA integrator, one MH test on the joint H)."""

    def __init__(
        self,
        target,
        step_size=0.01,
        n_steps=20,
        tol=1e-8,
        max_iter=50,
        divergence_threshold=1000.0,
    ):
        self.target = target
        self.step_size = step_size
        self.n_steps = n_steps
        self.tol = tol
        self.max_iter = max_iter
        self.divergence_threshold = divergence_threshold

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
        """Generalized leapfrog in (tau, p_tau) at fixed (w, p_w), per group (seeds/003 Alg. 2).

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
        """One S3HMC transition per chain (ALBA, seeds/002 Algorithm 1); ``inv_mass`` ignored."""
        t = self.target
        theta = state.position
        C = theta.shape[0]
        dtype, device = theta.dtype, theta.device
        eps_in = self.step_size if step_size is None else step_size
        eps = torch.as_tensor(eps_in, dtype=dtype, device=device).expand(C)
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


def hierarchical_prior_for(prior, sampler):
    """The hierarchical prior an estimator should use, or None for a plain Gaussian one.

    ``prior`` is the estimator's ``prior_precision``; a :class:`S3HMC` sampler with a plain
    precision gets the default :class:`~sklearn_bnn.priors.HierarchicalPrior`.
    """
    from ..priors import HierarchicalPrior

    if isinstance(prior, HierarchicalPrior):
        prior.check()
        return prior
    if isinstance(sampler, S3HMC):
        return HierarchicalPrior()
    return None


def network_hierarchical_target(
    network, X, targets, likelihood, prior, *, regression: bool, noise_init=1.0
):
    """A :class:`HierarchicalTarget` over a network's weights and per-tensor log-precisions.

    One precision per trainable tensor (each layer's weights and biases separately, seeds/002
    §2) with Gamma(prior.alpha, prior.beta); for regression with ``prior.learn_noise`` also the
    output noise precision, Gamma(prior.noise_alpha, prior.noise_beta), started at
    ``noise_init``.
    """
    from ..likelihoods import Gaussian
    from ..priors import GaussianPrior
    from ..targets import Target

    noise = bool(regression and prior.learn_noise)
    base = Target(network, X, targets, Gaussian(1.0) if noise else likelihood, GaussianPrior(1.0))
    n_tensors = len(network.sizes)
    groups = torch.cat([torch.full((n,), k, dtype=torch.long) for k, n in enumerate(network.sizes)])
    alpha = [float(prior.alpha)] * n_tensors + ([float(prior.noise_alpha)] if noise else [])
    beta = [float(prior.beta)] * n_tensors + ([float(prior.noise_beta)] if noise else [])
    n_obs = int(base.y.numel()) if noise else 0
    const = 0.5 * n_obs * math.log(2 * math.pi)

    def log_likelihood(w):
        ll, grad = base.log_likelihood_and_grad(w, prior_weight=0.0)
        return (ll + const if noise else ll), grad

    target = HierarchicalTarget(
        log_likelihood,
        groups.to(base.device),
        torch.tensor(alpha),
        torch.tensor(beta),
        noise=noise,
        n_obs=n_obs,
        base=base,
    )
    target.hyper_names = [f"precision[{n}]" for n in network.names] + (
        ["noise_precision"] if noise else []
    )
    init = [math.log(float(prior.alpha) / float(prior.beta))] * n_tensors
    target.initial_hyper = torch.tensor(init + ([math.log(noise_init)] if noise else []))
    return target
