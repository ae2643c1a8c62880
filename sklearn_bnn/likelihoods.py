"""Likelihoods: log p(y | f(x; w)) summed over data points.

Each likelihood maps the network output ``f`` (n, n_out) and the targets to the summed
log-probability (a scalar), and turns outputs into predictive quantities. Sums, never means:
the likelihood of N points is N times heavier than that of one (Cobb & Jalaian 2021, eq. 2).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

__all__ = ["Categorical", "Bernoulli", "Gaussian", "RowWeighted", "weighted_targets"]


class Categorical:
    """Multi-class likelihood on logits; ``y`` holds integer class indices."""

    name = "categorical"

    def log_prob(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return -F.cross_entropy(output, y, reduction="sum")

    def predictive(self, output: torch.Tensor) -> torch.Tensor:
        """Class probabilities."""
        return torch.softmax(output, dim=-1)


class Bernoulli:
    """Binary likelihood on one logit; ``y`` holds 0/1 as floats of shape (n, 1)."""

    name = "bernoulli"

    def log_prob(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return -F.binary_cross_entropy_with_logits(output, y, reduction="sum")

    def predictive(self, output: torch.Tensor) -> torch.Tensor:
        """Probabilities of both classes, shape (..., 2)."""
        p1 = torch.sigmoid(output)
        return torch.cat([1 - p1, p1], dim=-1)


class Gaussian:
    """Regression likelihood N(y | f(x), 1/tau) with a noise precision tau per output.

    Parameters
    ----------
    precision : float or tensor of shape (n_out,)
        The noise precision tau (``noise_precision`` on the estimators); with ``prior`` given,
        the starting value of a learned precision.
    prior : (shape, rate) or None
        A Gamma(shape, rate) prior on tau (rate a float or a tensor (n_out,)); the precision
        is then learned by a Gibbs step from its conjugate conditional
        (:meth:`sample_precision`) between HMC transitions, per chain.

    Attributes
    ----------
    chain_precision : tensor of shape (C, n_out) or None
        The precision of every chain, on the copies :meth:`with_chain_precision` makes for a
        Gibbs step's conditional density (None here).
    """

    name = "gaussian"

    def __init__(self, precision, prior=None):
        self.precision = precision
        self.prior = prior
        self.chain_precision = None

    @property
    def learns_precision(self) -> bool:
        return self.prior is not None

    def log_prob(self, output: torch.Tensor, y: torch.Tensor, precision=None) -> torch.Tensor:
        """Summed log-likelihood; ``precision`` (n_out,) overrides the stored one (the
        per-chain value inside a vmap over chains)."""
        n, n_out = output.shape[-2], output.shape[-1]
        if precision is None and self.chain_precision is not None:
            precision = self.chain_precision.reshape(-1, n_out)[0]  # one chain evaluated alone
        if precision is not None:
            tau = precision.to(output).reshape(-1)
            sq = ((output - y) ** 2 * tau).sum()
            log_tau = torch.log(tau).sum()
            return 0.5 * n * (log_tau - n_out * math.log(2 * math.pi)) - 0.5 * sq
        tau = self.precision
        if isinstance(tau, torch.Tensor) and tau.ndim > 0:
            tau = self._like(tau, output)
            sq = ((output - y) ** 2 * tau).sum()
            # the constant in float64 as a Python number would be, without a host read
            log_tau = torch.log(tau).sum().double()
            constant = 0.5 * n * (log_tau - n_out * math.log(2 * math.pi))
            return constant.to(output.dtype) - 0.5 * sq
        else:
            tau = float(tau)
            sq = ((output - y) ** 2).sum() * tau
            log_tau = n_out * math.log(tau)
        return 0.5 * n * (log_tau - n_out * math.log(2 * math.pi)) - 0.5 * sq

    def sample_precision(self, sum_sq, n, generator, temperature=1.0):
        """Draw tau per chain and output from its conditional given the residuals.

        With a Gamma(a, b) prior and n residuals of sum of squares S, the tempered conditional
        [p(y | f, tau) p(tau)]^(1/T) is Gamma((a - 1 + n / 2) / T + 1, (b + S / 2) / T)
        (T = 1: the conjugate Gamma(a + n / 2, b + S / 2)).

        Parameters
        ----------
        sum_sq : tensor (C, n_out)
        n : int
            Number of residuals per output.
        generator : torch.Generator

        Returns
        -------
        tensor (C, n_out)
        """
        a, b = self.prior
        if isinstance(b, torch.Tensor):  # one rate per output
            b = self._like(b, sum_sq.double())
        shape = torch.full_like(
            sum_sq, (a - 1.0 + 0.5 * n) / temperature + 1.0, dtype=torch.float64
        )
        rate = (b + 0.5 * sum_sq.double()) / temperature
        tau = sample_gamma(shape, generator) / rate
        return tau.to(sum_sq.dtype)

    def _like(self, tensor: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """``tensor`` (a stored precision or rate) on ``like``'s device and dtype, converted
        once and kept: a copy from the host at every gradient would wait for the device."""
        cache = self.__dict__.setdefault("_converted", {})
        key = (id(tensor), like.device, like.dtype)
        if key not in cache:
            cache[key] = (tensor, tensor.to(like))  # holding tensor keeps its id unique
        return cache[key][1]

    def with_chain_precision(self, tau: torch.Tensor) -> Gaussian:
        """A copy of this likelihood whose chains have the precisions ``tau`` (C, n_out)."""
        other = copy.copy(self)
        other.chain_precision = tau
        return other

    def predictive(self, output: torch.Tensor) -> torch.Tensor:
        """The predictive mean of one draw is the network output itself."""
        return output


#: Candidates per element drawn at once by :func:`sample_gamma`: with an acceptance above
#: 0.95 each, all of them are rejected with probability below 0.05^24 < 1e-31.
GAMMA_CANDIDATES = 24


def sample_gamma(shape: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Gamma(shape, 1) draws from ``generator`` alone (Marsaglia & Tsang 2000).

    For shape < 1, G(a) = G(a + 1) U^(1/a). Rejection, vectorised over the rounds too:
    :data:`GAMMA_CANDIDATES` proposals per element are drawn at once and the first accepted
    one is kept, which is the draw the round-by-round loop would return (acceptance above 95 %
    per round for shape >= 1), without a host read to decide when to stop. An element with no
    accepted proposal (probability below 1e-31) takes d = a - 1/3, the mode of the proposal.
    """
    shape = torch.as_tensor(shape, dtype=torch.float64)
    boost = shape < 1
    a = torch.where(boost, shape + 1, shape)
    d = a - 1.0 / 3.0
    c = 1.0 / torch.sqrt(9.0 * d)
    opts = dict(generator=generator, dtype=a.dtype, device=a.device)
    rounds = (GAMMA_CANDIDATES, *a.shape)
    x = torch.randn(rounds, **opts)
    u = torch.rand(rounds, **opts)
    v = (1 + c * x) ** 3
    ok = (v > 0) & (torch.log(u) < 0.5 * x**2 + d - d * v + d * torch.log(v.clamp_min(1e-300)))
    first = ok.to(torch.uint8).argmax(0, keepdim=True)  # the first accepted round
    out = torch.where(ok.any(0), (d * v).gather(0, first).squeeze(0), d)
    u = torch.rand(a.shape, **opts)
    return torch.where(boost, out * u ** (1.0 / shape), out)


