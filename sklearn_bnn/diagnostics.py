"""Convergence diagnostics: effective sample size and split R-hat.

ESS follows Geyer's initial monotone sequence estimator over chains, as in Stan and ArviZ
(Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021, "Rank-normalization, folding, and
localization: an improved R-hat"); bulk and tail ESS and R-hat use rank-normalised split chains.
All functions take draws of shape (n_chains, n_draws).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import ndtri

__all__ = [
    "RHAT_MAX",
    "convergence_check",
    "converged",
    "ess",
    "ess_bulk",
    "ess_tail",
    "rhat",
    "rhat_per_chain",
    "rhat_within",
    "mcse_mean",
    "format_summary",
]


def _as_chains(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"draws must have shape (n_chains, n_draws), got {x.shape}.")
    return x


def _autocovariance(x: np.ndarray) -> np.ndarray:
    """Biased autocovariance of each chain, by FFT: shape (C, N)."""
    n = x.shape[1]
    centred = x - x.mean(axis=1, keepdims=True)
    size = 2 ** int(np.ceil(np.log2(2 * n)))
    f = np.fft.rfft(centred, n=size, axis=1)
    return np.fft.irfft(f * np.conj(f), n=size, axis=1)[:, :n] / n


def ess(x) -> float:
    """Effective sample size of draws ``x`` (C, N) by Geyer's initial monotone sequence."""
    x = _as_chains(x)
    C, N = x.shape
    if N < 4:
        return float("nan")
    acov = _autocovariance(x)
    chain_var = acov[:, 0] * N / (N - 1)
    mean_var = chain_var.mean()
    var_plus = mean_var * (N - 1) / N
    if C > 1:
        var_plus += x.mean(axis=1).var(ddof=1)
    if not np.isfinite(var_plus) or var_plus <= 0:
        return float("nan")
    rho = 1.0 - (mean_var - acov.mean(axis=0)) / var_plus
    rho[0] = 1.0
    # Sum consecutive pairs while their sum stays positive (Geyer's initial positive sequence).
    pairs = rho[: N - N % 2].reshape(-1, 2).sum(axis=1)
    positive = np.nonzero(pairs <= 0)[0]
    k = positive[0] if positive.size else len(pairs)
    pairs = np.minimum.accumulate(pairs[:k])  # initial monotone sequence
    tau = -1.0 + 2.0 * pairs.sum()
    tau = max(tau, 1.0 / np.log10(C * N))
    return float(C * N / tau)


def _split(x: np.ndarray) -> np.ndarray:
    """Each chain's halves as two chains: (C, N) -> (2C, N // 2); (Q, C, N) likewise."""
    half = x.shape[-1] // 2
    return np.concatenate([x[..., :half], x[..., x.shape[-1] - half :]], axis=-2)


def _rank_normalise(x: np.ndarray) -> np.ndarray:
    """Normal scores of the ranks of each column's draws: ``x`` (Q, C, N), ranks taken over
    the C * N draws of each column q (ties at their average rank)."""
    from scipy.stats import rankdata

    ranks = rankdata(x.reshape(x.shape[0], -1), method="average", axis=1).reshape(x.shape)
    return ndtri((ranks - 0.375) / (x[0].size + 0.25))


def ess_bulk(x) -> float:
    """Bulk ESS: ESS of the rank-normalised split chains."""
    x = _as_chains(x)
    return ess(_rank_normalise(_split(x)[None])[0])


def ess_tail(x) -> float:
    """Tail ESS: the smaller ESS of the 5 % and 95 % quantile indicators (split chains)."""
    x = _as_chains(x)
    if x.shape[1] < 4:  # split chains of fewer than two draws: nothing to estimate
        return float("nan")
    x = _split(x)
    q05, q95 = np.quantile(x, [0.05, 0.95])
    return min(ess((x <= q05).astype(float)), ess((x <= q95).astype(float)))


