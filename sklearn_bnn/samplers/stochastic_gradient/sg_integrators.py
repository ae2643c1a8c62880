"""Pure update rules of the stochastic-gradient samplers (Schmal & Mäder 2026, Table 1, Alg. 2).

Notation: ``g`` is the gradient of the log density estimate (N/|B|) l_B + log p, so the
potential is U = -log p and the force -grad U = g. Momentum m, diagonal inverse mass
``inv_mass`` (M^-1), step size eps (a time step: the SGD learning rate of the same chain is
eps**2), momentum decay ``alpha`` per step (the constant-momentum parameterisation of Schmal & Mäder
(2026): the damping gamma = (1 - alpha) / eps is tied to the step size). All functions work on a
leading chain axis: positions and momenta (C, D), ``eps`` (C, 1).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "bab",
    "cosine_step_size",
    "euler_momentum",
    "ornstein_uhlenbeck",
    "skew_momentum",
    "skew_noise_variance",
]


def cosine_step_size(final: torch.Tensor, start: float | None, progress: float) -> torch.Tensor:
    """The warmup step size of Schmal & Mäder (2026, Table 2, "cosine schedule").

    Anneals from ``start`` down to ``final`` along half a cosine as ``progress`` goes from 0 to
    1; from then on (and with ``start=None``) it is ``final``. The momentum decay is held fixed,
    so the damping follows the step size (the constant-momentum schedule).
    """
    if start is None or progress >= 1.0:
        return final
    weight = 0.5 * (1.0 + math.cos(math.pi * progress))
    return final + (start - final) * weight


def euler_momentum(m, g, eps, alpha: float, temperature: float, sqrt_mass, noise, tmp=None):
    """Euler-Maruyama SGHMC momentum update (Chen et al. 2014; Schmal & Mäder 2026, eq. 3, Table 1).

    m <- alpha m + eps g + sqrt(2 (1 - alpha) T) M^1/2 xi, in place; the position then moves
    by eps M^-1 m. ``sqrt_mass`` None stands for a unit mass; ``noise`` (xi) is overwritten
    when it is scaled by ``sqrt_mass``, and ``tmp``, a buffer shaped like ``m``, receives
    eps g (a new tensor without it).
    """
    m.mul_(alpha).add_(eps * g if tmp is None else torch.mul(eps, g, out=tmp))
    if temperature > 0:
        m.add_(_scaled(noise, sqrt_mass), alpha=math.sqrt(2.0 * (1.0 - alpha) * temperature))
    return m


def ornstein_uhlenbeck(m, decay: float, temperature: float, sqrt_mass, noise):
    """The O step of OBABO: m <- a m + sqrt((1 - a^2) T) M^1/2 xi (exact for the friction part).

    OBABO applies it twice per step with a = sqrt(alpha), so a whole step decays the momentum by
    alpha. With T = 0 (the Hamiltonian trajectory ensemble) it is a pure decay. In place, with
    ``sqrt_mass`` and ``noise`` as for :func:`euler_momentum`.
    """
    m.mul_(decay)
    if temperature > 0:
        m.add_(_scaled(noise, sqrt_mass), alpha=math.sqrt((1.0 - decay * decay) * temperature))
    return m


def _scaled(noise, sqrt_mass):
    """M^1/2 xi, in ``noise``'s memory; ``noise`` itself for a unit mass (None)."""
    return noise if sqrt_mass is None else noise.mul_(sqrt_mass)


def bab(theta, m, g0, eps, inv_mass, grad_fn):
    """The deterministic B-A-B core of OBABO (Schmal & Mäder 2026, Table 1), with the force at the
    start from ``g0`` and at the end from ``grad_fn`` (the batch attached to the new position).

    m' = m + eps/2 g0(theta); theta' = theta + eps M^-1 m'; m'' = m' + eps/2 g1(theta').
    The map is a composition of shears (volume preserving) and, with the batches swapped and
    the momentum negated, its own inverse: the reversibility generalized SGHMC's test needs.

    Returns
    -------
    theta', m'', value1, g1
    """
    m = m + 0.5 * eps * g0
    theta = theta + eps * inv_mass * m
    value1, g1 = grad_fn(theta)
    m = m + 0.5 * eps * g1
    return theta, m, value1, g1


def skew_noise_variance(alpha: float) -> float:
    """Variance (in units of M) of the skew-symmetric step's noise: 4 beta with
    beta = (1 - alpha) / (1 + alpha), so that N(0, M) is invariant for the momentum part."""
    return 4.0 * (1.0 - alpha) / (1.0 + alpha)


def skew_momentum(r, g, eps, alpha: float, noise_term, tmp=None):
    """The skew-symmetric momentum update of AMAGOLD (Zhang et al. 2020; Schmal & Mäder 2026,
    Table 1, Alg. 2): r' = ((1 - beta) r + eps g + xi) / (1 + beta), beta = (1-alpha)/(1+alpha).

    ``noise_term`` is xi itself (already scaled: N(0, 4 beta M) at T = 1). Returns a new tensor;
    with ``tmp`` (a buffer shaped like ``r``, which receives eps g) it updates ``r`` in place.
    """
    beta = (1.0 - alpha) / (1.0 + alpha)
    if tmp is None:
        return ((1.0 - beta) * r + eps * g + noise_term) / (1.0 + beta)
    r.mul_(1.0 - beta).add_(torch.mul(eps, g, out=tmp)).add_(noise_term)
    return r.div_(1.0 + beta)
