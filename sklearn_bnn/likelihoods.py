"""Likelihoods: log p(y | f(x; w)) summed over data points.

Each likelihood maps the network output ``f`` (n, n_out) and the targets to the summed
log-probability (a scalar), and turns outputs into predictive quantities. Sums, never means:
the likelihood of N points is N times heavier than that of one (seeds/000 eq. 2).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["Categorical", "Bernoulli", "Gaussian"]


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
    """Regression likelihood N(y | f(x), 1/tau) with a fixed noise precision tau per output.

    Parameters
    ----------
    precision : float or tensor of shape (n_out,)
        The noise precision tau (``noise_precision`` on the estimators).
    """

    name = "gaussian"

    def __init__(self, precision):
        self.precision = precision

    def log_prob(self, output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n, n_out = output.shape[-2], output.shape[-1]
        tau = self.precision
        if isinstance(tau, torch.Tensor) and tau.ndim > 0:
            tau = tau.to(output)
            sq = ((output - y) ** 2 * tau).sum()
            log_tau = torch.log(tau).sum().item()
        else:
            tau = float(tau)
            sq = ((output - y) ** 2).sum() * tau
            log_tau = n_out * math.log(tau)
        return 0.5 * n * (log_tau - n_out * math.log(2 * math.pi)) - 0.5 * sq

    def predictive(self, output: torch.Tensor) -> torch.Tensor:
        """The predictive mean of one draw is the network output itself."""
        return output
