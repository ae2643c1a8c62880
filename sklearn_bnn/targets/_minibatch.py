"""The log posterior density estimated from minibatches, for stochastic-gradient samplers.

seeds/004 §2: with N data points and a batch B, (N/|B|) l_B(w) + log p(w) is an unbiased
estimate of the log posterior density l(w) + log p(w), and its gradient of the full gradient.
The data stay where the user keeps them (a numpy array, a memory map or a CPU tensor) and go to
the compute device one batch at a time, so device memory is bounded by a batch whatever N is.
"""

from __future__ import annotations

import numpy as np
import torch

from ._network import FunctionalNetwork, Target

__all__ = ["MinibatchTarget"]


class MinibatchTarget(Target):
    """Log posterior density of a network's parameters, estimated batch by batch.

    Parameters
    ----------
    network, likelihood, prior
        As for :class:`~sklearn_bnn.targets.Target`.
    X, y : array-like, memory map or tensor
        The data, indexed by rows one batch at a time and never copied whole to the device.
    batch_size : int
        Rows per batch |B| (also the chunk size of the full-data :meth:`value_and_grad`).

    Examples
    --------
    >>> from sklearn_bnn.likelihoods import Gaussian
    >>> from sklearn_bnn.priors import GaussianPrior
    >>> net = FunctionalNetwork(torch.nn.Linear(2, 1))
    >>> X, y = np.zeros((10, 2), np.float32), np.zeros((10, 1), np.float32)
    >>> t = MinibatchTarget(net, X, y, Gaussian(1.0), GaussianPrior(1.0), batch_size=4)
    >>> value, grad = t.batch_value_and_grad(net.initial_position()[None], np.arange(4))
    >>> grad.shape
    torch.Size([1, 3])
    """

    def __init__(self, network: FunctionalNetwork, X, y, likelihood, prior, *, batch_size: int):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        self.batch_size = int(batch_size)
        super().__init__(network, X, y, likelihood, prior)

    def _place(self, X, y, device=None):
        return X, y  # kept where they are: batches are moved in :meth:`batch`

    def batch(self, rows):
        """Inputs and targets of ``rows`` (indices or a slice) on the compute device."""
        X = self.X[rows]
        y = self.y[rows]
        X = self.network.as_tensor(np.ascontiguousarray(X) if isinstance(X, np.ndarray) else X)
        y = torch.as_tensor(np.ascontiguousarray(y) if isinstance(y, np.ndarray) else y)
        y = y.to(self.device, self.dtype if y.is_floating_point() else y.dtype)
        return X, y

    def batch_value_and_grad(self, theta: torch.Tensor, rows):
        """(N/|B|) l_B(w) + log p(w) and its gradient at ``theta`` (C, D), B = ``rows``.

        Returns
        -------
        value : tensor (C,)
        grad : tensor (C, D)
        """
        X, y = self.batch(rows)
        scale = self.n_data / X.shape[0]
        # grad[(N/B) l_B + log p] = (N/B) grad[l_B + (B/N) log p]
        log_lik, grad = self.log_likelihood_and_grad(theta, X, y, 1.0 / scale)
        return scale * log_lik + self.prior_density.log_prob(theta), grad.mul_(scale)

    def batch_log_prob(self, theta: torch.Tensor, rows):
        """(N/|B|) l_B(w) + log p(w) at ``theta`` (C, D) without a gradient: (C,)."""
        X, y = self.batch(rows)
        scale = self.n_data / X.shape[0]
        if theta.shape[0] == 1:  # one chain: a plain forward pass, no vmap
            return scale * super().log_prob(theta[0], X, y, 1.0 / scale).view(1)
        return scale * super().log_prob(theta, X, y, 1.0 / scale)

    def value_and_grad(self, theta: torch.Tensor, X=None, y=None, prior_weight: float = 1.0):
        """The exact full-data log density and gradient, accumulated batch by batch."""
        if X is not None:
            return super().value_and_grad(theta, X, y, prior_weight)
        value, grad = None, None
        for start in range(0, self.n_data, self.batch_size):
            Xb, yb = self.batch(slice(start, start + self.batch_size))
            weight = prior_weight * Xb.shape[0] / self.n_data
            v, g = self.log_likelihood_and_grad(theta, Xb, yb, weight)
            value, grad = (v, g) if value is None else (value + v, grad + g)
        return value + self.prior_density.log_prob(theta, prior_weight), grad

    def log_prob(self, theta: torch.Tensor, X=None, y=None, prior_weight: float = 1.0):
        """The exact full-data log density, accumulated batch by batch."""
        if X is not None:
            return super().log_prob(theta, X, y, prior_weight)
        total = self.prior_density.log_prob(theta, prior_weight)
        for start in range(0, self.n_data, self.batch_size):
            Xb, yb = self.batch(slice(start, start + self.batch_size))
            total = total + super().log_prob(theta, Xb, yb, 0.0)
        return total
