"""Estimator hooks for targets with trailing hyperparameter coordinates (S3HMC, seeds/002).

The sampled positions are [weights, log-precisions]; ``samples_`` keeps the weights only (so
prediction is unchanged) and the precisions are kept per draw in ``samples_.stats`` and as
``precisions_`` (n_chains, n_draws, n_precisions), named by ``precision_names_``, with their
ESS and R-hat in ``diagnostics_``.
"""

from __future__ import annotations

import numpy as np
import torch

from ..diagnostics import ess_bulk, rhat

__all__ = ["record_precisions", "split_hyperparameters"]


def split_hyperparameters(draws: torch.Tensor, stats: dict, target):
    """Weights (C, n, D_w) and the stats with one (C, n) entry per precision added."""
    k = target.n_hyper
    stats = dict(stats)
    for name, column in zip(target.hyper_names, draws[..., -k:].unbind(-1), strict=True):
        stats[name] = torch.exp(column)
    return draws[..., :-k], stats


def record_precisions(estimator, target) -> None:
    """Set ``precisions_``, ``precision_names_`` and the precisions' ESS / R-hat."""
    names = list(target.hyper_names)
    stats = estimator.samples_.stats
    estimator.precision_names_ = names
    estimator.precisions_ = torch.stack([stats[n] for n in names], -1)
    logs = {n: np.log(stats[n].double().numpy()) for n in names}
    estimator.diagnostics_["ess_bulk_precisions"] = {n: ess_bulk(v) for n, v in logs.items()}
    estimator.diagnostics_["rhat_precisions"] = {n: rhat(v) for n, v in logs.items()}
