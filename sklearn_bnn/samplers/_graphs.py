"""Leapfrog steps captured once as CUDA graphs and replayed.

On a GPU a leapfrog step of a small network is a few dozen tiny kernels whose launches, one
Python call each, cost far more than their arithmetic. A CUDA graph records the kernels of one
step once and replays them with a single launch. Two graphs are recorded per shape: the inner
step (drift, gradient, full kick) and the last step (drift, gradient, half kick), both reading
and writing the same static buffers (position, momentum, log density, gradient, the divergence
flag, the per-chain step size and the inverse mass), so a trajectory of L steps is one copy of
its start into the buffers, L replays and one copy out. The step size, its jitter included, is
an input buffer, so nothing is re-recorded from one transition to the next, and any L (jittered,
or set by an integration time) replays the same two graphs.

The replayed step is the eager leapfrog's (:func:`~.integrators.leapfrog`: the same operations
in the same order) with its multiply-adds fused (one kernel for the drift, one for the kick:
fewer launches, the same arithmetic rounded once), so a replayed trajectory equals the eager one
to float tolerance (``tests/samplers/test_graphs.py``, run where CUDA is), a divergence
included: both run on to a non-finite end, which the Metropolis test rejects.

Recorded only where it is sound: positions on a CUDA device, the plain leapfrog (or the naive
split scheme, which is the same integrator), a diagonal or identity metric, and a target whose
density cannot change under the recorded kernels. A Gibbs block that conditions the target (the
learned noise precision, a hierarchical prior's precisions) makes a new copy of it at each
transition: a :class:`~sklearn_bnn.targets.Target` names the tensors its copies differ by
(``graph_inputs``) and what they share (``graph_family``), so the steps are recorded once on a
copy of their own and each transition copies its values in before the replays. Any other
target is recorded for one object; once a kernel has met more targets than
:data:`MAX_TARGETS`, it falls back to the eager path with one warning saying why. Any failure
to record does the same.
"""

from __future__ import annotations

import torch

from .._config import switch
from .._warnings import warn
from ._base import State
from .geometry.euclidean import DiagonalMetric, IdentityMetric, as_metric
from .hamiltonian.integrators import gradient_only, leapfrog, naive_split

#: Distinct targets one kernel records graphs for before it stops recording (a target that a
#: Gibbs block re-conditions at every transition would otherwise be recorded every time).
MAX_TARGETS = 2

_GRAPHED_INTEGRATORS = (leapfrog, naive_split)


class ConditionedRecording:
    """What a recording reads of its target: the target it was made for (``source``) and, for
    a target whose conditioned copies differ only by their :meth:`graph_inputs` (a Gibbs
    block's), the recording's own buffers of those inputs, filled from the copy at hand before
    each replay."""

    def _follow(self, target):
        """Remember ``target``; the target to record on: ``target`` itself, or a copy
        conditioned on this recording's own input buffers."""
        self.source = target
        self.family = _family(target)
        self.inputs = None
        if self.family is None:
            return target
        self.inputs = tuple(None if t is None else t.detach().clone() for t in _inputs(target))
        return target.with_graph_inputs(self.inputs)

    def reads(self, target) -> bool:
        """Whether the recording computes ``target``'s density: the target recorded on, or a
        copy conditioned on inputs of the same shapes (copied in by :meth:`_load_inputs`)."""
        if target is self.source:
            return True
        if self.family is None or not _same(_family(target), self.family):
            return False
        return all(
            (a is None) == (b is None) and (a is None or a.shape == b.shape)
            for a, b in zip(_inputs(target), self.inputs, strict=True)
        )

    def _load_inputs(self, target) -> None:
        if self.inputs is None:
            return
        for buffer, value in zip(self.inputs, _inputs(target), strict=True):
            if buffer is not None:
                buffer.copy_(value)


