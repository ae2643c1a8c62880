"""Training of one plan-net network through skorch: the loss of Cobb (2019, eq. 7.1) and a fixed
dropout noise for the validation passes, so that successive validation losses differ by the
training only."""

from __future__ import annotations

import numpy as np
import torch
from skorch.callbacks import Callback
from torch import nn

from .._seeding import child, torch_seed
from ..losses import cholesky_gaussian_loss
from ..nets import PlanNet
from ._skorch import history_curves, plain_history, split_weights, train_net, weighted_mean

__all__ = ["train_member"]


def train_member(est, net: PlanNet, member, data, valid, penalty, device, desc: str):
    """Train ``net`` (member of seed sequence ``member``) on ``data``, early stopping on
    ``valid``; returns the trained network, its epochs, its best validation loss (NaN
    without early stopping) and its training history (a list of dicts, a row per epoch)."""
    trained = train_net(
        est,
        _FixedValidationNoise(net, torch_seed(child(member, "validation_noise"))),
        data,
        valid,
        loss=_plannet_loss,
        penalty=penalty,
        seed=torch_seed(child(member, "training")),
        device=device,
        early_stopping=bool(est.early_stopping),
        patience=est.n_iter_no_change,
        tol=est.tol,
        desc=desc,
        extra_callbacks=[("validation_noise", _ReseedValidationNoise())],
    )
    curve = history_curves(trained)[1]
    best = min(curve) if est.early_stopping and curve else np.nan
    return trained.module_.net.cpu(), len(trained.history), best, plain_history(trained.history)


def _plannet_loss(net, y_pred, y_true, X, training) -> torch.Tensor:
    """skorch loss hook: eq. 7.1 per point (standardised units), its mean over the batch
    (each point's term times its weight when the fit has weights)."""
    y_true, weights = split_weights(y_true)
    if weights is None:
        return cholesky_gaussian_loss(y_true, *y_pred)
    return weighted_mean(cholesky_gaussian_loss(y_true, *y_pred, reduction="none"), weights)


class _FixedValidationNoise(nn.Module):
    """A :class:`PlanNet` whose eval-mode passes (validation) reuse one seed every epoch.

    In training mode the concrete-dropout noise comes from torch's global generator (forked
    and seeded for the fit); in eval mode from a generator reset to ``seed`` at the start of
    every epoch, so successive validation losses differ by the training only.
    """

    def __init__(self, net: PlanNet, seed: int):
        super().__init__()
        self.net, self.seed, self.generator = net, seed, None

    def reset(self, device) -> None:
        self.generator = torch.Generator(device=device).manual_seed(self.seed)

    def forward(self, x):
        if self.training:
            return self.net(x)
        if self.generator is None or self.generator.device != x.device:
            self.reset(x.device)
        return self.net(x, self.generator)


class _ReseedValidationNoise(Callback):
    def on_epoch_begin(self, net, **kwargs):
        net.module_.generator = None
