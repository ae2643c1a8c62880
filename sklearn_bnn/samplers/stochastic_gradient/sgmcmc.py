"""Stochastic-gradient MCMC on a minibatch target (Schmal & Mäder 2026).

Samplers: :class:`SGLD`, :class:`SGHMC` (Euler-Maruyama, OBABO or skew-symmetric integrator),
:class:`AMAGOLD` (accumulated Metropolis-Hastings over a trajectory, Algorithm 2),
:class:`GSGHMC` (generalized SGHMC: OBABO with a minibatch Metropolis-Hastings test at every
step) and :class:`HTE` (Hamiltonian trajectory ensemble, Algorithm 1).

The kernels are in :mod:`.sg_kernels` and :mod:`.sg_adjusted`. One transition is one pass of
``n_steps`` minibatch steps (by default an epoch: the rows in a fresh random permutation, cut
into batches of the target's ``batch_size``; the remainder is left out, so every step sees the
same number of rows).
Momentum is drawn afresh from N(0, T M) at the start of each transition (a Gibbs step that
leaves the target invariant), so the sampling loop's state stays ``(position, log_prob, grad)``.
These kernels choose their own step size schedule (``adapts_step_size = False``): the step size
of the run, annealed from ``warmup_step_size`` along a cosine during warmup, whose length the
loop tells them (``kernel.init(position, generator, n_warmup=...)``). The target needs
``batch_value_and_grad(theta, rows)``, ``n_data`` and ``batch_size``
(:class:`~sklearn_bnn.targets.MinibatchTarget`), and, for AMAGOLD and HTE, the exact
``log_prob(theta)``. A target that also has ``batch_likelihood_and_grad`` and ``log_prior``
saves the prior's value at the steps whose value is not used (SGLD and SGHMC add it once per
transition, AMAGOLD and HTE never need it).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._utils import check_scalar_param
from ...targets import capabilities, require
from .._base import Kernel, Sampler
from .._by_name import register_sampler, register_setup
from .sg_adjusted import AMAGOLDKernel, GSGHMCKernel, HTEKernel, amagold_trajectory
from .sg_kernels import SGHMCKernel, SGLDKernel
from .sg_step_size import estimator_setup

__all__ = ["AMAGOLD", "GSGHMC", "HTE", "SGHMC", "SGLD", "amagold_trajectory"]

# an estimator runs a minibatch sampler (any object with data_access="minibatch") from the MAP
# start of minibatch Adam, at a step chosen from the data where asked (sg_step_size.py)
register_setup("minibatch")(estimator_setup)


@dataclass(kw_only=True, eq=False, repr=False)
class _SGSampler(Sampler):
    """The settings every stochastic-gradient sampler has, and their validation."""

    step_size: object = "auto"
    warmup_step_size: float | None = None
    n_steps: int | None = None

    _kernel_cls = None
    needs_exact_log_prob = False
    data_access = "minibatch"  # estimators: SGMCMCClassifier / SGMCMCRegressor

    def _check_common(self) -> None:
        if isinstance(self.step_size, str) and self.step_size == "auto":
            raise ValueError(
                f"{type(self).__name__}(step_size='auto') takes the step chosen from the data "
                "by SGMCMCClassifier / SGMCMCRegressor; to run it directly, give step_size a "
                "number (e.g. 1e-3)."
            )
        check_scalar_param(self.step_size, "step_size", low=0, low_inclusive=False)
        if self.n_steps is not None:
            check_scalar_param(self.n_steps, "n_steps", kind="int", low=1)
        if self.warmup_step_size is not None:
            check_scalar_param(
                self.warmup_step_size, "warmup_step_size", low=0, low_inclusive=False
            )
        if hasattr(self, "momentum"):
            check_scalar_param(self.momentum, "momentum", low=0, high=1)
        if hasattr(self, "temperature"):
            check_scalar_param(self.temperature, "temperature", low=0)

    _replays = False

    def replays_on_cuda(self, default_integrator: str | None = None) -> bool:
        """Whether this sampler's minibatch steps are recorded once as a CUDA graph and
        replayed on a GPU (:mod:`~sklearn_bnn.samplers.stochastic_gradient._sg_graphs`): SGLD
        and SGHMC, with data resident there."""
        return self._replays

    def check_target(self, target) -> None:
        require(
            target,
            ("batch_value_and_grad", "n_data", "batch_size"),
            type(self).__name__,
            "a minibatch target (with batch_value_and_grad, n_data and batch_size, e.g. "
            "MinibatchTarget)",
        )

    def build(self, target) -> Kernel:
        self._check_common()
        self.check_target(target)
        return self._kernel_cls(self, target)


@register_sampler("sgld")
@dataclass(kw_only=True, eq=False, repr=False)
class SGLD(_SGSampler):
    """Stochastic gradient Langevin dynamics (Welling & Teh 2011).

    theta <- theta + eps M^-1 g_B(theta) + N(0, 2 eps T M^-1), with g_B the gradient of the
    minibatch estimate (N/|B|) l_B + log p. No acceptance test: the draws carry a bias of order
    eps (and of the gradient noise) that shrinks with the step size.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        eps (the Langevin time step). "auto" is chosen from the data: the SG-MCMC estimators
        measure the minibatch gradient noise at the MAP start (:mod:`.sg_step_size`);
        :func:`.sample` needs a number.
    warmup_step_size : float, default=None
        Start of the cosine warmup schedule (annealed to ``step_size``); None: constant.
    temperature : float, default=1.0
        T: 1 samples the posterior, 0 is stochastic gradient ascent.
    n_steps : int, default=None
        Minibatch steps per transition (draw); None: one epoch.

    Examples
    --------
    >>> SGLD(step_size=1e-4).build  # doctest: +ELLIPSIS
    <bound method _SGSampler.build of SGLD(step_size=0.0001)>
    """

    _kernel_cls = SGLDKernel
    _replays = True

    temperature: float = 1.0


@register_sampler("sghmc")
@dataclass(kw_only=True, eq=False, repr=False)
class SGHMC(_SGSampler):
    """Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014).

    Schmal & Mäder (2026), eq. 3 and Table 1.

    Parameters
    ----------
    step_size : float or "auto", default="auto"
        eps, the time step (the matching SGD learning rate is eps**2). "auto" is chosen from
        the data: the SG-MCMC estimators measure the minibatch gradient noise at the MAP start
        (:mod:`.sg_step_size`); :func:`.sample` needs a number.
    momentum : float, default=0.99
        Momentum decay alpha per step, in [0, 1]: the damping is (1 - alpha) / eps, so a change
        of step size keeps the momentum (the constant-momentum parameterisation of Zhang et
        al. 2020). The momentum persists about 1 / (1 - alpha) steps, carried from one
        transition to the next: 0.99 lets the chain travel a hundred steps in one direction,
        where 0.9 makes it a random walk of ten-step legs.
    integrator : {"euler", "obabo", "skew"}, default="euler"
        Euler-Maruyama; OBABO (exact Ornstein-Uhlenbeck half steps around a velocity-Verlet
        step, one gradient per step); the skew-symmetric update of AMAGOLD without its test.
    warmup_step_size : float, default=None
        Start of the cosine warmup schedule (annealed to ``step_size``); None: constant.
    temperature : float, default=1.0
    n_steps : int, default=None
        Minibatch steps per transition; None: one epoch.
    """

    _kernel_cls = SGHMCKernel
    _replays = True

    momentum: float = 0.99
    integrator: str = "euler"
    temperature: float = 1.0

    def _check_common(self) -> None:
        super()._check_common()
        if self.integrator not in ("euler", "obabo", "skew"):
            raise ValueError(
                f"integrator must be 'euler', 'obabo' or 'skew', got {self.integrator!r}."
            )


# -- Metropolis-adjusted ----------------------------------------------------------------------


@dataclass(kw_only=True, eq=False, repr=False)
class _AdjustedSampler(_SGSampler):
    """The samplers whose trajectories a Metropolis-Hastings test adjusts (AMAGOLD, GSGHMC,
    HTE)."""

    momentum: float = 0.9

    def check_target(self, target) -> None:
        super().check_target(target)
        if self.needs_exact_log_prob and capabilities(target).log_prob is None:
            raise ValueError(f"{type(self).__name__} needs the target's exact log_prob(theta).")


_ADJUSTED_PARAMS = """
    Parameters
    ----------
    step_size : float or "auto", default="auto"
        eps, the time step (the matching SGD learning rate is eps**2). "auto" is chosen from
        the data: the SG-MCMC estimators measure the minibatch gradient noise at the MAP start
        (:mod:`.sg_step_size`); :func:`.sample` needs a number.
    momentum : float, default=0.9
        Momentum decay alpha per step, in [0, 1] (1: no friction).
    warmup_step_size : float, default=None
        Start of the cosine warmup schedule (annealed to ``step_size``); None: constant.
    n_steps : int, default=None
        Minibatch steps per transition (the trajectory length); None: one epoch.
