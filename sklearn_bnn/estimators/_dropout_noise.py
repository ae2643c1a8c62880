"""MC dropout regression's noise: the Gaussian likelihood and its learned precision.

:class:`WithNoise` is the module skorch trains (the network and its log noise precision, in
standardised units); with ``noise_precision=None`` the callback :class:`NoiseFromResiduals` sets
the precision before every epoch to its maximiser given the previous epoch's residuals.
"""

from __future__ import annotations

import math

import torch
from skorch.callbacks import Callback
from torch import nn


def gaussian_nll(sq: torch.Tensor, log_tau: torch.Tensor) -> torch.Tensor:
    """``-log N(y; f, tau^-1)`` summed over outputs, from the squared residuals ``sq``."""
    return 0.5 * (log_tau.exp() * sq - log_tau + math.log(2 * math.pi)).sum(-1)


class WithNoise(nn.Module):
    """The regression network plus its log noise precision (standardised units) as a buffer.

    ``record`` accumulates squared training residuals (non-persistent buffers, left out of the
    state dict) for :class:`NoiseFromResiduals`.
    """

    def __init__(self, net: nn.Sequential, log_tau):
        super().__init__()
        self.net = net
        dtype = next(net.parameters()).dtype
        self.register_buffer("log_tau", torch.as_tensor(log_tau, dtype=dtype))
        self.register_buffer("sq_sum", torch.zeros_like(self.log_tau), persistent=False)
        self.register_buffer("count", torch.zeros((), dtype=dtype), persistent=False)

    def forward(self, x):
        return self.net(x)

    @torch.no_grad()
    def record(self, sq, weights=None) -> None:
        # in-place (``+=`` on a module attribute would go through Module.__setattr__)
        if weights is None:
            self.sq_sum.add_(sq.sum(0))
            self.count.add_(len(sq))
        else:  # rows weighted: the noise of the data with each row repeated by its weight
            self.sq_sum.add_((sq * weights[:, None]).sum(0))
            self.count.add_(weights.sum())


class NoiseFromResiduals(Callback):
    """Sets the noise precision to ``1 / mean squared residual`` of the previous epoch.

    For a Gaussian likelihood with one precision per output, this is the exact maximiser of the
    data term in ``tau`` given the network (the KL term does not involve ``tau``): a coordinate
    step on the same objective, taken before each epoch.
    """

    def on_epoch_begin(self, net, **kwargs):
        module = net.module_
        if float(module.count) > 0:
            mse = (module.sq_sum / module.count).clamp_min(1e-10)
            module.log_tau.copy_(-mse.log())
        module.sq_sum.zero_()
        module.count.zero_()
