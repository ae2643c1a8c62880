"""Gibbs blocks of the network targets: exact conditional draws of precisions.

A block is what :class:`~sklearn_bnn.samplers.gibbs.GibbsKernel` alternates with the kernel that
moves the weights (see there for the protocol). Its values live in each chain's state; the
target is never changed: the conditional density given them is a light copy of the target
(:meth:`~sklearn_bnn.targets.Target.with_noise_precision`,
:meth:`~sklearn_bnn.targets.Target.with_prior_precision`).

Two blocks: the noise precision of a Gaussian likelihood (:class:`NoisePrecisionGibbs`) and the
per-tensor precisions of a hierarchical Gaussian prior (:class:`PriorPrecisionGibbs`,
``HierarchicalPrior(scheme="gibbs")``); :func:`hierarchical_blocks` gives a target's.
"""

from __future__ import annotations

import torch

from ..likelihoods import Gaussian, sample_gamma
from ..priors import HierarchicalPrior

__all__ = [
    "NoisePrecisionGibbs",
    "PriorPrecisionGibbs",
    "hierarchical_blocks",
    "hierarchical_noise",
]


class NoisePrecisionGibbs:
    """The Gaussian noise precision tau of a regression, one per chain and output.

    Given the weights, with a Gamma(a, b) prior and n residuals of sum of squares S per output,
    tau is Gamma(a + n/2, b + S/2) (tempered: Gamma((a - 1 + n/2)/T + 1, (b + S/2)/T)); the
    draw is exact, so the step leaves the joint posterior of weights and precision invariant
    (Neal 1996, §3.2). The residuals are summed however the target holds its data (whole, by
    subsets or by batches), and the state's log density is re-evaluated under the new tau.
    """

    def update(self, target, state, generator: torch.Generator):
        """Draw tau | residuals at ``state.position`` (C, n_out) from ``generator``, and the
        state's log density and gradient under it."""
        sum_sq = target._residual_sum_of_squares(state.position)
        tau = target.likelihood.sample_precision(
            sum_sq, target.n_data, generator, target.temperature
        )
        state = self.condition(target, tau)._state_under_new_noise(state, sum_sq, tau)
        return tau, state

    def condition(self, target, tau: torch.Tensor):
        """The target with every chain's noise precision set to its row of ``tau``."""
        return target.with_noise_precision(tau)

    def stats(self, tau: torch.Tensor) -> dict:
        """``{"noise_precision": (C,) or (C, n_out)}`` per chain."""
        return {"noise_precision": tau[:, 0] if tau.shape[1] == 1 else tau}


class PriorPrecisionGibbs:
    """The precision tau_l of each group of weights (one per trainable tensor), per chain.

    With w_i | tau ~ N(0, 1/tau_l) for the n_l weights of group l and tau_l ~ Gamma(alpha, beta),
    the conditional given the weights is conjugate (Neal 1996, §3.2; seeds/002 eq. 1-2):

        tau_l | w ~ Gamma(alpha + n_l / 2, beta + |w_l|^2 / 2),

    and tempered, [p(w | tau) p(tau)]^(1/T), Gamma((alpha - 1 + n_l/2)/T + 1, (beta +
    |w_l|^2/2)/T), as for the noise. The draw is exact, so alternating it with any kernel that
    leaves p(w | tau, D) invariant samples the joint posterior of weights and precisions.

    Parameters
    ----------
    names : list of str
        The groups' names (the network's trainable tensors), for the statistics
        ``precision[<name>]`` (the names S3HMC reports).
    sizes : list of int
        Number of weights n_l in each group, in the order of the flat parameter vector.
    alpha, beta : float
        Gamma shape and rate of every group's precision.

    Examples
    --------
    >>> block = PriorPrecisionGibbs(["w", "b"], [3, 1], alpha=2.0, beta=1.0)
    >>> shape, rate = block.conditional(torch.ones(1, 4))
    >>> shape.tolist(), rate.tolist()
    ([[3.5, 2.5]], [[2.5, 1.5]])
    """

    def __init__(self, names, sizes, alpha: float, beta: float):
        self.names, self.sizes = list(names), [int(n) for n in sizes]
        self.alpha, self.beta = float(alpha), float(beta)
        self.groups = torch.repeat_interleave(
            torch.arange(len(self.sizes)), torch.tensor(self.sizes)
        )

    def conditional(self, theta: torch.Tensor, temperature: float = 1.0):
        """Shape and rate (C, K), float64, of every group's Gamma conditional at ``theta``."""
        theta = theta.detach().double()
        sum_sq = torch.stack([w.square().sum(-1) for w in theta.split(self.sizes, -1)], -1)
        n = torch.tensor(self.sizes, dtype=torch.float64, device=theta.device)
        shape = ((self.alpha - 1.0 + 0.5 * n) / temperature + 1.0).expand_as(sum_sq)
        return shape, (self.beta + 0.5 * sum_sq) / temperature

    def draw(self, target, state, generator: torch.Generator) -> torch.Tensor:
        """tau | w at ``state.position`` (C, K), from ``generator`` only."""
        shape, rate = self.conditional(state.position, getattr(target, "temperature", 1.0))
        return (sample_gamma(shape.contiguous(), generator) / rate).to(state.position.dtype)

    def update(self, target, state, generator: torch.Generator):
        """Draw tau | w, and the state's log density and gradient under it (one gradient)."""
        tau = self.draw(target, state, generator)
        log_prob, grad = self.condition(target, tau).value_and_grad(state.position)
        return tau, type(state)(state.position, log_prob, grad)

    def condition(self, target, tau: torch.Tensor):
        """The target with every chain's prior precisions set to its row of ``tau`` (C, K)."""
        return target.with_prior_precision(tau[:, self.groups.to(tau.device)])

    @property
    def stat_names(self) -> list:
        """The names of :meth:`stats`, one per group: ``precision[<name>]``."""
        return [f"precision[{n}]" for n in self.names]

    def stats(self, tau: torch.Tensor) -> dict:
        """``{"precision[<name>]": (C,)}`` per group."""
        return {n: tau[:, k] for k, n in enumerate(self.stat_names)}


def hierarchical_blocks(prior, network) -> list:
    """The Gibbs block of ``prior`` over ``network``'s tensors: a
    :class:`PriorPrecisionGibbs` for ``HierarchicalPrior(scheme="gibbs")``, else none."""
    if not isinstance(prior, HierarchicalPrior):
        return []
    prior.check()
    if prior.scheme != "gibbs":
        raise ValueError(
            "HierarchicalPrior(scheme='joint') samples the weights and precisions together, "
            "with sampler='s3hmc' on HMCClassifier / HMCRegressor; use scheme='gibbs' to draw "
            "the precisions by Gibbs steps with this estimator or sampler."
        )
    return [PriorPrecisionGibbs(network.names, network.sizes, prior.alpha, prior.beta)]


def hierarchical_noise(prior, likelihood):
    """The likelihood under ``prior``: a Gaussian's noise precision learned with the
    Gamma(noise_alpha, noise_beta) of a ``HierarchicalPrior(learn_noise=True)`` (started at the
    likelihood's own precision); any other likelihood or prior leaves it as it is."""
    learn = isinstance(prior, HierarchicalPrior) and prior.learn_noise
    if not (learn and isinstance(likelihood, Gaussian)):
        return likelihood
    return Gaussian(likelihood.precision, prior=(float(prior.noise_alpha), float(prior.noise_beta)))
