"""SGLD and SGHMC minibatch steps captured once as a CUDA graph and replayed.

A minibatch step of a small network (a batch of 128 rows by default) is a few dozen tiny
kernels on a GPU, each launched from Python, and the eager kernels read one flag on the host
per step to test for a divergence: launch-bound, an eager epoch on a GPU is no faster than on
the CPU (docs/sgmcmc.md, "On a GPU: minibatch steps replayed from a CUDA graph"). Here the step is
recorded once as a CUDA graph over static buffers (position, momentum, value, gradient, the batch's
row indices, the step's normal draws, the step-size coefficients and the per-chain divergence count)
and replayed at every step: three small launches and one replay a step, nothing read on the host
inside a transition.

What the replayed step computes is the eager step's (:meth:`_UnadjustedKernel._move`, the same
function) with the divergence test done on the device: a chain whose new position, value or
gradient is not finite keeps its old state and takes a fresh momentum from N(0, T M), as the
eager kernel does, counted in the same per-chain count. The batches are the eager kernel's (the
same permutations, drawn on the device) and the step's normal draws come from the sampler's
generator in the same order, so until a divergence the replayed transition is the eager one to
float rounding (``tests/samplers/test_sg_graphs.py``). The fresh momenta of divergent chains
come from a second generator seeded from the first (drawn every step, used where a chain
diverged): the same distribution, another stream.

Recorded where it is sound: positions on a CUDA device and data resident there
(:class:`~sklearn_bnn.targets.MinibatchTarget` with ``batch_device``). A Gibbs block that
conditions the target anew at every transition (the regressors' learned noise precision) makes
copies that differ by their :meth:`graph_inputs`: one recording serves them all, their values
copied in before the replays. A target that changes otherwise, or a failure to record, turns
recording off for the sampler with one warning saying why, and the eager steps run.
"""

from __future__ import annotations

import torch

from ..._config import switch
from .._graphs import ConditionedRecording, GraphReplayer, record_graph


class _Buffers:
    """Per-step work buffers the recorded step reads and writes (as the eager ``_Scratch``,
    whose ``spare`` the eager steps swap: here the next position is always written there)."""

    __slots__ = ("noise", "spare", "tmp")

    def __init__(self, theta: torch.Tensor, noise: torch.Tensor):
        self.noise = noise
        self.tmp = torch.empty_like(theta)
        self.spare = torch.empty_like(theta)


class DrawnNoise:
    """The step's normal draws, made before the replay into fixed buffers; the kernel's
    ``_noise`` takes them in order instead of drawing."""

    def __init__(self, buffers):
        self.buffers = buffers
        self.used = 0

    def take(self) -> torch.Tensor:
        buffer = self.buffers[self.used]
        self.used += 1
        return buffer