def _rhat_plain(x: np.ndarray) -> np.ndarray:
    """The classic R-hat of each column of ``x`` (Q, C, N): NaN where the within-chain
    variance is zero."""
    N = x.shape[-1]
    w = x.var(axis=-1, ddof=1).mean(axis=-1)
    b = N * x.mean(axis=-1).var(axis=-1, ddof=1)
    var_plus = (N - 1) / N * w + b / N
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(w > 0, np.sqrt(var_plus / w), np.nan)


def _rhat_columns(x: np.ndarray) -> np.ndarray:
    """:func:`rhat` of every column of ``x`` (Q, C, N) at once: shape (Q,)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.shape[-1] < 4:  # split chains of fewer than two draws: no within-chain variance
        return np.full(x.shape[0], np.nan)
    x = _split(x)
    median = np.median(x.reshape(x.shape[0], -1), axis=1)[:, None, None]
    bulk = _rhat_plain(_rank_normalise(x))
    folded = _rhat_plain(_rank_normalise(np.abs(x - median)))
    return np.where(folded > bulk, folded, bulk)  # the larger; NaN where the bulk value is


def rhat(x) -> float:
    """Rank-normalised split R-hat: the larger of the bulk and the folded (tail) value."""
    return float(_rhat_columns(_as_chains(x)[None])[0])


def rhat_per_chain(x) -> np.ndarray:
    """The split R-hat of each chain alone: :func:`rhat` of ``x[c:c+1]`` for every chain c.

    Each chain's first half is compared with its second (rank-normalised, bulk and folded), so
    a chain still drifting away from its start scores above 1 whatever the other chains do,
    and chains that each sit still in different modes score near 1 although :func:`rhat` of
    all of them together is large. For one chain it is :func:`rhat` itself.

    Parameters
    ----------
    x : array-like of shape (n_chains, n_draws) or (n_draws,)
        Draws of one scalar quantity.

    Returns
    -------
    ndarray of shape (n_chains,)
        NaN for a chain of fewer than 4 draws or constant over its draws.
    """
    x = _as_chains(x)
    return _rhat_columns(x[:, None, :])


def rhat_within(x) -> float:
    """The within-chain split R-hat: :func:`rhat` of the draws with each chain's mean taken
    out.

    What is left is each chain's first half against its second, pooled over the chains: a
    chain still drifting scores above 1, chains that each sit still in different modes do not
    (their means differ, which :func:`rhat` counts and this removes). Pooling makes it far
    less noisy than the worst of :func:`rhat_per_chain` (a single chain's split R-hat rests
    on one difference of two half-chain means); the price is that one drifting chain among
    many is diluted. For one chain it is :func:`rhat` itself.

    Parameters
    ----------
    x : array-like of shape (n_chains, n_draws) or (n_draws,)
        Draws of one scalar quantity.

    Returns
    -------
    float
        NaN for chains of fewer than 4 draws or constant within every chain.
    """
    return float(_rhat_within_columns(_as_chains(x)[None])[0])


def _rhat_within_columns(x: np.ndarray) -> np.ndarray:
    """:func:`rhat_within` of every column of ``x`` (Q, C, N): shape (Q,)."""
    if x.shape[1] == 1:
        return _rhat_columns(x)
    return _rhat_columns(x - x.mean(axis=-1, keepdims=True))


#: The largest split R-hat of a converged quantity (1.1, Gelman & Rubin's long-standing limit;
#: Vehtari et al. 2021 advise 1.01 before trusting final inferences).
RHAT_MAX = 1.1


def _nanmax(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.nanmax(values)) if np.isfinite(values).any() else float("nan")


def _columns(lp: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The log density ``lp`` (C, S) and the reference quantities ``ref`` (C, S, Q) as one
    array of columns (1 + Q, C, S), the log density first."""
    lp = np.asarray(lp, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64).reshape(lp.shape + (-1,))
    return np.ascontiguousarray(np.concatenate([lp[None], np.moveaxis(ref, -1, 0)]))


def _worst(values: np.ndarray):
    """A statistic's values on the columns of :func:`_columns` (1 + Q, ...): its value on the
    log density, and its largest over the reference quantities, NaNs left out (NaN where
    there are none)."""
    if values.shape[0] == 1:
        return values[0], np.full(values.shape[1:], np.nan)
    return values[0], np.fmax.reduce(values[1:], axis=0)


