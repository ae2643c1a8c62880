"""A hand-written, chain-batched gradient of the package's MLP.

For the package's own :class:`~sklearn_bnn.nets.MLP` (Linear, activation, ..., Linear) under
the package's categorical, Bernoulli or Gaussian likelihood, the log-likelihood of C chains and
its gradient with respect to each chain's flat parameter vector are computed here without
autograd: the chain dimension is carried through batched matrix products
(:func:`torch.baddbmm`, :func:`torch.bmm`), the backward pass is written out (each
activation's derivative, the likelihood's derivative with respect to the network's output),
and every layer's gradient lands in the target's flat layout. The first layer, whose input is
shared by all chains, is one ordinary matrix product for all of them, forward and backward.
One chain on the CPU takes a leaner form of the same computation (plain products, no
concatenations: :meth:`BatchedMLP._one_chain`), as there a small network's gradient costs its
number of operations as much as its arithmetic.

Compared with ``vmap`` over ``functional_call`` and autograd this removes the fixed cost per
call (graph building, batching rules) and keeps every product a plain BLAS call. The
:class:`~sklearn_bnn.targets.Target` uses it where it applies (:meth:`BatchedMLP.accepts`) and
falls back to the general path otherwise; the prior is added outside, in closed form, as for
the general path.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..likelihoods import Bernoulli, Categorical, Gaussian

__all__ = ["BatchedMLP"]


# -- activations: value and derivative --------------------------------------------------------
# Each derivative takes the pre-activation z and the activation a = f(z) (whichever is cheaper)
# and returns f'(z); None marks the identity (no multiplication at all).


def _relu_grad(z, a, module):
    return a > 0  # as torch's own backward of relu: 0 at z = 0 (unused: see _Layer)


def _tanh_grad(z, a, module):
    return 1 - a * a


def _sigmoid_grad(z, a, module):
    return a * (1 - a)


def _gelu_grad(z, a, module):
    cdf = 0.5 * (1 + torch.erf(z * (1 / math.sqrt(2))))
    pdf = torch.exp(-0.5 * z * z) * (1 / math.sqrt(2 * math.pi))
    return cdf + z * pdf


def _silu_grad(z, a, module):
    s = torch.sigmoid(z)
    return s * (1 + z * (1 - s))


def _elu_grad(z, a, module):
    return torch.where(z > 0, torch.ones_like(z), a + module.alpha)


#: Exact activation classes handled here -> (forward, derivative); None: the identity.
_ACTIVATIONS = {
    nn.ReLU: (torch.relu, _relu_grad),
    nn.Tanh: (torch.tanh, _tanh_grad),
    nn.Sigmoid: (torch.sigmoid, _sigmoid_grad),
    nn.GELU: (F.gelu, _gelu_grad),
    nn.SiLU: (F.silu, _silu_grad),
    nn.ELU: (None, _elu_grad),  # forward needs the module's alpha: see _Layer.activate
    nn.Identity: None,
}


def _supported_activation(module: nn.Module) -> bool:
    kind = type(module)
    if kind not in _ACTIVATIONS:
        return False
    if kind is nn.GELU:
        return module.approximate == "none"
    return True


class _Layer:
    """One Linear layer of the MLP and the activation after it (None for the last layer or
    the identity): offsets of its weight (out, in) and bias (out,) in the flat vector."""

    def __init__(self, w_start, b_start, n_out, n_in, activation):
        self.w = slice(w_start, w_start + n_out * n_in)
        self.b = slice(b_start, b_start + n_out)
        self.n_out, self.n_in = n_out, n_in
        self.module = activation
        entry = None if activation is None else _ACTIVATIONS[type(activation)]
        self.forward_fn, self.derivative = (None, None) if entry is None else entry
        #: the derivative is a function of the activation alone: activate in place, keep no z
        self.in_place = self.derivative in (None, _relu_grad, _tanh_grad, _sigmoid_grad)

    def activate(self, z: torch.Tensor) -> torch.Tensor:
        """f(z): in place (z is overwritten) when :attr:`in_place`, else a new tensor."""
        if self.module is None:
            return z
        if self.derivative is _relu_grad:
            return z.relu_()
        if self.derivative is _tanh_grad:  # 2 sigmoid(2 z) - 1: half torch's tanh on a CPU
            return z.mul_(2).sigmoid_().mul_(2).sub_(1)
        if self.derivative is _sigmoid_grad:
            return z.sigmoid_()
        if self.forward_fn is None:  # ELU
            return F.elu(z, alpha=self.module.alpha)
        return self.forward_fn(z)

    def backward_through(self, da: torch.Tensor, z: torch.Tensor, a: torch.Tensor):
        """The gradient with respect to the pre-activation z from ``da``, the one with respect
        to a = f(z), in place in ``da`` (``z`` may be ``a`` itself: see :attr:`in_place`)."""
        if self.derivative is None:
            return da
        if self.derivative is _relu_grad:  # one fused pass: torch's own backward of relu
            return torch.ops.aten.threshold_backward.grad_input(da, a, 0, grad_input=da)
        if self.derivative is _tanh_grad:  # da (1 - a^2) in one pass, as torch's backward
            return torch.ops.aten.tanh_backward.grad_input(da, a, grad_input=da)
        return da.mul_(self.derivative(z, a, self.module))


class BatchedMLP:
    """Log-likelihood and gradient of C chains of an MLP, without autograd.

    Built by :meth:`for_network` for a :class:`~sklearn_bnn.targets.FunctionalNetwork` whose
    module is exactly the package's :class:`~sklearn_bnn.nets.MLP` with every parameter
    trainable, a bias on every layer and supported activations; None otherwise.

    Parameters
    ----------
    layers : list of _Layer
        In order, input side first.
    dim : int
        Length D of the flat parameter vector.
    """

    def __init__(self, layers: list[_Layer], dim: int):
        self.layers = layers
        self.dim = dim
        #: sizes of the flat vector's pieces, in order: each layer's weight, then its bias
        self.sizes = [size for layer in layers for size in (layer.n_out * layer.n_in, layer.n_out)]
        self._cache = {}  # derived copies of the data, per data tensor (see _derived)
        self._work = {}  # workspaces, per (C, n, dtype, device)

    @classmethod
    def for_network(cls, network) -> BatchedMLP | None:
        """The batched gradient of ``network``'s module, or None when it is not one this class
        reproduces exactly (the target then keeps its general path)."""
        from ..nets import MLP  # nets imports no target: no cycle

        module = network.module
        if type(module) is not MLP:
            return None
        children = [m for m in module if type(m) is not nn.Dropout]  # dropout: eval mode
        linears = children[0::2]
        activations = children[1::2]
        if len(linears) != len(activations) + 1:
            return None
        if not all(type(m) is nn.Linear and m.bias is not None for m in linears):
            return None
        if not all(_supported_activation(m) for m in activations):
            return None
        expected = []
        index = {id(p): n for n, p in module.named_parameters()}
        for lin in linears:
            expected += [index[id(lin.weight)], index[id(lin.bias)]]
        if list(network.names) != expected:
            return None  # a frozen tensor, or another order: not the flat layout assumed
        starts = network.offsets
        layers = []
        for i, lin in enumerate(linears):
            act = activations[i] if i < len(activations) else None
            act = None if type(act) is nn.Identity else act
            n_out, n_in = lin.weight.shape
            layers.append(
                _Layer(starts[index[id(lin.weight)]], starts[index[id(lin.bias)]], n_out, n_in, act)
            )
        return cls(layers, network.dim)

    # -- what is handled ----------------------------------------------------------------------
    def accepts(self, theta, likelihood, X, y) -> bool:
        """Whether :meth:`log_likelihood_and_grad` gives exactly the general path's density for
        these positions (C, D), likelihood and data (plain Python checks on types and shapes:
        no host sync)."""
        if not isinstance(X, torch.Tensor) or X.ndim != 2 or not X.is_floating_point():
            return False
        if theta.ndim != 2 or theta.shape[1] != self.dim:
            return False
        if not isinstance(y, torch.Tensor) or X.shape[1] != self.layers[0].n_in:
            return False
        if theta.dtype != X.dtype or theta.device != X.device or y.device != X.device:
            return False
        n_chains = theta.shape[0]
        n, n_out = X.shape[0], self.layers[-1].n_out
        kind = type(likelihood)
        if kind is Categorical:
            return y.ndim == 1 and y.shape[0] == n and not y.is_floating_point() and n_out > 1
        if kind is Bernoulli:
            return tuple(y.shape) == (n, n_out) and y.is_floating_point()
        if kind is Gaussian:
            if tuple(y.shape) != (n, n_out) or not y.is_floating_point():
                return False
            per_chain = likelihood.chain_precision
            if per_chain is not None:
                return per_chain.ndim == 2 and tuple(per_chain.shape) == (n_chains, n_out)
            tau = likelihood.precision
            return not isinstance(tau, torch.Tensor) or tau.numel() in (1, n_out)
        return False

    # -- the computation ----------------------------------------------------------------------
    def log_likelihood_and_grad(self, theta: torch.Tensor, X, y, likelihood, with_value=True):
        """Log-likelihood of every chain (C,) and its gradient (C, D) at ``theta`` (C, D).

        Call only where :meth:`accepts` said yes. No graph is built and nothing is synced.
        With ``with_value=False`` the log-likelihood is not computed (None in its place): the
        gradient alone, what the inner steps of a trajectory need.
        """
        theta = theta.detach()
        C = theta.shape[0]
        if C == 1 and theta.device.type == "cpu":
            return self._one_chain(theta, X, y, likelihood, with_value)
        X1t = self._inputs_with_ones(X)
        work = self._workspace(C, X1t.shape[1], X1t)
        zs, acts, f = self._forward(theta, X1t, work)
        value, d_out = self._likelihood(f, y, likelihood, C, with_value)
        grad = self._backward(theta, X1t, zs, acts, d_out, work)
        return value, grad

    def _one_chain(self, theta, X, y, likelihood, with_value=True):
        """:meth:`log_likelihood_and_grad` of one chain on the CPU: :meth:`one_chain_columns`
        of the data's feature-major forms (kept for the same data tensors)."""
        Xt = self._derived("xt", X, lambda: X.t().contiguous())  # (n_in, n)
        return self.one_chain_columns(theta, Xt, self.columns_of(y, likelihood, X.dtype),
                                      likelihood, with_value)  # fmt: skip

    def columns_of(self, y, likelihood, dtype) -> torch.Tensor:
        """The targets ``y`` as the likelihood's columns (n_out, n) in ``dtype``: the labels
        one-hot for a categorical likelihood, else ``y`` transposed."""
        if type(likelihood) is Categorical:
            n_out = self.layers[-1].n_out

            def make():
                return F.one_hot(y, n_out).to(dtype).t().contiguous()

            return self._derived("onehot", y, make, n_out, dtype)
        return self._derived("yt", y, lambda: y.t().contiguous())

    def one_chain_columns(self, theta, Xt, columns, likelihood, with_value=True):
        """:meth:`log_likelihood_and_grad` of one chain (1, D) on the CPU from the data in
        feature-major form: the inputs ``Xt`` (n_in, n) and the targets' :meth:`columns_of`
        (n_out, n), both contiguous. A minibatch target gathers a batch's columns from these
        forms of the whole data (one copy per batch, no transpose, no one-hot).

        As few operations as the products allow (a small network's gradient there costs its
        operations as much as its arithmetic): each layer's bias is added by its product
        (:func:`torch.addmm`), and each gradient is written straight into its place in the
        flat vector. A GPU keeps the batched form, whose product layouts are chosen for cuBLAS
        (:func:`_weight_grad`; the timings are in docs/hmc.md, "On a GPU: trajectories
        replayed from CUDA graphs")."""
        n = Xt.shape[1]
        params = theta.reshape(-1).split(self.sizes)
        work = self._workspace(1, n, Xt)
        last = len(self.layers) - 1
        inputs, hidden = Xt, []  # hidden: (z, a) of each hidden layer, (width, n)
        for i, layer in enumerate(self.layers):
            W = params[2 * i].view(layer.n_out, layer.n_in)
            b = params[2 * i + 1].view(layer.n_out, 1)
            out = None if work is None or i == last else work[i][0][0]
            z = torch.addmm(b, W, inputs, out=out)
            if i < last:
                inputs = layer.activate(z)
                hidden.append((z, inputs))
        value, d_out = self._likelihood_of_columns(z.unsqueeze(0), columns, likelihood, 1,
                                                   with_value)  # fmt: skip
        grad = torch.empty_like(theta)
        pieces = grad.view(-1).split(self.sizes)
        dz = d_out[0]
        for i in range(last, -1, -1):
            layer = self.layers[i]
            torch.sum(dz, 1, out=pieces[2 * i + 1])
            # (n, n_in), a transposed view of a feature-major block either way: MKL's kernel is
            # faster for this layout than for a row-major X (docs/chains.md, "Against a compiled
            # transition")
            below = (hidden[i - 1][1] if i else Xt).t()
            torch.mm(dz, below, out=pieces[2 * i].view(layer.n_out, layer.n_in))
            if i:
                W = params[2 * i].view(layer.n_out, layer.n_in)
                out = None if work is None else work[i - 1][1][0]
                da = torch.mm(W.t(), dz, out=out)
                dz = self.layers[i - 1].backward_through(da, *hidden[i - 1])
        return value, grad

    def _inputs_with_ones(self, X: torch.Tensor) -> torch.Tensor:
        """``[X, 1]`` transposed (d + 1, n): the first layer's weight and bias then act in one
        matrix product, forward and backward."""

        def make():
            ones = torch.ones(X.shape[0], 1, dtype=X.dtype, device=X.device)
            return torch.cat([X, ones], 1).t().contiguous()

        return self._derived("x1t", X, make)

    #: How many derived copies of data tensors are kept (a split target's subsets each have
    #: theirs; a minibatch target's batches come and go).
    max_cached = 16

    def _derived(self, name: str, data: torch.Tensor, make, *extra):
        """``make()``, cached for the same ``data`` tensor (same storage, version and shape)
        and ``extra`` key; the cache is emptied when it holds :attr:`max_cached` entries."""
        key = (name, data.data_ptr(), data._version, tuple(data.shape), data.dtype,
               data.device, *extra)  # fmt: skip
        hit = self._cache.get(key)
        if hit is not None and hit[0] is data:
            return hit[1]
        if len(self._cache) >= self.max_cached:
            self._cache.clear()
        value = make()
        self._cache[key] = (data, value)  # the reference keeps data_ptr from being reused
        return value

    #: Largest workspace kept between calls, in bytes; above it buffers are allocated per call.
    max_workspace_bytes = 2**27

    def _workspace(self, C: int, n: int, like: torch.Tensor):
        """Per hidden layer, the buffers (C, width, n) of its activation and of the gradient
        with respect to it, in ``like``'s dtype and device, reused from one call to the next
        (a fresh large allocation costs its page faults on every call on a CPU); None when
        they would be too large to keep. Only this object writes them, and nothing handed out
        is a view of them."""
        key = (C, n, like.dtype, like.device)
        if key in self._work:
            return self._work[key]
        widths = [layer.n_out for layer in self.layers[:-1]]
        size = 2 * C * n * sum(widths) * like.element_size()
        if size > self.max_workspace_bytes:
            return None
        if len(self._work) >= 4:  # a few sizes at a time (a split target's subsets)
            self._work.clear()
        buffers = [(like.new_empty((C, h, n)), like.new_empty((C, h, n))) for h in widths]
        self._work[key] = buffers
        return buffers

    def _forward(self, theta, X1t, work):
        """Every hidden layer's pre-activation and activation, feature-major (C, width, n),
        and the output (C, n_out, n).

        Feature-major keeps each chain's hidden values one contiguous (width, n) block: the
        first layer is one product for all chains, (C * h, d + 1) @ (d + 1, n), and its
        weight gradient another, (C * h, n) @ (n, d + 1), both already in the flat layout;
        the later layers are batched products of contiguous blocks.
        """
        C, n = theta.shape[0], X1t.shape[1]
        first = self.layers[0]
        Wb = torch.cat(
            [
                theta[:, first.w].view(C, first.n_out, first.n_in),
                theta[:, first.b].view(C, first.n_out, 1),
            ],
            2,
        )
        out = None if work is None or len(self.layers) == 1 else work[0][0]
        z = torch.mm(Wb.view(C * first.n_out, first.n_in + 1), X1t, out=_flat(out))
        z = z.view(C, first.n_out, n)
        zs, acts = [], []
        for i, layer in enumerate(self.layers[1:], 1):
            a = self.layers[i - 1].activate(z)
            zs.append(z)
            acts.append(a)
            W = theta[:, layer.w].view(C, layer.n_out, layer.n_in)
            b = theta[:, layer.b].unsqueeze(2)  # (C, n_out, 1)
            out = None if work is None or i == len(self.layers) - 1 else work[i][0]
            z = torch.baddbmm(b, W, a, out=out)
        return zs, acts, z

    def _backward(self, theta, X1t, zs, acts, d_out, work):
        """The gradient (C, D) from ``d_out`` (C, n_out, n), the one with respect to the
        output, layer by layer."""
        C = theta.shape[0]
        pieces = []
        dz = d_out  # w.r.t. the last pre-activation
        for i in range(len(self.layers) - 1, 0, -1):
            layer, below = self.layers[i], self.layers[i - 1]
            a = acts[i - 1]
            pieces.append(dz.sum(2))  # bias
            pieces.append(_weight_grad(dz, a).reshape(C, -1))  # weight
            W = theta[:, layer.w].view(C, layer.n_out, layer.n_in)
            out = None if work is None else work[i - 1][1]
            da = torch.bmm(W.transpose(1, 2), dz, out=out)  # (C, n_in, n)
            dz = below.backward_through(da, zs[i - 1], a)
        first = self.layers[0]
        g = torch.mm(dz.view(C * first.n_out, -1), X1t.t()).view(C, first.n_out, -1)
        pieces.append(g[:, :, -1])
        pieces.append(g[:, :, :-1].reshape(C, -1))
        return torch.cat(pieces[::-1], 1)

    def _likelihood(self, f, y, likelihood, C, with_value=True):
        """Log-likelihood per chain (C,) of outputs ``f`` (C, n_out, n) (None without
        ``with_value``), and its gradient with respect to ``f`` (C, n_out, n)."""
        columns = self.columns_of(y, likelihood, f.dtype)
        return self._likelihood_of_columns(f, columns, likelihood, C, with_value)

    def _likelihood_of_columns(self, f, columns, likelihood, C, with_value=True):
        """:meth:`_likelihood` with the targets as :meth:`columns_of` gives them."""
        kind = type(likelihood)
        if kind is Categorical:
            return self._categorical(f, columns, with_value)
        if kind is Bernoulli:
            return self._bernoulli(f, columns, with_value)
        return self._gaussian(f, columns, likelihood, C, with_value)

    def _categorical(self, f, onehot, with_value=True):
        # log p = sum of log_softmax(f) at the labels; d/df = onehot - softmax(f), which is
        # log_softmax's own backward at onehot (each column sums to 1): one pass, not two
        C = f.shape[0]
        log_p = torch.log_softmax(f, 1)
        value = _rows_dot(log_p.view(C, -1), onehot.view(-1)) if with_value else None
        d_out = torch.ops.aten._log_softmax_backward_data(
            onehot.expand_as(log_p), log_p, 1, log_p.dtype
        )
        return value, d_out

    def _bernoulli(self, f, y, with_value=True):
        # log p = y f - softplus(f); d/df = y - sigmoid(f)
        value = torch.sub(f * y, F.softplus(f)).sum((1, 2)) if with_value else None
        return value, torch.sub(y, torch.sigmoid(f))

    def _gaussian(self, f, y, likelihood, C, with_value=True):
        # log p = n/2 (sum log tau - n_out log 2 pi) - sum tau (f - y)^2 / 2; d/df = -tau (f - y)
        n_out, n = f.shape[1], f.shape[2]
        tau = likelihood.chain_precision
        if tau is None:
            tau = likelihood.precision
        resid = f - y
        if isinstance(tau, torch.Tensor):
            tau = tau.to(f).reshape(-1, n_out, 1) if tau.numel() > 1 else tau.to(f).reshape(1, 1, 1)
        else:  # a float: no tensor to build
            tau = float(tau)
        weighted = resid * tau
        if not with_value:
            return None, weighted.neg_()
        if isinstance(tau, torch.Tensor):
            log_tau = torch.log(tau).sum((1, 2))
            if tau.shape[1] == 1:
                log_tau = log_tau * n_out
        else:
            log_tau = n_out * math.log(tau)
        sq = (weighted * resid).sum((1, 2))
        value = 0.5 * n * (log_tau - n_out * math.log(2 * math.pi)) - 0.5 * sq
        return value, weighted.neg_()


def _weight_grad(dz: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """A later layer's weight gradient dz @ a^T per chain, (C, o, n) x (C, h, n) -> (C, o, h).

    For one chain on a GPU, as (a @ dz^T)^T: with few outputs cuBLAS's kernel for the direct form
    is several times slower than this one; with several chains, and on the CPU, the direct form
    (the faster there; docs/hmc.md, "On a GPU: trajectories replayed from CUDA graphs", has the
    timings).
    """
    if dz.shape[0] == 1 and dz.is_cuda:
        return torch.bmm(a, dz.transpose(1, 2)).transpose(1, 2)
    return torch.bmm(dz, a.transpose(1, 2))


def _rows_dot(m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``m @ v`` for ``m`` (C, k): for one chain on a GPU as a product and a sum (faster there
    than cuBLAS's matrix-vector kernel; docs/hmc.md, "On a GPU: trajectories replayed from CUDA
    graphs"), else the matrix-vector product."""
    if m.shape[0] == 1 and m.is_cuda:
        return (m * v).sum(1)
    return torch.mv(m, v)


def _flat(buffer):
    """A (C, h, n) buffer as the (C * h, n) matrix it is, or None."""
    return None if buffer is None else buffer.view(-1, buffer.shape[-1])
