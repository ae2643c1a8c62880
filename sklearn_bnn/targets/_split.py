"""The log posterior density evaluated over M data subsets, for split HMC.

Cobb & Jalaian (2021), §3.2, eq. 6: with the data split into M subsets, the potential energy is
U(w) = sum_m U_m(w) with U_m(w) = -log p(w) / M - l_m(w), l_m the log-likelihood of subset m.
:class:`SplitTarget` gives each subset's log density -U_m and its gradient, and the full-data
density and gradient accumulated subset by subset: no autograd graph ever spans more than one
subset, so the memory of a gradient is bounded by one subset whatever the size of the data. The
data may stay on the CPU and go to the compute device one subset at a time.
"""

from __future__ import annotations

import math

import torch

from ..priors import GaussianPrior
from ._network import FunctionalNetwork, Target

__all__ = ["SplitTarget", "split_bounds"]


def split_bounds(n: int, n_splits: int | None = None, split_size: int | None = None):
    """Row ranges ``[(start, stop), ...]`` of nearly equal contiguous subsets of ``n`` rows.

    ``split_size`` (at most that many rows per subset) takes precedence over ``n_splits``; there
    are never more subsets than rows.
    """
    if split_size is not None:
        n_splits = math.ceil(n / split_size)
    if n_splits is None:
        raise ValueError("give n_splits or split_size.")
    n_splits = max(1, min(int(n_splits), n))
    edges = [(i * n) // n_splits for i in range(n_splits + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


class SplitTarget(Target):
    """Log posterior density of a network's parameters, evaluated over M data subsets.

    A :class:`~sklearn_bnn.targets.Target` whose full-data :meth:`value_and_grad` and
    :meth:`log_prob` are sums over subsets, plus :meth:`subset_value_and_grad` for the split
    integrators (Cobb & Jalaian 2021, eq. 6-8, Algorithm 1).

    Parameters
    ----------
    network, X, y, likelihood, prior
        As for :class:`~sklearn_bnn.targets.Target`. Subsets are contiguous blocks of rows in
        the given order (shuffle the rows beforehand when they are sorted).
    n_splits : int, optional
        Number of subsets M (nearly equal in size).
    split_size : int, optional
        At most this many rows per subset (takes precedence over ``n_splits``).
    data_device : str or torch.device, optional
        Where the data are kept; the network's device by default. With ``"cpu"`` and a CUDA
        network, each subset is copied to the GPU (from pinned memory) when it is needed.

    Attributes
    ----------
    n_splits : int
        The number of subsets M.
    bounds : list of (int, int)
        Row range of each subset.
    n_subset_grads : int
        Subset gradients evaluated so far (a counter for cost accounting).
    default_integrator : str
        "symmetric": what a sampler whose ``integrator`` is None integrates this target with,
        the novel symmetric split leapfrog (Cobb & Jalaian 2021, Algorithm 1), so that a gradient
        never spans more than one subset.
    """

    default_integrator = "symmetric"

    def __init__(
        self,
        network: FunctionalNetwork,
        X,
        y,
        likelihood,
        prior: GaussianPrior,
        *,
        n_splits: int | None = None,
        split_size: int | None = None,
        data_device=None,
        **options,
    ):
        self.data_device = network.device if data_device is None else torch.device(data_device)
        super().__init__(network, X, y, likelihood, prior, **options)
        self.bounds = split_bounds(self.n_data, n_splits, split_size)
        self.n_splits = len(self.bounds)
        self.n_subset_grads = 0
        self._resident = None  # views of the subsets, when the data live on the compute device
        if self.data_device == self.device:
            self._resident = [self.subset(m) for m in range(self.n_splits)]

    def _place(self, X, y, device=None):
        X, y = super()._place(X, y, self.data_device)
        if self.data_device.type == "cpu" and self.device.type == "cuda":
            X, y = X.pin_memory(), y.pin_memory()
        return X, y

    def subset(self, m: int):
        """Inputs and targets of subset ``m`` on the compute device."""
        if self._resident is not None:
            return self._resident[m]
        start, stop = self.bounds[m]
        return (
            self.X[start:stop].to(self.device, non_blocking=True),
            self.y[start:stop].to(self.device, non_blocking=True),
        )

    def subset_value_and_grad(self, theta: torch.Tensor, m: int):
        """-U_m = l_m(w) + log p(w) / M and its gradient at ``theta`` (C, D).

        Cobb & Jalaian (2021), eq. 6.

        Returns
        -------
        value : tensor (C,)
        grad : tensor (C, D)
        """
        self.n_subset_grads += 1
        X, y = self.subset(m)
        return super().value_and_grad(theta, X, y, 1.0 / self.n_splits)

    def subset_log_likelihood_and_grad(self, theta: torch.Tensor, m: int, with_value=True):
        """l_m(w) and the gradient of -U_m = l_m(w) + log p(w) / M, at ``theta`` (C, D).

        What a split integrator's kick needs, without the prior's value (which
        :meth:`log_density_from_subsets` adds once for the whole data); with
        ``with_value=False`` l_m may be skipped too (None: :meth:`Target.log_prob_grad`).
        """
        self.n_subset_grads += 1
        X, y = self.subset(m)
        return self.log_likelihood_and_grad(theta, X, y, 1.0 / self.n_splits, with_value=with_value)

    def log_density_from_subsets(self, theta: torch.Tensor, log_liks, grads):
        """Full-data log density and gradient at ``theta`` (C, D) from every subset's
        log-likelihood (C,) and gradient of -U_m (C, D): sum(l_m) + log p(w), sum(grad)."""
        value, grad = log_liks[0], grads[0]
        for v, g in zip(log_liks[1:], grads[1:], strict=True):
            value, grad = value + v, grad + g
        return value + self._log_prior(theta), grad

    def _data_pieces(self):
        """The subsets, one at a time on the compute device (the residuals and the
        log-likelihood of the Gibbs blocks are summed over them)."""
        return (self.subset(m) for m in range(self.n_splits))

    def log_prob_grad(self, theta: torch.Tensor) -> torch.Tensor:
        """The full-data gradient alone, summed over the subsets as :meth:`value_and_grad`
        sums it (:meth:`Target.log_prob_grad`: no log-likelihood or prior value computed
        where the package's MLP takes the hand-written gradient)."""
        grad = None
        for m in range(self.n_splits):
            _, g = self.subset_log_likelihood_and_grad(theta, m, with_value=False)
            grad = g if grad is None else grad + g
        return grad

    def value_and_grad(self, theta: torch.Tensor, X=None, y=None, prior_weight: float = 1.0):
        """Full-data log density and gradient, summed over the subsets (one graph at a time).

        With ``X, y`` given, the density of that data alone, as for :class:`Target`.
        """
        if X is not None:
            return super().value_and_grad(theta, X, y, prior_weight)
        parts = [self.subset_log_likelihood_and_grad(theta, m) for m in range(self.n_splits)]
        return self.log_density_from_subsets(theta, *zip(*parts, strict=True))

    def log_prob(self, theta: torch.Tensor, X=None, y=None, prior_weight: float = 1.0):
        """Full-data log density at ``theta`` (D,) or (C, D), summed over the subsets."""
        if X is not None:
            return super().log_prob(theta, X, y, prior_weight)
        weight = 1.0 / self.n_splits
        return sum(
            super(SplitTarget, self).log_prob(theta, *self.subset(m), weight)
            for m in range(self.n_splits)
        )
