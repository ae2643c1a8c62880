"""The families of MCMC estimators: how each gives the data to its samplers.

An MCMC estimator is a task (classification or regression, ``_tasks.py``), the base of every
sampling estimator (``_base.py``) and a family, held as the class attribute ``_family``: one of
the objects below. A family declares the parameters it adds (``constraints``) and answers the
base's questions about the data: the target it builds, what it sets on the target, the setup
its samplers get, the checks of its parameters and of its fitted state. The base calls these
hooks; a new family is a subclass of :class:`FullData` or :class:`MinibatchData` overriding the
hooks that differ.
"""

from __future__ import annotations

from numbers import Integral

import torch
from sklearn.utils._param_validation import Interval

from .._seeding import numpy_rng
from .._state_checks import is_int
from .._utils import resolve_device
from ..priors import GaussianPrior, HierarchicalPrior, as_prior
from ..samplers.driver.budget import WarmupRule
from ..samplers.starts import resolve_start
from ..targets import MinibatchTarget, SplitTarget, Target, hierarchical_target

__all__ = ["FullData", "MinibatchData", "SplitData"]


class FullData:
    """Every gradient reads the whole data set (``HMCClassifier``, ``HMCRegressor``), with the
    rescaling moves between transitions (``rescale_moves``: a Gibbs block on the network's
    posterior beside any sampler, Liu & Sabatti 2000)."""

    #: Which samplers the family runs: those whose ``data_access`` is this.
    data_access = "full"
    #: The integrator a sampler left at ``integrator=None`` takes on this family's target.
    integrator = "leapfrog"
    #: The most draws per chain that ``n_draws="auto"`` takes.
    max_auto_draws = 500
    #: The warmup transitions ``n_warmup="auto"`` takes at least (:class:`WarmupRule`).
    min_auto_warmup = WarmupRule.min_warmup
    #: Parameters that serve ``fit`` only, left out of the checks of a loaded model.
    fit_only: tuple = ()
    constraints: dict = {"rescale_moves": ["boolean"]}

    def check_params(self, estimator) -> None:
        """Checks of the family's parameters beyond their constraints."""

    def make_target(self, estimator, network, X, targets, seed) -> Target:
        """The posterior density to sample. A hierarchical prior sampled jointly gives the
        density of the weights and their log-precisions (Cobb et al. 2019); sampled by Gibbs
        steps, the network target with its Gibbs blocks."""
        prior = estimator._prior_precision(network)
        likelihood = estimator._fit_likelihood()
        options = self.target_options(estimator)
        if isinstance(prior, HierarchicalPrior) and prior.scheme == "joint":
            base = Target(network, X, targets, likelihood, GaussianPrior(1.0), **options)
            return hierarchical_target(base, prior)
        return Target(network, X, targets, likelihood, as_prior(prior), **options)

    def target_options(self, estimator) -> dict:
        """The keyword options the family's target is built with: the posterior's
        temperature, and the exact rescaling moves (``rescale_moves``)."""
        return {
            "temperature": float(estimator.temperature),
            "rescale_moves": bool(estimator.rescale_moves),
        }

    def sampler_setup(self, estimator) -> dict:
        """Options of the setup that the samplers of this data access registered
        (``register_setup`` in :mod:`sklearn_bnn.samplers`)."""
        return {}

    def rows_per_gradient(self, estimator, n_rows: int) -> int:
        """The rows one gradient reads (``device="auto"`` weighs the work by them)."""
        return n_rows

    def loaded_state_spec(self, required: dict, optional: dict) -> tuple[dict, dict]:
        """The checks of a loaded fitted state, with the family's attributes added."""
        return required, optional


class SplitData(FullData):
    """The data cut into subsets (a :class:`~sklearn_bnn.targets.SplitTarget`;
    ``SplitHMCClassifier``, ``SplitHMCRegressor``), which the samplers integrate with the
    symmetric split leapfrog unless told otherwise."""

    integrator = "symmetric"
    # a model fitted with its data on a GPU loads on a machine without one
    fit_only = ("data_device",)
    constraints: dict = {
        **FullData.constraints,
        "n_splits": [Interval(Integral, 1, None, closed="left")],
        "split_size": [Interval(Integral, 1, None, closed="left"), None],
        "data_device": [str, torch.device, None],
    }

    def check_params(self, estimator) -> None:
        if estimator.data_device is not None:
            try:
                resolve_device(estimator.data_device)
            except ValueError as exc:
                raise ValueError(f"data_device: {exc}") from None

    def make_target(self, estimator, network, X, targets, seed) -> SplitTarget:
        """Rows shuffled (from ``seed``, the fit's "data" child) and cut into subsets, so that
        sorted data do not give lopsided subsets."""
        order = numpy_rng(seed).permutation(len(X))
        data_device = estimator.data_device
        target = SplitTarget(
            network,
            X[order],
            targets[torch.as_tensor(order)],
            estimator._fit_likelihood(),
            as_prior(estimator._prior_precision(network)),
            n_splits=estimator.n_splits,
            split_size=estimator.split_size,
            data_device=None if data_device is None else resolve_device(data_device),
            **self.target_options(estimator),
        )
        estimator.n_splits_ = target.n_splits
        return target

    def loaded_state_spec(self, required: dict, optional: dict) -> tuple[dict, dict]:
        return {**required, "n_splits_": is_int(1)}, optional


class MinibatchData(FullData):
    """The stochastic-gradient family (``SGMCMCClassifier``, ``SGMCMCRegressor``): a
    minibatch target read ``batch_size`` rows at a time, for the samplers whose
    ``data_access`` is "minibatch"."""

    data_access = "minibatch"
    # an SG transition is an epoch on large data
    max_auto_draws = 200
    # the step is fixed from the start (nothing settles): the warmup only leaves the mode
    min_auto_warmup = 100
    constraints: dict = {
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "n_cycles": [Interval(Integral, 1, None, closed="left"), None],
    }

    def make_target(self, estimator, network, X, targets, seed) -> MinibatchTarget:
        return MinibatchTarget(
            network,
            X,
            targets,
            estimator._fit_likelihood(),
            GaussianPrior(estimator._prior_precision(network)),
            batch_size=estimator.batch_size,
            **self.target_options(estimator),
        )

    def target_options(self, estimator) -> dict:
        return {"temperature": float(estimator.temperature)}

    def sampler_setup(self, estimator) -> dict:
        """The minibatch samplers' setup (``samplers/sg_step_size.py``): the minibatch MAP
        start (``init="map"``), the step chosen from the data (a sampler at
        ``step_size="auto"``) and a cyclical schedule (``n_cycles``)."""
        return {
            "n_cycles": estimator.n_cycles,
            "map_start": resolve_start(estimator.init) is not None,
        }

    def rows_per_gradient(self, estimator, n_rows: int) -> int:
        return min(int(estimator.batch_size), n_rows)
