"""Learned dropout rates (``dropout="auto"``): concrete dropout (Gal, Hron & Kendall 2017).

In training every ``nn.Dropout`` of the network is replaced by :class:`LearnedDropout`, the
Concrete relaxation of its Bernoulli mask, whose rate gets gradients from the data term and from
:class:`LearnedDropoutPenalty` (the terms of the KL that depend on the rate); after training the
network gets ``nn.Dropout`` layers back at the learned rates (:func:`with_bernoulli_dropout`),
so prediction draws exact Bernoulli masks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# dropout="auto": the rate every learned dropout layer starts from, and the temperature of the
# Concrete relaxation (Gal, Hron & Kendall 2017, who use 0.1)
INIT_DROPOUT = 0.1
CONCRETE_TEMPERATURE = 0.1

class LearnedDropout(nn.Module):
    """Dropout whose rate p is learned: the Concrete relaxation of the Bernoulli mask.

    In training every input gets ``(1 - z) / (1 - p)`` with ``z = sigmoid((logit p + logit u)
    / t)``, ``u ~ U(0, 1)`` (Gal, Hron & Kendall 2017), so that p gets gradients; in eval mode
    (skorch's validation) the layer is the identity, dropout's expectation. After training the
    layer is replaced by ``nn.Dropout(p)``: prediction draws exact Bernoulli masks.
    """

    def __init__(self, p: float, width: int, temperature: float = CONCRETE_TEMPERATURE):
        super().__init__()
        self.p_logit = nn.Parameter(torch.logit(torch.tensor(float(p))))
        self.width = int(width)
        self.temperature = float(temperature)

    @property
    def p(self) -> torch.Tensor:
        return torch.sigmoid(self.p_logit)

    def forward(self, x):
        if not self.training:
            return x
        tiny = torch.finfo(x.dtype).eps
        u = torch.rand_like(x).clamp(tiny, 1.0 - tiny)
        drop = torch.sigmoid((self.p_logit + torch.logit(u)) / self.temperature)
        return x * (1.0 - drop) / (1.0 - self.p)


def with_learned_dropout(net: nn.Sequential) -> nn.Sequential:
    """``net`` with each ``nn.Dropout`` replaced by a :class:`LearnedDropout` starting at its
    rate (the other layers are shared, not copied)."""
    layers, width = [], None
    for layer in net:
        if isinstance(layer, nn.Linear):
            width = layer.out_features
        if isinstance(layer, nn.Dropout):
            layer = LearnedDropout(layer.p, width).to(net[0].weight.dtype)
        layers.append(layer)
    return nn.Sequential(*layers)


def with_bernoulli_dropout(trained: nn.Sequential, net: nn.Sequential) -> nn.Sequential:
    """``net`` (the network built for the fit) given the trained layers of ``trained`` (its
    :func:`with_learned_dropout` form) and, for each ``nn.Dropout``, the learned rate."""
    for mine, theirs in zip(net, trained, strict=True):
        if isinstance(theirs, LearnedDropout):
            mine.p = float(theirs.p.detach())
        else:
            mine.load_state_dict(theirs.state_dict())
    return net


def dropout_rates(net: nn.Sequential) -> list[float]:
    """The rate of every dropout layer of ``net``, input side first."""
    return [float(m.p) for m in net if isinstance(m, nn.Dropout)]


class LearnedDropoutPenalty:
    """The terms of the KL of eq. 3.21 that depend on a learned rate, per training point.

    For each learned dropout layer feeding a ``Linear`` of weight ``W`` (``K`` inputs):
    ``lambda ||W||^2 / (2 N (1 - p)) - K H(p) / N``, with ``H(p) = -p log p - (1 - p) log(1 - p)``
    (Gal, Hron & Kendall 2017, eq. 3; ``W`` the weight applied to the inverted-dropout input
    ``x z / (1 - p)``, i.e. ``(1 - p)`` times Gal & Ghahramani's ``M``). The data term
    pulls p down (the mask's noise costs fit, the more so the more data there are), the entropy
    up towards 1/2 with a weight 1/N: the learned rate falls as the data grow.
    """

    def __init__(self, prior_precision: float, n_train: int):
        self.lam = float(prior_precision)
        # the number of training rows, or the sum of their weights
        self.n = n_train if isinstance(n_train, float) else int(n_train)

    def __call__(self, module) -> torch.Tensor:
        net = module if isinstance(module, nn.Sequential) else module.net
        total, pending = 0.0, None
        for layer in net:
            if isinstance(layer, LearnedDropout):
                pending = layer
            elif isinstance(layer, nn.Linear) and pending is not None:
                p = pending.p
                log_p, log_q = F.logsigmoid(pending.p_logit), F.logsigmoid(-pending.p_logit)
                entropy = -(p * log_p + (1.0 - p) * log_q)
                total = total - pending.width * entropy / self.n
                if self.lam > 0:
                    total = total + self.lam * layer.weight.square().sum() / (
                        2 * self.n * (1.0 - p)
                    )
                pending = None
        return total