class _SGRecording(ConditionedRecording):
    """One recorded minibatch step of one kernel configuration, target and shape.

    A target whose conditioned copies differ only by :meth:`graph_inputs` (a Gibbs block's
    learned noise precision) is recorded on a copy of its own, conditioned on buffers that
    each transition fills with the current copy's values (as :mod:`._graphs` does).
    """

    def __init__(self, kernel, theta, value, grad, coef, mass, rows, *, record: bool = True):
        target = self._follow(kernel.target)
        # bound to the target the recorded step evaluates
        self.kernel = kernel if target is kernel.target else kernel.with_target(target)
        self.integrator = getattr(kernel, "integrator", None)
        self.theta = theta.detach().clone()
        self.value = value.detach().clone()
        self.grad = grad.detach().clone()
        self.m = torch.zeros_like(self.theta)
        self.rows = rows.clone()
        self.noises = [torch.zeros_like(self.theta) for _ in range(kernel.draws_per_step)]
        self.fresh = torch.zeros_like(self.theta)
        self.coef = tuple(c.detach().clone() for c in coef)
        self.mass = None if mass is None else tuple(t.detach().clone() for t in mass)
        self.momentum_scale = self._momentum_scale(kernel, self.mass).to(self.theta).clone()
        self.n_div = torch.zeros(self.theta.shape[0], dtype=torch.long, device=self.theta.device)
        self.fresh_gen = torch.Generator(device=self.theta.device)
        self.graph = None  # unrecorded: the step runs eagerly on the buffers (the CPU tests)
        if record:
            self.graph = self._record()

    def _momentum_scale(self, kernel, mass):
        """sqrt(T M): the scale of a divergent chain's fresh momentum (zero at T = 0)."""
        inv_mass = torch.ones_like(self.theta[:, :1]) if mass is None else mass[0]
        return (kernel.temperature / inv_mass).sqrt()

    def _body(self) -> None:
        """One minibatch step on the buffers, in place."""
        kernel = self.kernel
        work = _Buffers(self.theta, self.noises[0])
        drawn = DrawnNoise(self.noises)
        new_theta, new_value, new_grad = kernel._move(
            self.theta, self.m, self.grad, self.coef, self.mass, work, drawn, self.rows
        )
        ok = kernel._finite(new_value, new_grad, new_theta)
        keep = ok[:, None]
        self.n_div.add_(~ok)
        torch.where(keep, new_theta, self.theta, out=self.theta)
        torch.where(ok, new_value, self.value, out=self.value)
        torch.where(keep, new_grad, self.grad, out=self.grad)
        fresh = self.fresh.mul(self.momentum_scale)
        torch.where(keep, self.m, fresh, out=self.m)

    def _record(self) -> torch.cuda.CUDAGraph:
        return record_graph(self._body, (self.theta, self.value, self.grad, self.m, self.n_div))

    def matches(self, kernel, theta, mass) -> bool:
        if not self.reads(kernel.target):
            return False
        if getattr(kernel, "integrator", None) != self.integrator:
            return False
        if theta.shape != self.theta.shape or theta.dtype != self.theta.dtype:
            return False
        if theta.device != self.theta.device or kernel.rows_per_batch != self.rows.shape[0]:
            return False
        if (mass is None) != (self.mass is None):
            return False
        if mass is not None and mass[0].shape != self.mass[0].shape:
            return False
        return len(self.noises) == kernel.draws_per_step

    def transition(self, kernel, theta, value, grad, m, eps0, mass, generator):
        """The transition's minibatch steps from ``(theta, value, grad, m)``: the buffers
        loaded, one replay per batch, the end state and per-chain divergence counts copied out."""
        self._load_inputs(kernel.target)
        self.theta.copy_(theta)
        self.value.copy_(value)
        self.grad.copy_(grad)
        self.m.copy_(m)
        self.n_div.zero_()
        if mass is not None:
            for buffer, new in zip(self.mass, mass, strict=True):
                buffer.copy_(new)
            self.momentum_scale.copy_(self._momentum_scale(kernel, mass))
        scheduled = kernel.warmup_step_size is not None and kernel._transition < kernel.n_warmup
        coef = None
        for i, rows in enumerate(kernel._batches(generator)):
            if coef is None or scheduled:
                coef = kernel._coefficients(kernel._eps(eps0, i), mass)
                for buffer, new in zip(self.coef, coef, strict=True):
                    buffer.copy_(new)
            self.rows.copy_(rows)
            for noise in self.noises:  # in the eager kernel's order, from its generator
                noise.normal_(generator=generator)
            self.fresh.normal_(generator=self.fresh_gen)
            if self.graph is None:
                self._body()
            else:
                self.graph.replay()
        m.copy_(self.m)  # the momentum goes on to the next transition
        return self.theta.clone(), self.value.clone(), self.grad.clone(), self.n_div.clone()


class GraphedSGSteps(GraphReplayer):
    """A kernel's minibatch steps, replayed from a CUDA graph where that applies.

    Copies of the kernel (``with_target``) share it; a pickled or deep-copied one starts
    without a recording. ``record=False`` runs the same buffered step unrecorded, on any device
    (what the CPU tests compare with the eager kernel).
    """

    _replayed = "minibatch steps"

    def __init__(self, record: bool = True):
        self.record = record
        self.recording = None
        self.targets_seen = 0
        self.off_reason = None

    def __getstate__(self):
        return {
            "record": self.record,
            "recording": None,
            "targets_seen": 0,
            "off_reason": self.off_reason,
        }

    def __deepcopy__(self, memo):
        fresh = GraphedSGSteps(self.record)
        fresh.off_reason = self.off_reason
        return fresh

    def applies(self, kernel, theta: torch.Tensor) -> bool:
        if not switch("sg_cuda_graphs") or self.off_reason is not None:
            return False
        if self.record and not theta.is_cuda:
            return False
        return kernel.capabilities.batch_device is not None

    def transition(self, kernel, theta, value, grad, m, eps0, mass, generator):
        """``(theta, value, grad, n_div)`` after the transition's steps, or None where no
        recording can be made (the caller then runs its eager steps)."""
        rec = self.recording
        if rec is None or not rec.matches(kernel, theta, mass):
            if not self._may_record_for(
                kernel.target,
                "the target changes between transitions in a way the recording cannot "
                "follow, so a recorded step would read the old one",
            ):
                return None
            coef = kernel._coefficients(kernel._eps(eps0, 0), mass)
            device = kernel.target.batch_device
            rows = torch.zeros(kernel.rows_per_batch, dtype=torch.long, device=device)
            try:
                rec = _SGRecording(kernel, theta, value, grad, coef, mass, rows, record=self.record)
                rec.fresh_gen.manual_seed(generator.initial_seed() + 0x5EED)
            except Exception as exc:  # noqa: BLE001 - any failure to record means the eager path
                self._turn_off(f"recording failed ({type(exc).__name__}: {exc})")
                return None
            self.recording = rec
        return rec.transition(kernel, theta, value, grad, m, eps0, mass, generator)
