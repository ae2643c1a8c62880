"""Second and contracted third derivatives of a user's log density, by autograd.

What a Riemannian metric needs from a log density log f (Cobb 2019, §5.3, eq. 5.1 and 5.9): its
value, gradient and Hessian at positions theta (C, D), and the gradient of the contraction
sum_jk A_jk d^2 log f / d theta_j d theta_k at fixed A (the derivative of the metric terms of the
Hamiltonian, written through the SoftAbs divided differences). :class:`AutodiffDerivatives` gives
them for a function of one position (D,) -> scalar.

How, and why so (docs/rmhmc.md times the choices on the funnel):

- the Hessian is reverse over reverse on a *replicated batch*: row (c, k) of a (C D, D) leaf
  holds theta_c, one ``vmap`` of the function evaluates all rows, one backward gives the
  gradients g, and one more backward of sum_(c, k) g_(c, k) [k] gives row k of the Hessian of
  chain c in row (c, k). Two plain autograd passes over batched tensors, no nested
  :mod:`torch.func` transforms: ``vmap(hessian(f))`` (forward over reverse) is several times
  slower on the CPU, because the forward-mode rules of the backward operations run as Python
  decompositions;
- the contraction is one more backward of the Hessian rows with A as the output gradient (a
  vector-Jacobian product of the Hessian: the D x D x D tensor of third derivatives is never
  formed). The graph that gives the Hessian with ``create_graph`` is kept for the last position
  asked (keyed on the position tensor and its version), so the fixed-point iterations of the
  generalized leapfrog in p, which contract at one position with a new A each time (Cobb 2019,
  Algorithm 2), pay one backward each instead of a Hessian each.
"""

from __future__ import annotations

import torch
from torch.func import grad, jvp, vmap

__all__ = ["AutodiffDerivatives"]


def map_rows(f, *args):
    """``vmap(f)(*args)``, or a loop over the leading axis where ``f`` cannot be batched."""
    try:
        return vmap(f)(*args)
    except Exception:
        outs = [f(*row) for row in zip(*args, strict=True)]
        if isinstance(outs[0], tuple):
            return tuple(torch.stack(o) for o in zip(*outs, strict=True))
        return torch.stack(outs)


def _grad(output, leaf, create_graph=False, grad_outputs=None):
    """d output / d leaf, zeros where the output does not depend on the leaf."""
    if not output.requires_grad:
        return torch.zeros_like(leaf)
    (out,) = torch.autograd.grad(
        output,
        leaf,
        grad_outputs,
        retain_graph=True if grad_outputs is not None else None,
        create_graph=create_graph,
        allow_unused=True,
    )
    return torch.zeros_like(leaf) if out is None else out


