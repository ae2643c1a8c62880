"""Machinery shared by the sampling estimators: validation, chains, prediction.

A subclass provides the likelihood and the encoding of ``y`` (``_prepare_targets``), the number
of network outputs, and turns per-draw network outputs into predictions. Everything else (the
network, the target, chains, warmup, warm starts, interrupts) lives here once; the diagnostics
of a run are in :mod:`._sampling_report`, the persistence of the fitted state in
:mod:`._sampling_state`.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._seeding import child, root_seed, torch_seed
from .._state_checks import meta_module
from .._threads import in_sampling_threads
from .._utils import (
    AUTO_CUDA_WORK,
    AUTO_CUDA_WORK_REPLAYED,
    FitDeviceMixin,
    predict_device,
    resolve_device,
    resolve_dtype,
    seeded_torch,
    to_numpy,
)
from .._warnings import one_convergence_warning
from ..diagnostics import format_summary
from ..likelihoods import RowWeighted, weighted_targets
from ..nets import ACTIVATIONS, build_module, check_hidden_layer_sizes
from ..priors import HierarchicalPrior, fan_in_precision
from ..samplers import (
    S3HMC,
    SAMPLERS,
    RunConfig,
    resolve_sampler,
    run_sampler,
    setup_sampler,
)
from ..samplers.driver._jobs import check_n_jobs
from ..samplers.driver.budget import DrawRule, WarmupRule, is_auto
from ..samplers.starts import resolve_start
from ..samples import PosteriorSamples
from ..targets import FunctionalNetwork, Target
from ._calibration import resolve_calibration
from ._families import FullData
from ._nested import named_as_objects, with_named_settings
from ._sampled_precisions import record_precisions
from ._sampling_report import record_diagnostics
from ._sampling_state import (
    PRIVATE_STATE,
    check_loaded_state,
    get_state,
    loaded_state_spec,
    set_state,
)
from ._weights import class_weights, row_weights, sample_weights

# the training rows whose per-draw predictions the convergence checks monitor
N_REFERENCE_ROWS = 64


class _ChainStart(NamedTuple):
    """Where a fit's chains start: a fresh start or the continuation of stored chains."""

    network: FunctionalNetwork
    positions: torch.Tensor  # (C, D)
    step_size: object  # None (the sampler's warmup setting), or the stored per-chain steps
    n_warmup: int
    start: object  # a MAPStart, or None: the chains start where they are
    seed: object  # the run's SeedSequence; None continues the stored generator states
    generator_states: list | None
    inv_mass: torch.Tensor | None