class RowWeighted:
    """A likelihood whose every row's log-probability is multiplied by a weight.

    The weights travel with the rows as the last column of the targets (see
    :func:`weighted_targets`), so subsets and minibatches of the data carry their own;
    ``log_prob`` sums ``w_i log p(y_i | f_i)``. Integer weights give exactly the likelihood of
    the data with row ``i`` repeated ``w_i`` times.

    Parameters
    ----------
    base : Categorical, Bernoulli or Gaussian
        The unweighted likelihood.
    total_weight : float
        The sum of the weights over the whole data: the number of observations a Gaussian's
        noise precision is learned from (:meth:`sample_precision`).
    """

    def __init__(self, base, total_weight: float):
        self.base = base
        self.total_weight = float(total_weight)
        self.name = base.name

    def __getattr__(self, name):
        # precision, prior, chain_precision, learns_precision, ... are the base's
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def split(self, y: torch.Tensor):
        """``(targets, weights)`` of packed targets: the base likelihood's ``y`` and (n,)."""
        w = y[..., -1]
        if self.base.name == "categorical":
            return y[..., 0].long(), w
        return y[..., :-1], w

    def log_prob(self, output: torch.Tensor, y: torch.Tensor, precision=None) -> torch.Tensor:
        """The weighted sum of the rows' log-probabilities."""
        y, w = self.split(y)
        name = self.base.name
        if name == "categorical":
            return -(F.cross_entropy(output, y, reduction="none") * w.to(output)).sum()
        if name == "bernoulli":
            per_row = F.binary_cross_entropy_with_logits(output, y, reduction="none").sum(-1)
            return -(per_row * w.to(output)).sum()
        n_out = output.shape[-1]
        base = self.base
        if precision is None and base.chain_precision is not None:
            precision = base.chain_precision.reshape(-1, n_out)[0]
        tau = base.precision if precision is None else precision
        tau = torch.as_tensor(tau).to(output).reshape(-1)
        per_row = (
            0.5 * (torch.log(tau).sum() - n_out * math.log(2 * math.pi))
            - 0.5 * ((output - y) ** 2 * tau).sum(-1)
        )
        return (per_row * w.to(output)).sum()

    def sum_of_squares(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Weighted squared residuals summed over rows: (..., n_out) from (..., n, n_out)."""
        y, w = self.split(y)
        return ((output - y) ** 2 * w.to(output)[:, None]).sum(-2)

    def sample_precision(self, sum_sq, n, generator, temperature=1.0):
        """The base's conditional draw, ``n`` the total weight (``sum_sq`` weighted)."""
        return self.base.sample_precision(sum_sq, self.total_weight, generator, temperature)

    def with_chain_precision(self, tau: torch.Tensor) -> RowWeighted:
        """This weighting of the base likelihood with the chains' precisions ``tau``."""
        return RowWeighted(self.base.with_chain_precision(tau), self.total_weight)

    def predictive(self, output: torch.Tensor) -> torch.Tensor:
        return self.base.predictive(output)


def weighted_targets(targets: torch.Tensor, weights) -> torch.Tensor:
    """Targets with the rows' weights appended as a last column, in floating point (class
    indices are exact in float32 below 2**24)."""
    weights = torch.as_tensor(weights, dtype=torch.float64)
    y = targets.double()
    y = y[:, None] if y.ndim == 1 else y
    return torch.cat([y, weights[:, None]], dim=1)
