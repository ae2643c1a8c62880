"""Priors over network weights.

The Gaussian prior N(0, 1/tau) with one precision tau per parameter tensor (Cobb & Jalaian 2021,
§3.1; Cobb et al. 2019, eq. 2), or a single float for all of them.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from sklearn.base import BaseEstimator

from ._persistence_registry import register

__all__ = [
    "BoundGaussianPrior",
    "GaussianPrior",
    "HierarchicalPrior",
    "Prior",
    "as_prior",
    "fan_in_precision",
]


class Prior:
    """Base class of the priors over a network's weights.

    A prior is a configuration (like a sampler object); :meth:`bind` lays it over a network's
    flattened parameters and returns the object the targets evaluate, with
    ``log_prob(theta, weight)`` (C,), ``grad(theta, weight)`` (C, D) and the in-place forms the
    hot paths use. ``weight`` multiplies the log density (1/M for one of M data subsets,
    Cobb & Jalaian 2021, eq. 6).
    """

    def bind(self, names: Sequence[str], sizes: Sequence[int], *, dtype, device):
        """The prior laid over parameters ``names`` of ``sizes`` (flattened in that order)."""
        raise NotImplementedError


def as_prior(value) -> Prior:
    """``value`` itself when it is a prior object (e.g. a :class:`HierarchicalPrior`), else
    the :class:`GaussianPrior` of that precision (a float, a sequence or a mapping)."""
    return value if isinstance(value, Prior) else GaussianPrior(value)


def fan_in_precision(
    names: Sequence[str], shapes: Sequence[Sequence[int]], output_precision: float | None = None
) -> dict:
    """Per-tensor precisions that scale with the width: each weight tensor's precision is its
    fan-in (the inputs of one output unit, the product of its shape beyond the first axis), a
    bias's (a 1-D tensor's) is 1.

    Every unit's summed input then has a prior variance of order one whatever the layer's
    width, so the prior over functions keeps its scale as the network grows (Neal 1996,
    sec. 2.2: hidden-to-output weights of standard deviation proportional to 1/sqrt(H)).

    Parameters
    ----------
    names, shapes : sequences
        The network's trainable parameter tensors, in order.
    output_precision : float or None, default=None
        The precision of the last weight tensor (the output layer's) instead of its fan-in.
    """
    precision = {}
    for name, shape in zip(names, shapes, strict=True):
        fan_in = 1
        for size in tuple(shape)[1:]:
            fan_in *= int(size)
        precision[name] = float(fan_in) if len(shape) > 1 else 1.0
    weights = [name for name, shape in zip(names, shapes, strict=True) if len(shape) > 1]
    if output_precision is not None and weights:
        precision[weights[-1]] = float(output_precision)
    return precision


class GaussianPrior(Prior):
    """Zero-mean Gaussian prior with per-tensor precisions.

    Parameters
    ----------
    precision : float, sequence of float, or mapping name -> float
        A single precision for every parameter tensor, one per tensor in the order of
        ``module.named_parameters()`` (trainable ones), or a mapping from parameter names
        (missing names fall back to ``default``).
    default : float
        Precision for tensors absent from a mapping.
    """

    def __init__(self, precision=1.0, default: float = 1.0):
        self.precision = precision
        self.default = default

    def precision_vector(
        self, names: Sequence[str], sizes: Sequence[int], *, dtype, device
    ) -> torch.Tensor:
        """The diagonal precision as a flat vector matching the flattened parameters."""
        per_tensor = self._per_tensor(names)
        return torch.cat(
            [
                torch.full((n,), float(t), dtype=dtype, device=device)
                for t, n in zip(per_tensor, sizes, strict=True)
            ]
        )

    def bind(self, names, sizes, *, dtype, device) -> BoundGaussianPrior:
        return BoundGaussianPrior(self.precision_vector(names, sizes, dtype=dtype, device=device))

    def _per_tensor(self, names: Sequence[str]) -> list[float]:
        p = self.precision
        if isinstance(p, numbers.Real) and not isinstance(p, bool):
            values = [float(p)] * len(names)
        elif isinstance(p, Mapping):
            unknown = set(p) - set(names)
            if unknown:
                raise ValueError(
                    f"prior_precision names unknown parameters {sorted(unknown)}; "
                    f"the network's trainable parameters are {list(names)}."
                )
            values = [float(p.get(n, self.default)) for n in names]
        else:
            try:
                values = [float(v) for v in p]
            except TypeError:
                raise ValueError(
                    f"prior_precision must be a positive float, a sequence or a dict, got {p!r}."
                ) from None
            if len(values) != len(names):
                raise ValueError(
                    f"prior_precision has {len(values)} entries but the network has "
                    f"{len(names)} trainable parameter tensors {list(names)}."
                )
        for v in values:
            if not (v > 0 and v < float("inf")):
                raise ValueError(f"prior_precision values must be finite and > 0, got {p!r}.")
        return values


class BoundGaussianPrior:
    """log N(theta | 0, diag(1/tau)) = -tau . theta^2 / 2 (+ const), in closed form.

    The one place the Gaussian prior's value and gradient are written (Cobb & Jalaian 2021, §3.1).
    ``precision`` (D,) may be replaced or updated in place (e.g. by a Gibbs step on a
    hyperprior); the weighted copies are cached against its version.

    Parameters
    ----------
    precision : tensor (D,) or (C, D)
        tau, one precision per flattened parameter, or one row per chain (the per-chain
        precisions a Gibbs block drew, :meth:`per_chain`); a single position (D,) then takes
        the first row (one chain evaluated alone).
    """

    def __init__(self, precision: torch.Tensor):
        self.precision = precision
        self._weighted = None

    @classmethod
    def per_chain(cls, precision: torch.Tensor) -> BoundGaussianPrior:
        """The prior of every chain c at its own precision ``precision[c]`` (C, D)."""
        if precision.ndim != 2:
            raise ValueError(f"per-chain precisions must be (C, D), got {tuple(precision.shape)}.")
        return cls(precision)

    def select_chains(self, idx) -> BoundGaussianPrior:
        """The prior of the chains ``idx`` only (itself when the precision is shared)."""
        tau = self.precision
        return self if tau.ndim == 1 else BoundGaussianPrior(tau[idx])

    def weighted_precision(self, weight: float = 1.0) -> torch.Tensor:
        """``weight * tau`` (cached: split integrators ask for 1/M at every subset)."""
        tau = self.precision
        if weight == 1.0:
            return tau
        key = (float(weight), id(tau), tau._version)
        if self._weighted is None or self._weighted[0] != key or self._weighted[1] is not tau:
            self._weighted = (key, tau, weight * tau)
        return self._weighted[2]

    def _tau(self, theta: torch.Tensor, weight: float) -> torch.Tensor:
        """``weight * tau`` shaped for ``theta``: a per-chain row for one position (D,)."""
        tau = self.weighted_precision(weight)
        return tau[0] if tau.ndim == 2 and theta.ndim == 1 else tau

    def log_prob(self, theta: torch.Tensor, weight: float = 1.0) -> torch.Tensor:
        """``weight`` times the log density at ``theta`` (C, D) -> (C,) (or (D,) -> scalar)."""
        tau = self._tau(theta, weight)
        # mul_(-0.5) in place: a Python number times a tensor costs a scalar tensor's creation,
        # as much as the product itself at a small network's size (the same value: * -0.5 is exact)
        square = theta.detach().square()
        if tau.ndim == 1 and not (square.is_cuda and square.ndim == 2 and square.shape[0] == 1):
            return torch.matmul(square, tau).mul_(-0.5)
        # per-chain precisions, or one chain on a GPU: there cuBLAS's matrix-vector kernel for a
        # single row is slower than a product and a sum (docs/hmc.md, "On a GPU")
        return square.mul_(tau).sum(-1).mul_(-0.5)

    def grad(self, theta: torch.Tensor, weight: float = 1.0) -> torch.Tensor:
        """``weight`` times the gradient of the log density, -w tau theta."""
        return -self._tau(theta, weight) * theta.detach()

    def add_grad_(self, grad: torch.Tensor, theta: torch.Tensor, weight: float = 1.0):
        """``grad += weight * grad log p(theta)`` in place; returns ``grad``."""
        return grad.addcmul_(self._tau(theta, weight), theta.detach(), value=-1.0)

    def neg_grad_into(self, out: torch.Tensor, theta: torch.Tensor, weight: float = 1.0):
        """``out = -weight * grad log p(theta)`` written into ``out`` (the hot path of one
        chain's gradient, which then accumulates the likelihood's backward pass on top)."""
        return torch.mul(self._tau(theta, weight), theta, out=out)


@register
@dataclass(kw_only=True, eq=False, repr=False)
class HierarchicalPrior(Prior, BaseEstimator):
    """Gaussian prior with one unknown precision per parameter tensor, Gamma hyperpriors.

    w_i | tau ~ N(0, 1/tau_l) for the weights of tensor l (each layer's weights and biases
    separately), tau_l ~ Gamma(alpha, beta), and for regression the output noise precision
    lambda ~ Gamma(noise_alpha, noise_beta) (Cobb et al. 2019, §2, App. C; Cobb 2019, §6.2). The
    precisions are sampled with the weights; nothing needs guessing.

    Parameters
    ----------
    alpha, beta : float, default=2.0, 1.0
        Gamma shape and rate of every weight/bias precision (Cobb 2019, §6.4);
        alpha > 1/2 keeps the metric G_tau positive definite (Cobb et al. 2019, eq. 6).
    noise_alpha, noise_beta : float, default=2.0, 0.1
        Gamma shape and rate of the regression noise precision (alpha > 1, Cobb et al. 2019,
        footnote 1); the default has its mode at 10 on the regressors' standardised targets.
    learn_noise : bool, default=True
        Regression: sample the output noise precision (the estimator's ``noise_precision`` is
        then only its starting value). With ``scheme="gibbs"`` and ``learn_noise=False``, the
        noise is as the estimator's ``noise_precision`` / ``noise_prior`` make it.
    scheme : {"gibbs", "joint"}, default="gibbs"
        How the precisions are sampled. ``"gibbs"``: the estimator's sampler (HMC, NUTS, split
        HMC) moves the weights given the precisions, and each transition ends with exact draws
        of every precision from its conjugate conditional, tau_l | w ~ Gamma(alpha + n_l/2,
        beta + |w_l|^2/2), and of the noise precision given the residuals (Neal 1996, §3.2;
        :class:`~sklearn_bnn.targets.PriorPrecisionGibbs`). ``"joint"``: weights and
        log-precisions form one position, sampled together by ``sampler="s3hmc"``
        (Cobb et al. 2019). ``sampler="s3hmc"`` always samples jointly. See docs/rmhmc.md for the
        comparison that made ``"gibbs"`` the default.
    interweave : int, default=0
        With ``scheme="gibbs"``: after each draw of the precisions, this many rounds of a
        Metropolis move per tensor of its precision and weights together at fixed
        non-centred weights w_l sqrt(tau_l) (the interweaving of Yu & Meng 2011, *JCGS*
        20:531; one forward pass per tensor and round, the step adapted in warmup;
        :class:`~sklearn_bnn.targets.InterweavedPrecisionGibbs`). 0 leaves it out; ignored by
        ``scheme="joint"``. See docs/rmhmc.md, "Interweaving moves".
    """

    alpha: float = 2.0
    beta: float = 1.0
    noise_alpha: float = 2.0
    noise_beta: float = 0.1
    learn_noise: bool = True
    scheme: str = "gibbs"
    interweave: int = 0

    def check(self) -> None:
        for name, low in (("alpha", 0.5), ("beta", 0.0), ("noise_alpha", 1.0), ("noise_beta", 0.0)):
            v = getattr(self, name)
            if not (isinstance(v, numbers.Real) and not isinstance(v, bool) and v > low):
                raise ValueError(f"HierarchicalPrior {name} must be a number > {low}, got {v!r}.")
        if self.scheme not in SCHEMES:
            raise ValueError(
                f"HierarchicalPrior scheme must be one of {SCHEMES}, got {self.scheme!r}."
            )
        v = self.interweave
        if not (isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v <= 100):
            raise ValueError(
                f"HierarchicalPrior interweave must be an integer in [0, 100], got {v!r}."
            )

    def bind(self, names, sizes, *, dtype, device) -> BoundGaussianPrior:
        """A Gaussian prior at the hyperprior's mean precision alpha / beta (the MAP start, and
        the precision until a Gibbs block draws each chain's own)."""
        return GaussianPrior(self.alpha / self.beta).bind(names, sizes, dtype=dtype, device=device)

    def to_state(self) -> dict:
        return self.get_params()

    @classmethod
    def _check_state(cls, state: dict) -> None:
        """A saved prior holds exactly its parameters, as numbers (checked before building);
        files written before ``scheme`` existed were sampled jointly and read so, and those
        written before ``interweave`` without the interweaving move."""
        expected = set(cls().get_params())
        if isinstance(state, dict) and "scheme" not in state:
            state["scheme"] = "joint"
        if isinstance(state, dict) and "interweave" not in state:
            state["interweave"] = 0
        if not isinstance(state, dict) or set(state) != expected:
            raise ValueError(f"a HierarchicalPrior state must hold {sorted(expected)}.")
        for name, value in state.items():
            if name == "scheme":
                if value not in SCHEMES:
                    raise ValueError(f"HierarchicalPrior scheme must be one of {SCHEMES}.")
            elif name == "interweave":
                if type(value) is not int:
                    raise ValueError(f"HierarchicalPrior interweave must be an int, got {value!r}.")
            elif type(value) not in (int, float, bool):
                raise ValueError(f"HierarchicalPrior {name} must be a number, got {value!r}.")
        cls(**state).check()

    @classmethod
    def from_state(cls, state: dict):
        return cls(**state)


#: How :class:`HierarchicalPrior` samples its precisions.
SCHEMES = ("gibbs", "joint")
