"""Bridged HMC: constrained HMC on a partition of the parameter space, recombined by bridge
sampling, each box an independent joblib job (the bridged-HMC thesis, ch. 3).

The boxes are either 2^s boxes made by splitting s coordinates at chosen points, or an explicit
list. Each box runs one chain of :class:`~.constrained.ConstrainedHMC` on the box (warmup
adaptation included) in its own joblib job, with a generator seeded from child b of the "boxes"
child of the run's :class:`numpy.random.SeedSequence` (``_seeding.py``), then computes its
bridge-sampling terms (:func:`.bridge.bridge_terms`). The parent estimates the box masses
(:func:`.bridge.bridge_log_masses`) and returns an equal-weight sample: draws resampled
systematically in proportion to w_j / n_j, shuffled and laid out as the caller's ``n_chains``
chains.

The returned :class:`~._run.ChainRun` is therefore made of *resampled* chains. Its per-transition
arrays (``accept_prob``, ``accepted``, ``acceptance``, ``divergent``, ``energy_error``) are those of
the transitions that produced each resampled draw (posterior-weighted figures); ``step_size`` and
``inv_mass`` are the weight-averaged box values; ``warmup_divergent`` holds the total over boxes in
chain 0; ``state`` is the last resampled draw of each chain (gradients zero: a bridged run cannot
be continued with ``warm_start``). The unweighted per-box figures are in ``stats`` (``box_*``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.utils.parallel import Parallel, delayed

from ..._seeding import child, root_seed, torch_seed
from ..._utils import check_scalar_param
from ..._warnings import collecting, reissue, warn
from ...exceptions import ConvergenceWarning
from .._base import State
from .._by_name import register_sampler
from ..driver._records import ChainRun
from ..driver.budget import as_length
from ..gibbs import with_gibbs_blocks
from ._settings import EuclideanSampler
from .bridge_sampling import bridge_log_masses, bridge_terms, explicit_boxes, split_boxes
from .constrained import ConstrainedHMC, dtype_and_device, to_box

__all__ = ["BridgedHMC", "run_box"]

_TRANSITION_FIELDS = ("accept_prob", "accepted", "acceptance", "divergent", "energy_error")


def run_box(
    run_chains,
    target,
    lower,
    upper,
    position,
    seed,
    n_steps,
    step_jitter,
    divergence_threshold,
    start,
    n_proposal,
    config,
    desc,
    verbose,
):
    """One box: start inside it, warm up and sample with constrained HMC (through
    ``run_chains``, the sampling loop the driver hands over), then the bridge terms; one joblib
    job. Returns ``(run, ll1, ll2, inside)`` on the CPU."""
    dtype, device = dtype_and_device(target)
    generator = torch.Generator(device=device).manual_seed(torch_seed(seed))
    box_sampler = ConstrainedHMC(
        lower=lower,
        upper=upper,
        n_steps=n_steps,
        divergence_threshold=divergence_threshold,
        step_jitter=step_jitter,
    )
    kernel = box_sampler.build(target)
    position = position.to(device, dtype)[None]
    if start is not None:
        position, _ = start.find(target, position)
    position = to_box(position, kernel.lower, kernel.upper)
    kernel = with_gibbs_blocks(kernel, target)
    state = kernel.init(position, generator, n_warmup=config.n_warmup)
    run = run_chains(kernel, state, generator, verbose=verbose, desc=desc, **config.loop_options())
    run.state = type(run.state)(*(t.detach().cpu() for t in run.state))
    proposal_gen = torch.Generator().manual_seed(torch_seed(child(seed, "proposal")))
    ll1, ll2, inside = bridge_terms(
        target, run.draws[0], run.log_prob[0], lower, upper, proposal_gen, n_proposal
    )
    return run, ll1, ll2, inside


@register_sampler("bridged_hmc")
@dataclass(kw_only=True, eq=False, repr=False)
class BridgedHMC(EuclideanSampler):
    """Bridged Hamiltonian Monte Carlo (a sampler object).

    The bridged-HMC thesis, ch. 3, Algorithm 2, eq. 3.1-3.6.

    Every box runs ``n_warmup`` + ``n_draws`` transitions of one constrained chain, so a run
    makes ``n_boxes * n_draws`` draws, resampled into an equal-weight sample of the same size.

    Parameters
    ----------
    n_split_params : int, default=1
        s, the number of coordinates split (2^s boxes). Ignored when ``boxes`` is given.
    split_coords : sequence of int, optional
        Which coordinates to split; by default s coordinates drawn at random from the run's seed
        (the bridged-HMC thesis, §3.3.2).
    split_points : float or sequence of float, default=0.0
        Where to split each coordinate (zero, as the bridged-HMC thesis does for networks).
    boxes : list of (lower, upper), optional
        An explicit partition (bounds per coordinate, infinite where free); the boxes must not
        overlap and should cover the posterior's mass.
    n_steps : int, default=20
        Leapfrog steps per trajectory.
    step_jitter : float in [0, 1), default=0.2
        Each transition's step size is scaled by a factor uniform in ``[1 - step_jitter,
        1 + step_jitter]``, so that fixed-length trajectories do not resonate between walls.
    n_proposal : int, optional
        Proposal draws for bridge sampling per box (default: as many as the posterior half).
    tol, max_iter : float, int
        Convergence of the bridge fixed point (eq. 3.3, 3.6) on log r: ``max_iter`` steps of
        the seed's iteration, then bisection on the same equation; a warning when not reached.
    min_box_draws : int, default=20
        A box with fewer posterior draws for bridge sampling gets a warning.
    min_overlap : float, default=0.01
        A box whose proposal and posterior draws overlap less than this (the overlap O of
        :func:`.bridge.bridge_log_masses`, 1 for a perfect proposal, 0 for none) gets a warning:
        its log mass is then decided by a few extreme draws.
    divergence_threshold : float, default=1000

    step_size, target_accept, adapt_mass
        The warmup's settings of each box's chain, as for :class:`~sklearn_bnn.samplers.HMC`
        (defaults "auto", 0.8, False).

    Examples
    --------
    >>> import torch
    >>> from sklearn_bnn.samplers import sample
    >>> def log_p(x):  # two modes, split at x_0 = 0
    ...     return torch.logaddexp(-0.5 * ((x - 3) ** 2).sum(), -0.5 * ((x + 3) ** 2).sum())
    >>> result = sample(log_p, torch.zeros(2, dtype=torch.float64),
    ...                 BridgedHMC(split_coords=[0]), n_warmup=100, n_draws=200,
    ...                 n_chains=1, random_state=0)
    >>> result.info["box_weight"].round(1).tolist()
    [0.5, 0.5]
    """

    n_split_params: int = 1
    split_coords: object = None
    split_points: object = 0.0
    boxes: object = None
    n_steps: int = 20
    step_jitter: float = 0.2
    n_proposal: int | None = None
    tol: float = 1e-10
    max_iter: int = 1000
    min_box_draws: int = 20
    min_overlap: float = 0.01

    def check_target(self, target) -> None:
        self._check_shared()
        check_scalar_param(self.n_steps, "n_steps", kind="int", low=1)
        check_scalar_param(self.step_jitter, "step_jitter", low=0, high=1, high_inclusive=False)
        check_scalar_param(self.tol, "tol", low=0, low_inclusive=False)
        check_scalar_param(self.max_iter, "max_iter", kind="int", low=1)
        check_scalar_param(self.min_box_draws, "min_box_draws", kind="int", low=2)
        check_scalar_param(self.min_overlap, "min_overlap", low=0, high=1)
        if self.n_proposal is not None:
            check_scalar_param(self.n_proposal, "n_proposal", kind="int", low=1)
        self.partition(target.dim, seed=0)

    def build(self, target):
        raise TypeError(
            "BridgedHMC runs one constrained kernel per box: run it through sample() or an "
            "estimator (run_sampler calls its run hook), not build()."
        )

    def partition(self, dim: int, seed):
        """The boxes on a ``dim``-dimensional space: ``lower, upper`` arrays (B, dim); ``seed``
        (anything :func:`numpy.random.default_rng` takes) draws the split coordinates when
        ``split_coords`` is None."""
        if self.boxes is not None:
            return explicit_boxes(self.boxes, dim)
        if self.split_coords is None:
            check_scalar_param(self.n_split_params, "n_split_params", kind="int", low=1, high=dim)
            rng = np.random.default_rng(seed)
            coords = sorted(rng.choice(dim, size=self.n_split_params, replace=False).tolist())
        else:
            coords = [int(c) for c in np.atleast_1d(self.split_coords)]
            if (
                not coords
                or len(set(coords)) != len(coords)
                or not all(0 <= c < dim for c in coords)
            ):
                raise ValueError(
                    f"split_coords must be distinct coordinates in [0, {dim}), got "
                    f"{self.split_coords!r}."
                )
        points = np.broadcast_to(np.asarray(self.split_points, float), (len(coords),))
        if not np.isfinite(points).all():
            raise ValueError(f"split_points must be finite, got {self.split_points!r}.")
        return split_boxes(dim, coords, points)

    def run(
        self,
        target,
        positions,
        driver,
        *,
        n_jobs,
        seed,
        generator_states,
        start=None,
        config,
        desc,
        verbose,
    ):
        """Run every box as a joblib job through ``driver.run_chains`` (the sampling loop) and
        recombine (the sampler protocol's ``run`` hook); returns ``(run, [])``."""
        if generator_states:
            raise ValueError("BridgedHMC cannot continue a previous run (warm_start=True).")
        self.check_target(target)
        seed = root_seed(0 if seed is None else seed)  # the run's SeedSequence
        lower, upper = self.partition(target.dim, seed=child(seed, "partition"))
        n_boxes = len(lower)
        # every box runs a fixed budget: the boxes' runs are weighted against each other
        config = config.replace(
            n_warmup=as_length(config.n_warmup), n_draws=as_length(config.n_draws)
        )
        boxes = child(seed, "boxes")
        jobs = [
            delayed(collecting(run_box))(
                driver.run_chains,
                target,
                torch.as_tensor(lower[b]),
                torch.as_tensor(upper[b]),
                positions[b % positions.shape[0]],
                child(boxes, b),
                self.n_steps,
                self.step_jitter,
                self.divergence_threshold,
                start,
                self.n_proposal,
                config,
                f"{desc} box {b}",
                verbose,
            )
            for b in range(n_boxes)
        ]
        results = []
        for result, problems in Parallel(n_jobs=n_jobs)(jobs):
            reissue(problems)  # the boxes' warmup problems, in this process
            results.append(result)
        runs = [r for r, *_ in results]
        masses = bridge_log_masses(
            [(ll1, ll2) for _, ll1, ll2, _ in results], tol=self.tol, max_iter=self.max_iter
        )
        self._warn(runs, masses)
        run = _resample(runs, masses["weight"], positions.shape[0], child(seed, "resample"))
        n_half = np.array([r.draws.shape[1] - r.draws.shape[1] // 2 for r in runs])
        run.stats.update(
            n_boxes=n_boxes,
            box_lower=lower,
            box_upper=upper,
            box_n_draws=np.array([r.draws.shape[1] for r in runs]),
            box_acceptance_rate=np.array([float(r.acceptance.double().mean()) for r in runs]),
            box_step_size=np.array([float(r.step_size[0]) for r in runs]),
            box_n_divergent=np.array([int(r.divergent.sum()) for r in runs]),
            box_log_mass=masses["log_mass"],
            box_log_mass_se=masses["log_mass_se"],
            box_weight=masses["weight"],
            box_bridge_converged=masses["converged"],
            box_bridge_iterations=masses["n_iter"],
            box_bridge_overlap=masses["overlap"],
            box_bridge_draws=n_half,
            box_proposals_inside=np.array([inside for *_, inside in results]),
        )
        return run, []

    def _warn(self, runs, masses) -> None:
        few = [b for b, r in enumerate(runs) if r.draws.shape[1] // 2 < self.min_box_draws]
        if few:
            warn(
                f"boxes {few} have fewer than min_box_draws={self.min_box_draws} posterior "
                "draws for bridge sampling: their weights are unreliable; increase n_draws.",
                RuntimeWarning,
            )
        bad = np.flatnonzero(~masses["converged"]).tolist()
        if bad:
            warn(
                f"the bridge-sampling fixed point was not found for boxes {bad} (no proposal "
                "draw inside the box, or no draws): their weights are unreliable; increase "
                "n_draws or n_proposal.",
                ConvergenceWarning,
            )
        overlap = masses["overlap"]
        low = [b for b in np.flatnonzero(overlap < self.min_overlap).tolist() if b not in bad]
        if low:
            shown = ", ".join(f"{b}: {overlap[b]:.1e}" for b in low)
            fewer = ""  # two boxes (one split) are already the fewest
            if len(runs) > 2:
                how = "boxes" if self.boxes is not None else "split_coords or n_split_params"
                fewer = f"fewer boxes ({how}), "
            warn(
                f"the Gaussian proposal of bridge sampling barely overlaps the posterior draws "
                f"of boxes {low} (overlap {shown}; 1 = perfect, min_overlap={self.min_overlap}): "
                "their log masses are decided by a few extreme draws and the box weights are "
                "arbitrary. This happens when a box's posterior is far from Gaussian (curved or "
                "multimodal inside the box, as for neural networks), and more draws per box do "
                f"not cure it; use {fewer}boxes that separate the modes (boxes=...), or plain "
                "HMC chains. Check box_bridge_overlap and box_log_mass_se.",
                RuntimeWarning,
            )


def _resample(runs, weight, n_chains: int, seed) -> ChainRun:
    """Systematic resampling of all box draws with probabilities w_j / n_j, shuffled into
    ``n_chains`` equal chains (the bridged-HMC thesis, eq. 3.5: expectations are the w-weighted
    mixture)."""
    sizes = np.array([r.draws.shape[1] for r in runs])
    total = int(sizes.sum())
    n_per = max(total // n_chains, 1)
    n_out = n_per * n_chains
    probs = np.concatenate([np.full(n, w / n) for w, n in zip(weight, sizes, strict=True)])
    if not np.isfinite(probs).all() or probs.sum() <= 0:
        probs = np.full(total, 1.0 / total)
    cum = np.cumsum(probs / probs.sum())
    gen = torch.Generator().manual_seed(torch_seed(seed))
    u0 = float(torch.rand((), generator=gen, dtype=torch.float64))
    index = np.minimum(np.searchsorted(cum, (u0 + np.arange(n_out)) / n_out), total - 1)
    index = index[torch.randperm(n_out, generator=gen).numpy()]
    box = np.repeat(np.arange(len(runs)), sizes)[index]
    within = index - np.concatenate([[0], np.cumsum(sizes)[:-1]])[box]
    n_trans = np.array([r.accept_prob.shape[1] for r in runs])
    thin = np.maximum(n_trans // np.maximum(sizes, 1), 1)[box]
    transition = np.minimum((within + 1) * thin - 1, n_trans[box] - 1)

    def gather(get):
        parts = [get(runs[b])[0, i] for b, i in zip(box.tolist(), within.tolist(), strict=True)]
        return torch.stack(parts).reshape(n_chains, n_per, *parts[0].shape)

    def gather_t(name):
        parts = [getattr(runs[b], name)[0, t] for b, t in zip(box, transition, strict=True)]
        return torch.stack(parts).reshape(n_chains, n_per)

    draws = gather(lambda r: r.draws)
    log_prob = gather(lambda r: r.log_prob)
    w = torch.as_tensor(weight, dtype=torch.float64)
    step = sum(float(wb) * float(r.step_size[0]) for wb, r in zip(w, runs, strict=True))
    inv_mass = sum(
        wb * r.inv_mass.double().reshape(-1, draws.shape[-1])[0]
        for wb, r in zip(w, runs, strict=True)
    )
    warmup_div = torch.zeros(n_chains, dtype=torch.long)
    warmup_div[0] = sum(int(r.warmup_divergent.sum()) for r in runs)
    draw_stats = {k: gather(lambda r, k=k: r.draw_stats[k]) for k in runs[0].draw_stats}
    draw_stats["box"] = torch.as_tensor(box).reshape(n_chains, n_per)
    draw_stats["box_draw"] = torch.as_tensor(within).reshape(n_chains, n_per)
    return ChainRun(
        draws=draws,
        log_prob=log_prob,
        **{name: gather_t(name) for name in _TRANSITION_FIELDS},
        warmup_divergent=warmup_div,
        step_size=torch.full((n_chains,), step, dtype=draws.dtype),
        state=State(draws[:, -1], log_prob[:, -1], torch.zeros_like(draws[:, -1])),
        inv_mass=inv_mass.to(draws.dtype),
        draw_stats=draw_stats,
        n_grad=sum(r.n_grad for r in runs),
        interrupted=any(r.interrupted for r in runs),
        step_size_origin=runs[0].step_size_origin,
        target_accept=runs[0].target_accept,
    )
