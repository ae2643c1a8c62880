"""The log posterior density estimated from minibatches, for stochastic-gradient samplers.

Schmal & Mäder (2026), §2: with N data points and a batch B, (N/|B|) l_B(w) + log p(w) is an
unbiased estimate of the log posterior density l(w) + log p(w), and its gradient of the full
gradient. Data held in memory that fit the compute device are moved there once, and the samplers
draw their batch indices on the device too, so a minibatch step makes no transfer and no host
synchronisation; a memory map, or data too large for the device, stay where the user keeps
them and go to the device one batch at a time, so device memory is bounded by a batch whatever
N is.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._network import FunctionalNetwork, Target

__all__ = ["MinibatchTarget"]

# "auto" keeps data resident on a GPU when they take at most this share of its free memory, and
# on the CPU (one tensor copy of an in-memory array) up to this many bytes
RESIDENT_GPU_SHARE = 0.25
RESIDENT_CPU_BYTES = 2**30
# resident CPU data up to this size also keep a feature-major copy for the one-chain fast path
FEATURE_MAJOR_BYTES = 2**27


def fits_on_device(X, y, device) -> bool:
    """Whether data ``X``, ``y`` should live on ``device`` whole: numpy arrays in memory or
    tensors that fit; never a memory map or another array-like (a lazy store reads rows)."""
    arrays = [a for a in (X, y) if a is not None]
    in_memory = (np.ndarray, torch.Tensor)
    if any(isinstance(a, np.memmap) or not isinstance(a, in_memory) for a in arrays):
        return False
    nbytes = sum(int(a.nbytes) if hasattr(a, "nbytes") else 0 for a in arrays)
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return nbytes <= RESIDENT_GPU_SHARE * free
    return nbytes <= RESIDENT_CPU_BYTES


class MinibatchTarget(Target):
    """Log posterior density of a network's parameters, estimated batch by batch.

    Parameters
    ----------
    network, likelihood, prior
        As for :class:`~sklearn_bnn.targets.Target`.
    X, y : array-like, memory map or tensor
        The data, indexed by rows one batch at a time and never copied whole to the device.
    batch_size : int
        Rows per batch |B| (also the chunk size of the full-data :meth:`value_and_grad`).
    resident : bool or "auto", default="auto"
        Keep the data on the compute device whole (one copy, at construction), the batch
        indices drawn there too: "auto" does for in-memory data that fit (:func:`fits_on_device`:
        a quarter of a GPU's free memory, 1 GiB on the CPU), never for a memory map. False moves
        each batch from where the data are.

    Examples
    --------
    >>> from sklearn_bnn.likelihoods import Gaussian
    >>> from sklearn_bnn.priors import GaussianPrior
    >>> net = FunctionalNetwork(torch.nn.Linear(2, 1))
    >>> X, y = np.zeros((10, 2), np.float32), np.zeros((10, 1), np.float32)
    >>> t = MinibatchTarget(net, X, y, Gaussian(1.0), GaussianPrior(1.0), batch_size=4)
    >>> value, grad = t.batch_value_and_grad(net.initial_position()[None], np.arange(4))
    >>> grad.shape
    torch.Size([1, 3])
    """

    def __init__(
        self,
        network: FunctionalNetwork,
        X,
        y,
        likelihood,
        prior,
        *,
        batch_size: int,
        resident="auto",
        **options,
    ):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        if resident not in (True, False, "auto"):
            raise ValueError(f"resident must be True, False or 'auto', got {resident!r}.")
        self.batch_size = int(batch_size)
        self._feature_major = None  # the data in the layout of the MLP's one-chain CPU path
        self.resident = (
            fits_on_device(X, y, network.device) if resident == "auto" else bool(resident)
        )
        super().__init__(network, X, y, likelihood, prior, **options)

    def _place(self, X, y, device=None):
        if not self.resident:
            return X, y  # kept where they are: batches are moved in :meth:`batch`
        y = y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y))
        return super()._place(X, y, device)  # once, whole: batches are gathered there

    @property
    def batch_device(self) -> torch.device | None:
        """Where the samplers should draw batch indices (the data's device when they are
        resident there), or None for indices on the host (numpy)."""
        return self.X.device if self.resident else None

    def batch(self, rows):
        """Inputs and targets of ``rows`` (indices or a slice) on the compute device.

        Index arrays (the stochastic-gradient samplers' batches, once per minibatch step) take
        the cheap path: ``ndarray.take`` gathers the rows of a numpy array or memory map into a
        fresh array that the tensor shares (no second copy), and a tensor is gathered by
        ``index_select`` on the indices as a tensor (indexing a tensor by a numpy array
        converts the indices element by element).
        """
        X = self.network.as_tensor(self._rows(self.X, rows))
        y = torch.as_tensor(self._rows(self.y, rows))
        return X, y.to(self.device, self.dtype if y.is_floating_point() else y.dtype)

    @staticmethod
    def _rows(data, rows):
        """``data[rows]``: a tensor that owns its memory for an index array into a numpy array
        or a tensor, else what ``data`` returns (a numpy result in C order)."""
        if isinstance(rows, torch.Tensor):  # indices drawn on the data's device
            return data.index_select(0, rows.to(data.device))
        if isinstance(rows, np.ndarray):
            if isinstance(data, torch.Tensor):
                return data.index_select(0, torch.from_numpy(rows).to(data.device))
            if isinstance(data, np.ndarray):
                return torch.from_numpy(np.ascontiguousarray(data.take(rows, axis=0)))
        out = data[rows]
        return np.ascontiguousarray(out) if isinstance(out, np.ndarray) else out

    def batch_value_and_grad(self, theta: torch.Tensor, rows):
        """(N/|B|) l_B(w) + log p(w) and its gradient at ``theta`` (C, D), B = ``rows``.

        Returns
        -------
        value : tensor (C,)
        grad : tensor (C, D)
        """
        log_lik, grad = self.batch_likelihood_and_grad(theta, rows)
        return log_lik + self.log_prior(theta), grad

    def batch_likelihood_and_grad(self, theta: torch.Tensor, rows):
        """:meth:`batch_value_and_grad` without the log prior in the value.

        A sampler that needs the value only at the end of a pass over the data (SGLD, SGHMC)
        or not at all (the trajectories of AMAGOLD and HTE) saves the prior's value at every
        step and adds :meth:`log_prior` where it needs it: the sum is the value of
        :meth:`batch_value_and_grad`, bit for bit.

        Returns
        -------
        log_lik : tensor (C,)
            (N/|B|) l_B(w).
        grad : tensor (C, D)
            The gradient of (N/|B|) l_B(w) + log p(w).
        """
        gathered = self._feature_major_batch(theta, rows)
        if gathered is not None:
            fast, Xt, columns = gathered
            scale = self.n_data / Xt.shape[1]
            log_lik, grad = fast.one_chain_columns(theta.detach(), Xt, columns, self.likelihood)
            grad = self.prior_density.add_grad_(grad, theta, 1.0 / scale)
            return scale * self._tempered(log_lik), self._tempered(grad).mul_(scale)
        X, y = self.batch(rows)
        scale = self.n_data / X.shape[0]
        # grad[(N/B) l_B + log p] = (N/B) grad[l_B + (B/N) log p]. The package's MLP takes its
        # hand-written gradient (BatchedMLP, the form a GPU replays from a CUDA graph,
        # samplers/_sg_graphs.py; on a CPU as fast as autograd or faster, docs/sgmcmc.md);
        # another network's one chain on the CPU the flat module's autograd pass, with the
        # scaling in its copy-out
        if (
            theta.shape[0] == 1
            and self.temperature == 1
            and theta.device.type == "cpu"
            and self._batched_applies(theta, X, y) is None
        ):
            flat, theta = self._flat_module(), theta.detach().view(-1)
            with torch.enable_grad():
                log_lik, grad = flat.log_likelihood_and_grad(
                    theta, X, y, self.likelihood, self.prior_density, 1.0 / scale, scale
                )
            return scale * log_lik.view(1), grad.view(1, -1)
        log_lik, grad = self.log_likelihood_and_grad(theta, X, y, 1.0 / scale)
        return scale * log_lik, grad.mul_(scale)

    def _feature_major_batch(self, theta: torch.Tensor, rows):
        """The package's MLP, and the batch ``rows`` as its one-chain CPU path takes them
        (:meth:`~sklearn_bnn.targets._batched_mlp.BatchedMLP.one_chain_columns`): columns
        gathered from feature-major copies of the whole resident data, made once. None where
        that path does not apply (several chains, a GPU, data not resident or larger than
        :data:`FEATURE_MAJOR_BYTES`, another network, a slice of rows)."""
        if theta.shape[0] != 1 or theta.device.type != "cpu" or not self.resident:
            return None
        if not isinstance(rows, (torch.Tensor, np.ndarray)):
            return None
        fast = self._batched_applies(theta, self.X, self.y)
        if fast is None or self.X.nbytes > FEATURE_MAJOR_BYTES:  # accepts() checked dtypes
            return None
        if self._feature_major is None or self._feature_major[0] is not fast:
            Xt = self.X.t().contiguous()
            self._feature_major = (fast, Xt, fast.columns_of(self.y, self.likelihood, Xt.dtype))
        _, Xt, columns = self._feature_major
        index = torch.as_tensor(rows, device=Xt.device)
        return fast, Xt.index_select(1, index), columns.index_select(1, index)

    def graph_family(self) -> tuple | None:
        """As :meth:`Target.graph_family`, with the batch size and residency: a minibatch
        step recorded as a CUDA graph
        (:mod:`sklearn_bnn.samplers.stochastic_gradient._sg_graphs`) on one conditioned copy
        replays on another. None for a subclass."""
        if type(self) is not MinibatchTarget:
            return None
        return (*self._family_members(), self.batch_size, self.resident)

    def log_prior(self, theta: torch.Tensor) -> torch.Tensor:
        """log p(w) at ``theta`` (C, D): the term :meth:`batch_value_and_grad` adds to the
        likelihood estimate."""
        return self.prior_density.log_prob(theta)

    def batch_log_prob(self, theta: torch.Tensor, rows):
        """(N/|B|) l_B(w) + log p(w) at ``theta`` (C, D) without a gradient: (C,)."""
        X, y = self.batch(rows)
        scale = self.n_data / X.shape[0]
        if self._one_chain(theta):  # a plain forward pass of the flat module, no vmap
            log_lik = self._flat_module().log_likelihood(theta[0], X, y, self.likelihood)
            prior = self.prior_density.log_prob(theta[0], 1.0 / scale)
            return scale * self._tempered(log_lik + prior).view(1)
        return scale * super().log_prob(theta, X, y, 1.0 / scale)

    def _one_chain(self, theta: torch.Tensor) -> bool:
        """Whether ``theta`` is one chain whose log-likelihood the flat module's plain forward
        pass gives (no per-chain likelihood parameters)."""
        return theta.shape[0] == 1 and getattr(self.likelihood, "chain_precision", None) is None

    def value_and_grad(self, theta: torch.Tensor, X=None, y=None, prior_weight: float = 1.0):
        """The exact full-data log density and gradient, accumulated batch by batch."""
        if X is not None:
            return super().value_and_grad(theta, X, y, prior_weight)
        value, grad = None, None
        for start in range(0, self.n_data, self.batch_size):
            Xb, yb = self.batch(slice(start, start + self.batch_size))
            weight = prior_weight * Xb.shape[0] / self.n_data
            v, g = self.log_likelihood_and_grad(theta, Xb, yb, weight)
            value, grad = (v, g) if value is None else (value + v, grad + g)
        return value + self.prior_density.log_prob(theta, prior_weight), grad

    # -- Gibbs step of a learned noise precision, batch by batch --------------------------------
    def _data_pieces(self):
        """The data batch by batch (the residuals of the noise's Gibbs step: one forward pass
        over the data, never more than a batch on the device)."""
        starts = range(0, self.n_data, self.batch_size)
        return (self.batch(slice(s, s + self.batch_size)) for s in starts)

    def _state_under_new_noise(self, state, sum_sq: torch.Tensor, tau: torch.Tensor):
        """After the Gibbs step: the exact full-data log density in closed form from the
        residuals (Gaussian likelihood: n/2 (log tau - log 2 pi) - tau S/2 per output), so
        AMAGOLD's and HTE's tests start from the right energy without a second pass; the
        gradient on one batch of rows spread over the data (the next transition's first step)."""
        theta = state.position
        n = self.n_data
        log_lik = (0.5 * n * (torch.log(tau) - math.log(2 * math.pi)) - 0.5 * tau * sum_sq).sum(-1)
        log_prob = self._tempered(log_lik.to(theta.dtype) + self.prior_density.log_prob(theta))
        rows = np.unique(np.linspace(0, n - 1, min(self.batch_size, n)).astype(np.int64))
        _, grad = self.batch_value_and_grad(theta, rows)
        return type(state)(theta, log_prob, grad)

    def log_prob(self, theta: torch.Tensor, X=None, y=None, prior_weight: float = 1.0):
        """The exact full-data log density, accumulated batch by batch.

        One chain (AMAGOLD's and HTE's test, once per transition) takes the flat module's plain
        forward pass per batch, several chains one vmapped pass: the same density, which may
        differ in the last bits between the two paths.
        """
        if X is not None:
            return super().log_prob(theta, X, y, prior_weight)
        total = self.prior_density.log_prob(theta, prior_weight)
        one_chain = self._one_chain(theta)  # a plain forward pass per batch, as batch_log_prob
        for start in range(0, self.n_data, self.batch_size):
            Xb, yb = self.batch(slice(start, start + self.batch_size))
            if one_chain:
                log_lik = self._flat_module().log_likelihood(theta[0], Xb, yb, self.likelihood)
                total = total + self._tempered(log_lik.view(1))
            else:
                total = total + super().log_prob(theta, Xb, yb, 0.0)
        return total