def _quietly(statistic, columns: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant quantities give NaN
        return statistic(columns)


def _chain_columns(columns: np.ndarray) -> np.ndarray:
    """:func:`rhat_per_chain` of every column (1 + Q, C, S): shape (1 + Q, C)."""
    K, C, S = columns.shape
    return _rhat_columns(columns.reshape(K * C, 1, S)).reshape(K, C)


def pooled_rhat(lp: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """The split R-hat of all the chains together (:func:`rhat`):
    of the log density ``lp`` (C, S), and the largest over the reference quantities ``ref``
    (C, S, Q). Above :data:`RHAT_MAX` when a chain drifts or when the chains disagree."""
    on_lp, on_ref = _worst(_quietly(_rhat_columns, _columns(lp, ref)))
    return float(on_lp), float(on_ref)


def within_chain_rhat(lp: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """The within-chain split R-hat (:func:`rhat_within`: each
    chain's mean taken out, pooled over the chains) of the log density ``lp`` (C, S), and the
    largest over the reference quantities ``ref`` (C, S, Q). For one chain it is
    :func:`pooled_rhat`."""
    on_lp, on_ref = _worst(_quietly(_rhat_within_columns, _columns(lp, ref)))
    return float(on_lp), float(on_ref)


def chain_rhat(lp: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The split R-hat of each chain alone (:func:`rhat_per_chain`)
    of the log density ``lp`` (C, S), and each chain's largest over the reference quantities
    ``ref`` (C, S, Q): two arrays of shape (C,)."""
    return _worst(_quietly(_chain_columns, _columns(lp, ref)))


def convergence_check(lp: np.ndarray, ref: np.ndarray) -> dict:
    """The convergence entries of ``diagnostics_`` from the log density ``lp`` (C, S) and the
    reference quantities ``ref`` (C, S, Q).

    Returns
    -------
    dict
        ``rhat_log_prob``, ``rhat_predictions_max``: :func:`pooled_rhat`;
        ``rhat_within_log_prob``, ``rhat_within_predictions_max``: :func:`within_chain_rhat`;
        ``rhat_chain_log_prob``, ``rhat_chain_predictions_max``: the worst chain alone
        (:func:`chain_rhat`); ``rhat_per_chain`` (C,): each chain's own, the larger of its
        log density's and its worst quantity's; ``converged``: :func:`converged`;
        ``chains_disagree``: the chains each stationary (every chain's own R-hat and the
        within-chain R-hat at most :data:`RHAT_MAX`) but the pooled R-hat above it, the
        chains sitting in different modes. For one chain every R-hat is the pooled one and
        the chains never disagree.
    """
    columns = _columns(lp, ref)
    pooled = _quietly(_rhat_columns, columns)
    rhat_lp, rhat_pred = (float(v) for v in _worst(pooled))
    if columns.shape[1] == 1:  # one chain: every R-hat is its own split R-hat
        within_lp, within_pred = rhat_lp, rhat_pred
        chain_lp, chain_pred = _worst(pooled[:, None])
    else:
        within_lp, within_pred = (float(v) for v in _worst(_quietly(_rhat_within_columns, columns)))
        chain_lp, chain_pred = _worst(_quietly(_chain_columns, columns))
    check = {
        "rhat_log_prob": rhat_lp,
        "rhat_predictions_max": rhat_pred,
        "rhat_within_log_prob": within_lp,
        "rhat_within_predictions_max": within_pred,
        "rhat_chain_log_prob": _nanmax(chain_lp),
        "rhat_chain_predictions_max": _nanmax(chain_pred),
        "rhat_per_chain": np.fmax(chain_lp, chain_pred),
    }
    check["converged"] = converged(check)
    check["chains_disagree"] = bool(
        lp.shape[0] > 1
        and check["converged"]
        and _nanmax([rhat_lp, rhat_pred]) > RHAT_MAX
        and not _nanmax(check["rhat_per_chain"]) > RHAT_MAX
    )
    return check


def converged(check: dict) -> bool:
    """Whether the chains of :func:`convergence_check`'s R-hats have converged: not if the
    within-chain R-hat exceeds :data:`RHAT_MAX` (the chains drift), nor if the pooled one
    does while some chain's own does too (a drifting chain, which pooling the within-chain
    statistic over the others dilutes). A pooled R-hat above the limit with every chain
    stationary by both checks is chains in different modes, which running longer does not
    change. For one chain: its split R-hat at most :data:`RHAT_MAX`."""
    within = _nanmax([check["rhat_within_log_prob"], check["rhat_within_predictions_max"]])
    pooled = _nanmax([check["rhat_log_prob"], check["rhat_predictions_max"]])
    drifting = _nanmax(check["rhat_per_chain"]) > RHAT_MAX
    return not (within > RHAT_MAX or (pooled > RHAT_MAX and drifting))


def mcse_mean(x) -> float:
    """Monte Carlo standard error of the mean: sd / sqrt(ESS)."""
    x = _as_chains(x)
    return float(x.std(ddof=1) / np.sqrt(ess(x)))


def format_summary(name: str, diag: dict) -> str:
    """Text report of an estimator's ``diagnostics_``."""
    per_chain = diag.get("rhat_per_chain")
    lines = [
        f"{name}: {diag['n_chains']} chain(s), {diag['n_draws']} draws in all, "
        f"{diag['n_grad_evals']:,} gradient evaluations"
        + (" (interrupted)" if diag.get("interrupted") else ""),
        f"{'chain':>5} {'step size':>10} {'accept':>7}"
        + (f" {'depth':>6}" if "mean_tree_depth" in diag else "")
        + (f" {'R-hat':>6}" if per_chain is not None else ""),
    ]
    for c in range(diag["n_chains"]):
        row = f"{c:>5} {diag['step_size'][c]:>10.3g} "
        acc = diag["acceptance_rate"]
        row += f"{acc[c]:>7.2f}" if len(acc) else f"{'-':>7}"
        if "mean_tree_depth" in diag:
            row += f" {diag['mean_tree_depth'][c]:>6.1f}"
        if per_chain is not None:
            row += f" {per_chain[c]:>6.3f}"
        lines.append(row)
    extra = ("", "")
    if "rhat_within_log_prob" in diag and diag["n_chains"] > 1:
        extra = tuple(
            f" (within chains {diag[f'rhat_within_{key}']:.3f}, the worst chain alone "
            f"{diag[f'rhat_chain_{key}']:.3f})"
            for key in ("log_prob", "predictions_max")
        )
    lines += [
        f"divergences: {diag['n_divergent']} after warmup, {diag['n_divergent_warmup']} in warmup",
        f"log density: bulk ESS {diag['ess_bulk_log_prob']:.0f}, tail ESS "
        f"{diag['ess_tail_log_prob']:.0f}, R-hat {diag['rhat_log_prob']:.3f}" + extra[0],
        f"predictions (reference rows): min bulk ESS {diag['ess_bulk_predictions_min']:.0f}, "
        f"max R-hat {diag['rhat_predictions_max']:.3f}" + extra[1],
    ]
    if diag.get("converged") is False:
        failing = np.flatnonzero(np.asarray(per_chain) > 1.1)
        lines.append(
            "not converged: "
            + ("the chain is" if diag["n_chains"] == 1 else "the chains are")
            + " still drifting"
            + (
                f" (by their own R-hat, column R-hat: chain(s) {', '.join(map(str, failing))})"
                if diag["n_chains"] > 1 and len(failing)
                else ""
            )
            + "; run them longer."
        )
    if diag.get("chains_disagree"):
        lines.append(
            "the chains settled in different modes: each is stationary (its own and the "
            "within-chain R-hat at most 1.1), but they disagree with each other (R-hat of the "
            "chains together above 1.1). Their pooled draws are an ensemble of those modes, "
            "each chain's mode with equal weight (not its share of the posterior mass); more "
            "draws would not bring the chains together."
        )
    return "\n".join(lines)
