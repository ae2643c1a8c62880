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

__all__ = ["MLP", "make_mlp", "build_module", "ACTIVATIONS"]

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
            f"hidden_layer_sizes must be a sequence of positive integers, got {hidden_layer_sizes!r}."
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
        return make_mlp(n_in, check_hidden_layer_sizes(hidden_layer_sizes), n_out, activation, dropout)
    if isinstance(module, nn.Module):
        return copy.deepcopy(module)
    if inspect.isclass(module) and not issubclass(module, nn.Module):
        raise ValueError(f"module must be an nn.Module subclass, a factory or an instance, got {module!r}.")
    if callable(module):
        net = module(n_in, n_out)
        if not isinstance(net, nn.Module):
            raise ValueError(
                f"module factory {module!r} returned {type(net).__name__}, expected an nn.Module."
            )
        return net
    raise ValueError(f"module must be an nn.Module subclass, a factory or an instance, got {module!r}.")


def count_parameters(module: nn.Module) -> int:
    """Number of trainable scalars in ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def module_device_dtype(module: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Device and floating dtype of the first parameter (CPU/float32 if none)."""
    for p in module.parameters():
        return p.device, p.dtype
    return torch.device("cpu"), torch.float32
