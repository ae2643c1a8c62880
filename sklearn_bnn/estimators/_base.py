"""Machinery shared by the sampling estimators: validation, chains, prediction, persistence.

A subclass provides the likelihood and the encoding of ``y`` (``_prepare_targets``), the number
of network outputs, and turns per-draw network outputs into predictions. Everything else (the
network, the target, chains, warmup, warm starts, interrupts, diagnostics, persistence) lives
here once.
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._registry import WeightsOnlyMixin
from .._seeding import child, root_seed, torch_seed
from .._state_checks import (
    check_classes,
    check_depth,
    check_feature_names,
    check_named_shapes,
    check_state,
    dict_of,
    is_any,
    is_array,
    is_bool,
    is_float,
    is_instance,
    is_int,
    is_tensor,
    list_of,
    meta_module,
    optional,
)
from .._threads import in_sampling_threads
from .._utils import (
    predict_device,
    resolve_device,
    resolve_dtype,
    seeded_torch,
    to_numpy,
)
from ..diagnostics import ess_bulk, ess_tail, format_summary, rhat
from ..nets import ACTIVATIONS, build_module, check_hidden_layer_sizes
from ..priors import GaussianPrior, HierarchicalPrior, as_prior
from ..samplers import CHAIN_METHODS, SAMPLERS, resolve_sampler, run_sampler
from ..samplers._summary import run_summary
from ..samples import PosteriorSamples
from ..targets import FunctionalNetwork, Target, hierarchical_target
from ._hierarchical import record_precisions


class BaseSamplingEstimator(WeightsOnlyMixin, BaseEstimator):
    """Common parameters and fit/predict machinery of the MCMC estimators (see subclasses)."""

    """Common parameters and fit/predict machinery of the MCMC estimators (see subclasses).

    A public estimator combines three parts, each declaring the parameters it reads in
    ``_own_constraints`` (scikit-learn's constraint format): a task mixin (``_tasks.py``:
    likelihood, ``y`` encoding, prediction), a sampling family (which sampler parameters and
    which data access, e.g. ``_TrajectoryParams`` in ``hmc.py``) and this base (network,
    prior, chains, warmup, device, seeds). Its ``__init__`` stores exactly the parameters of
    those parts; ``__init_subclass__`` merges their constraints into
    ``_parameter_constraints`` and refuses a class whose ``__init__`` and constraints differ.
    """

    # "full": samplers that evaluate the whole data set per gradient; "minibatch": those that
    # take a MinibatchTarget. A sampler declares its own as ``data_access``.
    _data_access = "full"

    # -- to be provided by subclasses -------------------------------------------------------------
    def _prepare_targets(self, y, reset: bool):
        """Validate/encode ``y``; return (targets tensor, n_outputs)."""
        raise NotImplementedError

    def _likelihood(self):
        raise NotImplementedError

    def _reference_quantity(self, outputs: torch.Tensor) -> torch.Tensor:
        """One scalar per draw and point whose convergence is checked: (n_draws, n)."""
        raise NotImplementedError

    # -- validation ----------------------------------------------------------------
    # scikit-learn's parameter constraints (checked by ``_validate_params`` at the start of
    # ``fit``, with scikit-learn's message); ``_check_params`` adds what they cannot say.
    _own_constraints: dict = {
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [str],
        "module": "no_validation",  # a torch module class or a factory: checked when built
        "prior_precision": [Interval(Real, 0, None, closed="neither"), HasMethods(["bind"])],
        "n_draws": [Interval(Integral, 1, None, closed="left")],
        "n_warmup": [Interval(Integral, 0, None, closed="left")],
        "sampler": [str, HasMethods(["build"])],
        "step_size": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "thin": [Interval(Integral, 1, None, closed="left")],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "chain_method": [StrOptions(set(CHAIN_METHODS))],
        "n_jobs": [Integral, None],
        "init": [StrOptions({"map", "random"})],
        "n_init_steps": [Interval(Integral, 0, None, closed="left")],
        "device": [str, torch.device],
        "dtype": [StrOptions({"float32", "float64"}), torch.dtype, type],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
        "random_state": ["random_state"],
        "temperature": [Interval(Real, 0, None, closed="neither")],
    }
    _parameter_constraints: dict = _own_constraints

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        merged = {}
        for klass in reversed(cls.__mro__):
            merged.update(vars(klass).get("_own_constraints", {}))
        cls._parameter_constraints = merged
        if "__init__" in vars(cls) and set(merged) != set(cls._get_param_names()):
            raise TypeError(
                f"{cls.__name__}.__init__ takes {sorted(cls._get_param_names())} but its parts "
                f"constrain {sorted(merged)}: each parameter belongs to exactly one part."
            )

    def _check_params(self) -> None:
        """scikit-learn's constraints, then the checks that involve several parameters."""
        self._validate_params()
        check_hidden_layer_sizes(self.hidden_layer_sizes)
        if self.module is None and self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}."
            )
        resolve_dtype(self.dtype)
        self._check_sampler_access(self._sampler_object())  # ValueErrors naming `sampler`
        if self.thin > self.n_draws:
            raise ValueError(f"thin={self.thin} must not exceed n_draws={self.n_draws}.")

    def _check_sampler_access(self, sampler) -> None:
        """The sampler must read the data the way this estimator's target gives them."""
        access = getattr(sampler, "data_access", "full")
        if access != self._data_access:
            names = sorted(
                name
                for name, cls in SAMPLERS.items()
                if getattr(cls, "data_access", "full") == self._data_access
            )
            raise ValueError(
                f"sampler must be one of {names} or a sampler object with data_access="
                f"{self._data_access!r} for {type(self).__name__}, got {self.sampler!r} "
                f"(data_access={access!r})."
            )

    # -- fitting ----------------------------------------------------------------
    def _build_network(self, seed: int, n_in: int, n_out: int) -> torch.nn.Module:
        with seeded_torch(seed):
            return build_module(self.module, n_in, n_out, self.hidden_layer_sizes, self.activation)

    def _continuing(self) -> bool:
        return bool(self.warm_start) and hasattr(self, "samples_")

    def fit(self, X, y):
        """Sample the posterior over the network's weights given ``(X, y)``.

        With ``warm_start=True`` and a previous fit, the chains continue from where they stopped
        (same step size, no new warmup) and the new draws are appended to ``samples_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)

        Returns
        -------
        self
        """
        before = dict(vars(self))
        try:
            return self._fit(X, y)
        except BaseException:
            # a fit that fails or is interrupted part-way (e.g. Ctrl-C during the MAP start)
            # leaves the estimator as it was: unfitted, or the previous fit intact
            vars(self).clear()
            vars(self).update(before)
            raise

    def _fit(self, X, y):
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
        targets, n_outputs = self._prepare_targets(y, reset=not continuing)
        device, dtype = resolve_device(self.device), resolve_dtype(self.dtype)
        seeds = root_seed(self.random_state)  # the fit's one SeedSequence (_seeding.py)

        if continuing:
            self._check_warm_start(X.shape[1], n_outputs)
            network = self.network_.to(device, dtype)
            positions = self._last_position
            step_size, n_warmup, n_init_steps, seed = self._step_size_per_chain, 0, 0, None
            generator_states, inv_mass = self._generator_states, self._inv_mass
        else:
            seed = child(seeds, "sampling")
            net_seeds = child(seeds, "network")  # one child per chain's network
            nets = [
                self._build_network(torch_seed(child(net_seeds, c)), X.shape[1], n_outputs)
                for c in range(self.n_chains)
            ]
            network = FunctionalNetwork(nets[0], device=device, dtype=dtype)
            positions = torch.stack([FunctionalNetwork(n).initial_position() for n in nets])
            step_size, n_warmup, generator_states, inv_mass = (
                self.step_size,
                self.n_warmup,
                None,
                None,
            )
            n_init_steps = self.n_init_steps if self.init == "map" else 0
            self.n_outputs_ = n_outputs

        target = self._make_target(network, X, targets, child(seeds, "data"))
        # p(theta | D)^(1/T); 1 leaves it as it is
        target.temperature = float(self.temperature)
        for name, value in self._target_options().items():  # e.g. rescale_moves
            setattr(target, name, value)
        options = self._run_options()
        # a continued chain keeps its adapted mass
        options["adapt_mass"] = options.get("adapt_mass", False) and not continuing
        # the sampler may sample another form of the target (S3HMC: weights and precisions)
        work = X.shape[0] * positions.shape[1] * positions.shape[0]  # forward multiply-adds
        run, self._generator_states = in_sampling_threads(work, run_sampler)(
            self._sampler_object(),
            target,
            positions,
            chain_method=self.chain_method,
            n_jobs=self.n_jobs,
            seed=seed,
            generator_states=generator_states,
            n_init_steps=n_init_steps,
            run_kwargs=dict(
                n_warmup=n_warmup,
                n_draws=self.n_draws,
                thin=self.thin,
                step_size=step_size,
                inv_mass=inv_mass,
                **options,
            ),
            desc=type(self).__name__,
            verbose=self.verbose,
        )
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
        self._record_diagnostics(run, continuing, X)
        if run.moved_coordinates or run.gibbs_coordinates:
            record_precisions(self, run.moved_coordinates or run.gibbs_coordinates)
        return self

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

    def _make_target(self, network: FunctionalNetwork, X, targets, seed) -> Target:
        """The posterior density to sample (subclasses may split the data, drawing from
        ``seed``, the fit's "data" ``SeedSequence``). A hierarchical prior sampled jointly gives
        the density of the weights and their log-precisions (seeds/002); sampled by Gibbs
        steps, the network target with its Gibbs blocks."""
        prior = self.prior_precision
        if isinstance(prior, HierarchicalPrior) and prior.scheme == "joint":
            base = Target(network, X, targets, self._likelihood(), GaussianPrior(1.0))
            return hierarchical_target(base, prior)
        return Target(network, X, targets, self._likelihood(), as_prior(prior))

    def _sampler_defaults(self) -> dict:
        """The flat parameters that configure a sampler given by name (a family's)."""
        return {}

    def _run_options(self) -> dict:
        """Options of the sampling loop a family sets (``target_accept``, ``adapt_mass``)."""
        return {}

    def _target_options(self) -> dict:
        """Attributes a family sets on the target before sampling (``rescale_moves``)."""
        return {}

    def _sampler_object(self):
        """The configured sampler: ``sampler`` itself when it is an object, or the registered
        sampler of that name built with the estimator's flat parameters."""
        return resolve_sampler(self.sampler, **self._sampler_defaults())

    def _record_diagnostics(self, run, continuing: bool, X) -> None:
        previous = self.diagnostics_ if continuing else {}
        samples = self.samples_
        diag = run_summary(run)
        diag["n_chains"], diag["n_draws"] = samples.n_chains, len(samples)
        for key in ("n_divergent", "n_divergent_warmup", "n_grad_evals"):
            diag[key] += previous.get(key, 0)
        if not self._run_options().get("adapt_mass", False):
            del diag["inv_mass"]
        n_div = int(run.divergent.sum())
        lp = samples.log_prob.double().numpy()
        diag.update(
            ess_bulk_log_prob=ess_bulk(lp), ess_tail_log_prob=ess_tail(lp), rhat_log_prob=rhat(lp)
        )
        ref = self._reference_quantity(self._network_outputs(X[:64], validate=False))
        ref = to_numpy(ref).reshape(samples.n_chains, samples.n_draws, -1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # constant columns give NaN
            diag["rhat_predictions_max"] = float(
                np.nanmax([rhat(ref[..., j]) for j in range(ref.shape[-1])] + [np.nan])
            )
            diag["ess_bulk_predictions_min"] = float(
                np.nanmin([ess_bulk(ref[..., j]) for j in range(ref.shape[-1])] + [np.nan])
            )
        self.diagnostics_ = diag
        n_transitions = run.accepted.numel()
        self.acceptance_rate_ = float(run.acceptance.mean()) if n_transitions else np.nan
        if n_transitions and n_div > 0.05 * n_transitions:
            warnings.warn(
                f"{n_div} of {n_transitions} transitions diverged (rejected); the "
                f"step_size ({float(run.step_size.mean()):.3g}) is probably too large for this "
                "posterior: lower step_size or use step_size='auto'.",
                RuntimeWarning,
                stacklevel=3,
            )
        worst = np.nanmax([diag["rhat_log_prob"], diag["rhat_predictions_max"], 0.0])
        if worst > 1.1:
            warnings.warn(
                f"R-hat {worst:.2f} > 1.1: the draws have not converged (see "
                "diagnostics_ and summary()); increase n_warmup, n_draws or n_chains.",
                RuntimeWarning,
                stacklevel=3,
            )

    def summary(self) -> str:
        """A short text report of the sampling: per-chain statistics and convergence."""
        check_is_fitted(self)
        return format_summary(type(self).__name__, self.diagnostics_)

    def to_inference_data(self, include_weights: bool = True):
        """The draws as an ArviZ ``InferenceData`` (needs ``pip install sklearn-bnn[arviz]``).

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
    def _network_outputs(self, X, validate: bool = True, transform=None, mean=False):
        """Per-draw network outputs on ``X``: (n_draws, n, n_outputs), or their mean over draws
        (n, n_outputs) when ``mean``; ``transform`` maps outputs first (see forward_batched)."""
        if validate:
            check_is_fitted(self)
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        network = self.network_.to(predict_device(self.device))
        return network.forward_batched(self.samples_.flat(), X, transform=transform, mean=mean)

    # -- persistence ----------------------------------------------------------------
    _private_state = (
        "_last_position",
        "_step_size_per_chain",
        "_inv_mass",
        "_generator_states",
    )

    def _get_state(self) -> dict:
        state = super()._get_state()
        state["network_"] = {
            "constants": dict(self.network_._constants),
            "dtype": self.network_.dtype,
        }
        state.update({name: getattr(self, name) for name in self._private_state})
        return state

    def _loaded_state_spec(self) -> tuple[dict, dict]:
        """(required, optional) checks of the fitted state, by attribute name."""
        required = {
            "n_features_in_": is_int(1),
            "n_outputs_": is_int(1),
            "network_": dict_of(is_any),
            "samples_": is_instance(PosteriorSamples),
            "diagnostics_": dict_of(is_any),
            "acceptance_rate_": is_float,
            "_last_position": is_tensor(ndim=2, floating=True),
            "_step_size_per_chain": is_tensor(ndim=1, floating=True),
            "_inv_mass": optional(is_tensor(floating=True)),
            "_generator_states": optional(list_of(is_tensor(ndim=1))),
        }
        if self._is_classifier():
            required["classes_"] = check_classes
        else:
            required.update(_y_2d=is_bool, y_mean_=is_any, y_scale_=is_any)
        optional_entries = {"feature_names_in_": is_array(ndim=1, kinds="UO")}
        if self._is_classifier():  # absent from files written before calibration existed
            optional_entries.update(
                calibration_temperature_=_check_temperature,
                calibration_posterior_=_check_temperature_posterior,
            )
        if not self._is_classifier():  # the learned (or fixed) noise, in y units
            optional_entries.update(_y_var=is_any, noise_precision_=is_any, noise_std_=is_any)
        # S3HMC's sampled precisions
        optional_entries.update(precisions_=is_tensor(ndim=3), precision_names_=is_any)
        return required, optional_entries

    def _check_loaded_state(self, state: dict) -> None:
        """Check a decoded fitted state before :meth:`_set_state` (see ``sklearn_bnn.load``):
        the type of every attribute, and that every size agrees with the stored draws. The
        network is built on the ``meta`` device only, so no size in the file allocates memory."""
        self._check_params()
        # files written before the target scaling became public
        for old, new in (("_y_mean", "y_mean_"), ("_y_scale", "y_scale_")):
            if old in state and new not in state:
                state[new] = state.pop(old)
        check_state(state, *self._loaded_state_spec())
        n_in, n_out, samples = state["n_features_in_"], state["n_outputs_"], state["samples_"]
        check_feature_names(state)
        _check_diagnostics(state["diagnostics_"], samples.n_chains, samples.dim)
        if self._is_classifier():
            n_classes = len(state["classes_"])
            if n_out != (1 if n_classes == 2 else n_classes):
                raise ValueError(f"n_outputs_={n_out} does not fit {n_classes} classes_.")
        else:
            if not state["_y_2d"] and n_out != 1:
                raise ValueError(f"n_outputs_={n_out} for a single-output regressor.")
            for name in ("y_mean_", "y_scale_"):
                value = np.asarray(state[name])
                if value.dtype.kind not in "iuf" or value.size != n_out:
                    raise ValueError(f"{name} must hold n_outputs_={n_out} numbers.")
        net_state = state["network_"]
        check_state(
            net_state,
            {
                "constants": dict_of(is_tensor()),
                "dtype": lambda v, f: v in (torch.float32, torch.float64) or _not_dtype(f, v),
            },
        )
        if self.module is None:
            check_depth(self.hidden_layer_sizes, len(samples.names), "samples_")
        net = meta_module(lambda: self._build_network(0, n_in, n_out))
        net = FunctionalNetwork(net, device="meta", dtype=net_state["dtype"])
        what = f"the network of n_features_in_={n_in}, n_outputs_={n_out} and these parameters"
        check_named_shapes(
            "samples_",
            dict(zip(samples.names, samples.shapes, strict=True)),
            dict(zip(net.names, net.shapes, strict=True)),
            what,
        )
        check_named_shapes("network_ constants", net_state["constants"], net._constants, what)
        chains, dim = samples.n_chains, samples.dim
        if state.get("precisions_") is not None:  # sampled precisions (S3HMC or Gibbs)
            names = state.get("precision_names_")
            n_hyper = len(names) if isinstance(names, list | tuple) else -1
            if tuple(state["precisions_"].shape) != (chains, samples.n_draws, n_hyper):
                raise ValueError(
                    f"precisions_ does not have the shape ({chains}, {samples.n_draws}, "
                    "len(precision_names_))."
                )
            # S3HMC's chains also move the log-precisions; Gibbs blocks keep them aside
            if state["_last_position"].shape[-1] == dim + n_hyper:
                dim += n_hyper
        if tuple(state["_last_position"].shape) != (chains, dim):
            raise ValueError(f"_last_position does not have the shape ({chains}, {dim}).")
        if len(state["_step_size_per_chain"]) != chains:
            raise ValueError(f"_step_size_per_chain does not have {chains} entries.")
        if state["_inv_mass"] is not None and state["_inv_mass"].shape[-1] != dim:
            raise ValueError(f"_inv_mass does not have {dim} columns.")

    def _set_state(self, state: dict) -> None:
        net_state = state.pop("network_")
        super()._set_state(state)
        net = self._build_network(0, self.n_features_in_, self.n_outputs_)
        net.load_state_dict(net_state["constants"], strict=False)
        self.network_ = FunctionalNetwork(net, dtype=net_state["dtype"])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

    def _multi_output(self) -> bool:
        return False

    def _is_classifier(self) -> bool:
        return False


def store_params(estimator, arguments: dict) -> None:
    """The body of a public estimator's ``__init__``: store every argument unchanged under its
    own name (scikit-learn's convention), from ``locals()``."""
    for name, value in arguments.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


def _check_diagnostics(diag: dict, n_chains: int, dim: int) -> None:
    """``diagnostics_`` of a loaded model: numbers, or arrays with one row per chain (the
    adapted inverse mass: (dim,) or (n_chains, dim)), or dicts of numbers by name (the
    hyperparameters' ESS and R-hat)."""
    for key, value in diag.items():
        if isinstance(value, dict):
            if not all(isinstance(v, bool | int | float) for v in value.values()):
                raise ValueError(f"diagnostics_[{key!r}] must map names to numbers.")
        elif isinstance(value, np.ndarray):
            shapes = [(dim,), (n_chains, dim)] if key == "inv_mass" else [(n_chains,)]
            if value.dtype.kind not in "biuf" or value.shape not in shapes:
                raise ValueError(f"diagnostics_[{key!r}] must have a shape in {shapes}.")
        elif value is not None and not isinstance(value, bool | int | float):
            raise ValueError(f"diagnostics_[{key!r}] must be a number or an array.")
    if diag.get("n_chains", n_chains) != n_chains:
        raise ValueError(f"diagnostics_['n_chains'] is not the {n_chains} chains of samples_.")


def _check_temperature(value, field):
    is_float(value, field)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{field} must be a positive finite float, got {value!r}.")


def _check_temperature_posterior(value, field):
    """Temperatures (row 0, positive) and weights (row 1, non-negative, summing to one)."""
    ok = isinstance(value, np.ndarray) and value.ndim == 2 and value.shape[0] == 2
    ok = ok and value.shape[1] >= 1 and value.dtype.kind == "f" and np.all(np.isfinite(value))
    if not (ok and np.all(value[0] > 0) and np.all(value[1] >= 0)
            and abs(value[1].sum() - 1) < 1e-6):
        raise ValueError(f"{field} must hold positive temperatures and weights summing to 1.")


def _not_dtype(field, value):
    raise ValueError(f"{field} must be torch.float32 or torch.float64, got {value!r}.")
