"""Priors over network weights.

The Gaussian prior N(0, 1/tau) with one precision tau per parameter tensor (seeds/000 §3.1,
seeds/002 eq. 2), or a single float for all of them.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import torch

__all__ = ["GaussianPrior"]


class GaussianPrior:
    """Zero-mean Gaussian prior with per-tensor precisions.

    Parameters
    ----------
    precision : float, sequence of float, or mapping name -> float
        A single precision for every parameter tensor, one per tensor in the order of
        ``module.named_parameters()`` (trainable ones), or a mapping from parameter names
        (missing names fall back to ``default``).
    default : float
        Precision for tensors absent from a mapping.
    """

    def __init__(self, precision=1.0, default: float = 1.0):
        self.precision = precision
        self.default = default

    def precision_vector(
        self, names: Sequence[str], sizes: Sequence[int], *, dtype, device
    ) -> torch.Tensor:
        """The diagonal precision as a flat vector matching the flattened parameters."""
        per_tensor = self._per_tensor(names)
        return torch.cat(
            [
                torch.full((n,), float(t), dtype=dtype, device=device)
                for t, n in zip(per_tensor, sizes, strict=True)
            ]
        )

    def _per_tensor(self, names: Sequence[str]) -> list[float]:
        p = self.precision
        if isinstance(p, numbers.Real) and not isinstance(p, bool):
            values = [float(p)] * len(names)
        elif isinstance(p, Mapping):
            unknown = set(p) - set(names)
            if unknown:
                raise ValueError(
                    f"prior_precision names unknown parameters {sorted(unknown)}; "
                    f"the network's trainable parameters are {list(names)}."
                )
            values = [float(p.get(n, self.default)) for n in names]
        else:
            try:
                values = [float(v) for v in p]
            except TypeError:
                raise ValueError(
                    f"prior_precision must be a positive float, a sequence or a dict, got {p!r}."
                ) from None
            if len(values) != len(names):
                raise ValueError(
                    f"prior_precision has {len(values)} entries but the network has "
                    f"{len(names)} trainable parameter tensors {list(names)}."
                )
        for v in values:
            if not (v > 0 and v < float("inf")):
                raise ValueError(f"prior_precision values must be finite and > 0, got {p!r}.")
        return values
