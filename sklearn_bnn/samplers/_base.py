"""The sampler protocol: states, step information, kernels and sampler objects.

Two layers, in the style of BlackJAX's ``SamplingAlgorithm`` and NumPyro's ``MCMCKernel``:

- a **sampler** (:class:`Sampler`) is a configuration with scikit-learn parameters
  (``HMC(n_steps=50)``, ``NUTS(max_tree_depth=8)``): it can be cloned, grid-searched and set by
  nested names (``sampler__n_steps``), and knows nothing of any data;
- ``sampler.build(target)`` checks the target and binds the sampler to it: it returns a
  **kernel** (:class:`Kernel`) built as ``XKernel(sampler, target)``, which reads every setting
  from the sampler object and keeps only run-time state of its own (the default step size and
  inverse mass of a ``step``, an adaptation's state): ``state = kernel.init(position,
  generator, n_warmup=...)``, then ``state, info = kernel.step(state, generator,
  step_size=..., inv_mass=...)``.

A sampler also has two hooks around a run, both doing nothing by default:
``sampler.prepare_target(target)`` returns the target it samples (S3HMC appends per-group
log-precisions to a network's weights), and ``sampler.postprocess(run, target)`` turns the run
of that target back into draws of the caller's (S3HMC moves the precisions to per-draw
statistics). A sampler that drives its own runs (one chain per box of a partition) overrides
``sampler.run(target, positions, driver, **kwargs)``, and gets the sampling loop passed in as
``driver`` rather than importing it.

Every kernel works on a leading chain axis: positions are (C, D), per-chain scalars (C,). A kernel
never prints, never touches global RNG state and knows nothing of scikit-learn; its only source of
randomness is the ``torch.Generator`` it is handed.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import torch
from sklearn.base import BaseEstimator

from .._utils import check_scalar_param
from ..targets import TargetCapabilities, capabilities
from .geometry.euclidean import as_metric

__all__ = [
    "WARMUP_SETTINGS",
    "Info",
    "Kernel",
    "Sampler",
    "State",
    "chain_step_size",
    "default_step_size",
    "kinetic_energy",
    "sample_momentum",
    "sampler_setting",
]

#: The warmup's settings that a sampler may declare in its signature; the sampling loop reads
#: them from the sampler object (:meth:`Sampler.warmup_options`), never from anywhere else.
WARMUP_SETTINGS = ("step_size", "target_accept", "adapt_mass")


class State(NamedTuple):
    """A position with its cached log density and gradient (so a step costs one gradient)."""

    position: torch.Tensor  # (C, D)
    log_prob: torch.Tensor  # (C,)
    grad: torch.Tensor  # (C, D)


class Info(NamedTuple):
    """What one transition did, per chain.

    ``extra`` holds whatever else a kernel reports (NUTS: ``tree_depth``); the sampling loop
    keeps every entry of it beside each draw, in ``PosteriorSamples.stats``.
    """

    accept_prob: torch.Tensor  # (C,) Metropolis-Hastings acceptance probability
    accepted: torch.Tensor  # (C,) bool
    energy_error: torch.Tensor  # (C,) H(end) - H(start); inf when the trajectory diverged
    divergent: torch.Tensor  # (C,) bool: non-finite or above the divergence threshold
    step_size: torch.Tensor  # (C,)
    n_grad: float  # full-data gradient evaluations spent (per chain; a subset counts 1/M)
    extra: dict | None = None  # per-chain (C,) statistics of this kernel
    # (start, end, end velocity (C, D), integration time (C,)) of the trajectory, for an
    # adaptation of its length (kernels with ``adapts_trajectory``); not kept by the loop
    trajectory: tuple | None = None


class Kernel:
    """A sampler bound to a target: the transition kernel the sampling loop drives.

    Subclasses set ``self.target`` and implement :meth:`init` and :meth:`step`. A kernel is
    built by its sampler, ``XKernel(sampler, target)``, and reads its settings from the sampler
    object (:func:`sampler_setting`); it holds no copy of a setting with a default of its own.

    Attributes
    ----------
    sampler : Sampler
        The configuration the kernel was built from.
    target : object
        The log density, with ``value_and_grad(theta (C, D)) -> ((C,), (C, D))``, ``dim``,
        ``device`` and ``dtype``.
    adapts_step_size : bool
        Whether the loop may tune ``step_size`` by dual averaging (False for kernels without
        a step size, e.g. random-walk kernels with their own scale).
    metric : Metric or None
        A metric (:mod:`.geometry`) the kernel uses instead of the loop's diagonal inverse mass:
        a user's fixed Euclidean metric, or RMHMC's position-dependent one. The loop then adapts
        no mass. None: the kernel takes the ``inv_mass`` the loop passes to :meth:`step`.
    adapts_trajectory : bool
        Whether the warmup adapts the kernel's integration time (HMC with
        ``trajectory_length="auto"``): the loop then passes the adaptation's schedule to
        every :meth:`step` as ``trajectory``, and the kernel reports ``Info.trajectory``.
    needs_warmup_length : bool
        Whether something in the kernel adapts over a warmup whose length it must know in
        advance (a Gibbs block's proposal scales): an adaptive warmup then runs its whole
        planned length.
    """

    adapts_step_size = True
    adapts_trajectory = False
    needs_warmup_length = False
    sampler = None
    _target = None
    _capabilities = None
    metric = None

    @property
    def target(self):
        return self._target

    @target.setter
    def target(self, target) -> None:
        self._target = target
        self._capabilities = None

    @property
    def capabilities(self) -> TargetCapabilities:
        """The optional members of :attr:`target` (:func:`~sklearn_bnn.targets.capabilities`),
        read once per target."""
        if self._capabilities is None:
            self._capabilities = capabilities(self._target)
        return self._capabilities

    def final_step_size(self, step_size):
        """The step the kernel takes for the loop's ``step_size`` (C,): the step itself, unless
        the kernel bounds it (the stochastic-gradient kernels, from the curvature)."""
        return step_size

    def init(self, position: torch.Tensor, generator=None, *, n_warmup: int = 0) -> State:
        """The state at ``position`` (D,) or (C, D), with its log density and gradient.

        ``generator`` is there for kernels whose start draws something (a Gibbs block), and
        ``n_warmup`` for kernels with a warmup schedule of their own (the stochastic-gradient
        kernels' annealed step size): the loop tells every kernel both.
        """
        if position.ndim == 1:
            position = position[None]
        log_prob, grad = self.target.value_and_grad(position)
        return State(position.detach(), log_prob, grad)

    def with_target(self, target) -> Kernel:
        """This kernel on another target with the same layout (a Gibbs step's conditional
        density): a shallow copy, sharing whatever else the kernel holds. A kernel that keeps
        anything bound to its target (methods, derivatives) overrides this to rebind it."""
        kernel = copy.copy(self)
        kernel.target = target
        return kernel

    def local_target(self, state):
        """The density the next transition from ``state`` moves on: ``target`` itself, or,
        for a kernel that conditions on coordinates kept outside the position (a Gibbs block),
        the conditional density given their current values. The warmup's step-size search
        integrates on it."""
        return self.target

    def progress(self, info: Info) -> str:
        """A few words for the progress bar after a transition (none by default)."""
        return ""

    def step(self, state, generator: torch.Generator, step_size=None, inv_mass=None):
        """One transition for every chain: returns ``(state, info)``. A kernel with
        :attr:`adapts_trajectory` also takes ``trajectory=``, the integration-time schedule."""
        raise NotImplementedError

    def acceptance(self, info: Info) -> torch.Tensor:
        """The per-chain acceptance statistic reported as ``acceptance_rate_`` (C,).

        Whether the proposal was accepted, by default; a kernel whose transition almost always
        moves (NUTS) reports its mean Metropolis acceptance probability instead.
        """
        return info.accepted.double()

    def describe(self, stats: dict) -> dict:
        """Run-level figures from this kernel's per-draw ``stats`` (C, n_draws) each, for the
        diagnostics (e.g. NUTS's mean tree depth); none by default."""
        return {}


class Sampler(BaseEstimator):
    """Base class of the sampler objects: a configuration that builds a :class:`Kernel`.

    Parameters are keyword arguments of ``__init__``, stored unchanged (the scikit-learn
    convention), so ``clone``, ``get_params``/``set_params`` and ``GridSearchCV`` work on
    samplers and on the estimators that take them
    (``HMCRegressor(sampler=NUTS(max_tree_depth=8))``). The package's samplers declare them as
    the fields of a keyword-only dataclass (``@dataclass(kw_only=True, eq=False, repr=False)``),
    whose generated ``__init__`` does exactly that.

    Subclasses implement :meth:`check_target`, the one place their settings are validated (and
    a target they cannot sample refused with a clear message), and :meth:`build`, which calls
    it and returns ``XKernel(self, target)``: the kernel reads the settings from the sampler,
    so each is declared once, with its default, on the sampler's class.

    Attributes
    ----------
    data_access : {"full", "minibatch"}
        How the sampler reads the data, which says which estimators can run it: "full" (the
        default) evaluates the whole data set, or one subset of a split target, per gradient
        (``HMCClassifier``, ``SplitHMCRegressor``, ...); "minibatch" needs a minibatch target
        (``batch_value_and_grad``, ``n_data``, ``batch_size``: ``SGMCMCClassifier``, ...).
    """

    data_access = "full"

    def build(self, target) -> Kernel:
        """A kernel of this configuration on ``target`` (``XKernel(self, target)``, after
        :meth:`check_target`)."""
        raise NotImplementedError

    def resume(self, stats: dict):
        """The sampler that continues a run whose per-draw statistics are ``stats`` (an
        estimator's warm start: no warmup). Itself by default; a sampler that adapts more than
        the loop's step size and mass in warmup returns a copy that starts where the run
        ended (HMC's adapted integration time)."""
        return self

    def warmup_options(self) -> dict:
        """The warmup settings this sampler declares (those of :data:`WARMUP_SETTINGS` in its
        signature: the step size, "auto" for dual averaging, the acceptance it aims for, the
        diagonal mass adaptation), checked, as the sampling loop takes them."""
        params = self.get_params(deep=False)
        options = {name: params[name] for name in WARMUP_SETTINGS if name in params}
        check_warmup_options(options)
        declared = self._get_param_defaults().get("target_accept")
        if (
            not isinstance(options.get("step_size", "auto"), str)
            and "target_accept" in options
            and options["target_accept"] != declared
        ):
            raise ValueError(
                f"target_accept={options['target_accept']!r} is the acceptance that the warmup "
                f"adapts the step size to, but step_size={options['step_size']!r} is fixed: "
                f"set step_size='auto' to adapt it, or leave target_accept at {declared!r}."
            )
        return options

    @classmethod
    def _get_param_defaults(cls) -> dict:
        """The defaults declared in ``__init__``'s signature, by parameter name."""
        import inspect

        return {
            name: p.default
            for name, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty
        }

    def check_target(self, target) -> None:
        """Raise ``ValueError`` if ``target`` lacks something this sampler needs."""

    def prepare_target(self, target):
        """The target this sampler samples when asked to sample ``target`` (itself by
        default; a sampler that needs extra coordinates or another form of the density
        returns it here, with ``extend_positions(positions)`` if it has more coordinates)."""
        return target

    def postprocess(self, run, target):
        """The run of the prepared ``target`` as draws of the caller's target: by default what
        the target's own ``split_draws(run)`` gives when it has one (a hierarchical network
        target: the weights as draws, the precisions as per-draw statistics), else ``run``."""
        split = capabilities(target).split_draws
        return run if split is None else split(run)

    def run(self, target, positions: torch.Tensor, driver, **kwargs):
        """Sample ``target`` from ``positions`` (C, D): build the kernel and let ``driver``
        (the sampling loop: ``driver.run_all_chains``, ``driver.run_chains``,
        ``driver.chain_seeds``) run every chain. A sampler that drives its own runs overrides
        this; returns ``(run, generator_states)``."""
        return driver.run_all_chains(driver.kernel_for(self, target), positions, **kwargs)


def sampler_setting(name: str, *, absent=None, doc: str | None = None) -> property:
    """A read-only kernel attribute that is the setting ``name`` of the kernel's sampler.

    ``absent`` is what a sampler of the family without that setting gives: the value that turns
    the feature off (``ConstrainedHMC`` has no ``trajectory_length``, NUTS no ``n_steps``).
    """

    def read(kernel):
        return getattr(kernel.sampler, name, absent)

    return property(read, doc=doc or f"The sampler's ``{name}``.")


def default_step_size(sampler, step_size=None):
    """The step size a kernel's ``step`` takes when given none: ``step_size`` when given, else
    the sampler's ``step_size`` when it is a number, else None (``"auto"``: the sampling loop
    adapts it in warmup and passes it to every step)."""
    if step_size is not None:
        return step_size
    declared = getattr(sampler, "step_size", None)
    return None if isinstance(declared, str) else declared


def chain_step_size(step_size, default, position: torch.Tensor) -> torch.Tensor:
    """The step size (C,) of a transition from ``position`` (C, D): ``step_size`` (a number or
    one per chain) when given, else the kernel's ``default``."""
    eps = default if step_size is None else step_size
    if eps is None:
        raise ValueError(
            "this kernel has no step size of its own: its sampler's step_size is 'auto', which "
            "the sampling loop adapts and passes to every step. Pass step_size to step(), or "
            "build the kernel from a sampler with a numeric step_size."
        )
    return torch.as_tensor(eps, dtype=position.dtype, device=position.device).expand(
        position.shape[0]
    )


def kinetic_energy(momentum: torch.Tensor, inv_mass) -> torch.Tensor:
    """K(p) = p^T M^-1 p / 2 over the last axis.

    ``inv_mass`` is a metric of :mod:`.geometry.euclidean` or a tensor, the diagonal of M^-1 (see
    :func:`~sklearn_bnn.samplers.geometry.euclidean.as_metric`); the metric computes it.
    """
    return as_metric(inv_mass).kinetic_energy(momentum)


def sample_momentum(shape, inv_mass, generator: torch.Generator, *, dtype, device) -> torch.Tensor:
    """p ~ N(0, M), drawn by the metric ``inv_mass`` (or a diagonal of M^-1, as a tensor)."""
    return as_metric(inv_mass).sample_momentum(shape, generator, dtype=dtype, device=device)


def check_warmup_options(options: dict) -> None:
    """Raise ``ValueError`` naming the first warmup setting out of its range."""
    if "step_size" in options:
        check_scalar_param(
            options["step_size"], "step_size", low=0, low_inclusive=False, allow=("auto",)
        )
    if "target_accept" in options:
        check_scalar_param(
            options["target_accept"],
            "target_accept",
            low=0,
            high=1,
            low_inclusive=False,
            high_inclusive=False,
        )
    if "adapt_mass" in options and not isinstance(options["adapt_mass"], bool):
        raise ValueError(f"adapt_mass must be True or False, got {options['adapt_mass']!r}.")
