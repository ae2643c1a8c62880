"""The sampling loop: warmup, then draws, with progress and interrupts.

The one loop of the package: the estimators and the public driver (:func:`.sample`) both run
their kernels through :func:`run_chains`. It knows two protocols only: the kernel's
(``step``, ``acceptance``, ``progress``) and the warmup adaptation's (``init``, ``update``,
``final``, and ``trajectory`` for a kernel that ``adapts_trajectory``; :mod:`.warmup`). Whatever
a kernel reports in ``Info.extra`` is kept beside each draw.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from ..._config import switch
from ..._utils import flush_subnormals
from ..._warnings import warn
from ..adaptation.warmup import WindowAdaptation
from ..defaults import TARGET_ACCEPT
from ._records import ChainRun
from .budget import DrawRule, WarmupRule

__all__ = ["run_chains"]


@flush_subnormals
def run_chains(
    kernel,
    state,
    generator: torch.Generator,
    *,
    n_warmup: int | WarmupRule,
    n_draws: int | DrawRule,
    thin: int = 1,
    step_size="auto",
    target_accept: float = TARGET_ACCEPT,
    inv_mass=None,
    adapt_mass: bool = False,
    verbose: bool = False,
    desc: str = "sampling",
    adaptation=None,
) -> ChainRun:
    """Run ``n_warmup`` adaptation transitions, then ``n_draws`` transitions keeping every
    ``thin``-th.

    Either budget may be a rule instead of a number (:mod:`.budget`): a
    :class:`~.budget.WarmupRule` ends the warmup once the adapted step size has settled (for a
    kernel whose step size is adapted without a mass or an integration time, whose schedules
    need the length in advance: those run ``max_warmup`` transitions; a kernel with a step-size
    schedule of its own runs ``min_warmup``), a :class:`~.budget.DrawRule` stops sampling once
    every chain is stationary and the draws are precise enough, moving the draws a failing
    chain has not yet forgotten its start in into warmup.

    The step size and inverse mass of each transition come from ``adaptation`` (by default
    :class:`~.warmup.WindowAdaptation` of ``step_size``, ``target_accept``, ``adapt_mass`` and
    ``inv_mass``: dual averaging when ``step_size="auto"``, Stan's mass windows with
    ``adapt_mass``). ``state`` is the kernel's start (``kernel.init(position, generator,
    n_warmup=n_warmup)``). A KeyboardInterrupt stops the loop and returns what was collected,
    flagged ``interrupted``.
    """
    warmup_rule = n_warmup if isinstance(n_warmup, WarmupRule) else None
    n_warmup, stops_early = warmup_length(n_warmup, kernel, adapt_mass)
    draw_rule = n_draws if isinstance(n_draws, DrawRule) else None
    if draw_rule is not None:
        n_draws = draw_rule.max_draws * thin
    if adaptation is None:
        adaptation = WindowAdaptation(
            n_warmup,
            step_size=step_size,
            target_accept=target_accept,
            adapt_mass=adapt_mass,
            inv_mass=inv_mass,
        )
    record = _Record(state, n_draws, thin)
    record.eps, record.inv_mass = adaptation.init(kernel, state, generator)
    if getattr(kernel, "adapts_trajectory", False):  # the warmup's schedule, every transition
        record.step_options = {"trajectory": getattr(adaptation, "trajectory", None)}
    record.step_size_origin = getattr(adaptation, "step_size_origin", "given")
    record.target_accept = getattr(adaptation, "target_accept", None)
    bar = _Progress(
        tqdm(
            total=n_warmup + n_draws,
            desc=desc,
            disable=not verbose,
            leave=True,
            unit="draw",
            dynamic_ncols=True,
        )
    )
    try:
        rule = warmup_rule if stops_early else None
        _warm_up(kernel, generator, adaptation, n_warmup, record, bar, rule)
        _draw(kernel, generator, n_draws, record, bar, draw_rule)
    except KeyboardInterrupt:
        record.interrupt(n_draws)
    finally:
        bar.close()
    return record.result()


def warmup_length(n_warmup, kernel, adapt_mass) -> tuple[int, bool]:
    """The warmup transitions to plan for (what the adaptation's schedules and the kernel's
    ``init`` are told), and whether the loop may end the warmup earlier.

    Parameters
    ----------
    n_warmup : int or WarmupRule
    kernel : Kernel
    adapt_mass : bool or "auto"
        The run's mass adaptation ("auto": for kernels that adapt their step size).
    """
    if not isinstance(n_warmup, WarmupRule):
        return int(n_warmup), False
    if not kernel.adapts_step_size:  # a schedule of its own: nothing settles
        return n_warmup.min_warmup, False
    mass = adapt_mass is True or adapt_mass == "auto"
    fixed_schedule = (
        (mass and kernel.metric is None) or kernel.adapts_trajectory or kernel.needs_warmup_length
    )
    return n_warmup.max_warmup, not fixed_schedule


def _warm_up(kernel, generator, adaptation, n_warmup: int, record, bar, rule=None) -> None:
    """The warmup transitions: the adaptation sees each, and gives the state to go on from and
    the next step size and mass. With a :class:`~.budget.WarmupRule`, the warmup ends once the
    step size has settled."""
    n_div = record.warmup_divergent
    history = []
    for i in range(n_warmup):
        state, info = kernel.step(
            record.state, generator, step_size=record.eps, inv_mass=record.inv_mass,
            **record.step_options,
        )  # fmt: skip
        record.n_grad += info.n_grad
        n_div += info.divergent.to(n_div.device)
        record.state, record.eps, record.inv_mass = adaptation.update(i, state, info)
        record.n_warmup = i + 1
        bar.show(i, "warmup", kernel, info, n_div)
        if rule is not None:
            history.append(adaptation.averaged_step_size())
            if rule.settled(i, history):
                bar.skip(n_warmup - i - 1)
                break
    record.eps, record.inv_mass = adaptation.final()


def _draw(kernel, generator, n_draws: int, record, bar, rule=None) -> None:
    """The sampling transitions at the final step size and mass, every ``thin``-th kept; with
    a :class:`~.budget.DrawRule`, until it says stop."""
    n_div = torch.zeros_like(record.warmup_divergent)
    for i in range(n_draws):
        state, info = kernel.step(
            record.state, generator, step_size=record.eps, inv_mass=record.inv_mass,
            **record.step_options,
        )  # fmt: skip
        record.state = state
        record.n_grad += info.n_grad
        record.transition(i, kernel, info)
        n_div += info.divergent.to(n_div.device)
        bar.show(i, "sampling", kernel, info, n_div)
        if rule is not None and rule.due(record.n_kept - record.start, record.n_kept):
            record.flush()
            window = slice(record.start, record.n_kept)
            done, drop = rule.check(record.draws[:, window], record.log_probs[:, window])
            record.start += drop
            if done:
                bar.skip(n_draws - i - 1)
                break
    record.flush()


class _Record:
    """The buffers of a run: per-transition statistics, kept draws and their statistics.

    They live on the host. On an accelerator, each transition's values are first copied into
    buffers on the device (no wait for the device) and moved to the host together, every
    :attr:`chunk` transitions and at the end: one transfer per quantity per chunk instead of
    several host synchronisations per transition. On the CPU they are written
    directly.
    """

    #: Device memory for the staged draws (bytes): the chunk is as many transitions as fit.
    STAGE_BYTES = 64 * 2**20
    #: At most this many transitions staged between two transfers.
    MAX_CHUNK = 50

    def __init__(self, state, n_draws: int, thin: int):
        C, D = state.position.shape
        dtype = state.position.dtype
        device = state.position.device
        self.state, self.thin, self.C = state, thin, C
        self.n_kept_max = n_draws // thin
        self.n_done, self.n_kept, self.n_grad, self.interrupted = 0, 0, 0, False
        self.n_warmup = 0  # warmup transitions run
        self.start = 0  # kept draws before this one became warmup (a DrawRule's burn-in)
        self.eps = self.inv_mass = None
        self.step_options = {}  # other arguments of every step (an adapted trajectory)
        self.step_size_origin, self.target_accept = "given", None
        self.draws = torch.empty((C, self.n_kept_max, D), dtype=dtype)
        self.log_probs = torch.empty((C, self.n_kept_max), dtype=dtype)
        self.per_transition = {
            "accept_prob": torch.empty((C, n_draws), dtype=dtype),
            "accepted": torch.zeros((C, n_draws), dtype=torch.bool),
            "acceptance": torch.empty((C, n_draws), dtype=torch.float64),
            "divergent": torch.zeros((C, n_draws), dtype=torch.bool),
            "energy_error": torch.empty((C, n_draws), dtype=dtype),
        }
        self.draw_stats = {
            "accept_prob": torch.empty((C, self.n_kept_max), dtype=dtype),
            "divergent": torch.zeros((C, self.n_kept_max), dtype=torch.bool),
            "energy_error": torch.empty((C, self.n_kept_max), dtype=dtype),
        }
        self.staged = device.type != "cpu" or switch("stage_draws_on_cpu")
        self.warmup_divergent = torch.zeros(C, dtype=torch.long, device=device)
        if self.staged:
            per_draw = max(1, C * D * dtype.itemsize)
            self.chunk = int(min(self.MAX_CHUNK, max(1, self.STAGE_BYTES // per_draw)))
            self.stage = {}  # name -> device buffer (C, chunk, ...), made at first use
            self.stage_transitions = []  # (transition index, kept index or None) staged

    def _put(self, name: str, host: torch.Tensor, index: int, slot: int, value) -> None:
        """``host[:, index] = value`` now (CPU), or staged in slot ``slot`` (accelerator)."""
        if not self.staged:
            host[:, index] = value.cpu()
            return
        buffer = self.stage.get(name)
        if buffer is None:
            shape = (self.C, self.chunk, *value.shape[1:])
            buffer = torch.empty(shape, dtype=host.dtype, device=value.device)
            self.stage[name] = buffer
        buffer[:, slot] = value

    def transition(self, i: int, kernel, info) -> None:
        """Record sampling transition ``i``; keep the state as a draw every ``thin``-th."""
        t = self.per_transition
        slot = len(self.stage_transitions) if self.staged else 0
        values = {
            "accept_prob": info.accept_prob,
            "accepted": info.accepted,
            "acceptance": kernel.acceptance(info),
            "divergent": info.divergent,
            "energy_error": info.energy_error,
        }
        for name, value in values.items():
            self._put(name, t[name], i, slot, value)
        self.n_done = i + 1
        keep = not (self.n_done % self.thin or self.n_kept >= self.n_kept_max)
        if keep:
            k = self.n_kept
            slot = (
                sum(1 for _, kept in self.stage_transitions if kept is not None)
                if self.staged
                else 0
            )
            self._put("draws", self.draws, k, slot, self.state.position)
            self._put("log_probs", self.log_probs, k, slot, self.state.log_prob)
            for name, value in (info.extra or {}).items():
                if name not in self.draw_stats:  # (C,) or (C, k) per draw
                    shape = (self.C, self.n_kept_max, *value.shape[1:])
                    self.draw_stats[name] = torch.zeros(shape, dtype=value.dtype)
                self._put("extra:" + name, self.draw_stats[name], k, slot, value)
            if not self.staged:
                self._copy_draw_stats(i, k)
            self.n_kept += 1
        if self.staged:
            self.stage_transitions.append((i, self.n_kept - 1 if keep else None))
            if len(self.stage_transitions) == self.chunk:
                self.flush()

    def _copy_draw_stats(self, i: int, k: int) -> None:
        """A kept draw's statistics, from transition ``i``'s (already on the host)."""
        for name in ("accept_prob", "divergent", "energy_error"):
            self.draw_stats[name][:, k] = self.per_transition[name][:, i]

    def flush(self) -> None:
        """Move the staged transitions to the host (nothing on the CPU)."""
        if not self.staged or not self.stage_transitions:
            return
        staged, n = self.stage_transitions, len(self.stage_transitions)
        first = staged[0][0]
        for name, host in self.per_transition.items():
            host[:, first : first + n] = self.stage[name][:, :n].cpu()
        kept = [(i, k) for i, k in staged if k is not None]  # staged in slots 0, 1, ...
        if kept:
            k0, m = kept[0][1], len(kept)
            self.draws[:, k0 : k0 + m] = self.stage["draws"][:, :m].cpu()
            self.log_probs[:, k0 : k0 + m] = self.stage["log_probs"][:, :m].cpu()
            for name, buffer in self.stage.items():
                if name.startswith("extra:"):
                    host = self.draw_stats[name[len("extra:") :]]
                    host[:, k0 : k0 + m] = buffer[:, :m].cpu()
            for i, k in kept:
                self._copy_draw_stats(i, k)
        self.stage_transitions = []

    def interrupt(self, n_draws: int) -> None:
        """A KeyboardInterrupt: warn, and keep at least the current position as a draw (so an
        estimator can predict)."""
        self.interrupted = True
        self.flush()
        warn(
            f"sampling interrupted after {self.n_done} of {n_draws} draws; the estimator "
            f"keeps the {self.n_kept} draws collected so far.",
            RuntimeWarning,
        )
        self.start = min(self.start, max(self.n_kept - 1, 0))  # keep what was drawn
        if self.n_kept == 0:
            self.draws[:, 0] = self.state.position.cpu()
            self.log_probs[:, 0] = self.state.log_prob.cpu()
            for values in self.draw_stats.values():
                values[:, 0] = 0
            self.n_kept = 1

    def result(self) -> ChainRun:
        n_kept, n_done = self.n_kept, self.n_done
        first, burned = self.start, self.start * self.thin  # draws moved into warmup
        kept = slice(first, n_kept)
        return ChainRun(
            draws=self.draws[:, kept],
            log_prob=self.log_probs[:, kept],
            **{name: values[:, burned:n_done] for name, values in self.per_transition.items()},
            warmup_divergent=self.warmup_divergent.cpu()
            + self.per_transition["divergent"][:, :burned].sum(1),
            step_size=self.eps.detach().cpu(),
            state=self.state,
            inv_mass=self.inv_mass.detach().cpu(),
            draw_stats={k: v[:, kept] for k, v in self.draw_stats.items()},
            n_grad=self.n_grad,
            interrupted=self.interrupted,
            step_size_origin=self.step_size_origin,
            target_accept=self.target_accept,
            n_warmup=self.n_warmup + burned,
        )


class _Progress:
    """The progress bar and what its postfix shows.

    The acceptance shown is the running mean of each chain's acceptance probability over the
    current phase (warmup, then sampling; the mean restarts at the phase change), as Stan and
    NumPyro show it: the last transition's alone flickers between 0 and 1 with the jittered
    step size.

    Parameters
    ----------
    bar : tqdm.tqdm
        The bar to update (disabled when the run is not verbose).
    """

    def __init__(self, bar):
        self.bar = bar
        self.phase = None
        self.acc_sum = None
        self.n = 0

    def show(self, i: int, phase: str, kernel, info, n_div) -> None:
        """Count transition ``i`` of ``phase`` and, every tenth, refresh the postfix.

        Parameters
        ----------
        i : int
            The transition's index within its phase.
        phase : str
            ``"warmup"`` or ``"sampling"``; a new phase restarts the running mean.
        kernel : Kernel
            The kernel, asked for its own few words (``kernel.progress(info)``).
        info : Info
            The transition's statistics.
        n_div : torch.Tensor
            The divergences of the phase so far, per chain.
        """
        bar = self.bar
        bar.update(1)
        if bar.disable:
            return
        # summed where it is: the host reads it at a refresh only, once in ten transitions
        acc = torch.nan_to_num(info.accept_prob.detach().double(), nan=0.0)
        if phase != self.phase:
            self.phase, self.acc_sum, self.n = phase, torch.zeros_like(acc), 0
        self.acc_sum += acc
        self.n += 1
        if i % 10 and i > 0:
            return
        mean = self.acc_sum.cpu() / self.n
        per_chain = (
            "/".join(f"{a:.2f}" for a in mean.tolist()) if len(mean) <= 8 else f"{mean.mean():.2f}"
        )
        note = kernel.progress(info)
        bar.set_postfix_str(
            f"{phase}{' ' + note if note else ''} acc={per_chain} "
            f"eps={info.step_size.mean().item():.2e} div={int(n_div.sum())}",
            refresh=False,
        )

    def skip(self, n: int) -> None:
        """Count ``n`` planned transitions that an adaptive budget left out."""
        if n > 0:
            self.bar.total -= n
            self.bar.refresh()

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()
