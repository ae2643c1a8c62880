"""The full-data family of the MCMC estimators, shared by the HMC and split HMC estimators."""

from __future__ import annotations

__all__ = ["FullDataParams"]


class FullDataParams:
    """What the full-batch samplers (HMC, NUTS, RMHMC, ...) share on an estimator: the
    rescaling moves between transitions (a Gibbs block on the network's posterior, beside any
    sampler). Shared by the HMC and split HMC families; the samplers' own settings live on the
    sampler objects."""

    _own_constraints: dict = {
        "rescale_moves": ["boolean"],
    }

    def _target_options(self) -> dict:
        return {**super()._target_options(), "rescale_moves": bool(self.rescale_moves)}
