"""Estimator record of sampled hyperparameters (S3HMC, Cobb et al. 2019).

The sampled positions are [weights, log-precisions]; the run returns the weights as its draws
(``samples_``, so prediction is unchanged) and the precisions per draw in ``samples_.stats``
(the target's ``split_draws``); they are also kept as
``precisions_`` (n_chains, n_draws, n_precisions), named by ``precision_names_``, with their
ESS and R-hat in ``diagnostics_``.
"""

from __future__ import annotations

import numpy as np
import torch

from ..diagnostics import ess_bulk, rhat

__all__ = ["record_precisions"]


def record_precisions(estimator, names) -> None:
    """Set ``precisions_``, ``precision_names_`` and the precisions' ESS / R-hat, from the
    per-draw statistics ``names`` (the sampled coordinates a run moved out of its draws)."""
    names = list(names)
    stats = estimator.samples_.stats
    estimator.precision_names_ = names
    estimator.precisions_ = torch.stack([stats[n] for n in names], -1)
    logs = {n: np.log(stats[n].double().numpy()) for n in names}
    estimator.diagnostics_["ess_bulk_precisions"] = {n: ess_bulk(v) for n, v in logs.items()}
    estimator.diagnostics_["rhat_precisions"] = {n: rhat(v) for n, v in logs.items()}
