"""Gibbs blocks composed with a kernel: Metropolis-within-Gibbs, as a kernel wrapper.

Some parameters of a model have a conditional distribution that can be drawn exactly given the
others: the noise precision of a Gaussian regression given the residuals (a conjugate Gamma),
the precision of a group of weights given the weights. Neal (1996, *Bayesian Learning for Neural
Networks*, §3.2) alternates HMC on the weights with such Gibbs draws of the hyperparameters;
NumPyro's ``HMCGibbs`` composes an inner kernel with a user's ``gibbs_fn`` the same way. Each
transition here is

1. one transition of the inner kernel on the conditional density of the position given the
   block's current values (``block.condition(target, values)``), then
2. one exact draw of the block's values given the new position (``block.update``), which also
   re-evaluates the state's cached log density and gradient under the new values.

Both steps leave the joint posterior invariant, so their composition does. The block's values
travel in the chain's state (:class:`GibbsState`), one row per chain, and every draw comes from
the generator of the chain: nothing is stored on the target, the likelihood or the kernel, so a
chain gives the same draws whether the chains run together, one after another or as joblib jobs
on any backend.

A **Gibbs block** is an object with

- ``update(target, state, generator) -> (values (C, k), state)``: draw the values from their
  conditional at ``state.position`` and return the state re-evaluated under them;
- ``condition(target, values) -> target``: the density of the position given the values;
- ``stats(values) -> dict``: per-chain statistics kept beside each draw.

A target declares the blocks its model has with ``gibbs_blocks()`` (the network targets: a
hierarchical prior's precisions, :class:`~sklearn_bnn.targets.PriorPrecisionGibbs`, and the
learned noise precision, :class:`~sklearn_bnn.targets.NoisePrecisionGibbs`); :func:`kernel_for`
wraps a sampler's kernel in one :class:`GibbsKernel`, whose block is :class:`BlockSequence` when
there are several.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..targets import capabilities
from ._base import Info, Kernel, State

__all__ = ["BlockSequence", "GibbsKernel", "GibbsState", "kernel_for", "with_gibbs_blocks"]


class GibbsState(NamedTuple):
    """A position with its cached log density and gradient under the block's ``values``."""

    position: torch.Tensor  # (C, D)
    log_prob: torch.Tensor  # (C,)
    grad: torch.Tensor  # (C, D)
    values: torch.Tensor  # (C, k): the Gibbs block's current values, per chain


class GibbsKernel(Kernel):
    """An inner kernel on the position, alternated with exact draws of a Gibbs block.

    Parameters
    ----------
    inner : Kernel
        Moves the position on the conditional density given the block's values.
    block : object
        The Gibbs block (see the module docstring).

    Examples
    --------
    A regressor with a learned noise precision (``HMCRegressor(noise_precision=None)``) samples
    with ``GibbsKernel(HMC(...).build(target), NoisePrecisionGibbs())``, which
    :func:`kernel_for` builds from the target's ``gibbs_blocks()``.
    """

    def __init__(self, inner: Kernel, block):
        self.inner = inner
        self.block = block
        self.target = inner.target
        self.metric = inner.metric
        self.adapts_step_size = inner.adapts_step_size
        self.adapts_trajectory = inner.adapts_trajectory
        prepares = getattr(block, "needs_warmup_length", hasattr(block, "prepare"))
        self.needs_warmup_length = inner.needs_warmup_length or prepares

    def _inner_state(self, state) -> State:
        return State(state.position, state.log_prob, state.grad)

    def _on_values(self, values) -> Kernel:
        """The inner kernel on the conditional density given ``values``."""
        return self.inner.with_target(self.block.condition(self.target, values))

    def _draw(self, state, generator: torch.Generator, previous=None) -> GibbsState:
        """The block's update; with the values of the chain's previous draw (``previous``),
        from the target conditioned on them (a block that reads the likelihood, as the
        interweaving move, then sees the chain's own noise precision), and handed to a block
        that reads its own (``takes_previous``: the interweaving move's adapted scales)."""
        target = self.target if previous is None else self.block.condition(self.target, previous)
        kwargs = {"previous": previous} if getattr(self.block, "takes_previous", False) else {}
        values, state = self.block.update(target, self._inner_state(state), generator, **kwargs)
        return GibbsState(state.position, state.log_prob, state.grad, values)

    def init(self, position, generator=None, *, n_warmup: int = 0) -> GibbsState:
        """The inner kernel's start, then a first draw of the block given it (none for a block
        without values, ``initial_draw = False``: a move of the position only, which a chain
        continued by a warm start then takes exactly as the same chain run in one go). A block
        with a ``prepare(n_warmup)`` is told the warmup length (to adapt in it only)."""
        prepare = getattr(self.block, "prepare", None)
        if prepare is not None:
            prepare(n_warmup)
        state = self.inner.init(position, generator, n_warmup=n_warmup)
        if not getattr(self.block, "initial_draw", True):
            empty = state.position.new_zeros((state.position.shape[0], 0))
            return GibbsState(state.position, state.log_prob, state.grad, empty)
        return self._draw(state, generator)

    def step(self, state: GibbsState, generator, step_size=None, inv_mass=None, **options):
        """One inner transition given the block's values, then one draw of the values.

        The re-evaluation under the new values costs one gradient, counted in ``n_grad``; the
        block's statistics join ``info.extra`` (kept beside each draw by the loop). Other
        ``options`` (an adapted ``trajectory``) go to the inner kernel.
        """
        moved, info = self._on_values(state.values).step(
            self._inner_state(state), generator, step_size=step_size, inv_mass=inv_mass,
            **options,
        )  # fmt: skip
        new = self._draw(moved, generator, state.values)
        extra = {**(info.extra or {}), **self.block.stats(new.values)}
        return new, info._replace(n_grad=info.n_grad + 1, extra=extra)

    def local_target(self, state):
        return self.block.condition(self.target, state.values)

    def trajectory_schedule(self, n_warmup: int, step_size):
        return self.inner.trajectory_schedule(n_warmup, step_size)

    def final_step_size(self, step_size):
        return self.inner.final_step_size(step_size)

    def acceptance(self, info: Info) -> torch.Tensor:
        return self.inner.acceptance(info)

    def describe(self, stats: dict) -> dict:
        return self.inner.describe(stats)

    def progress(self, info: Info) -> str:
        return self.inner.progress(info)


