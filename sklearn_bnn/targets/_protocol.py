"""The target protocol: the one member every target has, and the optional ones a sampler may use.

A target is any object with ``value_and_grad(theta (C, D)) -> ((C,), (C, D))``. Everything
else a sampler can use is optional and declared here, with the value its absence means:
:func:`capabilities` reads them from a target once, and samplers read the resulting
:class:`TargetCapabilities` instead of asking the target member by member.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["TargetCapabilities", "capabilities", "require"]

# the optional members that are functions: present only when callable
_FUNCTIONS = frozenset(
    {
        "log_prob",
        "log_prob_grad",
        "batch_value_and_grad",
        "batch_likelihood_and_grad",
        "batch_log_prob",
        "gibbs_blocks",
        "select_chains",
        "split_draws",
        "graph_family",
        "log_prob_grad_hessian",
        "hessian_contraction",
        "scalar_log_prob",
        "fisher_information",
    }
)


@dataclass(frozen=True)
class TargetCapabilities:
    """The optional members of a target, each its value or the value its absence means.

    Functions are bound to the target they were read from: a kernel that moves to another
    target (a Gibbs step's conditional density) reads that target's capabilities again.

    Attributes
    ----------
    dim : int or None
        The number of coordinates; None: the positions' (a user's target may leave it out).
    device, dtype : torch.device, torch.dtype or None
        Where and in what precision the target computes; None: those of the positions.
    temperature : float
        The posterior's temperature T (the likelihood enters as l / T); 1 when absent.
    log_prob, log_prob_grad : callable or None
        The log density alone, and its gradient alone (the leapfrog's inner steps take it).
    batch_value_and_grad, batch_likelihood_and_grad, batch_log_prob : callable or None
        Minibatch evaluations ``f(theta, rows)``: the scaled log density and gradient, the
        same without the log prior, the value alone.
    n_data, batch_size : int or None
        The number of data rows and the minibatch size of a minibatch target.
    batch_device : torch.device or None
        The device the data rows live on when they are resident there (row indices then go
        there, with no host copy); None: indices are drawn on the host.
    gibbs_blocks : callable or None
        ``gibbs_blocks() -> list``: the Gibbs blocks that update the target's own
        hyperparameters beside the kernel.
    n_hyper : int
        The number of hyperparameter coordinates appended to the weights (0 for none).
    select_chains : callable or None
        ``select_chains(idx)``: the density of some chains only (per-chain values).
    split_draws : callable or None
        ``split_draws(run)``: the run as the draws of the caller's target.
    default_integrator : str or None
        The integrator HMC takes when it is not given one (a split target's).
    n_splits : int or None
        The number of data subsets of a split target.
    graph_family : callable or None
        ``graph_family()``: the key under which CUDA-graph recordings on this target are shared.
    log_prob_grad_hessian, hessian_contraction, scalar_log_prob, fisher_information : callable
        Second-order derivatives, the log density of one position, the Fisher information:
        the Riemannian metrics' closed forms.
    network, prior, prior_density : object or None
        A network target's functional network and priors.
    """

    dim: int | None = None
    device: Any = None
    dtype: Any = None
    temperature: float = 1.0
    log_prob: Callable | None = None
    log_prob_grad: Callable | None = None
    batch_value_and_grad: Callable | None = None
    batch_likelihood_and_grad: Callable | None = None
    batch_log_prob: Callable | None = None
    n_data: int | None = None
    batch_size: int | None = None
    batch_device: Any = None
    gibbs_blocks: Callable | None = None
    n_hyper: int = 0
    select_chains: Callable | None = None
    split_draws: Callable | None = None
    default_integrator: str | None = None
    n_splits: int | None = None
    graph_family: Callable | None = None
    log_prob_grad_hessian: Callable | None = None
    hessian_contraction: Callable | None = None
    scalar_log_prob: Callable | None = None
    fisher_information: Callable | None = None
    network: Any = None
    prior: Any = None
    prior_density: Any = None


_FIELDS = tuple(f.name for f in dataclasses.fields(TargetCapabilities))


def capabilities(target) -> TargetCapabilities:
    """The optional members ``target`` has (see :class:`TargetCapabilities`), read once:
    the defaults stand for those it lacks (a function that is not callable counts as absent)."""
    found = {}
    for name in _FIELDS:
        value = getattr(target, name, None)
        if value is None or (name in _FUNCTIONS and not callable(value)):
            continue
        found[name] = value
    return TargetCapabilities(**found)


def require(target, names, who: str, kind: str) -> TargetCapabilities:
    """``target``'s capabilities, after checking it has each of ``names``: a ``ValueError``
    names the first one missing, the sampler ``who`` and the ``kind`` of target it needs."""
    found = capabilities(target)
    for name in names:
        if getattr(found, name) is None:
            raise ValueError(f"{who} needs {kind}; {type(target).__name__} has no {name!r}.")
    return found
