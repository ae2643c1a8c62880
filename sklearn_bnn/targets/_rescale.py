"""An exact rescaling move for positively homogeneous networks, as a Gibbs block.

In the package's :class:`~sklearn_bnn.nets.MLP` with a positively homogeneous activation
(ReLU or the identity: a(c z) = c a(z) for c > 0), scaling hidden unit j of layer l -- its
incoming row W_l[j, :] and bias b_l[j] by c > 0 and its outgoing column W_{l+1}[:, j] by 1/c --
leaves the network's function, hence the likelihood, unchanged; along these directions only the
Gaussian prior changes, and HMC crosses them by a random walk (docs/rmhmc.md, "Hyperparameters
that mix"). :class:`UnitRescaleGibbs` draws each unit's c from its conditional along that orbit.

The move is the generalised Gibbs step of Liu & Sabatti (2000, "Generalised Gibbs sampler and
multigrid Monte Carlo for Bayesian computation", *Biometrika* 87(2), 353-369, Theorem 1; the
parameter-expansion view of Liu & Wu 1999, *JASA* 94:1264): for a group of transformations T_c
of the position x with left-Haar measure H(dc), drawing c from

    p(c) ∝ pi(T_c x) |det J_c(x)| H(dc)

and moving to T_c x leaves pi invariant. The multiplicative group has H(dc) = dc / c; the unit's
transformation scales n_in + 1 coordinates by c and n_out by 1/c, det J_c = c^k with
k = n_in + 1 - n_out. With the (tempered) Gaussian prior of per-coordinate precisions tau,

    A = (sum_i tau_i W_l[j, i]^2 + tau_b b_l[j]^2) / 2,    B = sum_m tau_m W_{l+1}[m, j]^2 / 2,

p(c) ∝ c^(k - 1) exp(-(A c^2 + B / c^2) / T), and u = c^2 (dc = du / (2 sqrt(u))) has density
∝ u^(k/2 - 1) exp(-(A u + B / u) / T): the generalised inverse Gaussian GIG(p, a, b) with
density ∝ u^(p - 1) exp(-(a u + b / u) / 2), p = k / 2, a = 2 A / T, b = 2 B / T.

The GIG is drawn exactly on v = log u, where its log density is concave, by rejection from a
three-piece envelope (:func:`sample_log_gig`), from the chain's generator only. Units of one
layer touch disjoint coordinates and are drawn together, vectorised over units and chains; the
layers in turn (layer l's move changes layer l+1's rows).
"""

from __future__ import annotations

import torch
from torch import nn

from .._utils import host_reads_are_free

__all__ = [
    "LayerRescaleGibbs",
    "UnitRescaleGibbs",
    "homogeneous_layers",
    "sample_log_concave",
    "sample_log_gig",
]

#: Activations with a(c z) = c a(z) for every c > 0.
HOMOGENEOUS = (nn.ReLU, nn.Identity)
#: Rejection rounds of :func:`sample_log_concave`, drawn together, and the passes of them.
ROUNDS_PER_PASS, PASSES = 25, 4
#: Largest number of proposals :func:`sample_log_concave` draws in one pass where it does not
#: read the host (8 MB of float64 for each of its tensors of that size).
MAX_PASS_SIZE = 2**20


def homogeneous_layers(network) -> list | None:
    """The hidden layers a unit rescaling applies to, or None when the network has none.

    Only the package's own :class:`~sklearn_bnn.nets.MLP` (exactly that class: a subclass may
    change ``forward``) made of ``Linear`` layers with trainable weights and biases, separated
    by ReLU or identity activations (dropout, a no-op in the evaluation mode the targets use,
    is allowed). Returns, per hidden layer, the flat-vector offsets and sizes
    ``(w_start, h, n_in, b_start, next_w_start, n_out)``.
    """
    from ..nets import MLP  # nets imports no target: no cycle

    module = network.module
    if type(module) is not MLP:
        return None
    linears = [m for m in module if isinstance(m, nn.Linear)]
    others = [m for m in module if not isinstance(m, nn.Linear | nn.Dropout)]
    if len(linears) < 2 or not all(isinstance(m, HOMOGENEOUS) for m in others):
        return None
    offsets = network.offsets
    index = {id(p): n for n, p in module.named_parameters()}
    layers = []
    for lin, nxt in zip(linears[:-1], linears[1:], strict=True):
        params = (lin.weight, lin.bias, nxt.weight)
        if any(p is None or index.get(id(p)) not in offsets for p in params):
            return None  # a frozen or missing tensor: not in the flat vector
        h, n_in = lin.weight.shape
        layers.append(
            (
                offsets[index[id(lin.weight)]],
                h,
                n_in,
                offsets[index[id(lin.bias)]],
                offsets[index[id(nxt.weight)]],
                nxt.weight.shape[0],
            )
        )
    return layers