class BlockSequence:
    """Several Gibbs blocks as one: each drawn in turn given the others (a systematic-scan
    Gibbs sweep), their values side by side in the state (C, k_1 + k_2 + ...).

    Block j is drawn from its conditional on the target conditioned on the blocks before it
    (already drawn this sweep); a block's draw depends on the position only, so the blocks
    before the last are drawn with their ``draw(target, state, generator)`` when they have one
    (no re-evaluation), and the last block's ``update`` re-evaluates the state under all the new
    values. A block that moves the position (``moves_position``, e.g. the unit rescaling of
    :class:`~sklearn_bnn.targets.UnitRescaleGibbs`) gives its moved position by ``move(target,
    state, generator) -> (values, position)``; the blocks after it see that position, and the
    last block's re-evaluation covers it. Every draw leaves its conditional invariant, so the
    sweep leaves the joint posterior invariant.

    Parameters
    ----------
    blocks : list
        The Gibbs blocks, in the order they are drawn.
    """

    def __init__(self, blocks):
        self.blocks = list(blocks)
        self.widths = None  # columns of each block's values, known from the first draw
        self.takes_previous = any(getattr(b, "takes_previous", False) for b in self.blocks)
        self.needs_warmup_length = any(hasattr(b, "prepare") for b in self.blocks)

    def prepare(self, n_warmup: int) -> None:
        """Tell the blocks that adapt in warmup its length."""
        for block in self.blocks:
            if hasattr(block, "prepare"):
                block.prepare(n_warmup)

    def update(self, target, state, generator: torch.Generator, previous=None):
        parts = []
        olds = [None] * len(self.blocks) if previous is None else self._split(previous)
        for block, old in zip(self.blocks[:-1], olds[:-1], strict=True):
            draw = getattr(block, "draw", None)
            kwargs = {"previous": old} if getattr(block, "takes_previous", False) else {}
            if getattr(block, "moves_position", False):
                # the cached density is stale until the last block's update re-evaluates it
                values, position = block.move(target, state, generator, **kwargs)
                state = type(state)(position, state.log_prob, state.grad)
            elif draw is None:
                values, state = block.update(target, state, generator)
            else:
                values = draw(target, state, generator)
            target = block.condition(target, values)
            parts.append(values)
        last = self.blocks[-1]
        kwargs = {"previous": olds[-1]} if getattr(last, "takes_previous", False) else {}
        values, state = last.update(target, state, generator, **kwargs)
        parts.append(values)
        self.widths = [p.shape[1] for p in parts]
        return torch.cat(parts, 1), state

    def _split(self, values: torch.Tensor):
        if self.widths is None:
            raise RuntimeError("BlockSequence: the values are split after a first update.")
        return values.split(self.widths, 1)

    def condition(self, target, values: torch.Tensor):
        for block, part in zip(self.blocks, self._split(values), strict=True):
            target = block.condition(target, part)
        return target

    def stats(self, values: torch.Tensor) -> dict:
        out = {}
        for block, part in zip(self.blocks, self._split(values), strict=True):
            out.update(block.stats(part))
        return out


def with_gibbs_blocks(kernel: Kernel, target) -> Kernel:
    """``kernel`` composed with the Gibbs blocks ``target`` declares (``gibbs_blocks()``;
    several as one :class:`BlockSequence`), or ``kernel`` itself when it declares none.

    A kernel confined to a region (``kernel.confined``: constrained HMC's box, bridged HMC's
    boxes) drops the blocks that move the position (``moves_position``), which could leave it,
    or takes their ``without_move()`` where they have one (the precisions' plain draw).
    """
    blocks = capabilities(target).gibbs_blocks
    blocks = [] if blocks is None else list(blocks())
    if getattr(kernel, "confined", False):
        blocks = [
            b.without_move() if hasattr(b, "without_move") else b
            for b in blocks
            if hasattr(b, "without_move") or not getattr(b, "moves_position", False)
        ]
    if not blocks:
        return kernel
    return GibbsKernel(kernel, blocks[0] if len(blocks) == 1 else BlockSequence(blocks))


def kernel_for(sampler, target) -> Kernel:
    """The kernel of ``sampler`` on ``target``, with the target's Gibbs blocks."""
    return with_gibbs_blocks(sampler.build(target), target)
