"""The sampling loop: warmup, then draws, with progress and interrupts.

The one loop of the package: the estimators and the public driver (:func:`.sample`) both run
their kernels through :func:`run_chains`. It knows two protocols only: the kernel's
(``step``, ``acceptance``, ``progress``) and the warmup adaptation's (``init``, ``update``,
``final``, :mod:`.warmup`). Whatever a kernel reports in ``Info.extra`` is kept beside each draw.
"""

from __future__ import annotations

import warnings

import torch
from tqdm.auto import tqdm

from .._utils import flush_subnormals
from ._run import ChainRun
from .warmup import WindowAdaptation

__all__ = ["run_chains"]


@flush_subnormals
def run_chains(
    kernel,
    state,
    generator: torch.Generator,
    *,
    n_warmup: int,
    n_draws: int,
    thin: int = 1,
    step_size="auto",
    target_accept: float = 0.8,
    inv_mass=None,
    adapt_mass: bool = False,
    verbose: bool = False,
    desc: str = "sampling",
    adaptation=None,
) -> ChainRun:
    """Run ``n_warmup`` adaptation transitions, then ``n_draws`` transitions keeping every
    ``thin``-th.

    The step size and inverse mass of each transition come from ``adaptation`` (by default
    :class:`~.warmup.WindowAdaptation` of ``step_size``, ``target_accept``, ``adapt_mass`` and
    ``inv_mass``: dual averaging when ``step_size="auto"``, Stan's mass windows with
    ``adapt_mass``). ``state`` is the kernel's start (``kernel.init(position, generator,
    n_warmup=n_warmup)``). A KeyboardInterrupt stops the loop and returns what was collected,
    flagged ``interrupted``.
    """
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
        _warm_up(kernel, generator, adaptation, n_warmup, record, bar)
        _draw(kernel, generator, n_draws, record, bar)
    except KeyboardInterrupt:
        record.interrupt(n_draws)
    finally:
        bar.close()
    return record.result()


def _warm_up(kernel, generator, adaptation, n_warmup: int, record, bar) -> None:
    """The warmup transitions: the adaptation sees each, and gives the state to go on from and
    the next step size and mass."""
    for i in range(n_warmup):
        state, info = kernel.step(
            record.state, generator, step_size=record.eps, inv_mass=record.inv_mass
        )
        record.n_grad += info.n_grad
        record.warmup_divergent += info.divergent.cpu()
        record.state, record.eps, record.inv_mass = adaptation.update(i, state, info)
        bar.show(i, "warmup", kernel, info, record.warmup_divergent)
    record.eps, record.inv_mass = adaptation.final()


def _draw(kernel, generator, n_draws: int, record, bar) -> None:
    """The sampling transitions at the final step size and mass, every ``thin``-th kept."""
    n_div = torch.zeros(record.state.position.shape[0], dtype=torch.long)
    for i in range(n_draws):
        state, info = kernel.step(
            record.state, generator, step_size=record.eps, inv_mass=record.inv_mass
        )
        record.state = state
        record.n_grad += info.n_grad
        record.transition(i, kernel, info)
        n_div += info.divergent.cpu()
        bar.show(i, "sampling", kernel, info, n_div)


class _Record:
    """The buffers of a run: per-transition statistics, kept draws and their statistics."""

    def __init__(self, state, n_draws: int, thin: int):
        C, D = state.position.shape
        dtype = state.position.dtype
        self.state, self.thin, self.C = state, thin, C
        self.n_kept_max = n_draws // thin
        self.n_done, self.n_kept, self.n_grad, self.interrupted = 0, 0, 0, False
        self.eps = self.inv_mass = None
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
        self.warmup_divergent = torch.zeros(C, dtype=torch.long)
        self.draw_stats = {
            "accept_prob": torch.empty((C, self.n_kept_max), dtype=dtype),
            "divergent": torch.zeros((C, self.n_kept_max), dtype=torch.bool),
            "energy_error": torch.empty((C, self.n_kept_max), dtype=dtype),
        }

    def transition(self, i: int, kernel, info) -> None:
        """Record sampling transition ``i``; keep the state as a draw every ``thin``-th."""
        t = self.per_transition
        t["accept_prob"][:, i] = info.accept_prob.cpu()
        t["accepted"][:, i] = info.accepted.cpu()
        t["acceptance"][:, i] = kernel.acceptance(info).cpu()
        t["divergent"][:, i] = info.divergent.cpu()
        t["energy_error"][:, i] = info.energy_error.cpu()
        self.n_done = i + 1
        if self.n_done % self.thin or self.n_kept >= self.n_kept_max:
            return
        k = self.n_kept
        self.draws[:, k] = self.state.position.cpu()
        self.log_probs[:, k] = self.state.log_prob.cpu()
        self.draw_stats["accept_prob"][:, k] = t["accept_prob"][:, i]
        self.draw_stats["divergent"][:, k] = t["divergent"][:, i]
        self.draw_stats["energy_error"][:, k] = t["energy_error"][:, i]
        for name, value in (info.extra or {}).items():
            if name not in self.draw_stats:  # (C,) or (C, k) per draw
                shape = (self.C, self.n_kept_max, *value.shape[1:])
                self.draw_stats[name] = torch.zeros(shape, dtype=value.dtype)
            self.draw_stats[name][:, k] = value.cpu()
        self.n_kept += 1

    def interrupt(self, n_draws: int) -> None:
        """A KeyboardInterrupt: warn, and keep at least the current position as a draw (so an
        estimator can predict)."""
        self.interrupted = True
        warnings.warn(
            f"sampling interrupted after {self.n_done} of {n_draws} draws; the estimator "
            f"keeps the {self.n_kept} draws collected so far.",
            RuntimeWarning,
            stacklevel=4,
        )
        if self.n_kept == 0:
            self.draws[:, 0] = self.state.position.cpu()
            self.log_probs[:, 0] = self.state.log_prob.cpu()
            for values in self.draw_stats.values():
                values[:, 0] = 0
            self.n_kept = 1

    def result(self) -> ChainRun:
        n_kept, n_done = self.n_kept, self.n_done
        return ChainRun(
            draws=self.draws[:, :n_kept],
            log_prob=self.log_probs[:, :n_kept],
            **{name: values[:, :n_done] for name, values in self.per_transition.items()},
            warmup_divergent=self.warmup_divergent,
            step_size=self.eps.detach().cpu(),
            state=self.state,
            inv_mass=self.inv_mass.detach().cpu(),
            draw_stats={k: v[:, :n_kept] for k, v in self.draw_stats.items()},
            n_grad=self.n_grad,
            interrupted=self.interrupted,
            step_size_origin=self.step_size_origin,
            target_accept=self.target_accept,
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
        acc = torch.nan_to_num(info.accept_prob.detach().double().cpu(), nan=0.0)
        if phase != self.phase:
            self.phase, self.acc_sum, self.n = phase, torch.zeros_like(acc), 0
        self.acc_sum += acc
        self.n += 1
        if i % 10 and i > 0:
            return
        mean = self.acc_sum / self.n
        per_chain = (
            "/".join(f"{a:.2f}" for a in mean.tolist()) if len(mean) <= 8 else f"{mean.mean():.2f}"
        )
        note = kernel.progress(info)
        bar.set_postfix_str(
            f"{phase}{' ' + note if note else ''} acc={per_chain} "
            f"eps={info.step_size.mean().item():.2e} div={int(n_div.sum())}",
            refresh=False,
        )

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()