class AutodiffDerivatives:
    """Derivatives of a log density ``fn`` of one position (D,) -> scalar, by autograd.

    The protocol the metrics use (a target may provide the two methods itself, in closed form):

    - ``log_prob_grad_hessian(theta (C, D)) -> (value (C,), grad (C, D), hessian (C, D, D))``
      of log f;
    - ``hessian_contraction(theta (C, D), A (C, D, D)) -> (C, D)``: the gradient of
      sum_jk A_jk d^2 log f / d theta_j d theta_k at fixed A.

    Both run two or three autograd passes over a replicated batch of C D positions (module
    notes); the contraction keeps the Hessian's graph of the last position it was asked for and
    reuses it while that tensor is unchanged. ``fn`` is batched with ``vmap`` when it allows it
    and called row by row otherwise (tried once).

    Parameters
    ----------
    fn : callable
        ``theta (D,) -> log f(theta)``, a scalar tensor, twice differentiable by autograd.
    """

    def __init__(self, fn):
        self.fn = fn
        self._batched = None  # vmap works: None untried, then True or False
        self._graph = None  # (theta, version, leaf, hessian rows) of the last contraction

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_graph"] = None  # an autograd graph is neither picklable nor worth copying
        return state

    def _values(self, leaf):
        """fn at each row of ``leaf`` (R, D) -> (R,), recorded by autograd."""
        if self._batched is not False:
            try:
                out = vmap(self.fn)(leaf)
                self._batched = True
                return out.reshape(leaf.shape[0])
            except Exception:
                if self._batched:
                    raise
                self._batched = False
        return torch.stack([self.fn(row).reshape(()) for row in leaf])

    def _second_order(self, theta, create_graph):
        """Replicated leaf (C D, D), values (C D,), gradients (C D, D) and Hessian rows
        (C D, D): row c D + k of the last is row k of the Hessian at theta_c."""
        C, D = theta.shape
        eye = torch.eye(D, dtype=theta.dtype, device=theta.device)
        leaf = theta.detach().repeat_interleave(D, 0).requires_grad_(True)
        with torch.enable_grad():
            value = self._values(leaf)
            g = _grad(value.sum(), leaf, create_graph=True)
            rows = _grad((g * eye.repeat(C, 1)).sum(), leaf, create_graph=create_graph)
        return leaf, value, g, rows

    def log_prob_grad_hessian(self, theta):
        C, D = theta.shape
        _, value, g, rows = self._second_order(theta, create_graph=False)
        return (
            value.detach().view(C, D)[:, 0],
            g.detach().view(C, D, D)[:, 0],
            rows.detach().view(C, D, D),
        )

    def log_prob_and_grad(self, theta):
        fn = self.fn
        with torch.no_grad():
            g, v = map_rows(torch.func.grad_and_value(fn), theta.detach())
        return v, g

    def hessian_contraction(self, theta, A):
        C, D = theta.shape
        cached = self._graph
        if cached is None or cached[0] is not theta or cached[1] != theta._version:
            leaf, _, _, rows = self._second_order(theta, create_graph=True)
            cached = self._graph = (theta, theta._version, leaf, rows)
        leaf, rows = cached[2], cached[3]
        # sum_(c, k) A_c[k] . H_c[k] summed over k is tr(A_c^T H_c); its gradient per row,
        # summed over the D copies of theta_c, is the contraction for chain c.
        A = A.detach().to(rows.dtype).reshape(C * D, D)
        out = _grad(rows, leaf, grad_outputs=A)
        return out.detach().view(C, D, D).sum(1)

    def hessian_diagonal(self, theta, chunk):
        return _hessian_diagonal(self.fn, theta.detach(), chunk)

    def diagonal_contraction(self, theta, c, chunk):
        return _diag_hessian_contraction(self.fn, theta.detach(), c, chunk)


def _hessian_diagonal(fn, theta, chunk):
    """diag of the Hessian of fn at each row of theta (C, D), by chunks of HVPs."""
    D = theta.shape[-1]
    eye = torch.eye(D, dtype=theta.dtype, device=theta.device)

    def one(th):
        out = []
        for s in range(0, D, chunk):
            basis = eye[s : s + chunk]
            hv = vmap(lambda e: jvp(grad(fn), (th,), (e,))[1])(basis)
            out.append((hv * basis).sum(-1))
        return torch.cat(out)

    return map_rows(one, theta)


def _diag_hessian_contraction(fn, theta, c, chunk):
    """grad_theta sum_d c_d (hess fn)_dd at fixed c, per row (C, D), by chunks."""
    D = theta.shape[-1]
    eye = torch.eye(D, dtype=theta.dtype, device=theta.device)
    total = torch.zeros_like(theta)
    for s in range(0, D, chunk):
        basis = eye[s : s + chunk]

        def part(th, cc, basis=basis, s=s):
            hv = vmap(lambda e: jvp(grad(fn), (th,), (e,))[1])(basis)
            return ((hv * basis).sum(-1) * cc[s : s + chunk]).sum()

        total = total + map_rows(grad(part), theta, c)
    return total
