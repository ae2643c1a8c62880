"""The minibatch MAP search's Adam steps, replayed from CUDA graphs on a GPU.

The stochastic-gradient estimators start their chains at a mode found by minibatch Adam
(:func:`~sklearn_bnn.samplers.starts.find_mode_minibatch`): up to 200 epochs of minibatch steps.
Launched one operation at a time, a step of a small network on a GPU costs its kernel launches,
not its arithmetic (docs/sgmcmc.md, "The MAP start on a GPU", has the timings). Here the step is one
function on fixed buffers (position, Adam's two moments, the epoch's loss total, the per-chain step
counts and stopping mask), run as it is on the CPU and recorded once per batch size as a CUDA graph
on a GPU (an epoch's batches have at most two sizes, ceil and floor of N / ceil(N / |B|)); the
step's learning rate, which changes with the step count, is a buffer filled before each replay. The
replayed step is the eager one: ``tests/samplers/test_adam_graphs.py`` compares them where CUDA is.
"""

from __future__ import annotations

import torch

from .._config import switch
from .._warnings import warn
from ..targets import capabilities
from ._graphs import record_graph

BETA1, BETA2, TINY = 0.9, 0.999, 1e-8


class AdamSteps:
    """Minibatch Adam on ``target`` from ``theta`` (C, D), one :meth:`step` per batch.

    Attributes ``theta``, ``m``, ``v`` (C, D); ``total`` (C,) float64, the epoch's running sum of
    the per-datum loss weighted by the batch's share of the data; ``steps`` (C,) the steps each
    chain took; ``active`` (C,) bool, the chains still searching (a stopped chain keeps its
    weights). ``record`` None: record on a CUDA device with resident data (the default), False:
    never (the steps run eagerly on the buffers).
    """

    def __init__(self, target, theta: torch.Tensor, record: bool | None = None):
        self.target = target
        self.n = int(target.n_data)
        self.theta = theta.detach().clone()
        self.m = torch.zeros_like(self.theta)
        self.v = torch.zeros_like(self.theta)
        C = self.theta.shape[0]
        self.total = torch.zeros(C, dtype=torch.float64, device=self.theta.device)
        self.steps = torch.zeros(C, dtype=torch.long, device=self.theta.device)
        self.active = torch.ones(C, dtype=torch.bool, device=self.theta.device)
        if record is None:
            resident = capabilities(target).batch_device is not None
            record = switch("map_cuda_graphs") and self.theta.is_cuda and resident
        self.record = record
        self.lr = torch.zeros((), dtype=self.theta.dtype, device=self.theta.device)
        self.graphs = {}  # batch size -> (rows buffer, graph)
        self.off_reason = None

    def _body(self, rows, lr) -> None:
        """One Adam step on the batch ``rows`` at learning rate ``lr``, in place."""
        value, grad = self.target.batch_value_and_grad(self.theta, rows)
        self.total += value.detach().double() * (-len(rows) / self.n)
        grad = grad.mul_(-1.0 / self.n)  # the per-datum potential's gradient
        self.m.mul_(BETA1).add_(grad, alpha=1 - BETA1)
        self.v.mul_(BETA2).addcmul_(grad, grad, value=1 - BETA2)
        proposal = self.theta - lr * self.m / (self.v.sqrt() + TINY)
        ok = torch.isfinite(proposal).all(-1) & self.active
        torch.where(ok[:, None], proposal, self.theta, out=self.theta)
        self.steps += self.active

    def step(self, rows, lr: float) -> None:
        """One step on ``rows`` (sorted indices: a tensor on the data's device, or numpy)."""
        if not self.record or self.off_reason is not None or not isinstance(rows, torch.Tensor):
            self._body(rows, lr)
            return
        recorded = self.graphs.get(rows.shape[0])
        if recorded is None:
            recorded = self._record(rows)
            if recorded is None:
                self._body(rows, lr)
                return
        buffer, graph = recorded
        buffer.copy_(rows)
        self.lr.fill_(lr)
        graph.replay()

    def _record(self, rows):
        buffers = (self.theta, self.m, self.v, self.total, self.steps)
        saved = [t.clone() for t in buffers]  # as they were, should the recording fail midway
        buffer = rows.clone()
        try:
            graph = record_graph(lambda: self._body(buffer, self.lr), buffers)
        except Exception as exc:  # noqa: BLE001 - any failure to record means the eager path
            for target, value in zip(buffers, saved, strict=True):
                target.copy_(value)
            self.off_reason = f"recording failed ({type(exc).__name__}: {exc})"
            warn(
                f"CUDA graphs are off for the MAP search's Adam steps: {self.off_reason}. "
                "Every step runs eagerly (the same search, more kernel launches).",
                RuntimeWarning,
            )
            return None
        self.graphs[rows.shape[0]] = (buffer, graph)
        return buffer, graph
