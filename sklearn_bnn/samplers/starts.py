"""Starting points for the chains.

A chain started at the network's random initialisation spends much of its warmup climbing to
the typical set. Starting it at a mode of the posterior (each chain from its own random
initialisation) leaves warmup to adapt the step size and the chains to explore around distinct
modes. :class:`MAPStart` is that start, the one place every sampler's chains get it; it runs one
of two searches, by how the target reads the data:

* :func:`find_mode`, full-batch Adam, for the full-data samplers (HMC and its relatives), whose
  every gradient is over the whole data anyway;
* :func:`find_mode_minibatch`, minibatch Adam with scikit-learn's ``MLPClassifier`` stopping
  rule, for the stochastic-gradient samplers: on large data a full-batch step costs a pass over
  the data, and a few epochs of minibatch steps reach a better mode than hundreds of full-batch
  steps (docs/sgmcmc.md, "Defaults").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from .._persistence_registry import register
from .._utils import SettingsObject, check_scalar_param, flush_subnormals
from ..targets import capabilities
from ._adam_graphs import BETA1, BETA2, TINY, AdamSteps

__all__ = [
    "MAPStart",
    "MinibatchModeSearch",
    "find_mode",
    "find_mode_minibatch",
    "init_step_budget",
]

# the full-batch search's budget (Adam at 1e-2, cosine decay): 500 steps
FULL_BATCH_STEPS = 500
#: The stopping tolerance of the minibatch search that starts the chains, on the per-datum
#: loss: looser than scikit-learn's 1e-4, because the chains leave the mode at once (the
#: posterior's log density spreads over about D / 2 nats, far more than N times this), so
#: the last epochs of a tighter search polish a point no draw keeps (docs/sgmcmc.md).
START_TOL = 2e-3
# the minibatch search's: at most 200 epochs (scikit-learn's MLP max_iter) or 10,000 steps,
# whichever is more (small data: an epoch is a handful of steps)
MAX_INIT_EPOCHS = 200
MIN_INIT_STEPS = 10_000


@flush_subnormals
def find_mode(
    target, position: torch.Tensor, n_steps: int = 500, lr: float = 1e-2, progress=None
) -> torch.Tensor:
    """Maximise ``target``'s log density from ``position`` (C, D) with full-batch Adam.

    Adam (Kingma & Ba 2015, beta1 = 0.9, beta2 = 0.999) with a learning rate decaying along a
    half cosine to zero; chains are optimised together as one batched computation, one gradient
    per step. A step that makes a chain non-finite is undone for that chain.

    Parameters
    ----------
    progress : callable, optional
        Called once per step (e.g. a progress bar's ``update``).

    Returns
    -------
    tensor (C, D)
        The end points.
    """
    beta1, beta2, tiny = BETA1, BETA2, TINY
    theta = position.detach().clone()
    m = torch.zeros_like(theta)
    v = torch.zeros_like(theta)
    for t in range(1, n_steps + 1):
        _, grad = target.value_and_grad(theta)
        grad = -grad  # minimise the potential
        m.mul_(beta1).add_(grad, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step_lr = 0.5 * lr * (1 + math.cos(math.pi * (t - 1) / n_steps))
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        proposal = theta - step_lr * m_hat / (v_hat.sqrt() + tiny)
        ok = torch.isfinite(proposal).all(-1, keepdim=True)
        theta = torch.where(ok, proposal, theta)
        if progress is not None:
            progress()
    return theta


@dataclass
class MinibatchModeSearch:
    """What :func:`find_mode_minibatch` did.

    Attributes
    ----------
    n_steps : int
        Minibatch Adam steps taken (all chains together).
    n_epochs : int
        Epochs begun (the last one may be cut by the step budget).
    loss_curve : numpy.ndarray of shape (n_epochs, C)
        Per chain, the epoch's mean training loss: the per-datum negative log posterior
        density -((N/|B|) l_B + log p) / N averaged over the epoch's batches (weighted by their
        rows) at the weights each batch saw, as scikit-learn's ``loss_curve_``.
    converged : numpy.ndarray of shape (C,)
        Per chain, whether the stopping rule ended its search (False: the budget did).
    steps_per_chain : numpy.ndarray of shape (C,)
        The Adam steps each chain took before it stopped.
    """

    n_steps: int
    n_epochs: int
    loss_curve: np.ndarray
    converged: np.ndarray
    steps_per_chain: np.ndarray


@flush_subnormals
def find_mode_minibatch(
    target,
    position: torch.Tensor,
    max_steps: int,
    *,
    lr: float = 1e-3,
    tol: float = 1e-4,
    n_iter_no_change: int = 10,
    seed=0,
    progress=None,
) -> tuple[torch.Tensor, MinibatchModeSearch]:
    """Maximise ``target``'s log density from ``position`` (C, D) with minibatch Adam.

    scikit-learn's ``MLPClassifier(solver="adam")`` applied to the log posterior: each epoch
    visits the rows in a fresh permutation, cut into ceil(N / |B|) batches of nearly equal size
    (|B| = ``target.batch_size`` at most; scikit-learn leaves a smaller last batch, whose
    N/|B|-scaled gradient is the noisiest on small data), and takes one Adam step (Kingma & Ba
    2015: beta1 = 0.9, beta2 = 0.999, a constant learning rate ``lr``) per batch on the
    per-datum loss -((N/|B|) l_B + log p) / N. A chain
    stops when its epoch's mean training loss has not fallen below its best by ``tol`` for more
    than ``n_iter_no_change`` epochs in a row (scikit-learn's rule and defaults), or when
    ``max_steps`` steps have been taken. A stopped chain keeps its weights while the others go
    on, so a chain ends where it would alone. A step that makes a chain non-finite is undone for
    that chain. The batches come from ``seed`` and are shared by the chains.

    Parameters
    ----------
    target : MinibatchTarget
        With ``batch_value_and_grad(theta, rows)``, ``n_data`` and ``batch_size``.
    position : tensor (C, D)
    max_steps : int
        The budget: at most this many minibatch steps.
    lr, tol, n_iter_no_change : float, float, int
        Adam's learning rate and the stopping rule (scikit-learn's ``learning_rate_init``,
        ``tol`` and ``n_iter_no_change``).
    seed : int or numpy.random.SeedSequence, default=0
        Seeds the permutations of the rows.
    progress : callable, optional
        Called once per step (e.g. a progress bar's ``update``).

    Returns
    -------
    theta : tensor (C, D)
        The end points.
    search : MinibatchModeSearch
    """
    n, size = int(target.n_data), int(target.batch_size)
    n_batches = -(-n // size)  # ceil(N / |B|) batches of nearly equal size, none above |B|
    rng = np.random.default_rng(seed)
    adam = AdamSteps(target, position)  # replayed from CUDA graphs on a GPU (_adam_graphs.py)
    C = adam.theta.shape[0]
    best = np.full(C, np.inf)
    stale = np.zeros(C, dtype=np.int64)
    # data resident on the device: the epoch's permutation goes there once, and each batch is
    # a slice of it (the same rows; no copy and no host read per step on a GPU)
    rows_device = capabilities(target).batch_device
    curve, t = [], 0
    while t < max_steps and bool(adam.active.any()):
        perm = rng.permutation(n)
        if rows_device is not None:
            batches = torch.from_numpy(perm).to(rows_device).tensor_split(n_batches)
        else:
            batches = np.array_split(perm, n_batches)
        adam.total.zero_()
        seen = 0
        for rows in batches:
            if t >= max_steps:
                break
            rows = np.sort(rows) if rows_device is None else rows.sort().values
            seen += len(rows)
            t += 1
            adam.step(rows, lr * math.sqrt(1 - BETA2**t) / (1 - BETA1**t))
            if progress is not None:
                progress()
        loss = (adam.total / max(seen, 1)).cpu().numpy()
        curve.append(loss)
        if seen < n:  # an epoch cut by the budget says nothing about convergence
            break
        now = adam.active.cpu().numpy()
        stale = np.where(now, np.where(loss > best - tol, stale + 1, 0), stale)
        best = np.where(now, np.minimum(best, loss), best)
        adam.active &= torch.as_tensor(stale <= n_iter_no_change, device=adam.theta.device)
    search = MinibatchModeSearch(
        n_steps=t,
        n_epochs=len(curve),
        loss_curve=np.array(curve).reshape(len(curve), C),
        converged=~adam.active.cpu().numpy(),
        steps_per_chain=adam.steps.cpu().numpy(),
    )
    return adam.theta.clone(), search


def init_step_budget(n_steps, n_data: int, batch_size: int) -> int:
    """The minibatch Adam steps the MAP start may take: ``n_steps`` itself, or for "auto"
    ``MAX_INIT_EPOCHS`` epochs of ceil(N / |B|) steps (scikit-learn's ``max_iter``), but at
    least ``MIN_INIT_STEPS``.

    The stopping rule, not this budget, is meant to end the search. Epochs bound it on large
    data, where each epoch is many steps; on small data an epoch is a handful of steps and 200
    of them stop Adam short of a mode (the 200-row gap set: 400 steps, test RMSE 0.15, against
    0.10-0.12 where the rule ended the search after 2,500-2,800 steps). At Adam's 1e-3 a weight
    moves at most about 1e-3 a step, so 10,000 steps reach twice as far as the full-data start
    of the HMC estimators (500 steps at 1e-2).

    Examples
    --------
    >>> init_step_budget("auto", 1000, 128), init_step_budget("auto", 160_000, 128)
    (10000, 250000)
    >>> init_step_budget(300, 1000, 128)
    300
    """
    if isinstance(n_steps, str):
        epochs = MAX_INIT_EPOCHS * math.ceil(n_data / min(batch_size, n_data))
        return max(epochs, MIN_INIT_STEPS)
    return int(n_steps)


def _reads_minibatches(target) -> bool:
    found = capabilities(target)
    return found.batch_value_and_grad is not None and found.batch_size is not None


@register
@dataclass(kw_only=True, eq=False, repr=False)
class MAPStart(SettingsObject):
    """Start the chains at a posterior mode, each chain from its own random initialisation.

    The estimators' ``init="map"`` is ``MAPStart()``; ``init=MAPStart(n_steps=200)`` or
    ``set_params(init__n_steps=200)`` changes its budget. The search follows the target: a
    target read a minibatch at a time (the stochastic-gradient samplers') is searched by
    :func:`find_mode_minibatch`, minibatch Adam with scikit-learn's stopping rule at a tolerance
    of :data:`START_TOL` per datum; any other by
    :func:`find_mode`, full-batch Adam with a cosine-decayed learning rate.

    Parameters
    ----------
    n_steps : int or "auto", default="auto"
        The Adam steps the search may take (0: no search, the chains start where they are).
        "auto": 500 full-batch steps, or for a minibatch target :func:`init_step_budget`'s
        epochs, which the stopping rule usually ends first.

    Examples
    --------
    >>> from sklearn_bnn import HMCClassifier
    >>> HMCClassifier(init=MAPStart(n_steps=200)).init.n_steps
    200
    """

    n_steps: object = "auto"

    def _check_params(self) -> None:
        check_scalar_param(self.n_steps, "n_steps", kind="int", low=0, allow=("auto",))

    def budget(self, target) -> int:
        """The steps the search may take on ``target``."""
        self._check_params()
        if not isinstance(self.n_steps, str):
            return int(self.n_steps)
        if _reads_minibatches(target):
            return init_step_budget("auto", int(target.n_data), int(target.batch_size))
        return FULL_BATCH_STEPS

    def find(self, target, position: torch.Tensor, *, seed=0, desc="", verbose=False):
        """Search from ``position`` (C, D), all chains together.

        Parameters
        ----------
        seed : int or numpy.random.SeedSequence, default=0
            The minibatch search's row permutations (the full-batch search draws nothing).
        desc, verbose
            The progress bar's label and whether it shows.

        Returns
        -------
        position : tensor (C, D)
            The end points.
        search : MinibatchModeSearch or None
            What the minibatch search did; None for the full-batch one, or when no step ran.
        """
        budget = self.budget(target)
        if budget == 0:
            return position, None
        bar = tqdm(
            total=budget,
            desc=f"{desc} init (MAP)".strip(),
            disable=not verbose,
            unit="step",
            dynamic_ncols=True,
        )
        with bar:
            if _reads_minibatches(target):
                return find_mode_minibatch(
                    target, position, budget, tol=START_TOL, seed=seed, progress=bar.update
                )
            return find_mode(target, position, budget, progress=bar.update), None


def resolve_start(init):
    """The MAP start ``init`` asks for: ``MAPStart()`` for "map", None for "random", an object
    as it is."""
    if isinstance(init, str):
        if init == "map":
            return MAPStart()
        if init == "random":
            return None
        raise ValueError(f"init must be 'map', 'random' or a MAPStart, got {init!r}.")
    return init