@dataclass(kw_only=True, eq=False, repr=False)
class BaseSamplingEstimator(BaseEstimator):
    """Common parameters and fit/predict machinery of the MCMC estimators (see subclasses).

    A public estimator is this base, a task mixin (``_tasks.py``: likelihood, ``y`` encoding,
    prediction) and a family (``_family``, an object of ``_families.py``: how the data reach
    the samplers, and the parameters that adds). The parameters are keyword-only dataclass
    fields, each declared once: those of every MCMC estimator here, the task's on its mixin,
    the family's on the public class, which redeclares a field whose default differs. The
    generated ``__init__`` stores each as given (scikit-learn's contract), and the public
    class's ``_parameter_constraints`` joins their constraints (scikit-learn's format): this
    base's, the task's and the family's.
    """

    hidden_layer_sizes: tuple = (100,)
    activation: str = "relu"
    module: object = None
    prior_precision: object = "auto"
    n_draws: object = "auto"
    n_warmup: object = "auto"
    sampler: object = "hmc"
    thin: int = 1
    n_chains: int = 1
    n_jobs: int | None = None
    init: object = "map"
    device: object = "cpu"
    dtype: object = "float32"
    verbose: bool = False
    warm_start: bool = False
    random_state: object = None
    temperature: float = 1.0

    #: How the data reach the samplers (``_families.py``).
    _family = FullData()
    #: The fewest draws per chain that ``n_draws="auto"`` takes: the tails of the predictive
    #: need them (docs/hmc.md, "Budgets"); a calibration stage takes its own fewest.
    _min_auto_draws = 100
    #: The chains' private state that a saved model keeps.
    _private_state = PRIVATE_STATE

    # -- to be provided by subclasses -------------------------------------------------------------
    def _prepare_targets(self, y, reset: bool):
        """Validate/encode ``y``; return (targets tensor, n_outputs)."""
        raise NotImplementedError

    def _likelihood(self):
        raise NotImplementedError

    def _row_uncertainty(self, outputs: torch.Tensor) -> torch.Tensor:
        """How unsure the draws' predictions of each row are, (n,) from (n_draws, n, ...)."""
        raise NotImplementedError

    def _reference_quantity(self, outputs: torch.Tensor) -> torch.Tensor:
        """One scalar per draw and point whose convergence is checked: (n_draws, n)."""
        raise NotImplementedError

    # -- validation ----------------------------------------------------------------
    # scikit-learn's parameter constraints (checked by ``_validate_params`` at the start of
    # ``fit``, with scikit-learn's message); ``_check_params`` adds what they cannot say.
    _parameter_constraints = {
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [str],
        "module": "no_validation",  # a torch module class or a factory: checked when built
        "prior_precision": [
            Interval(Real, 0, None, closed="neither"),
            StrOptions({"auto", "fan_in"}),
            "array-like",  # one precision per parameter tensor, in order
            dict,  # by tensor name
            HasMethods(["bind"]),
        ],
        "n_draws": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_warmup": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "sampler": [str, HasMethods(["build"])],
        "thin": [Interval(Integral, 1, None, closed="left")],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Integral, None],
        "init": [StrOptions({"map", "random"}), HasMethods(["find", "budget"])],
        "device": [str, torch.device],
        "dtype": [StrOptions({"float32", "float64"}), torch.dtype, type],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
        "random_state": ["random_state"],
        "temperature": [Interval(Real, 0, None, closed="neither")],
    }
    def _check_params(self) -> None:
        """scikit-learn's constraints, then the checks that involve several parameters."""
        self._validate_params()
        check_hidden_layer_sizes(self.hidden_layer_sizes)
        if self.module is None and self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}."
            )
        resolve_dtype(self.dtype)
        if isinstance(self.sampler, str) and self.sampler.lower() not in SAMPLERS:
            raise ValueError(self._sampler_choices(f"got {self.sampler!r}."))
        self._check_sampler_access(self._sampler_object())  # ValueErrors naming `sampler`
        check_n_jobs(self.n_jobs)
        self._family.check_params(self)
        if not is_auto(self.n_draws) and self.thin > self.n_draws:
            raise ValueError(f"thin={self.thin} must not exceed n_draws={self.n_draws}.")

    def _check_sampler_access(self, sampler) -> None:
        """The sampler must read the data the way this estimator's target gives them."""
        access = getattr(sampler, "data_access", "full")
        if access != self._family.data_access:
            raise ValueError(
                self._sampler_choices(f"got {self.sampler!r} (data_access={access!r}).")
            )

    def _sampler_choices(self, got: str) -> str:
        """The refusal of a sampler, listing only the samplers this estimator runs."""
        names = sorted(
            name
            for name, cls in SAMPLERS.items()
            if getattr(cls, "data_access", "full") == self._family.data_access
        )
        return (
            f"sampler must be one of {names} or a sampler object with data_access="
            f"{self._family.data_access!r} for {type(self).__name__}, {got}"
        )

    # -- nested settings ---------------------------------------------------------------
    _NAMED_OBJECTS = {
        "sampler": resolve_sampler,
        "init": resolve_start,
        "calibration": resolve_calibration,  # the classifiers'
    }

    def get_params(self, deep=True):
        """The parameters; with ``deep``, also the settings of every object behind a
        parameter as ``<parameter>__<setting>``, where a name gives it too (its object's
        defaults)."""
        params = super().get_params(deep=deep)
        return with_named_settings(self, params) if deep else params

    def set_params(self, **params):
        """Set parameters, an object's own settings as ``<parameter>__<setting>`` (a setting
        the object does not take is a ValueError naming it). A parameter given by name becomes
        a new object of that name with its defaults first, so
        ``HMCClassifier().set_params(sampler__n_steps=20)`` and a ``GridSearchCV`` over
        ``sampler__n_steps``, ``init__n_steps`` or ``calibration__validation_fraction``
        change the fit."""
        return super().set_params(**named_as_objects(self, params))

    #: The device the fit ran on.
    device_ = FitDeviceMixin.device_

    # -- fitting ----------------------------------------------------------------
    def _build_network(self, seed: int, n_in: int, n_out: int) -> torch.nn.Module:
        with seeded_torch(seed):
            return build_module(self.module, n_in, n_out, self.hidden_layer_sizes, self.activation)

    def _continuing(self) -> bool:
        return bool(self.warm_start) and hasattr(self, "samples_")

    def fit(self, X, y, sample_weight=None):
        """Sample the posterior over the network's weights given ``(X, y)``.

        With ``warm_start=True`` and a previous fit, the chains continue from where they stopped
        (same step size, no new warmup) and the new draws are appended to ``samples_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row: it multiplies the row's log-likelihood, so an
            integer weight k gives the posterior of the data with the row repeated k times
            (a classifier's ``class_weight`` multiplies into it). None: every row weighs 1.

        Returns
        -------
        self
        """
        before = dict(vars(self))
        # the fit's convergence problems in one ConvergenceWarning, given once the fit is
        # stored (turned into an error by a filter, it leaves the fit to inspect)
        with one_convergence_warning():
            try:
                return self._fit(X, y, sample_weight)
            except BaseException:
                # a fit that fails or is interrupted part-way (e.g. Ctrl-C during the MAP
                # start) leaves the estimator as it was: unfitted, or the previous fit intact
                vars(self).clear()
                vars(self).update(before)
                raise

    def _fit(self, X, y, sample_weight=None):
        self._check_params()
        continuing = self._continuing()
        X, y = validate_data(
            self,
            X,
            y,
            reset=not continuing,
            dtype=[np.float64, np.float32],
            multi_output=self._multi_output(),
            y_numeric=not self._is_classifier(),
        )
        self._row_weights = sample_weights(sample_weight, X)  # read while the target is built
        try:
            return self._fit_checked(X, y, continuing)
        finally:
            del self._row_weights

    def _fit_checked(self, X, y, continuing: bool):
        targets, n_outputs = self._prepare_targets(y, reset=not continuing)
        targets = self._weighted_targets(targets, y)
        device = resolve_device(
            self.device,
            work=lambda: self._work_per_gradient(X.shape[0], X.shape[1], n_outputs),
            threshold=self._auto_cuda_work(),
        )
        self._fit_device = str(device)  # where predictions run: "auto" is decided here, once
        dtype = resolve_dtype(self.dtype)
        seeds = root_seed(self.random_state)  # the fit's one SeedSequence (_seeding.py)
        if continuing:
            self._check_warm_start(X.shape[1], n_outputs)
            start = self._continued_start(device, dtype)
        else:
            start = self._fresh_start(X.shape[1], n_outputs, device, dtype, seeds)
            self.n_outputs_ = n_outputs
        target = self._make_target(start.network, X, targets, child(seeds, "data"))
        run = self._run_chains(target, start, X, continuing)
        self._store_run(run, start.network, dtype, continuing, X)
        return self

    def _fresh_start(self, n_features, n_outputs, device, dtype, seeds) -> _ChainStart:
        """New chains: one network per chain, seeded from the fit's "network" child (chain c
        from its child c), the run from its "sampling" child, warmup and the MAP start ahead."""
        net_seeds = child(seeds, "network")  # one child per chain's network
        nets = [
            self._build_network(torch_seed(child(net_seeds, c)), n_features, n_outputs)
            for c in range(self.n_chains)
        ]
        return _ChainStart(
            network=FunctionalNetwork(nets[0], device=device, dtype=dtype),
            positions=torch.stack([FunctionalNetwork(n).initial_position() for n in nets]),
            step_size=None,
            n_warmup=self.n_warmup,
            start=resolve_start(self.init),
            seed=child(seeds, "sampling"),
            generator_states=None,
            inv_mass=None,
        )

    def _continued_start(self, device, dtype) -> _ChainStart:
        """The stored chains where they stopped: their step sizes, mass and generator states,
        no warmup and no MAP start."""
        return _ChainStart(
            network=self.network_.to(device, dtype),
            positions=self._last_position,
            step_size=self._step_size_per_chain,
            n_warmup=0,
            start=None,
            seed=None,
            generator_states=self._generator_states,
            inv_mass=self._inv_mass,
        )

    def _auto_cuda_work(self) -> float:
        """The work from which ``device="auto"`` takes CUDA: lower where the configured
        sampler's steps are replayed from CUDA graphs (full-data HMC with the leapfrog, SGLD
        and SGHMC), which are faster there at every size measured."""
        sampler = resolve_sampler(self.sampler) if self.device in (None, "auto") else None
        replays = getattr(sampler, "replays_on_cuda", None)
        if replays is not None and replays(self._family.integrator):
            return AUTO_CUDA_WORK_REPLAYED
        return AUTO_CUDA_WORK

    def _work_per_gradient(self, n_rows: int, n_features: int, n_outputs: int) -> float:
        """Forward multiply-adds of one gradient of all chains, for ``device="auto"``: rows
        (a batch's for a minibatch sampler) x the network's parameters x chains."""
        net = FunctionalNetwork(
            meta_module(lambda: self._build_network(0, n_features, n_outputs)), device="meta"
        )
        rows = self._family.rows_per_gradient(self, n_rows)
        return rows * net.dim * self.n_chains

    def _budgets(self, start: _ChainStart, X) -> tuple:
        """The run's warmup and draws budgets: the numbers given, or for "auto" the rules of
        :mod:`sklearn_bnn.samplers.driver.budget`, the draws' rule monitoring the predictions on the
        reference rows that ``diagnostics_`` reports."""
        n_warmup = (
            WarmupRule(min_warmup=self._family.min_auto_warmup)
            if is_auto(start.n_warmup)
            else start.n_warmup
        )
        n_draws = self.n_draws
        vars(self).pop("_reference_rows", None)  # chosen by this run's monitor, if any
        if is_auto(n_draws):
            network, chosen = start.network, {}

            def monitor(draws):
                C, S, _ = draws.shape
                flat = draws.reshape(C * S, -1)[:, : network.dim]
                if "rows" not in chosen:  # at the first check, from its draws, then fixed
                    chosen["rows"] = self._uncertain_rows(network, flat, X)
                outputs = network.forward_batched(flat, X[chosen["rows"]])
                return to_numpy(self._reference_quantity(outputs)).reshape(C, S, -1)

            n_draws = DrawRule(
                min_draws=self._min_auto_draws,
                max_draws=self._family.max_auto_draws,
                monitor=monitor,
            )
        return n_warmup, n_draws

    def _uncertain_rows(self, network, flat_draws, X) -> np.ndarray:
        """The :data:`N_REFERENCE_ROWS` training rows (of the first 4,096) whose predictions
        the draws are least sure of (:meth:`_row_uncertainty`): the rows whose predictive
        needs the most draws, and those a chain moves through most slowly."""
        candidates = X[: 4 * 1024]
        outputs = network.forward_batched(flat_draws, candidates)
        uncertainty = to_numpy(self._row_uncertainty(outputs))
        rows = np.argsort(-uncertainty, kind="stable")[:N_REFERENCE_ROWS]
        self._reference_rows = np.sort(rows)
        return self._reference_rows

    def _run_chains(self, target, start: _ChainStart, X, continuing: bool):
        """Sample ``target`` from ``start`` with the configured sampler through ``run_sampler``
        (the sampler may sample another form of the target: S3HMC's weights and precisions), in
        the torch threads the model's size calls for; keeps the chains' generator states."""
        positions = start.positions
        n_warmup, n_draws = self._budgets(start, X)
        work = X.shape[0] * positions.shape[1] * positions.shape[0]  # forward multiply-adds
        run, self._generator_states = in_sampling_threads(work, run_sampler)(
            self._sampler_object(),
            target,
            positions,
            n_jobs=self.n_jobs,
            seed=start.seed,
            generator_states=start.generator_states,
            start=start.start,
            # the warmup's settings left at None are the sampler's; a continued chain keeps
            # its adapted step sizes and mass
            config=RunConfig(
                n_warmup=n_warmup,
                n_draws=n_draws,
                thin=self.thin,
                inv_mass=start.inv_mass,
                step_size=start.step_size,
                adapt_mass=False if continuing else None,
            ),
            desc=getattr(self, "_progress_desc", type(self).__name__),  # a stage's name
            verbose=self.verbose,
        )
        return run

    def _store_run(self, run, network, dtype, continuing: bool, X) -> None:
        """The fitted attributes from ``run``: ``samples_`` (appended to the stored draws when
        continuing), the chains' last position, step sizes and mass, the diagnostics and the
        sampled precisions."""
        # samples_ keeps the weights; sampled hyperparameters are in the per-draw stats
        samples = PosteriorSamples(
            run.draws, run.log_prob, network.names, network.shapes, run.draw_stats
        )
        if continuing and not getattr(self, "_drop_previous_draws", False):
            samples = self.samples_.concatenate(samples)
        self.network_ = network.to("cpu", dtype)
        self.samples_ = samples
        self._last_position = run.state.position
        self._step_size_per_chain = run.step_size
        self._inv_mass = run.inv_mass
        record_diagnostics(self, run, continuing, X)
        if run.hyperparameters:
            record_precisions(self, run.hyperparameters)

    def _check_warm_start(self, n_features: int, n_outputs: int) -> None:
        """A warm start continues the stored chains: their number and the network they sample
        must be those of the current parameters, or the change would be silently ignored."""
        if self.n_chains != self.samples_.n_chains:
            raise ValueError(
                f"warm_start=True continues the previous fit's {self.samples_.n_chains} chains, "
                f"but n_chains is now {self.n_chains}: set it back, or warm_start=False to "
                "sample afresh."
            )
        net = FunctionalNetwork(
            meta_module(lambda: self._build_network(0, n_features, n_outputs)), device="meta"
        )
        stored = dict(zip(self.samples_.names, map(tuple, self.samples_.shapes), strict=True))
        if dict(zip(net.names, map(tuple, net.shapes), strict=True)) != stored:
            raise ValueError(
                "warm_start=True continues the previous fit's chains, but the network of the "
                "current parameters (hidden_layer_sizes, activation, module) has other weights: "
                "set them back, or warm_start=False to sample afresh."
            )

    def _weighted_targets(self, targets, y):
        """``targets`` with the rows' weights (``sample_weight`` times the class weights) as a
        last column, kept in ``_row_weights``; unchanged when there are none."""
        per_class = codes = None
        if self._is_classifier():
            codes = np.searchsorted(self.classes_, y)
            per_class = class_weights(self.class_weight, self.classes_, y)
        weights = row_weights(self._row_weights, per_class, codes, type(self).__name__)
        self._row_weights = weights
        if weights is None:
            return targets
        prior, sampler = self.prior_precision, resolve_sampler(self.sampler)
        joint = isinstance(prior, HierarchicalPrior) and prior.scheme == "joint"
        if joint or isinstance(sampler, S3HMC):
            raise ValueError(
                f"{type(self).__name__} takes no sample_weight (nor class_weight) with a "
                'hierarchical prior sampled jointly (scheme="joint") or the S3HMC sampler: fit '
                'without weights, or use HierarchicalPrior(scheme="gibbs") or a Gaussian '
                "prior_precision."
            )
        return weighted_targets(targets, weights)

    def _fit_likelihood(self):
        """The likelihood the fit's target sums: :meth:`_likelihood`, its rows weighted by
        ``_row_weights`` when there are weights."""
        likelihood = self._likelihood()
        weights = getattr(self, "_row_weights", None)
        return likelihood if weights is None else RowWeighted(likelihood, weights.sum())

    def _prior_precision(self, network: FunctionalNetwork):
        """``prior_precision`` over ``network``'s weights: as given, or per tensor for a name
        (:func:`~sklearn_bnn.priors.fan_in_precision`): "fan_in" every weight tensor at its
        fan-in; "auto" the same but the output layer at 1, whose outputs (logits, or a
        standardised target) then keep a prior spread of several units."""
        precision = self.prior_precision
        if not isinstance(precision, str):
            return precision
        output = 1.0 if precision == "auto" else None
        return fan_in_precision(network.names, network.shapes, output_precision=output)

    def _make_target(self, network: FunctionalNetwork, X, targets, seed) -> Target:
        """The posterior density to sample: the family's (``seed``: the fit's "data"
        ``SeedSequence``, for a family that splits the data)."""
        return self._family.make_target(self, network, X, targets, seed)

    def _sampler_object(self):
        """The configured sampler: ``sampler`` itself when it is an object, or the registered
        sampler of that name at its defaults; for a warm start, as the sampler resumes the
        stored run (``resume``); then as the setup registered for this family's data access
        makes it (``setup_sampler``: the minibatch samplers' MAP start and step choice), or
        unchanged where there is none."""
        sampler = resolve_sampler(self.sampler)
        if self._continuing() and hasattr(sampler, "resume"):
            sampler = sampler.resume(self.samples_.stats)
        family = self._family
        return setup_sampler(sampler, family.data_access, **family.sampler_setup(self))

    # -- persistence: sklearn_bnn.save / load (the checks in _sampling_state.py) ------------
    def _get_state(self) -> dict:
        return get_state(self)

    def _loaded_state_spec(self) -> tuple[dict, dict]:
        return self._family.loaded_state_spec(*loaded_state_spec(self))

    def _check_loaded_state(self, state: dict) -> None:
        fit_only = {name: getattr(self, name) for name in self._family.fit_only}
        vars(self).update(dict.fromkeys(fit_only))  # a loaded model does not fit
        try:
            check_loaded_state(self, state)
        finally:
            vars(self).update(fit_only)

    def _set_state(self, state: dict) -> None:
        set_state(self, state)

    # -- reporting ---------------------------------------------------------------------
    def summary(self) -> str:
        """A short text report of the sampling: per-chain statistics and convergence."""
        check_is_fitted(self)
        return format_summary(type(self).__name__, self.diagnostics_)

    def to_inference_data(self, include_weights: bool = True):
        """The draws as an ArviZ ``InferenceData`` (needs ArviZ: ``pip install arviz``).

        Parameters
        ----------
        include_weights : bool, default=True
            Export every named parameter tensor (n_chains, n_draws, *shape); with False, only
            the log density and the sampler statistics.
        """
        check_is_fitted(self)
        self.samples_.info = {"step_size": self.diagnostics_["step_size"]}
        return self.samples_.to_inference_data(include_draws=include_weights)

    # -- prediction ----------------------------------------------------------------
    def _network_outputs(self, X, validate: bool = True, transform=None, mean=False, out=None):
        """Per-draw network outputs on ``X``: (n_draws, n, n_outputs), or their mean over draws
        (n, n_outputs) when ``mean``; ``transform`` maps outputs first, ``out`` receives them
        (see forward_batched)."""
        if validate:
            check_is_fitted(self)
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        network = self.network_.to(predict_device(getattr(self, "_fit_device", self.device)))
        return network.forward_batched(
            self.samples_.flat(), X, transform=transform, mean=mean, out=out
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

    def _multi_output(self) -> bool:
        return False

    def _is_classifier(self) -> bool:
        return False
