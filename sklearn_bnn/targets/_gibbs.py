"""Gibbs blocks of the network targets: exact conditional draws of likelihood parameters.

A block is what :class:`~sklearn_bnn.samplers.gibbs.GibbsKernel` alternates with the kernel that
moves the weights (see there for the protocol). Its values live in each chain's state; the
target is never changed: the conditional density given them is a light copy of the target
(:meth:`~sklearn_bnn.targets.Target.with_noise_precision`).
"""

from __future__ import annotations

import torch

__all__ = ["NoisePrecisionGibbs"]


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