class _Recording(ConditionedRecording):
    """The two recorded leapfrog steps of one target, shape and metric layout.

    The buffers: the position ``q`` and momentum ``p``, updated in place; the per-trajectory
    inputs ``step`` (C, 1), ``half`` (C, 1) and ``factor``, the step times the inverse mass,
    (C, D) or (C, 1). A step is then one fused multiply-add for the drift and one for the kick
    around the gradient: the eager leapfrog's arithmetic with the multiply-adds fused (equal to
    float rounding). Only the last step's log density and gradient leave the trajectory: they
    are the tensors the last graph computes them into (``end``), read before the next replay.
    """

    def __init__(self, target, state, momentum, eps, metric, *, record: bool = True):
        self.target = self._follow(target)
        self.q = state.position.detach().clone()
        self.p = momentum.detach().clone()
        self.end = (state.log_prob, state.grad)
        self.step = eps.detach().reshape(-1, 1).clone()
        self.half = 0.5 * self.step
        if isinstance(metric, IdentityMetric):
            self.inv_mass = None
            self.factor = self.step.clone()
        else:
            self.inv_mass = metric.inv_mass.detach().clone()
            self.factor = (self.step * self.inv_mass).expand_as(self.q).clone()
        self.inner = self.last = None  # unrecorded, the steps run eagerly (the CPU tests)
        if record:
            pool = torch.cuda.graph_pool_handle()
            self.inner = self._record(self.step, pool)
            self.last = self._record(self.half, pool)

    def _body(self, kick_step: torch.Tensor) -> None:
        """One leapfrog step on the buffers, in place, the momentum kicked by ``kick_step``
        (the full step inside the trajectory, the half step at its end). Only the last step
        computes the log density; an inner one takes the gradient alone
        (:func:`~.integrators.gradient_only`)."""
        self.q.addcmul_(self.factor, self.p)
        if kick_step is self.half:
            lp_new, grad_new = self.target.value_and_grad(self.q)
            # the last graph's outputs stay allocated in its pool, written at each replay (an
            # inner replay may reuse that memory: run() copies them out before the next one)
            self.end = (lp_new, grad_new)
        else:
            grad_new = gradient_only(self.target)(self.q)
        self.p.addcmul_(kick_step, grad_new)

    def _record(self, kick_step: torch.Tensor, pool) -> torch.cuda.CUDAGraph:
        return record_graph(lambda: self._body(kick_step), (self.q, self.p), pool)

    def _replay(self, graph, kick_step) -> None:
        if graph is None:
            self._body(kick_step)
        else:
            graph.replay()

    def matches(self, target, state: State, eps: torch.Tensor, metric) -> bool:
        q = state.position
        if not self.reads(target) or q.shape != self.q.shape or q.dtype != self.q.dtype:
            return False
        if q.device != self.q.device or eps.numel() != self.step.shape[0]:
            return False
        if self.inv_mass is None:
            return isinstance(metric, IdentityMetric)
        return isinstance(metric, DiagonalMetric) and metric.inv_mass.shape == self.inv_mass.shape

    def run(self, state: State, momentum, eps, n_steps: int, metric, target=None):
        """The trajectory on ``target`` (the recorded one by default): its inputs and the
        start copied in, ``n_steps`` replays, the end copied out."""
        if target is not None:
            self._load_inputs(target)
        self.step.copy_(eps.reshape(-1, 1))
        torch.mul(self.step, 0.5, out=self.half)
        if self.inv_mass is None:
            self.factor.copy_(self.step)
        else:
            torch.mul(self.step, metric.inv_mass, out=self.factor)
        self.q.copy_(state.position)
        torch.addcmul(momentum, self.half, state.grad, out=self.p)
        for _ in range(n_steps - 1):
            self._replay(self.inner, self.step)
        self._replay(self.last, self.half)
        log_prob, grad = self.end
        end = State(self.q.clone(), log_prob.clone(), grad.clone())
        return end, self.p.clone(), n_steps


def record_graph(body, buffers, pool=None) -> torch.cuda.CUDAGraph:
    """``body()`` recorded as a CUDA graph. It first runs twice on a side stream, so that lazy
    initialisations (cuBLAS handles, cached constants) happen outside the recording; the
    ``buffers`` those runs write are restored afterwards."""
    saved = [t.clone() for t in buffers]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        body()
    for buffer, value in zip(buffers, saved, strict=True):
        buffer.copy_(value)
    return graph


def _family(target):
    family = getattr(target, "graph_family", None)
    return None if family is None else family()


def _inputs(target) -> tuple:
    return target.graph_inputs()


