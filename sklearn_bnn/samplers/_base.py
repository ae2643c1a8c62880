"""The sampler protocol: states, step information, kernels and sampler objects.

Two layers, in the style of BlackJAX's ``SamplingAlgorithm`` and NumPyro's ``MCMCKernel``:

- a **sampler** (:class:`Sampler`) is a configuration with scikit-learn parameters
  (``HMC(n_steps=50)``, ``NUTS(max_tree_depth=8)``): it can be cloned, grid-searched and set by
  nested names (``sampler__n_steps``), and knows nothing of any data;
- ``sampler.build(target)`` binds it to a log density and returns a **kernel**
  (:class:`Kernel`): ``state = kernel.init(position)``, then ``state, info =
  kernel.step(state, generator, step_size=..., inv_mass=...)``.

Every kernel works on a leading chain axis: positions are (C, D), per-chain scalars (C,). A kernel
never prints, never touches global RNG state and knows nothing of scikit-learn; its only source of
randomness is the ``torch.Generator`` it is handed.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from sklearn.base import BaseEstimator

from .euclidean import as_metric

__all__ = ["Info", "Kernel", "Sampler", "State", "kinetic_energy", "sample_momentum"]


class State(NamedTuple):
    """A position with its cached log density and gradient (so a step costs one gradient)."""

    position: torch.Tensor  # (C, D)
    log_prob: torch.Tensor  # (C,)
    grad: torch.Tensor  # (C, D)


class Info(NamedTuple):
    """What one transition did, per chain.

    ``extra`` holds whatever else a kernel reports (NUTS: ``tree_depth``); the sampling loop
    keeps every entry of it beside each draw, in ``PosteriorSamples.stats``.
    """

    accept_prob: torch.Tensor  # (C,) Metropolis-Hastings acceptance probability
    accepted: torch.Tensor  # (C,) bool
    energy_error: torch.Tensor  # (C,) H(end) - H(start); inf when the trajectory diverged
    divergent: torch.Tensor  # (C,) bool: non-finite or above the divergence threshold
    step_size: torch.Tensor  # (C,)
    n_grad: float  # full-data gradient evaluations spent (per chain; a subset counts 1/M)
    extra: dict | None = None  # per-chain (C,) statistics of this kernel


class Kernel:
    """A sampler bound to a target: the transition kernel the sampling loop drives.

    Subclasses set ``self.target`` and implement :meth:`init` and :meth:`step`.

    Attributes
    ----------
    target : object
        The log density, with ``value_and_grad(theta (C, D)) -> ((C,), (C, D))``, ``dim``,
        ``device`` and ``dtype``.
    adapts_step_size : bool
        Whether the loop may tune ``step_size`` by dual averaging (False for kernels without
        a step size, e.g. random-walk kernels with their own scale).
    """

    adapts_step_size = True
    target = None

    def init(self, position: torch.Tensor) -> State:
        """The state at ``position`` (D,) or (C, D), with its log density and gradient."""
        if position.ndim == 1:
            position = position[None]
        log_prob, grad = self.target.value_and_grad(position)
        return State(position.detach(), log_prob, grad)

    def step(self, state, generator: torch.Generator, step_size=None, inv_mass=None):
        """One transition for every chain: returns ``(state, info)``."""
        raise NotImplementedError

    def acceptance(self, info: Info) -> torch.Tensor:
        """The per-chain acceptance statistic reported as ``acceptance_rate_`` (C,).

        Whether the proposal was accepted, by default; a kernel whose transition almost always
        moves (NUTS) reports its mean Metropolis acceptance probability instead.
        """
        return info.accepted.double()

    def describe(self, stats: dict) -> dict:
        """Run-level figures from this kernel's per-draw ``stats`` (C, n_draws) each, for the
        diagnostics (e.g. NUTS's mean tree depth); none by default."""
        return {}


class Sampler(BaseEstimator):
    """Base class of the sampler objects: a configuration that builds a :class:`Kernel`.

    Parameters are set in ``__init__`` and stored unchanged (the scikit-learn convention), so
    ``clone``, ``get_params``/``set_params`` and ``GridSearchCV`` work on samplers and on the
    estimators that take them (``HMCRegressor(sampler=NUTS(max_tree_depth=8))``).

    Subclasses implement :meth:`build`, and may override :meth:`check_target` to refuse a target
    they cannot sample with a clear message.
    """

    def build(self, target) -> Kernel:
        """A kernel of this configuration on ``target``."""
        raise NotImplementedError

    def check_target(self, target) -> None:
        """Raise ``ValueError`` if ``target`` lacks something this sampler needs."""


def kinetic_energy(momentum: torch.Tensor, inv_mass) -> torch.Tensor:
    """K(p) = p^T M^-1 p / 2 over the last axis.

    ``inv_mass`` is a metric of :mod:`.euclidean` or a tensor, the diagonal of M^-1 (see
    :func:`~sklearn_bnn.samplers.euclidean.as_metric`); the metric computes it.
    """
    return as_metric(inv_mass).kinetic_energy(momentum)


def sample_momentum(shape, inv_mass, generator: torch.Generator, *, dtype, device) -> torch.Tensor:
    """p ~ N(0, M), drawn by the metric ``inv_mass`` (or a diagonal of M^-1, as a tensor)."""
    return as_metric(inv_mass).sample_momentum(shape, generator, dtype=dtype, device=device)
