"""Network factories and building blocks.

Estimators take either ``hidden_layer_sizes`` and ``activation`` (a standard multilayer
perceptron, as :class:`sklearn.neural_network.MLPClassifier`) or ``module``: a user's
``nn.Module`` subclass, a factory ``(n_features_in, n_outputs) -> nn.Module`` or an instance
(deep-copied at fit, never mutated).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .losses import n_offdiag

__all__ = [
    "MLP",
    "make_mlp",
    "build_module",
    "ACTIVATIONS",
    "ConcreteDropout",
    "CholeskyGaussianHead",
    "PlanNet",
]

ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "logistic": nn.Sigmoid,
    "sigmoid": nn.Sigmoid,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "elu": nn.ELU,
    "identity": nn.Identity,
}


class MLP(nn.Sequential):
    """A multilayer perceptron: Linear, activation, (dropout), ..., Linear.

    Parameters
    ----------
    n_in : int
        Number of input features.
    hidden_layer_sizes : sequence of int
        Width of each hidden layer (may be empty: a linear model).
    n_out : int
        Number of outputs.
    activation : str
        One of :data:`ACTIVATIONS`.
    dropout : float
        Dropout probability after each hidden activation (0 for none).

    Examples
    --------
    >>> net = MLP(4, (16, 16), 3)
    >>> net(torch.zeros(2, 4)).shape
    torch.Size([2, 3])
    """

    def __init__(
        self,
        n_in: int,
        hidden_layer_sizes: Sequence[int],
        n_out: int,
        activation: str = "relu",
        dropout: float = 0.0,
    ):
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}."
            )
        layers: list[nn.Module] = []
        width = n_in
        for size in hidden_layer_sizes:
            layers.append(nn.Linear(width, int(size)))
            layers.append(ACTIVATIONS[activation]())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = int(size)
        layers.append(nn.Linear(width, n_out))
        super().__init__(*layers)


def make_mlp(
    n_in: int,
    hidden_layer_sizes: Sequence[int],
    n_out: int,
    activation: str = "relu",
    dropout: float = 0.0,
) -> MLP:
    """Build an :class:`MLP` (see its parameters)."""
    return MLP(n_in, hidden_layer_sizes, n_out, activation=activation, dropout=dropout)


def check_hidden_layer_sizes(hidden_layer_sizes) -> tuple[int, ...]:
    """Validate ``hidden_layer_sizes`` (an int or a sequence of positive ints)."""
    if isinstance(hidden_layer_sizes, int | float) and not isinstance(hidden_layer_sizes, bool):
        hidden_layer_sizes = (hidden_layer_sizes,)
    try:
        sizes = tuple(hidden_layer_sizes)
    except TypeError:
        raise ValueError(
            "hidden_layer_sizes must be a sequence of positive integers, "
            f"got {hidden_layer_sizes!r}."
        ) from None
    for s in sizes:
        if isinstance(s, bool) or not float(s).is_integer() or s < 1:
            raise ValueError(
                "hidden_layer_sizes must be a sequence of positive integers, "
                f"got {hidden_layer_sizes!r}."
            )
    return tuple(int(s) for s in sizes)


def build_module(
    module,
    n_in: int,
    n_out: int,
    hidden_layer_sizes=(100,),
    activation: str = "relu",
    dropout: float = 0.0,
) -> nn.Module:
    """Build the network an estimator uses.

    Parameters
    ----------
    module : None, nn.Module subclass, callable or nn.Module instance
        ``None`` builds :class:`MLP` from ``hidden_layer_sizes``/``activation``. A subclass of
        ``nn.Module`` or a factory is called as ``module(n_in, n_out)``. An instance is deep-copied.
    n_in, n_out : int
        Input and output widths.

    Returns
    -------
    nn.Module
        A fresh module; the argument is never mutated.
    """
    if module is None:
        return make_mlp(
            n_in, check_hidden_layer_sizes(hidden_layer_sizes), n_out, activation, dropout
        )
    if isinstance(module, nn.Module):
        return copy.deepcopy(module)
    if inspect.isclass(module) and not issubclass(module, nn.Module):
        raise ValueError(
            f"module must be an nn.Module subclass, a factory or an instance, got {module!r}."
        )
    if callable(module):
        net = module(n_in, n_out)
        if not isinstance(net, nn.Module):
            raise ValueError(
                f"module factory {module!r} returned {type(net).__name__}, expected an nn.Module."
            )
        return net
    raise ValueError(
        f"module must be an nn.Module subclass, a factory or an instance, got {module!r}."
    )


class ConcreteDropout(nn.Module):
    """Dropout with a learned rate on the input of a layer (Gal, Hron & Kendall 2017).

    The Bernoulli keep/drop mask is replaced by its Concrete (relaxed Bernoulli) relaxation
    ``z = sigmoid((logit p + logit u) / t)``, ``u ~ U(0, 1)``, so that the drop probability ``p``
    gets gradients; inputs are scaled by ``(1 - z) / (1 - p)``. This is the layer plan-net stacks
    (Cobb 2019, §7.4.2, and §3.2.5 for the ELBO it optimises). The mask is always sampled: the
    layer is meant for Monte Carlo prediction.

    Parameters
    ----------
    layer : nn.Module
        The layer fed with the dropped-out input (e.g. ``nn.Linear``).
    in_features : int
        Width of that input (the ``K`` of the dropout regulariser).
    temperature : float
        Temperature ``t`` of the relaxation (0.1 in the paper).
    init_p : float
        Initial drop probability.

    Examples
    --------
    >>> cd = ConcreteDropout(nn.Linear(3, 2), 3)
    >>> cd(torch.ones(4, 3)).shape, round(cd.p.item(), 3)
    (torch.Size([4, 2]), 0.1)
    """

    def __init__(
        self, layer: nn.Module, in_features: int, temperature: float = 0.1, init_p: float = 0.1
    ):
        super().__init__()
        if not 0.0 < init_p < 1.0:
            raise ValueError(f"init_p must be in (0, 1), got {init_p!r}.")
        self.layer = layer
        self.in_features = int(in_features)
        self.temperature = float(temperature)
        self.p_logit = nn.Parameter(torch.logit(torch.tensor(float(init_p))))

    @property
    def p(self) -> torch.Tensor:
        """The current drop probability."""
        return torch.sigmoid(self.p_logit)

    def forward(
        self, x: torch.Tensor, generator: torch.Generator | None = None, share_mask: bool = False
    ):
        """Drop out ``x`` and apply the layer.

        With ``share_mask=True`` one mask is drawn per leading index and shared by every row
        (axis -2) of ``x``: one weight realisation per Monte Carlo pass.
        """
        shape = (*x.shape[:-2], 1, x.shape[-1]) if share_mask else x.shape
        eps = torch.finfo(x.dtype).eps
        u = torch.rand(shape, generator=generator, device=x.device, dtype=x.dtype)
        u = u.clamp(eps, 1.0 - eps)
        drop = torch.sigmoid((self.p_logit + torch.logit(u)) / self.temperature)
        return self.layer(x * (1.0 - drop) / (1.0 - self.p))

    def regularizer(self, weight_regularizer: float, dropout_regularizer: float) -> torch.Tensor:
        """``wr ||W||^2 / (1 - p) + dr K (p log p + (1 - p) log(1 - p))``.

        The concrete-dropout regulariser (Gal, Hron & Kendall 2017, eq. 3). ``W`` is every parameter
        of the wrapped layer; with ``wr = l^2 / N`` and ``dr = 2 / N`` this is twice the KL term of
        the ELBO per data point, matching the scale of Cobb (2019), eq. 7.1.
        """
        square = sum(w.square().sum() for w in self.layer.parameters())
        log_p, log_q = F.logsigmoid(self.p_logit), F.logsigmoid(-self.p_logit)
        neg_entropy = self.p * log_p + (1.0 - self.p) * log_q
        return (
            weight_regularizer * square / (1.0 - self.p)
            + dropout_regularizer * self.in_features * neg_entropy
        )


class CholeskyGaussianHead(nn.Module):
    """Linear output layer for a full-covariance Gaussian (Cobb 2019, §7.4.1).

    Outputs a mean ``mu`` (D), the log-diagonal of a lower-triangular ``L`` (D; ``l_dd`` is its
    ``exp``) and the ``D (D - 1) / 2`` strictly-lower entries; the precision is ``L L^T``.
    ``diagonal=True`` drops the off-diagonal entries: the heteroscedastic Gaussian.

    Examples
    --------
    >>> mean, log_diag, off = CholeskyGaussianHead(8, 3)(torch.zeros(5, 8))
    >>> mean.shape, log_diag.shape, off.shape
    (torch.Size([5, 3]), torch.Size([5, 3]), torch.Size([5, 3]))
    """

    def __init__(self, in_features: int, n_targets: int, diagonal: bool = False):
        super().__init__()
        self.n_targets = int(n_targets)
        self.n_off = 0 if diagonal else n_offdiag(self.n_targets)
        self.linear = nn.Linear(in_features, 2 * self.n_targets + self.n_off)

    def forward(self, x: torch.Tensor):
        out = self.linear(x)
        d = self.n_targets
        return out[..., :d], out[..., d : 2 * d], out[..., 2 * d :]


class PlanNet(nn.Module):
    """Concrete-dropout MLP with a Cholesky Gaussian head: the plan-net of Cobb 2019, Fig. 7.3.

    Every hidden ``Linear`` and the head take their input through a :class:`ConcreteDropout`.

    Parameters
    ----------
    n_in : int
    hidden_layer_sizes : sequence of int
        (1024, 1024, 1024, 1024) in the thesis.
    n_targets : int
    activation : str
        One of :data:`ACTIVATIONS`.
    diagonal : bool
        Heteroscedastic (diagonal precision) head instead of the full one.
    temperature, init_p : float
        Passed to every :class:`ConcreteDropout`.

    Examples
    --------
    >>> net = PlanNet(4, (16, 16), 2)
    >>> [t.shape[-1] for t in net(torch.zeros(3, 4))]
    [2, 2, 1]
    """

    def __init__(
        self,
        n_in: int,
        hidden_layer_sizes: Sequence[int],
        n_targets: int,
        activation: str = "relu",
        diagonal: bool = False,
        temperature: float = 0.1,
        init_p: float = 0.1,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}."
            )
        self.activation = ACTIVATIONS[activation]()
        widths = [int(n_in), *(int(w) for w in hidden_layer_sizes)]
        self.hidden = nn.ModuleList(
            ConcreteDropout(nn.Linear(a, b), a, temperature, init_p)
            for a, b in zip(widths[:-1], widths[1:], strict=True)
        )
        self.head = ConcreteDropout(
            CholeskyGaussianHead(widths[-1], n_targets, diagonal), widths[-1], temperature, init_p
        )

    def forward(
        self, x: torch.Tensor, generator: torch.Generator | None = None, share_mask: bool = False
    ):
        """``(mean, log_diag, off_diag)``; see :class:`ConcreteDropout` for ``share_mask``."""
        for layer in self.hidden:
            x = self.activation(layer(x, generator, share_mask))
        return self.head(x, generator, share_mask)

    def regularizer(self, weight_regularizer: float, dropout_regularizer: float) -> torch.Tensor:
        """Sum of the :meth:`ConcreteDropout.regularizer` of every layer."""
        return sum(
            m.regularizer(weight_regularizer, dropout_regularizer)
            for m in self.modules()
            if isinstance(m, ConcreteDropout)
        )

    def dropout_rates(self) -> list[float]:
        """Learned drop probability of each layer, input side first."""
        return [m.p.item() for m in self.modules() if isinstance(m, ConcreteDropout)]