def _same(a, b) -> bool:
    """Two graph families alike: every member the same object (numbers equal)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is y or (isinstance(x, float | int) and x == y) for x, y in zip(a, b, strict=True))


class GraphReplayer:
    """What a kernel's replayer of recorded steps keeps across transitions: its ``recording``,
    the ``targets_seen`` besides the recorded one, and ``off_reason``, why CUDA graphs are off
    for it (None while they are on).

    A subclass names, for the one warning of :meth:`_turn_off`, the steps it replays
    (``_replayed``) and what then runs eagerly (``_eager``).
    """

    _replayed = "steps"
    _eager = "Every step"

    def _may_record_for(self, target, why_not: str) -> bool:
        """Whether a recording may still be made for ``target``.

        A target the current recording does not read counts as one more seen; at
        :data:`MAX_TARGETS` of them, graphs are turned off (:meth:`_turn_off` with ``why_not``)
        and False is returned.

        Parameters
        ----------
        target : target object
            The target of the transition about to be recorded.
        why_not : str
            The reason the warning gives when there have been too many targets.

        Returns
        -------
        bool
        """
        if self.recording is not None and not self.recording.reads(target):
            self.targets_seen += 1
        if self.targets_seen >= MAX_TARGETS:
            self._turn_off(why_not)
            return False
        return True

    def _turn_off(self, reason: str) -> None:
        """Run every later transition eagerly, and say so once, with ``reason``."""
        self.off_reason = reason
        self.recording = None
        warn(
            f"CUDA graphs are off for this sampler's {self._replayed}: {reason}. {self._eager} "
            "runs eagerly (the same sampler, more kernel launches).",
            RuntimeWarning,
        )


class GraphedLeapfrog(GraphReplayer):
    """A kernel's leapfrog trajectories, replayed from CUDA graphs where they apply.

    Called as an integrator with the kernel's integrator first:
    ``graphed(integrator, target, state, momentum, eps, n_steps, metric, generator)``. Only
    :func:`~.integrators.leapfrog` (and the naive split scheme, the same steps) is recorded;
    any other integrator, a CPU position, a dense metric or a state with more than a position
    (a Gibbs block's) runs eagerly. Copies (a kernel's ``with_target``) share the recording;
    a pickled or deep-copied one starts without it.
    """

    _replayed = "trajectories"
    _eager = "Every leapfrog step"

    def __init__(self):
        self.recording = None
        self.targets_seen = 0
        self.off_reason = None

    def __getstate__(self):
        return {"recording": None, "targets_seen": 0, "off_reason": self.off_reason}

    def __deepcopy__(self, memo):
        fresh = GraphedLeapfrog()
        fresh.off_reason = self.off_reason
        return fresh

    def __call__(self, integrator, target, state, momentum, eps, n_steps: int, metric, generator):
        if not self._applies(integrator, state, metric):
            return integrator(target, state, momentum, eps, n_steps, metric, generator)
        metric = as_metric(metric)
        rec = self.recording
        if rec is None or not rec.matches(target, state, eps, metric):
            rec = self._record(target, state, momentum, eps, metric)
            if rec is None:
                return integrator(target, state, momentum, eps, n_steps, metric, generator)
        return rec.run(state, momentum, eps, n_steps, metric)

    def _applies(self, integrator, state: State, metric) -> bool:
        if not switch("hmc_cuda_graphs") or self.off_reason is not None:
            return False
        if integrator not in _GRAPHED_INTEGRATORS:
            return False
        if type(state) is not State or not state.position.is_cuda:
            return False
        metric = as_metric(metric)
        if isinstance(metric, IdentityMetric):
            return True
        inv_mass = getattr(metric, "inv_mass", None)
        return isinstance(metric, DiagonalMetric) and isinstance(inv_mass, torch.Tensor)

    def _record(self, target, state, momentum, eps, metric):
        if not self._may_record_for(
            target,
            "the target changes between transitions (a Gibbs block conditions it), so a "
            "recorded trajectory would read the old one",
        ):
            return None
        try:
            self.recording = _Recording(target, state, momentum, eps, metric)
        except Exception as exc:  # noqa: BLE001 - any failure to record means the eager path
            self._turn_off(f"recording failed ({type(exc).__name__}: {exc})")
            return None
        return self.recording
