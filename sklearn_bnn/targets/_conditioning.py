"""The conditioned copies of a network target: its Gibbs blocks, the copies a Gibbs block
samples the weights on (the noise or prior precisions it drew, the chains still running), and
the tensors by which those copies differ when a trajectory is replayed across them."""

from __future__ import annotations

import copy

import torch

from ..priors import BoundGaussianPrior
from ._gibbs import NoisePrecisionGibbs
from ._rescale import LayerRescaleGibbs, UnitRescaleGibbs

__all__ = ["ConditionedCopies"]


class ConditionedCopies:
    """What :class:`~sklearn_bnn.targets.Target` adds for Gibbs sampling: the Gibbs blocks of
    its model, shallow copies conditioned on drawn precisions or on a subset of chains, the
    residuals a noise-precision block draws from, and the tensors by which the conditioned
    copies differ (:meth:`graph_inputs`).

    The class using it holds ``network``, ``likelihood``, ``prior_density``,
    ``rescale_moves``, ``_prior_blocks``, ``X``, ``y`` and the density's methods
    (``value_and_grad``, ``_chain_log_likelihoods``, ``_flat_module``, ``_batched``).
    """

    # -- Gibbs blocks: the likelihood's noise, a hierarchical prior's precisions ------------
    def gibbs_blocks(self) -> list:
        """The Gibbs blocks of this model (:mod:`sklearn_bnn.samplers.gibbs`), drawn in this
        order: with :attr:`rescale_moves` and a hierarchical prior, each hidden layer's scale
        with the precisions integrated out (:class:`LayerRescaleGibbs`); a hierarchical prior's
        precisions (``HierarchicalPrior(scheme="gibbs")``); with :attr:`rescale_moves`, every
        hidden unit's scale given them (:class:`UnitRescaleGibbs`; a positively homogeneous MLP
        under a Gaussian prior only); the noise precision when the likelihood learns it."""
        learns = getattr(self.likelihood, "learns_precision", False)
        return (
            self._layer_rescale_blocks()
            + list(self._prior_blocks)
            + self._unit_rescale_blocks()
            + ([NoisePrecisionGibbs()] if learns else [])
        )

    def _unit_rescale_blocks(self) -> list:
        """[:class:`UnitRescaleGibbs`] when :attr:`rescale_moves` is set and the network and the
        prior admit it, else []."""
        if not self.rescale_moves or not isinstance(self.prior_density, BoundGaussianPrior):
            return []
        block = UnitRescaleGibbs.for_network(self.network)
        return [] if block is None else [block]

    def _layer_rescale_blocks(self) -> list:
        """[:class:`LayerRescaleGibbs`], the precisions integrated out, for a hierarchical
        prior's Gibbs block (directly before it) when the unit rescaling applies, else []."""
        units = self._unit_rescale_blocks()
        if not units or not self._prior_blocks:
            return []
        precisions = self._prior_blocks[0]
        return [LayerRescaleGibbs(units[0].layers, precisions.alpha, precisions.beta)]

    def with_noise_precision(self, tau: torch.Tensor) -> ConditionedCopies:
        """This target with the noise precision of each chain set to its row of ``tau``
        (C, n_out): a shallow copy sharing the network, the data and the prior (the density a
        Gibbs block conditions on). This target is left unchanged."""
        self._flat_module()  # built once here, shared by the copies
        self._batched()
        conditioned = copy.copy(self)
        conditioned.likelihood = self.likelihood.with_chain_precision(tau)
        return conditioned

    def with_prior_precision(self, precision: torch.Tensor) -> ConditionedCopies:
        """This target with the prior precision of each chain set to its row of ``precision``
        (C, D), one per weight: a shallow copy sharing the network, the data and the
        likelihood. This target is left unchanged."""
        self._flat_module()
        self._batched()
        conditioned = copy.copy(self)
        conditioned.prior_density = BoundGaussianPrior.per_chain(precision)
        return conditioned

    # -- a Gibbs block's conditioned copies, for trajectories replayed from CUDA graphs -------
    def graph_inputs(self) -> tuple:
        """The tensors by which this target's conditioned copies differ: the per-chain noise
        precision of the likelihood (C, n_out) and the per-chain prior precision (C, D), each
        None where not conditioned. A trajectory recorded as a CUDA graph
        (:mod:`sklearn_bnn.samplers._graphs`) on one copy replays on another of the same
        :meth:`graph_family` once these are copied into the recording's own."""
        noise = getattr(self.likelihood, "chain_precision", None)
        tau = getattr(self.prior_density, "precision", None)
        prior = tau if isinstance(tau, torch.Tensor) and tau.ndim == 2 else None
        return (noise, prior)

    def with_graph_inputs(self, inputs: tuple) -> ConditionedCopies:
        """This target conditioned on ``inputs`` (as :meth:`graph_inputs` gives them)."""
        noise, prior = inputs
        out = self if noise is None else self.with_noise_precision(noise)
        return out if prior is None else out.with_prior_precision(prior)

    def _family_members(self) -> tuple:
        inputs = self.graph_inputs()
        return (
            self.network,
            self.X,
            self.y,
            type(self.likelihood),
            getattr(self.likelihood, "precision", None),
            self.prior_density if inputs[1] is None else type(self.prior_density),
            self.temperature,
            self.batched_mlp,
        )

    def split_draws(self, run):
        """``run`` with the names of the precisions its Gibbs blocks drew (kept as per-draw
        statistics) in ``run.hyperparameters``: a hierarchical prior's, then the learned
        noise's when there is one output, the names S3HMC gives its sampled precisions."""
        if self._prior_blocks and run.draw_stats:
            names = [n for b in self._prior_blocks for n in b.stat_names]
            noise = run.draw_stats.get("noise_precision")
            # one output: the noise joins them, as in S3HMC; several stay (C, n, n_out) apart
            names += ["noise_precision"] if noise is not None and noise.ndim == 2 else []
            run.hyperparameters = [n for n in names if n in run.draw_stats]
        return run

    def _data_pieces(self):
        """The data as ``(X, y)`` pieces on the device, one at a time: whole here; a split
        target's subsets, a minibatch target's batches."""
        return [(self.X, self.y)]

    def _residual_sum_of_squares(self, theta: torch.Tensor) -> torch.Tensor:
        """Sum over the data of the squared residuals per chain and output (C, n_out)."""
        return self._sum_of_squares_over(theta, self._data_pieces())

    def log_likelihood(self, theta: torch.Tensor) -> torch.Tensor:
        """The full-data log-likelihood of every chain (C,) at ``theta`` (C, D), untempered:
        forward passes only (no gradient), chains batched, piece by piece of the data (what a
        Metropolis move of the weights needs, :class:`InterweavedPrecisionGibbs`)."""
        with torch.no_grad():
            return sum(
                self._chain_log_likelihoods(theta.detach(), X, y) for X, y in self._data_pieces()
            )

    def _sum_of_squares_over(self, theta: torch.Tensor, pieces) -> torch.Tensor:
        """Squared residuals per chain and output (C, n_out), summed over ``(X, y)`` pieces of
        the data (the whole data, its subsets or its batches), one piece on the device at a
        time; chains batched by :meth:`FunctionalNetwork.map_draws`."""
        total = 0
        weighted = getattr(self.likelihood, "sum_of_squares", None)  # row weights
        with torch.no_grad():
            for X, y in pieces:
                out = self.network.map_draws(
                    lambda t, X=X: self.network.forward(t, X), theta.detach()
                )
                total = total + (((out - y) ** 2).sum(1) if weighted is None else weighted(out, y))
        return total

    def select_chains(self, idx: torch.Tensor) -> ConditionedCopies:
        """The density of the chains ``idx`` only: itself, or for a target conditioned on
        per-chain noise or prior precisions, the one conditioned on theirs (NUTS evaluates the
        chains still growing their trees)."""
        out = self
        tau = getattr(self.likelihood, "chain_precision", None)
        if tau is not None:
            out = out.with_noise_precision(tau[idx])
        select = getattr(self.prior_density, "select_chains", None)
        prior = self.prior_density if select is None else select(idx)
        if prior is not self.prior_density:
            out = copy.copy(out) if out is self else out
            out.prior_density = prior
        return out

    def _state_under_new_noise(self, state, sum_sq: torch.Tensor, tau: torch.Tensor):
        """The state's log density and gradient on this target (conditioned on the ``tau`` a
        Gibbs step drew; the residuals' ``sum_sq`` are there for targets that use them)."""
        log_prob, grad = self.value_and_grad(state.position)
        return type(state)(state.position, log_prob, grad)