"""


@register_sampler("amagold")
class AMAGOLD(_AdjustedSampler):
    __doc__ = (
        """Amortized Metropolis adjustment of SGHMC (Zhang et al. 2020; Schmal & Mäder 2026).

    A trajectory of skew-symmetric minibatch steps whose forward/backward proposal densities
    are accumulated step by step (``rho``); one Metropolis-Hastings test at the end on the
    exact full-data log density (one extra forward pass over the data per transition). The
    draws are exact whatever the gradient noise; the acceptance falls as the step grows.
    """
        + _ADJUSTED_PARAMS
    )

    _kernel_cls = AMAGOLDKernel
    needs_exact_log_prob = True


@register_sampler("gsghmc")
@dataclass(kw_only=True, eq=False, repr=False)
class GSGHMC(_AdjustedSampler):
    __doc__ = (
        """Generalized SGHMC (Schmal & Mäder 2026, "Generalized SGHMC", eq. 9, c_n = 1).

    OBABO steps; each B-A-B move is accepted or rejected on the minibatch energy of the new
    point's batch against that of the old point's batch (the batch travels with the position:
    the augmented target exp(-U_tau(theta)) Unif(tau) N(m; 0, M)); the momentum is negated on
    rejection, as in generalized HMC. One gradient per step, fixed batch size. Consecutive
    batches come from one permutation per epoch (disjoint) rather than independent draws.

    With the likelihood scaled by N/|B| (this package's U, the log posterior estimate), the
    batch-to-batch spread of U_tau(theta) at a fixed theta is many nats for any real data set
    (4 nats on iris with |B| = 32, growing like N / sqrt(|B|)), so the literal test of eq. 9
    (``energy="augmented"``) drives the chain onto an unusually favourable batch that no later
    proposal beats: the acceptance collapses to zero (see docs/sgmcmc.md). The default
    ``energy="paired"`` evaluates the old position on the new batch as well (one extra forward
    pass, no backward), so the test sees U_tau_p(theta_p) - U_tau_p(theta_0): an O(eps)
    difference whose batch noise nearly cancels. It is a noisy Metropolis-Hastings test (an
    uncorrected bias of the order of that noise's variance, vanishing with eps), exact when the
    gradient noise is not data-driven (on :class:`~.sg_synthetic.NoisyGaussianTarget`, whose
    values are exact, both variants coincide).
    """
        + _ADJUSTED_PARAMS
        + """    energy : {"paired", "augmented"}, default="paired"
        Which energy difference the per-step test uses (see above).
"""
    )

    _kernel_cls = GSGHMCKernel

    energy: str = "paired"

    def _check_common(self) -> None:
        super()._check_common()
        if self.energy not in ("paired", "augmented"):
            raise ValueError(f"energy must be 'paired' or 'augmented', got {self.energy!r}.")


@register_sampler("hte")
@dataclass(kw_only=True, eq=False, repr=False)
class HTE(_AdjustedSampler):
    __doc__ = (
        """Hamiltonian trajectory ensemble (Schmal & Mäder 2026, Algorithm 1).

    Momentum drawn from N(0, M), ``n_steps`` OBABO minibatch steps at T = 0 (momentum with
    decay, no injected noise), then the HMC test on the exact full-data energy. Not an exact
    posterior sampler (the stochastic trajectory is not reversible): an ensemble method that
    keeps trajectories which stayed close to the Hamiltonian flow. As in Algorithm 1 a rejected
    trajectory adds no draw: a new momentum is drawn at the same position and the trajectory
    re-run, up to ``max_tries`` times per draw (then the previous draw is repeated and the
    transition counts as rejected); ``stats["n_tries"]`` records the trajectories per draw, so
    a transition may cost several epochs.
    """
        + _ADJUSTED_PARAMS
        + """    max_tries : int, default=10
        Trajectories tried per draw before the previous draw is repeated.
"""
    )

    _kernel_cls = HTEKernel
    needs_exact_log_prob = True

    max_tries: int = 10

    def _check_common(self) -> None:
        super()._check_common()
        check_scalar_param(self.max_tries, "max_tries", kind="int", low=1)
