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

import math

import torch

from ..likelihoods import Gaussian, RowWeighted, sample_gamma
from ..priors import HierarchicalPrior

__all__ = [
    "InterweavedPrecisionGibbs",
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
    the conditional given the weights is conjugate (Neal 1996, §3.2; Cobb et al. 2019, eq. 1-2):

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
        n = self._on_device("_sizes", theta.device)
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
        return target.with_prior_precision(tau[:, self._on_device("groups", tau.device)])

    def _on_device(self, name: str, device) -> torch.Tensor:
        """``groups`` or the sizes (float64) on ``device``, copied there once: a copy from
        the host at every transition would wait for the device."""
        cache = self.__dict__.setdefault("_device_copies", {})
        key = (name, str(device))
        if key not in cache:
            if name == "groups":
                cache[key] = self.groups.to(device)
            else:
                cache[key] = torch.tensor(self.sizes, dtype=torch.float64, device=device)
        return cache[key]

    @property
    def stat_names(self) -> list:
        """The names of :meth:`stats`, one per group: ``precision[<name>]``."""
        return [f"precision[{n}]" for n in self.names]

    def stats(self, tau: torch.Tensor) -> dict:
        """``{"precision[<name>]": (C,)}`` per group."""
        return {n: tau[:, k] for k, n in enumerate(self.stat_names)}


def hierarchical_blocks(prior, network) -> list:
    """The Gibbs block of ``prior`` over ``network``'s tensors: a
    :class:`PriorPrecisionGibbs` for ``HierarchicalPrior(scheme="gibbs")`` (an
    :class:`InterweavedPrecisionGibbs` with its ``interweave`` rounds), else none."""
    if not isinstance(prior, HierarchicalPrior):
        return []
    prior.check()
    if prior.scheme != "gibbs":
        raise ValueError(
            "HierarchicalPrior(scheme='joint') samples the weights and precisions together, "
            "with sampler='s3hmc' on HMCClassifier / HMCRegressor; use scheme='gibbs' to draw "
            "the precisions by Gibbs steps with this estimator or sampler."
        )
    args = (network.names, network.sizes, prior.alpha, prior.beta)
    if prior.interweave:
        return [InterweavedPrecisionGibbs(*args, rounds=prior.interweave)]
    return [PriorPrecisionGibbs(*args)]


def hierarchical_noise(prior, likelihood):
    """The likelihood under ``prior``: a Gaussian's noise precision learned with the
    Gamma(noise_alpha, noise_beta) of a ``HierarchicalPrior(learn_noise=True)`` (started at the
    likelihood's own precision); any other likelihood or prior leaves it as it is. Row weights
    (:class:`~sklearn_bnn.likelihoods.RowWeighted`) stay on the learned likelihood."""
    learn = isinstance(prior, HierarchicalPrior) and prior.learn_noise
    weighted = isinstance(likelihood, RowWeighted)
    base = likelihood.base if weighted else likelihood
    if not (learn and isinstance(base, Gaussian)):
        return likelihood
    learned = Gaussian(base.precision, prior=(float(prior.noise_alpha), float(prior.noise_beta)))
    return RowWeighted(learned, likelihood.total_weight) if weighted else learned


class InterweavedPrecisionGibbs(PriorPrecisionGibbs):
    """The precisions' Gibbs draw, then a non-centred Metropolis move of each tensor's scale.

    The centred draw tau_l | w (:class:`PriorPrecisionGibbs`) and HMC's moves of w given tau
    random-walk along the directions where w_l and tau_l change together (the funnel of a
    hierarchical prior, Papaspiliopoulos, Roberts & Sköld 2007, *Statist. Sci.* 22:59). After
    the draw, this block holds the non-centred weights z_l = w_l sqrt(tau_l) fixed and moves
    log tau_l by a Metropolis step (the ancillarity-sufficiency interweaving of Yu & Meng 2011,
    "To center or not to center", *JCGS* 20:531, with a Metropolis update of the non-centred
    conditional): delta ~ N(0, s_l^2), log tau_l' = log tau_l + delta, w_l' = w_l exp(-delta/2).

    The acceptance, for the tempered joint [L(w) N(w | 0, 1/tau) Gamma(tau | alpha, beta)]^(1/T)
    that the sampler targets (density in (w, tau); the move is a map of (w, log tau) with
    Jacobian exp(-n_l delta / 2) for w and 1 for log tau, and d tau = tau d log tau): with
    tau' |w'|^2 = tau |w|^2 the Gaussian's exponent cancels, and

        log r = (l(w') - l(w)) / T + ((alpha - 1) / T + 1) delta - beta (tau' - tau) / T
                + (n_l / 2) delta (1 / T - 1),

    the last term the Gaussian's normaliser tau^(n_l / 2T) against the Jacobian (zero at T = 1,
    where the ratio is the likelihood's times the Gamma prior's in log tau). One proposal per
    tensor and round costs one forward pass of the likelihood for all chains
    (``target.log_likelihood``), no gradient.

    s_l is per chain and tensor, adapted during warmup only (the block's first ``n_warmup + 1``
    updates: the chain's first draw and its warmup transitions) by a Robbins-Monro step on
    log s_l towards an acceptance of 0.4 (Andrieu & Thoms 2008, *Stat. Comput.* 18:343), then
    fixed: the sampling phase is a Markov chain with a fixed kernel. The scales, the update
    count and the last acceptance travel beside the precisions in the chain's values
    (C, 2K + 2); :meth:`condition` and :meth:`stats` read the precisions.

    Parameters
    ----------
    names, sizes, alpha, beta
        As :class:`PriorPrecisionGibbs`.
    rounds : int, default=1
        Proposals per tensor in one update (each round visits every tensor in turn).
    initial_scale : float, default=0.5
        s_l before adaptation.
    """

    #: The block moves the position; a :class:`~sklearn_bnn.samplers.gibbs.BlockSequence`
    #: passes it on, and a kernel confined to a box takes :meth:`without_move` instead.
    moves_position = True
    #: The block reads its own previous values (the adapted scales).
    takes_previous = True
    target_accept = 0.4

    def __init__(self, names, sizes, alpha, beta, rounds: int = 1, initial_scale: float = 0.5):
        super().__init__(names, sizes, alpha, beta)
        self.rounds, self.initial_scale = int(rounds), float(initial_scale)
        self.n_warmup = 0

    def prepare(self, n_warmup: int) -> None:
        """The number of warmup transitions, during which the scales adapt."""
        self.n_warmup = int(n_warmup)

    def without_move(self) -> PriorPrecisionGibbs:
        """The plain conjugate draw (for kernels confined to a box)."""
        return PriorPrecisionGibbs(self.names, self.sizes, self.alpha, self.beta)

    def move(self, target, state, generator: torch.Generator, previous=None):
        """tau | w, then the interweaving moves: the values (C, 2K + 2) and the moved position
        (the state's cached density is not re-evaluated)."""
        tau = self.draw(target, state, generator)
        C, K = tau.shape
        if previous is None or previous.shape[1] != 2 * K + 2:
            log_s = torch.full((C, K), math.log(self.initial_scale), dtype=torch.float64)
            count = torch.zeros(C, dtype=torch.float64)
        else:
            log_s, count = previous[:, K : 2 * K].double(), previous[:, 2 * K].double()
        log_s, count = log_s.to(tau.device), count.to(tau.device)
        position, tau, accept = self.interweave(target, state.position, tau, log_s, generator)
        adapting = (count <= self.n_warmup)[:, None]
        rate = (count + 1.0)[:, None] ** -0.6
        log_s = torch.where(adapting, log_s + rate * (accept - self.target_accept), log_s)
        log_s = log_s.clamp(-10.0, 3.0)
        extra = torch.cat([log_s, (count + 1)[:, None], accept.mean(-1, keepdim=True)], 1)
        return torch.cat([tau, extra.to(tau.dtype)], 1), position

    def interweave(self, target, theta, tau, log_s, generator: torch.Generator):
        """The Metropolis moves of (w_l, tau_l) at fixed z_l, ``rounds`` per tensor.

        Returns the position (C, D), the precisions (C, K) and each tensor's mean acceptance
        probability (C, K), float64.
        """
        T = float(getattr(target, "temperature", 1.0))
        x = theta.detach().clone()
        log_tau = tau.double().log()
        log_lik = target.log_likelihood(x).double()
        accept = torch.zeros_like(log_tau)
        starts = [0]
        for n in self.sizes[:-1]:
            starts.append(starts[-1] + n)
        opts = dict(generator=generator, dtype=torch.float64, device=log_tau.device)
        for _ in range(self.rounds):
            for k, (start, n) in enumerate(zip(starts, self.sizes, strict=True)):
                delta = torch.randn(x.shape[0], **opts) * log_s[:, k].exp()
                proposal = x.clone()
                proposal[:, start : start + n] *= torch.exp(-0.5 * delta).to(x.dtype)[:, None]
                new_lik = target.log_likelihood(proposal).double()
                log_r = self.log_ratio(new_lik - log_lik, log_tau[:, k], delta, n, T)
                u = torch.rand(x.shape[0], **opts)
                take = torch.log(u) < log_r  # False where log_r is NaN
                x = torch.where(take[:, None], proposal, x)
                log_tau[:, k] = torch.where(take, log_tau[:, k] + delta, log_tau[:, k])
                log_lik = torch.where(take, new_lik, log_lik)
                prob = torch.exp(torch.clamp(torch.nan_to_num(log_r, nan=-math.inf), max=0.0))
                accept[:, k] += prob / self.rounds
        return x, log_tau.exp().to(tau.dtype), accept

    def log_ratio(self, d_log_lik, log_tau, delta, n: int, temperature: float = 1.0):
        """log r of the move log tau -> log tau + delta, w -> w exp(-delta / 2) (class
        docstring), given the log-likelihood's change ``d_log_lik``."""
        T, a, b = temperature, self.alpha, self.beta
        d_tau = torch.exp(log_tau) * torch.expm1(delta)
        return (
            d_log_lik / T
            + ((a - 1.0) / T + 1.0) * delta
            - b * d_tau / T
            + 0.5 * n * delta * (1.0 / T - 1.0)
        )

    def update(self, target, state, generator: torch.Generator, previous=None):
        """The draw and the moves, and the state re-evaluated under them (one gradient)."""
        values, position = self.move(target, state, generator, previous)
        log_prob, grad = self.condition(target, values).value_and_grad(position)
        return values, type(state)(position, log_prob, grad)

    def condition(self, target, values: torch.Tensor):
        """The target with every chain's prior precisions set to its precisions (C, K)."""
        return super().condition(target, values[:, : len(self.sizes)])

    def stats(self, values: torch.Tensor) -> dict:
        """The precisions, and ``interweave_accept`` (C,): the last update's mean acceptance
        probability over tensors and rounds."""
        K = len(self.sizes)
        return {**super().stats(values[:, :K]), "interweave_accept": values[:, 2 * K + 1]}