def sample_log_gig(
    p: torch.Tensor, a: torch.Tensor, b: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Exact draws of v = log u, u ~ GIG(p, a, b) (float64, elementwise, broadcast together).

    The density of v, exp(h(v)) with h(v) = p v - (a e^v + b e^-v) / 2, is log-concave, and is
    drawn exactly by :func:`sample_log_concave` at the mode
    log u* = log((p + sqrt(p^2 + a b)) / a), where -h'' = sqrt(p^2 + a b).

    Where the GIG is improper (a = 0 with p >= 0, b = 0 with p <= 0) or a parameter is not
    finite, v is 0: the identity, which any distribution leaves invariant.
    """
    p, a, b = torch.broadcast_tensors(*(t.to(torch.float64) for t in (p, a, b)))
    ok = torch.isfinite(a) & torch.isfinite(b) & torch.isfinite(p) & (a >= 0) & (b >= 0)
    ok &= ((a > 0) | (p < 0)) & ((b > 0) | (p > 0))
    one = torch.ones_like(a)
    p, a, b = torch.where(ok, p, one), torch.where(ok, a, one), torch.where(ok, b, one)
    log_a, log_b = torch.log(a), torch.log(b)

    def h(v):
        return p * v - 0.5 * (torch.exp(log_a + v) + torch.exp(log_b - v))

    def h_and_slope(v):  # the two exponentials once for both
        up, down = torch.exp(log_a + v).mul_(0.5), torch.exp(log_b - v).mul_(0.5)
        return torch.sub(p * v, up).sub_(down), torch.sub(p, up).add_(down)

    s = torch.sqrt(p * p + a * b)  # -h''(v*) = (a u* + b / u*) / 2 at the mode
    mode = torch.where(  # log u*, u* = (p + s) / a = b / (s - p), without cancellation
        p >= 0, torch.log(p + s) - log_a, log_b - torch.log(s - p)
    )
    return sample_log_concave(h, h_and_slope, mode, s, ok, generator)


def sample_log_concave(
    h, h_and_slope, mode, curvature, ok, generator: torch.Generator
) -> torch.Tensor:
    """Exact draws from the log-concave densities exp(h(v)), elementwise (float64).

    Rejection from the three-piece envelope of a log-concave density (Devroye 1986,
    *Non-Uniform Random Variate Generation*, §VII.2; the construction Devroye 2014, *Stat.
    Comput.* 24:239, uses for the GIG): flat at the mode's height between two points
    v_- < v* < v_+ where h has dropped by about 1, and the tangent lines of h at v_- and v_+
    beyond them. Concavity makes it an envelope wherever v_- and v_+ land (a few Newton steps
    from the quadratic approximation place them), so every accepted draw is exact; acceptance
    is about 0.5-0.7 a round. The rounds are drawn vectorised, and each element keeps its
    first accepted proposal: the draw a round-by-round loop would return. On the CPU they come
    :data:`ROUNDS_PER_PASS` at a time, and the passes stop once every element has its draw
    (a host read, free there: nearly always after the first); elsewhere all
    ``ROUNDS_PER_PASS * PASSES`` rounds are one pass, with no host read to decide when to
    stop (in passes of :data:`ROUNDS_PER_PASS` where one would exceed :data:`MAX_PASS_SIZE`
    numbers). An element left after the 100 rounds, with probability below 1e-30, stays at
    v = 0.

    Parameters
    ----------
    h, h_and_slope : callable
        The log density (up to a constant), and the pair (h, h'), elementwise on a tensor
        shaped like ``mode`` or with leading dimensions before that shape; h strictly concave
        with h' > 0 far left and < 0 far right.
    mode : tensor
        The maximiser of h.
    curvature : tensor
        -h''(mode) > 0.
    ok : bool tensor
        Where to draw; elsewhere the result is 0.
    """
    top = h(mode)
    half = torch.sqrt(2.0 / curvature)  # where the quadratic approximation has dropped by 1
    # both edges at once, right then left, along a leading dimension (half the operations)
    sign = mode.new_ones((2,) + (1,) * mode.ndim)
    sign[1] = -1.0
    near, far = 1e-3 * half, 50.0 * half
    v = mode + sign * half
    for _ in range(4):  # Newton on h(v) = top - 1; any v on the right side is valid
        value, slope = h_and_slope(v)
        step = (value - top + 1.0) / slope
        v = torch.where(torch.isfinite(step), v - step, v)
        v = mode + sign * torch.clamp(sign * (v - mode), near, far)
    value, slope = h_and_slope(v)
    right, left = v
    h_r, h_l = value - top
    slope_r, slope_l = slope  # < 0 and > 0 by strict concavity
    mass_mid = right - left
    mass_r = torch.exp(h_r) / -slope_r
    mass_l = torch.exp(h_l) / slope_l
    total = mass_mid + mass_r + mass_l

    out = torch.zeros_like(mode)
    todo = ok.clone()
    opts = dict(generator=generator, dtype=mode.dtype, device=mode.device)
    reads = host_reads_are_free(mode)
    rounds, passes = ROUNDS_PER_PASS, PASSES
    if not reads and mode.numel() * ROUNDS_PER_PASS * PASSES <= MAX_PASS_SIZE:
        rounds, passes = ROUNDS_PER_PASS * PASSES, 1  # a quarter of the kernels on a GPU
    shape = (rounds, *mode.shape)
    for _ in range(passes):
        pick = torch.rand(shape, **opts) * total
        u = torch.rand(shape, **opts)
        e = -torch.log1p(-torch.rand(shape, **opts))  # Exp(1)
        in_mid = pick < mass_mid
        in_right = ~in_mid & (pick < mass_mid + mass_r)
        v = torch.where(
            in_mid,
            left + u * mass_mid,
            torch.where(in_right, right + e / -slope_r, left - e / slope_l),
        )
        envelope = torch.where(
            in_mid,
            torch.zeros_like(v),
            torch.where(in_right, h_r + slope_r * (v - right), h_l + slope_l * (v - left)),
        )
        accept = torch.log(torch.rand(shape, **opts)) < h(v) - top - envelope
        accept &= torch.isfinite(v)
        first = accept.to(torch.uint8).argmax(0, keepdim=True)  # the first accepted round
        take = todo & accept.any(0)
        out = torch.where(take, v.gather(0, first).squeeze(0), out)
        todo &= ~take
        if reads and not bool(todo.any()):
            break
    return out


class _RescaleBlock:
    """What the two rescaling blocks share: a Gibbs block that moves the position and has no
    values of its own (width 0). A subclass draws the move in ``move(target, state, generator)
    -> (empty values (C, 0), moved position (C, D))``."""

    #: Moves the position: a :class:`~sklearn_bnn.samplers.gibbs.BlockSequence` passes the
    #: moved state on, and kernels confined to a box (constrained and bridged HMC) drop it.
    moves_position = True
    #: No values to start with: a chain's first transition needs no draw of the block.
    initial_draw = False

    def __init__(self, layers):
        self.layers = [tuple(int(x) for x in layer) for layer in layers]

    def update(self, target, state, generator: torch.Generator):
        """The move, then the state's log density and gradient at the moved position (one
        gradient)."""
        values, moved = self.move(target, state, generator)
        log_prob, grad = target.value_and_grad(moved)
        return values, type(state)(moved, log_prob, grad)

    def condition(self, target, values: torch.Tensor):
        """The target itself: the block has no values to condition on."""
        return target

    def stats(self, values: torch.Tensor) -> dict:
        """None: the move's outcome is the position itself."""
        return {}


class UnitRescaleGibbs(_RescaleBlock):
    """Each hidden unit's scale drawn from its conditional along the function-preserving orbit.

    A Gibbs block (:mod:`sklearn_bnn.samplers.gibbs`) that moves the position and has no values
    of its own (width 0): per hidden layer, in order, every unit j and chain draws u = c^2 from
    GIG(k/2, 2 A_j / T, 2 B_j / T) (see the module docstring for the derivation; Liu & Sabatti
    2000) and the unit's incoming row and bias are multiplied by c, its outgoing column by 1/c.
    The network's function, hence the likelihood, is unchanged; the prior's precisions (one row
    per chain when a hierarchical prior's Gibbs block drew them) and the temperature T are the
    target's. The state's log density and gradient are re-evaluated afterwards (one gradient)
    by :meth:`update`, or by the last block of a :class:`~sklearn_bnn.samplers.gibbs.
    BlockSequence` when this block comes before it (:meth:`move`).

    Parameters
    ----------
    layers : list of tuple
        Per hidden layer ``(w_start, h, n_in, b_start, next_w_start, n_out)``: where its weight
        (h, n_in), bias (h,) and the next layer's weight (n_out, h) start in the flat vector
        (:func:`homogeneous_layers`).

    Examples
    --------
    >>> from sklearn_bnn.nets import MLP
    >>> from sklearn_bnn.targets import FunctionalNetwork
    >>> block = UnitRescaleGibbs.for_network(FunctionalNetwork(MLP(3, (4,), 2)))
    >>> block.layers
    [(0, 4, 3, 12, 16, 2)]
    >>> UnitRescaleGibbs.for_network(FunctionalNetwork(MLP(3, (4,), 2, activation="tanh")))
    """

    @classmethod
    def for_network(cls, network) -> UnitRescaleGibbs | None:
        """The block of ``network`` (a :class:`~sklearn_bnn.targets.FunctionalNetwork`), or
        None when its module is not a positively homogeneous MLP (:func:`homogeneous_layers`)."""
        layers = homogeneous_layers(network)
        return None if not layers else cls(layers)

    def _precision(self, target, theta: torch.Tensor) -> torch.Tensor:
        tau = target.prior_density.precision
        return tau.to(theta.device, torch.float64).expand(theta.shape)

    def move(self, target, state, generator: torch.Generator):
        """The rescaled position (C, D), every unit's scale drawn from ``generator``, and the
        empty values (C, 0); the state's cached density is not re-evaluated."""
        theta = state.position.detach()
        C = theta.shape[0]
        tau = self._precision(target, theta)
        temperature = float(getattr(target, "temperature", 1.0))
        x = theta.to(torch.float64).clone()
        for w0, h, n_in, b0, v0, n_out in self.layers:
            W = x[:, w0 : w0 + h * n_in].view(C, h, n_in)
            bias = x[:, b0 : b0 + h]
            V = x[:, v0 : v0 + n_out * h].view(C, n_out, h)
            A = 0.5 * (
                (tau[:, w0 : w0 + h * n_in].view(C, h, n_in) * W.square()).sum(-1)
                + tau[:, b0 : b0 + h] * bias.square()
            )
            B = 0.5 * (tau[:, v0 : v0 + n_out * h].view(C, n_out, h) * V.square()).sum(1)
            k = torch.full_like(A, 0.5 * (n_in + 1 - n_out))
            log_u = sample_log_gig(k, 2 * A / temperature, 2 * B / temperature, generator)
            c = torch.exp(0.5 * log_u)  # (C, h)
            W.mul_(c[:, :, None])
            bias.mul_(c)
            V.div_(c[:, None, :])
        moved = x.to(theta.dtype)
        finite = torch.isfinite(moved).all(-1, keepdim=True)  # never hand on a NaN or inf
        moved = torch.where(finite, moved, theta)
        return theta.new_zeros((C, 0)), moved


class LayerRescaleGibbs(_RescaleBlock):
    """Each hidden layer's common scale, with the hierarchical prior's precisions integrated out.

    Under ``HierarchicalPrior`` (one precision tau_t ~ Gamma(alpha, beta) per tensor) the slow
    direction is joint: every unit of hidden layer l scaled by one c (incoming weights and
    biases times c, outgoing weights over c) with tau of those tensors divided and multiplied by
    c^2 leaves the likelihood and every tau_t |w_t|^2 unchanged, and a Gibbs sampler that
    alternates tau | w with moves of w given tau crosses it by a random walk (Liu & Wu 1999,
    *JASA* 94:1264, on parameter expansion for such directions). This block draws c from the
    conditional of the *marginal* density of the weights, tau integrated out, along the orbit
    (Liu & Sabatti 2000): tempered by T, the marginal prior of tensor t is
    (beta + |w_t|^2 / 2)^-alpha'_t with alpha'_t = (alpha - 1 + n_t/2) / T + 1 (the Gamma
    conditional :class:`~sklearn_bnn.targets.PriorPrecisionGibbs` draws from), so v = log c^2
    has the log-concave density

        h(v) = K v / 2 - sum_up alpha'_t softplus(v + s_t) - sum_down alpha'_t softplus(s_t - v),

    s_t = log(|w_t|^2 / (2 beta)), K = n_up - n_down the coordinates scaled up minus down (the
    Jacobian c^K and the Haar measure dc / c), drawn exactly (:func:`sample_log_concave`, its
    mode by bisection on h'). Followed at once by the exact draw of every tau given the moved
    weights, the pair is a draw of (w, tau) that leaves the joint posterior invariant
    (partially collapsed Gibbs, van Dyk & Park 2008, *JASA* 103:790): the block must come
    directly before the precision block and uses no precision itself. Where the orbit's
    density is improper (h' of one sign: a warm posterior, T > 1, can make it so), the layer
    stays as it is.

    Parameters
    ----------
    layers : list of tuple
        As :class:`UnitRescaleGibbs`.
    alpha, beta : float
        The Gamma hyperprior of every tensor's precision.
    """

    def __init__(self, layers, alpha: float, beta: float):
        super().__init__(layers)
        self.alpha, self.beta = float(alpha), float(beta)

    def move(self, target, state, generator: torch.Generator):
        """The position with every hidden layer's scale drawn in turn, and the empty values."""
        theta = state.position.detach()
        C = theta.shape[0]
        T = float(getattr(target, "temperature", 1.0))
        x = theta.to(torch.float64).clone()
        for w0, h, n_in, b0, v0, n_out in self.layers:
            blocks = [
                (x[:, w0 : w0 + h * n_in], 1.0),
                (x[:, b0 : b0 + h], 1.0),
                (x[:, v0 : v0 + n_out * h], -1.0),
            ]
            log_c2 = self._draw(blocks, generator, T)
            c = torch.exp(0.5 * log_c2)[:, None]
            blocks[0][0].mul_(c)
            blocks[1][0].mul_(c)
            blocks[2][0].div_(c)
        moved = x.to(theta.dtype)
        moved = torch.where(torch.isfinite(moved).all(-1, keepdim=True), moved, theta)
        return theta.new_zeros((C, 0)), moved

    def _draw(self, blocks, generator, T):
        """log c^2 (C,) for one layer; ``blocks``: (coordinates (C, n_t), +1 up / -1 down)."""
        sum_sq = torch.stack([w.square().sum(-1) for w, _ in blocks], -1)  # (C, 3)
        shift = torch.log(sum_sq / (2 * self.beta))  # -inf for an all-zero tensor: no term
        half_k = 0.5 * sum(sign * w.shape[1] for w, sign in blocks)
        # (+1, +1, -1) and alpha'_t = (alpha - 1 + n_t / 2) / T + 1 per tensor, filled on the
        # device rather than copied from the host
        signs = torch.ones_like(shift[0])
        signs[2] = -1.0
        power = torch.stack(
            [
                torch.full_like(shift[0, 0], (self.alpha - 1.0 + 0.5 * w.shape[1]) / T + 1.0)
                for w, _ in blocks
            ]
        )

        def dh(v):
            return half_k - (signs * power * torch.sigmoid(signs * v[..., None] + shift)).sum(-1)

        def h(v):
            z = signs * v[..., None] + shift
            return half_k * v - (power * torch.nn.functional.softplus(z)).sum(-1)

        # proper only where h' falls from > 0 (far left) to < 0 (far right)
        up, down = (signs > 0) & torch.isfinite(shift), (signs < 0) & torch.isfinite(shift)
        far_right = half_k - (power * up).sum(-1)
        far_left = half_k + (power * down).sum(-1)
        ok = (far_right < 0) & (far_left > 0) & torch.isfinite(sum_sq).all(-1)
        lo = torch.full_like(far_right, -80.0)
        hi = torch.full_like(far_right, 80.0)
        for _ in range(60):  # bisection on the decreasing h'
            mid = 0.5 * (lo + hi)
            rising = dh(mid) > 0
            lo, hi = torch.where(rising, mid, lo), torch.where(rising, hi, mid)
        mode = 0.5 * (lo + hi)
        z = signs * mode[..., None] + shift
        sig = torch.sigmoid(z)
        curvature = (power * sig * (1 - sig)).sum(-1)
        ok &= (curvature > 0) & torch.isfinite(mode) & (mode.abs() < 79.0)
        mode = torch.where(ok, mode, torch.zeros_like(mode))
        curvature = torch.where(ok, curvature, torch.ones_like(curvature))
        return sample_log_concave(h, lambda v: (h(v), dh(v)), mode, curvature, ok, generator)
