"""Partitions of the parameter space into boxes, and box masses by bridge sampling.

The bridged-HMC thesis, §3.2-3.3. A box j of the partition has mass c_j = integral over the box of
the unnormalised density q; the weights are w_j = c_j / sum_k c_k (eq. 3.5). Each c_j is estimated
by bridge sampling with the optimal bridge function (eq. 3.1-3.4) against a Gaussian proposal g
fitted to the first half of the box's draws; the second half are the posterior draws. The
iteration (eq. 3.3) runs in log space after subtracting a shift l* common to all boxes (eq. 3.6),
so no exponential ever overflows and the shift cancels from the weights. Where the iteration
swings instead of settling (proposal and posterior draws that hardly overlap), the same fixed
point is found by bisection, and the overlap of the two samples is reported so that such an
answer is not taken for a good one.

The restricted density is q(theta) 1_box(theta): a proposal draw that falls outside the box counts
with q = 0 (its log ratio is -inf), which keeps the estimator consistent for the box's mass.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from scipy.special import logsumexp
from sklearn.covariance import ledoit_wolf

from ...targets import capabilities

__all__ = ["bridge_log_masses", "bridge_terms", "explicit_boxes", "split_boxes"]


def split_boxes(dim: int, coords, points):
    """The 2^s boxes made by splitting coordinates ``coords`` at ``points``.

    The partition of the bridged-HMC thesis, §3.3.2.

    Parameters
    ----------
    dim : int
    coords : sequence of s ints
    points : sequence of s floats

    Returns
    -------
    lower, upper : ndarray (2^s, dim)
        Box b lies below ``points[k]`` on coordinate ``coords[k]`` when bit k of b is 0, above
        it when the bit is 1; the other coordinates are free.
    """
    coords, points = list(coords), list(points)
    boxes = []
    for bits in itertools.product((0, 1), repeat=len(coords)):
        lo, hi = np.full(dim, -np.inf), np.full(dim, np.inf)
        for k, bit in enumerate(reversed(bits)):
            if bit:
                lo[coords[k]] = points[k]
            else:
                hi[coords[k]] = points[k]
        boxes.append((lo, hi))
    return np.stack([b[0] for b in boxes]), np.stack([b[1] for b in boxes])


def explicit_boxes(boxes, dim: int):
    """``[(lower, upper), ...]`` as two (B, dim) arrays, checked (lower < upper everywhere)."""
    try:
        lower = np.stack([np.broadcast_to(np.asarray(lo, float), (dim,)) for lo, _ in boxes])
        upper = np.stack([np.broadcast_to(np.asarray(hi, float), (dim,)) for _, hi in boxes])
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"boxes must be a list of (lower, upper) pairs of {dim} bounds each: {exc}"
        ) from None
    if len(boxes) == 0 or not (lower < upper).all():
        raise ValueError("boxes must be a non-empty list with lower < upper in every box.")
    return lower, upper


def _log_density(target, theta: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    values, found = [], capabilities(target)
    for start in range(0, theta.shape[0], chunk):
        rows = theta[start : start + chunk].to(
            "cpu" if found.device is None else found.device,
            torch.float64 if found.dtype is None else found.dtype,
        )
        values.append(target.value_and_grad(rows)[0].detach().double().cpu())
    return torch.cat(values) if values else torch.zeros(0, dtype=torch.float64)


def bridge_terms(target, draws, log_prob, lower, upper, generator, n_proposal=None):
    """The log ratios ll1 (posterior draws) and ll2 (proposal draws) of bridge sampling.

    The bridged-HMC thesis, §3.3.1.

    The first half of ``draws`` fits the Gaussian proposal g (sample mean and covariance, as in
    the bridged-HMC thesis, §4.1, shrunk toward a multiple of the identity by the formula of
    Ledoit & Wolf (2004), which leaves it unchanged when there are many draws per dimension and
    keeps it from collapsing along some directions when there are few; a diagonal covariance when
    there are fewer draws than dimensions); the second half are the posterior draws. ll1_j = log
    q(theta*_j) - log g(theta*_j); ll2_i = log q(theta~_i) - log g(theta~_i) with theta~_i ~ g, and
    -inf where theta~_i is outside the box.

    Returns
    -------
    ll1 : ndarray (N1,)
    ll2 : ndarray (N2,)
    inside : float
        Fraction of the proposal draws inside the box.
    """
    draws = draws.double().cpu()
    n = draws.shape[0]
    n_fit = n // 2
    fit, post = draws[:n_fit], draws[n_fit:]
    post_lp = log_prob[n_fit:].double().cpu()
    dim = draws.shape[1]
    mean = fit.mean(0)
    var = ((fit - mean) ** 2).sum(0) / max(n_fit - 1, 1)
    jitter = 1e-10 * (1.0 + float(var.mean()))
    if n_fit > dim + 1:  # Ledoit-Wolf shrinkage: no spuriously narrow directions when n ~ D
        shrunk = ledoit_wolf(fit.numpy())[0] * n_fit / (n_fit - 1)
        cov = torch.as_tensor(shrunk) + jitter * torch.eye(dim, dtype=torch.float64)
    else:
        cov = torch.diag(var + jitter)
    chol = torch.linalg.cholesky(cov)
    n2 = post.shape[0] if n_proposal is None else int(n_proposal)
    z = torch.randn((n2, dim), generator=generator, dtype=torch.float64, device="cpu")
    proposals = mean + z @ chol.T

    def log_g(x):
        white = torch.linalg.solve_triangular(chol, (x - mean).T, upper=False).T
        return (
            -0.5 * (white**2).sum(1)
            - torch.log(torch.diagonal(chol)).sum()
            - 0.5 * dim * math.log(2 * math.pi)
        )

    lo = torch.as_tensor(lower, dtype=torch.float64)
    hi = torch.as_tensor(upper, dtype=torch.float64)
    inside = ((proposals >= lo) & (proposals <= hi)).all(1)
    ll2 = torch.full((n2,), -math.inf, dtype=torch.float64)
    if bool(inside.any()):
        ll2[inside] = _log_density(target, proposals[inside]) - log_g(proposals[inside])
    ll2 = torch.nan_to_num(ll2, nan=-math.inf, posinf=-math.inf, neginf=-math.inf)
    ll1 = post_lp - log_g(post)
    return ll1.numpy(), ll2.numpy(), float(inside.double().mean()) if n2 else 0.0


def _batch_mean_var(x: np.ndarray) -> float:
    """Variance of the mean of an autocorrelated series, by batch means."""
    n = len(x)
    n_batches = max(int(math.sqrt(n)), 2)
    size = n // n_batches
    if size < 2:
        return float(np.var(x, ddof=1) / n) if n > 1 else math.inf
    means = x[: n_batches * size].reshape(n_batches, size).mean(1)
    return float(max(np.var(means, ddof=1) / n_batches, np.var(x, ddof=1) / n))


def _fixed_point_map(a, b, log_s1, log_s2):
    """The map log r -> log r' of the bridged-HMC thesis, eq. 3.6, in log space.

    Parameters
    ----------
    a : ndarray (N2,)
        Shifted log ratios of the proposal draws, ll2 - l* (``-inf`` outside the box).
    b : ndarray (N1,)
        Shifted log ratios of the posterior draws, ll1 - l*.
    log_s1, log_s2 : float
        log(N1 / (N1 + N2)) and log(N2 / (N1 + N2)).

    Returns
    -------
    callable
        ``update(log_r) -> log_r'``.
    """
    log_n1, log_n2 = math.log(len(b)), math.log(len(a))

    def update(lr):
        num = _logsumexp(a - np.logaddexp(log_s1 + a, log_s2 + lr)) - log_n2
        den = _logsumexp(-np.logaddexp(log_s1 + b, log_s2 + lr)) - log_n1
        return num - den

    return update


def _logsumexp(x: np.ndarray) -> float:
    """log sum exp(x) of a 1-D array (-inf entries allowed), in plain NumPy: the fixed point
    calls it up to thousands of times on small arrays, where scipy's version costs many times
    more per call (docs/bridged_hmc.md, "Box masses by bridge sampling")."""
    peak = np.max(x)
    if not np.isfinite(peak):
        return float(peak)
    return float(peak + math.log(np.sum(np.exp(x - peak))))


def _solve_fixed_point(update, start, tol, max_iter):
    """The fixed point of eq. 3.6, first by the seed's iteration, then by bisection.

    The map T has slope T'(log r) = B - A with A, B in [0, 1] (A: the proposal draws' weighted
    mean of s2 r / (s1 l2 + s2 r), B: the same for the posterior draws), so it contracts when
    the two samples overlap and tends to the reflection ``log r -> K - log r`` (slope -1) when
    they do not: the plain iteration then swings between two values for ever, and a non-converged
    iterate depends on the parity of the last step. ``log r - T(log r)`` has slope 1 - T' >= 0,
    so its root, the same estimator, is bracketed and found by bisection in every case.

    Parameters
    ----------
    update : callable
        The map of :func:`_fixed_point_map`.
    start : float
        The first log r (0: r = exp(l*)).
    tol : float
        Convergence: a step of the iteration, or the bracket's width, below ``tol``.
    max_iter : int
        Steps of the iteration before bisection; bisection stops after ``3 * max_iter`` more
        evaluations at most.

    Returns
    -------
    log_r : float
    converged : bool
    n_evaluations : int
        Evaluations of the map, iteration and bisection together.
    """
    lr, previous = start, start
    for iteration in range(1, max_iter + 1):
        previous, lr = lr, update(lr)
        if not math.isfinite(lr):
            return lr, False, iteration
        if abs(lr - previous) < tol:
            return lr, True, iteration
    # the last two iterates bracket the root when the iteration oscillates; widen until they do
    lo, hi = min(lr, previous), max(lr, previous)
    evaluations, width = max_iter, max(hi - lo, 1.0)
    while lo - update(lo) > 0 and evaluations < 4 * max_iter:
        lo, width, evaluations = lo - width, 2 * width, evaluations + 1
    while hi - update(hi) < 0 and evaluations < 4 * max_iter:
        hi, width, evaluations = hi + width, 2 * width, evaluations + 1
    while hi - lo > tol and evaluations < 4 * max_iter:
        mid = 0.5 * (lo + hi)
        if mid - update(mid) < 0:
            lo = mid
        else:
            hi = mid
        evaluations += 1
    converged = hi - lo <= tol and lo - update(lo) <= 0 <= hi - update(hi)
    return 0.5 * (lo + hi), bool(converged), evaluations


def bridge_log_masses(terms, tol: float = 1e-10, max_iter: int = 1000):
    """Log masses of the boxes from their bridge-sampling terms (bridged-HMC thesis, eq. 3.4-3.6).

    The estimator of each box is the fixed point of eq. 3.6, reached by the seed's iteration;
    where that iteration has not settled after ``max_iter`` steps (it swings between two values
    when the proposal and posterior samples hardly overlap), the same fixed point is found by
    bisection (see :func:`_solve_fixed_point`). Whether the answer means anything is a separate
    question, answered by ``overlap``.

    Parameters
    ----------
    terms : list of (ll1, ll2) pairs, one per box
    tol : float
        Convergence of the fixed point: change of log r below ``tol``.
    max_iter : int
        Steps of the iteration before bisection takes over.

    Returns
    -------
    dict with ndarrays over boxes: ``log_mass`` (log c_j), ``log_mass_se`` (its standard
    error, from the relative mean squared error of Frühwirth-Schnatter 2004 as in Gronau et al.
    2017, with batch means for the autocorrelation of the posterior draws), ``weight``
    (w_j = c_j / sum c_k), ``converged`` (bool), ``n_iter`` (evaluations of the map: steps of
    the iteration, then of the bisection), ``overlap`` and ``shift`` l*.
    ``overlap`` is O = integral of p g / (s1 p + s2 g) for the box's normalised density p and
    the proposal g, estimated at the fixed point by the mean over posterior draws of
    1 / (s1 l1 / r + s2) (equal there to the proposal draws' mean of
    (l2 / r) / (s1 l2 / r + s2)); it is 1 when g = p and 0 when they do not overlap, and the
    relative variance of the estimate is about (1/O - 1) / (N s1 s2) (Meng and Wong 1996). With
    O near 0 the estimate is decided by a few extreme draws and its standard error is
    meaningless.
    """
    finite = [ll1[np.isfinite(ll1)] for ll1, _ in terms]
    pooled = np.concatenate(finite) if finite else np.zeros(1)
    shift = float(pooled.mean()) if pooled.size else 0.0  # l*: one shift for all boxes
    log_r, se, converged, n_iter, overlap = [], [], [], [], []
    for ll1, ll2 in terms:
        b, a = ll1 - shift, ll2 - shift
        n1, n2 = len(b), len(a)
        if n1 == 0 or n2 == 0 or not np.isfinite(a).any() or not np.isfinite(b).all():
            log_r.append(-math.inf)
            se.append(math.inf)
            converged.append(False)
            n_iter.append(0)
            overlap.append(0.0)
            continue
        log_s1, log_s2 = math.log(n1 / (n1 + n2)), math.log(n2 / (n1 + n2))
        update = _fixed_point_map(a, b, log_s1, log_s2)
        lr, done, iterations = _solve_fixed_point(update, 0.0, tol, max_iter)
        log_f1 = a - np.logaddexp(log_s1 + a, log_s2 + lr)
        log_f2 = -np.logaddexp(log_s1 + b, log_s2 + lr)
        f1 = np.exp(log_f1 - logsumexp(log_f1) + math.log(n2))  # f1 / mean(f1)
        f2 = np.exp(log_f2 - logsumexp(log_f2) + math.log(n1))
        re2 = np.var(f1, ddof=1) / n2 + _batch_mean_var(f2)
        log_r.append(lr)
        se.append(float(math.sqrt(re2)))
        converged.append(done and np.isfinite(lr))
        n_iter.append(iterations)
        # O = mean_j 1 / (s1 l1_j / r + s2) = mean_j exp(lr + log_f2_j)
        overlap.append(float(np.exp(min(logsumexp(log_f2) - math.log(n1) + lr, 0.0))))
    log_r = np.asarray(log_r)
    total = logsumexp(log_r) if np.isfinite(log_r).any() else 0.0
    weight = np.exp(log_r - total) if np.isfinite(log_r).any() else np.zeros(len(log_r))
    return {
        "log_mass": log_r + shift,
        "log_mass_se": np.asarray(se),
        "weight": weight,
        "converged": np.asarray(converged, dtype=bool),
        "n_iter": np.asarray(n_iter),
        "overlap": np.asarray(overlap),
        "shift": shift,
    }
