"""The target: the log posterior density of a network's weights on a data set.

``Target`` owns "the posterior of this network on this data". Parameters travel as one flat
vector ``theta`` through :func:`torch.func.functional_call`; the user's module is deep-copied,
put in eval mode and never mutated. Frozen parameters (``requires_grad=False``) and buffers are
held as constants and not sampled.

Potential energy U(w) = -log p(Y | X, w) - log p(w) (Cobb & Jalaian 2021, §3.1, eq. 2), with the
likelihood summed over data points.
"""

from __future__ import annotations

import copy
import itertools

import torch
from torch import nn
from torch.func import functional_call, vmap

from .._warnings import warn
from ..priors import GaussianPrior
from ._batched_mlp import BatchedMLP
from ._conditioning import ConditionedCopies
from ._gibbs import hierarchical_blocks, hierarchical_noise

__all__ = ["FunctionalNetwork", "Target"]


class FunctionalNetwork:
    """A module made functional: flat parameter vectors in, outputs out.

    The module is deep-copied and put in eval mode; its trainable parameters define the flat
    layout, frozen parameters and buffers are held as constants.

    Parameters
    ----------
    module : nn.Module
    device, dtype : where and in which precision to evaluate.
    """

    def __init__(self, module: nn.Module, *, device="cpu", dtype=torch.float32):
        self.device = torch.device(device)
        self.dtype = dtype
        self.module = copy.deepcopy(module).to(device=self.device, dtype=dtype).eval()
        trainable = [(n, p) for n, p in self.module.named_parameters() if p.requires_grad]
        if not trainable:
            raise ValueError("the network has no trainable parameters to sample.")
        self.names = [n for n, _ in trainable]
        self.shapes = [p.shape for _, p in trainable]
        self.sizes = [p.numel() for _, p in trainable]
        self.dim = sum(self.sizes)
        #: Where each parameter starts in the flat weight vector, by name.
        starts = itertools.accumulate(self.sizes[:-1], initial=0)
        self.offsets = dict(zip(self.names, starts, strict=True))
        self._constants = {
            n: p.detach() for n, p in self.module.named_parameters() if not p.requires_grad
        }
        self._constants.update(dict(self.module.named_buffers()))

    def to(self, device=None, dtype=None) -> FunctionalNetwork:
        """A copy on another device or dtype (self when nothing changes)."""
        device = self.device if device is None else torch.device(device)
        dtype = self.dtype if dtype is None else dtype
        if device == self.device and dtype == self.dtype:
            return self
        return FunctionalNetwork(self.module, device=device, dtype=dtype)

    def as_tensor(self, X, device=None) -> torch.Tensor:
        """``X`` on ``device`` (this network's by default), floating inputs in its dtype."""
        X = X if isinstance(X, torch.Tensor) else torch.tensor(X)  # a copy: X may be read-only
        device = self.device if device is None else device
        X = X.to(device=device, dtype=self.dtype if X.is_floating_point() else X.dtype)
        # C order whatever the caller's layout (a DataFrame gives Fortran order): BLAS takes
        # another path for transposed strides, and its last-bit differences grow along a chain
        return X.contiguous()

    def initial_position(self) -> torch.Tensor:
        """The module's own trainable parameters as a flat vector (D,)."""
        return torch.cat([self.module.get_parameter(n).detach().reshape(-1) for n in self.names])

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named parameter views of a flat vector ``theta`` (D,)."""
        return {
            n: t.view(s)
            for n, t, s in zip(self.names, theta.split(self.sizes), self.shapes, strict=True)
        }

    def forward(self, theta: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
        """Network output at one parameter vector ``theta`` (D,)."""
        return functional_call(self.module, {**self.unflatten(theta), **self._constants}, (X,))

    #: False once :func:`torch.func.vmap` failed on this module (e.g. ``nn.LSTM`` / ``nn.GRU``,
    #: whose fused kernels have no batching rule): later batches go straight to the loop.
    _vmappable = True

    def map_draws(self, fn, *args):
        """``fn`` over the leading dimension of every argument, stacked: one batched call of
        :func:`torch.func.vmap`, or a loop over the leading dimension where the module cannot be
        batched (warned once per network). Autograd flows through either."""
        if self._vmappable:
            try:
                return vmap(fn)(*args)
            except RuntimeError as exc:
                if "atching rule" not in str(exc) and "vmap" not in str(exc):
                    raise  # an error of the module itself, not of batching it
                self._vmappable = False
                warn(
                    f"the network could not be batched with torch.func.vmap ({exc}); "
                    "evaluating the draws or chains one at a time.",
                    RuntimeWarning,
                )
        return torch.stack([fn(*row) for row in zip(*args, strict=True)])

    def forward_batched(
        self,
        thetas: torch.Tensor,
        X,
        transform=None,
        mean: bool = False,
        chunk_size: int | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Outputs of every draw in ``thetas`` (S, D) on ``X``: shape (S, n, n_out).

        Draws are evaluated together with :func:`torch.func.vmap`, in chunks sized to keep the
        widest hidden activation near 4 MB on a CPU (about the size of a cache: larger chunks
        run slower than a loop over draws; docs/hmc.md, "Measured") and 1 GB on a
        GPU; when fewer than 16 draws fit a CPU chunk, one draw at a time is faster and is used.

        Parameters
        ----------
        transform : callable, optional
            Applied to each chunk of outputs (e.g. softmax to probabilities).
        mean : bool
            Return the mean over draws (n, n_out), accumulated chunk by chunk so the per-draw
            outputs are never all held at once.
        out : tensor of shape (S, n, n_out'), optional
            Preallocated result (any dtype and device, e.g. a float64 view of a numpy array):
            each chunk of (transformed) outputs is copied into its draws' slice as it is made,
            and ``out`` is returned, so no second (S, n, n_out) block is ever held.
        """
        X = self.as_tensor(X)
        S = thetas.shape[0]
        if chunk_size is None:
            budget = 2.5e8 if self.device.type == "cuda" else 1e6
            widest = max(s[0] for s in self.shapes)
            chunk_size = max(1, min(S, int(budget // max(1, X.shape[0] * widest))))
        if chunk_size < 16 and self.device.type == "cpu":
            # Large inputs on a CPU: per-draw work is compute-bound and vmap's batched-weight
            # matmuls are slower than plain ones (benchmarks/speed/hmc_speed.py), so go draw by
            # draw.
            chunk_size = 1
            f = lambda th, x: self.forward(th[0], x)[None]  # noqa: E731
        else:
            f = lambda th, x: self.map_draws(lambda t: self.forward(t, x), th)  # noqa: E731
        total, chunks = None, []
        with torch.no_grad():
            for i in range(0, S, chunk_size):
                part = f(thetas[i : i + chunk_size].to(self.device, self.dtype), X)
                if transform is not None:
                    part = transform(part)
                if mean:  # accumulated in float64: the mean must not depend on chunking
                    part = part.double().sum(0)
                    total = part if total is None else total + part
                elif out is not None:
                    out[i : i + chunk_size].copy_(part)
                else:
                    chunks.append(part)
        if mean:
            return total / S
        return out if out is not None else torch.cat(chunks)


class Target(ConditionedCopies):
    """Log posterior density of a network's trainable parameters given ``(X, y)``.

    Parameters
    ----------
    network : FunctionalNetwork
        The network, on the device and dtype to compute in.
    X : array-like or tensor of shape (n, ...)
        Inputs, moved to the network's device and dtype once, here.
    y : tensor
        Targets in the form the likelihood expects.
    likelihood : object
        With ``log_prob(output, y) -> scalar`` summed over points (see :mod:`.likelihoods`).
    prior : Prior
        The prior over the flattened parameters (:mod:`sklearn_bnn.priors`), bound here to the
        network's layout as ``prior_density``. A ``HierarchicalPrior(scheme="gibbs")`` adds
        the Gibbs block of its precisions (:meth:`gibbs_blocks`) and, with ``learn_noise``,
        makes a Gaussian likelihood's noise precision learned under its Gamma hyperprior.
    temperature : float, default=1.0
        The posterior temperature T: the density sampled is p(theta | D)^(1 / T), likelihood
        and prior both tempered (the cold-posterior convention of Wenzel et al. 2020, eq. 1);
        1 is Bayes.
    rescale_moves : bool, default=False
        Declare the exact unit-rescaling move (:class:`UnitRescaleGibbs`) among the Gibbs
        blocks when the network is the package's MLP with a positively homogeneous activation
        (ReLU, identity) and the prior is Gaussian.

    Examples
    --------
    >>> from sklearn_bnn.likelihoods import Gaussian
    >>> net = FunctionalNetwork(torch.nn.Linear(2, 1))
    >>> t = Target(net, torch.zeros(5, 2), torch.zeros(5, 1), Gaussian(1.0), GaussianPrior(1.0))
    >>> t.dim
    3
    >>> value, grad = t.value_and_grad(net.initial_position()[None])
    >>> grad.shape
    torch.Size([1, 3])
    """

    #: Evaluate the package's own MLP under its categorical, Bernoulli or Gaussian likelihood
    #: by the hand-written, chain-batched gradient of :class:`~._batched_mlp.BatchedMLP` (the
    #: same density; faster than autograd at every number of chains); False keeps
    #: the general autograd path for every network.
    batched_mlp = True

    def __init__(
        self,
        network: FunctionalNetwork,
        X,
        y,
        likelihood,
        prior: GaussianPrior,
        *,
        temperature: float = 1.0,
        rescale_moves: bool = False,
    ):
        self.temperature = float(temperature)
        self.rescale_moves = bool(rescale_moves)
        self.network = network
        self.device, self.dtype, self.dim = network.device, network.dtype, network.dim
        self.likelihood = hierarchical_noise(prior, likelihood)
        self.prior = prior
        self._prior_blocks = hierarchical_blocks(prior, network)
        self.prior_density = prior.bind(
            network.names, network.sizes, dtype=self.dtype, device=self.device
        )
        self.X, self.y = self._place(X, y)
        self.n_data = self.X.shape[0]

    def _place(self, X, y, device=None):
        """``X`` and ``y`` as tensors on ``device`` (the network's by default), once."""
        X = self.network.as_tensor(X, device)
        device = X.device
        y = y.to(device) if isinstance(y, torch.Tensor) else y
        if isinstance(y, torch.Tensor) and y.is_floating_point():
            y = y.to(self.dtype)
        return X, y

    def _flat_module(self) -> _FlatModule:
        if getattr(self, "_flat", None) is None:
            self._flat = _FlatModule(self.network)
        return self._flat

    def _batched(self) -> BatchedMLP | None:
        """The network's :class:`BatchedMLP` (None when it is not the package's MLP), built
        once and shared by the conditioned copies."""
        if not hasattr(self, "_batched_cache"):
            self._batched_cache = BatchedMLP.for_network(self.network)
        return self._batched_cache

    def _batched_applies(self, theta, X, y):
        """The :class:`BatchedMLP` when it gives this target's density at ``theta`` (C, D) on
        ``(X, y)``, else None (the general path is then taken)."""
        if not self.batched_mlp:
            return None
        fast = self._batched()
        if fast is None or not fast.accepts(theta, self.likelihood, X, y):
            return None
        tau = getattr(self.prior_density, "precision", None)
        if isinstance(tau, torch.Tensor) and tau.ndim == 2 and tau.shape[0] != theta.shape[0]:
            return None  # the general path's own handling of a mismatched per-chain prior
        return fast

    # -- densities ----------------------------------------------------------------
    def _log_likelihood(self, theta, X, y) -> torch.Tensor:
        return self.likelihood.log_prob(self.network.forward(theta, X), y)

    def _chain_log_likelihoods(self, theta, X, y) -> torch.Tensor:
        """Log-likelihood of every chain (C,), each with its own likelihood parameters (the
        noise precision a Gibbs step drew) when the likelihood keeps some per chain."""
        per_chain = getattr(self.likelihood, "chain_precision", None)
        if per_chain is None or per_chain.shape[0] != theta.shape[0]:
            return self.network.map_draws(lambda t: self._log_likelihood(t, X, y), theta)
        lik = self.likelihood
        return self.network.map_draws(
            lambda t, p: lik.log_prob(self.network.forward(t, X), y, p), theta, per_chain
        )

    def _tempered(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` / T, in place; untouched (bit for bit) at T = 1."""
        return value if self.temperature == 1 or value is None else value.div_(self.temperature)

    def _log_prior(self, theta, weight: float = 1.0) -> torch.Tensor:
        """The (tempered) log prior density, ``weight`` times, at ``theta`` (C, D)."""
        return self._tempered(self.prior_density.log_prob(theta, weight))

    # -- CUDA graphs: what the conditioned copies of one target share -------------------
    def graph_family(self) -> tuple | None:
        """What every conditioned copy of one target shares (compared by identity): the
        class, network, data, likelihood kind and fixed parameters, the prior where it is not
        per chain, the temperature. None for a subclass (a split target, whose copies are not
        replayed across; a minibatch target has its own)."""
        if type(self) is not Target:
            return None
        return self._family_members()

    @property
    def prior_precision(self) -> torch.Tensor:
        """The Gaussian prior's precision vector tau (D,), when the prior has one."""
        return self.prior_density.precision

    @prior_precision.setter
    def prior_precision(self, value: torch.Tensor) -> None:
        self.prior_density.precision = value

    def log_prob(self, theta: torch.Tensor, X=None, y=None, prior_weight: float = 1.0):
        """Log posterior density (up to a constant) at ``theta`` of shape (D,) or (C, D).

        ``X, y`` and ``prior_weight`` as in :meth:`value_and_grad`.
        """
        X = self.X if X is None else X
        y = self.y if y is None else y
        with torch.no_grad():
            if theta.ndim == 1:
                log_lik = self._log_likelihood(theta, X, y)
            else:
                log_lik = self._chain_log_likelihoods(theta, X, y)
            return self._tempered(log_lik + self.prior_density.log_prob(theta, prior_weight))

    def value_and_grad(self, theta: torch.Tensor, X=None, y=None, prior_weight: float = 1.0):
        """Log density and its gradient: one forward/backward pass of the likelihood.

        The package's MLP under its categorical, Bernoulli or Gaussian likelihood takes a
        hand-written forward and backward pass with the chains batched through the matrix
        products (:class:`~._batched_mlp.BatchedMLP`, :attr:`batched_mlp`); any other network
        goes through autograd (one chain: a plain forward/backward of a private copy of the
        module whose parameters are views of one flat vector; several chains: ``vmap`` over
        ``functional_call``). The Gaussian prior's value and gradient are added in closed form,
        which keeps the graph as small as the network's own.

        Parameters
        ----------
        theta : tensor of shape (C, D)
            One position per chain, all evaluated as one batched computation.
        X, y : optional
            A data subset (for split integrators); the full data by default.
        prior_weight : float
            Multiplies the log prior (1/M for one of M subsets, Cobb & Jalaian 2021, eq. 6).

        Returns
        -------
        value : tensor (C,)
        grad : tensor (C, D)
        """
        log_lik, grad = self.log_likelihood_and_grad(theta, X, y, prior_weight)
        return log_lik.add_(self._log_prior(theta, prior_weight)), grad

    def log_prob_grad(self, theta: torch.Tensor) -> torch.Tensor:
        """The gradient (C, D) of the log density at ``theta`` (C, D), without its value.

        What the inner steps of a trajectory need: only the last step's log density is read
        (by the Metropolis test). Where the package's MLP takes the hand-written gradient
        (:class:`~._batched_mlp.BatchedMLP`), neither the likelihood's value nor the prior's is
        computed: on a GPU, where each operation of a replayed step is a kernel of about the same
        cost whatever its size, they are 7 of the about 30 kernels of a one-chain step on digits.
        Elsewhere it is :meth:`value_and_grad`'s gradient. A subclass whose density is not
        this class's own (:meth:`value_and_grad` overridden) gets its :meth:`value_and_grad`'s
        unless it overrides this method too.
        """
        if type(self).value_and_grad is not Target.value_and_grad:
            return self.value_and_grad(theta)[1]
        return self.log_likelihood_and_grad(theta, with_value=False)[1]

    def log_likelihood_and_grad(
        self, theta: torch.Tensor, X=None, y=None, prior_weight=1.0, *, with_value=True
    ):
        """Log-likelihood, and the gradient of the log *density* (likelihood plus weighted prior).

        The hot path of the split integrators: a kick needs only the gradient, and the prior's
        value, wanted once per trajectory for the energy, is cheaper to add in closed form where
        it is needed (:meth:`value_and_grad`, the split target's full-data energy) than at every
        subset. Arguments as for :meth:`value_and_grad`; with ``with_value=False`` the
        log-likelihood may be skipped (None in its place) where that saves work.

        Returns
        -------
        log_lik : tensor (C,) or None
        grad : tensor (C, D)
            Gradient of ``log_lik + prior_weight * log p(theta)``.
        """
        X = self.X if X is None else X
        y = self.y if y is None else y
        fast = self._batched_applies(theta, X, y)
        if fast is not None:  # the package's MLP: no autograd, chains batched by hand
            log_lik, grad = fast.log_likelihood_and_grad(theta, X, y, self.likelihood, with_value)
            grad = self.prior_density.add_grad_(grad, theta, prior_weight)
            return self._tempered(log_lik), self._tempered(grad)
        if theta.shape[0] == 1:
            # One chain: the hot path of every leapfrog step, kept to a handful of tensor ops.
            with torch.enable_grad():
                log_lik, grad = self._flat_module().log_likelihood_and_grad(
                    theta.detach().view(-1), X, y, self.likelihood, self.prior_density, prior_weight
                )
            return self._tempered(log_lik.view(1)), self._tempered(grad.view(1, -1))
        theta = theta.detach()
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)  # a fresh alias: theta stays a plain tensor
            log_lik = self._chain_log_likelihoods(leaf, X, y)
            (grad,) = torch.autograd.grad(log_lik.sum(), leaf)
        grad = self.prior_density.add_grad_(grad, theta, prior_weight)
        return self._tempered(log_lik.detach()), self._tempered(grad)


class _Constant:
    """A scalar tensor cached per dtype and device."""

    def __init__(self, number: float):
        self.number, self.cache = number, {}

    def get(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.dtype, like.device)
        if key not in self.cache:
            self.cache[key] = torch.tensor(self.number, dtype=like.dtype, device=like.device)
        return self.cache[key]


_MINUS_ONE = _Constant(-1.0)


class _FlatModule:
    """A private copy of the network whose trainable parameters are views of one flat vector.

    Loading a position is one copy, and the gradient comes from a plain forward/backward of the
    module: a single chain's subset gradient then runs at the speed of bare PyTorch, without the
    per-call cost of :func:`torch.func.functional_call`.
    """

    def __init__(self, network: FunctionalNetwork):
        self.module = copy.deepcopy(network.module)
        self.flat = network.initial_position().clone()
        self.flat_grad = torch.zeros_like(self.flat)
        self.params = []
        for name, view, grad_view, shape in zip(
            network.names,
            self.flat.split(network.sizes),
            self.flat_grad.split(network.sizes),
            network.shapes,
            strict=True,
        ):
            param = self.module.get_parameter(name)
            param.data = view.view(shape)
            # backward() accumulates into the flat gradient in place: no gathering afterwards
            param.grad = grad_view.view(shape)
            self.params.append(param)

    def log_likelihood(self, theta: torch.Tensor, X, y, likelihood) -> torch.Tensor:
        """Log-likelihood of ``(X, y)`` at ``theta`` (D,) by a forward pass without a graph:
        the value :func:`torch.func.functional_call` gives, at a plain module call's cost."""
        with torch.no_grad():
            self.flat.copy_(theta)
            return likelihood.log_prob(self.module(X), y)

    def log_likelihood_and_grad(
        self, theta: torch.Tensor, X, y, likelihood, prior, weight, grad_scale: float = 1.0
    ):
        """Log-likelihood of ``(X, y)`` at ``theta`` (D,), and the gradient (D,) of it plus
        ``weight`` times the bound ``prior``'s log density. Called with grad mode enabled.

        Few tensor operations, as this runs once per subset gradient: the gradient buffer
        starts as minus the prior's gradient, backward() of minus the log-likelihood adds
        -grad l to it in place, and the negation that copies it out gives grad l + grad log p
        (times ``grad_scale``, in the same pass: x * -s is -(x) * s bit for bit).
        """
        self.flat.copy_(theta)  # neither side requires grad: nothing is recorded
        prior.neg_grad_into(self.flat_grad, theta, weight)
        value = likelihood.log_prob(self.module(X), y)
        value.backward(gradient=_MINUS_ONE.get(value))
        if grad_scale == 1.0:
            return value.detach(), torch.neg(self.flat_grad)
        return value.detach(), torch.mul(self.flat_grad, -grad_scale)
