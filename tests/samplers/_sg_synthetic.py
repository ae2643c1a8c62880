"""The synthetic benchmark target of seeds/004: a diagonal Gaussian with noisy gradients.

A test fixture (``tests/samplers/test_sgmcmc.py``), also read by
``benchmarks/samplers/sgmcmc_synthetic.py``; not part of the package.

seeds/004, "Synthetic benchmark": the samplers see the exact gradient of the negative log density
plus N(0, s^2) noise, standing in for minibatch noise; means ~ Exp(0.1) (scale 10), variances
~ U[0.1, 1]. The noise comes from the target's own generator: it is part of the problem, not of
the sampler (whose random numbers all come from the generator the loop hands it).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["NoisyGaussianTarget", "random_gaussian_problem"]


class NoisyGaussianTarget:
    """N(mean, diag(var)) with gradients perturbed by N(0, grad_noise^2) noise.

    Parameters
    ----------
    mean, var : array-like of shape (D,)
    grad_noise : float, default=0.0
        Standard deviation s of the noise added to each gradient coordinate of
        :meth:`batch_value_and_grad` (the value stays exact).
    n_data, batch_size : int, default=1
        Nominal rows and batch size: with the defaults one kernel step is one minibatch step
        unless the sampler's ``n_steps`` says otherwise.
    seed : int, default=0
        Seed of the noise generator.
    dtype : torch.dtype, default=torch.float64
    """

    def __init__(
        self, mean, var, grad_noise=0.0, n_data=1, batch_size=1, seed=0, dtype=torch.float64
    ):
        self.mean = torch.as_tensor(np.asarray(mean), dtype=dtype)
        self.var = torch.as_tensor(np.asarray(var), dtype=dtype)
        self.grad_noise = float(grad_noise)
        self.n_data, self.batch_size = int(n_data), int(batch_size)
        self.dim = self.mean.shape[0]
        self.device, self.dtype = torch.device("cpu"), dtype
        self._noise = torch.Generator().manual_seed(seed)

    def log_prob(self, theta):
        return -0.5 * ((theta - self.mean) ** 2 / self.var).sum(-1)

    def value_and_grad(self, theta):
        return self.log_prob(theta), -(theta - self.mean) / self.var

    def batch_log_prob(self, theta, rows):
        """The exact value (the noise is on the gradient only)."""
        return self.log_prob(theta)

    def batch_value_and_grad(self, theta, rows):
        value, grad = self.value_and_grad(theta)
        if self.grad_noise > 0:
            noise = torch.randn(grad.shape, generator=self._noise, dtype=grad.dtype)
            grad = grad + self.grad_noise * noise
        return value, grad


def random_gaussian_problem(dim: int, rng: np.random.Generator):
    """Means ~ Exp(rate 0.1) and variances ~ U[0.1, 1] (seeds/004 synthetic benchmark)."""
    return rng.exponential(10.0, dim), rng.uniform(0.1, 1.0, dim)
