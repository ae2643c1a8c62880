"""The joint density of a network's weights and their per-group precisions (S3HMC's target).

The positions are theta = [w (D_w), log tau (K)]: the weights, then one log-precision per group
of weights (per trainable tensor: each layer's weights and biases separately, Cobb et al. 2019, §2)
and, for regression, the log output noise precision last, each with a Gamma hyperprior
(Cobb et al. 2019, eq. 1-2; Cobb 2019, ch. 6). :class:`HierarchicalTarget` holds the density and the
pieces of it the S3HMC kernel integrates; :func:`hierarchical_target` builds one from a network
:class:`~sklearn_bnn.targets.Target` and a :class:`~sklearn_bnn.priors.HierarchicalPrior`.
"""

from __future__ import annotations

import math

import torch

from ..likelihoods import Gaussian
from ..priors import GaussianPrior
from ._network import Target

__all__ = ["HierarchicalTarget", "hierarchical_target", "network_hierarchical_target"]


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
                "precision), so that G_tau is positive definite (Cobb et al. 2019, eq. 6 and "
                f"footnote 1); got alpha={self.alpha.tolist()}, beta={self.beta.tolist()}."
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
        """c_l of G_tau = diag(c_l / tau_l^2) (Cobb et al. 2019, eq. 6/7); the noise: alpha - 1."""
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

    # -- the draws of the caller's target --------------------------------------------------------
    def split_draws(self, run):
        """``run`` with the weights as its draws and the precisions exp(log tau) as per-draw
        statistics named by ``hyper_names`` (listed in ``run.hyperparameters``); the final
        state keeps every coordinate, to continue from. A target not built from a network
        (``base`` None) leaves the run as it is."""
        k = self.n_hyper
        if self.base is None or k == 0:
            return run
        for name, column in zip(self.hyper_names, run.draws[..., -k:].unbind(-1), strict=True):
            run.draw_stats[name] = torch.exp(column)
        run.draws = run.draws[..., :-k]
        run.hyperparameters = list(self.hyper_names)
        return run


def hierarchical_target(target, prior) -> HierarchicalTarget:
    """The :class:`HierarchicalTarget` of a network ``target`` under a hierarchical ``prior``
    (:class:`~sklearn_bnn.priors.HierarchicalPrior`): the same network, data and likelihood,
    one Gamma-distributed precision per trainable tensor, and for a Gaussian likelihood with
    ``prior.learn_noise`` the noise precision too, started at the likelihood's own precision."""
    prior.check()
    likelihood = target.likelihood
    regression = getattr(likelihood, "name", None) == "gaussian"
    if getattr(likelihood, "learns_precision", False) and not prior.learn_noise:
        raise ValueError(
            "noise_precision=None learns the noise precision by Gibbs steps, which S3HMC "
            "does not take: give noise_precision a value, or use "
            "HierarchicalPrior(learn_noise=True) to sample it with the weights."
        )
    noise_init = float(torch.as_tensor(likelihood.precision).reshape(-1)[0]) if regression else 1.0
    hier = network_hierarchical_target(
        target.network,
        target.X,
        target.y,
        likelihood,
        prior,
        regression=regression,
        noise_init=noise_init,
    )
    hier.temperature = getattr(target, "temperature", 1.0)
    return hier


def network_hierarchical_target(
    network, X, targets, likelihood, prior, *, regression: bool, noise_init=1.0
):
    """A :class:`HierarchicalTarget` over a network's weights and per-tensor log-precisions.

    One precision per trainable tensor (each layer's weights and biases separately, Cobb et al. 2019
    §2) with Gamma(prior.alpha, prior.beta); for regression with ``prior.learn_noise`` also the
    output noise precision, Gamma(prior.noise_alpha, prior.noise_beta), started at
    ``noise_init``.
    """
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
