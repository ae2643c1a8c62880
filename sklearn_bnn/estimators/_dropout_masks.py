"""Dropout masks drawn outside the network, and MC dropout's chunked prediction.

:func:`draw_masks` draws one scaled Bernoulli mask per dropout layer from a given generator, and
:func:`forward_with_masks` runs the network with them, so a prediction (or the loss-calibrated
objective) controls its masks instead of relying on ``nn.Dropout``'s draws from torch's global
generator. :func:`masked_output_samples` is MC dropout's prediction: ``n_draws`` networks, one
mask each for all rows, evaluated by chunks of rows of bounded size.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["draw_masks", "forward_with_masks", "masked_output_samples"]

# Upper bound on the elements of one hidden activation tensor during prediction (16 MB of
# float32: benchmarks/speed/predict_memory.py --samples; 2**24 was slower as well as 4 times
# larger).
PREDICT_CHUNK_ELEMENTS = 2**22


def draw_masks(net: nn.Sequential, prefix: tuple, generator: torch.Generator, like: torch.Tensor):
    """One scaled Bernoulli mask per dropout layer of ``net``, of shape ``(*prefix, width)``.

    Entries are ``z / (1 - p)`` with ``z ~ Bernoulli(1 - p)`` (inverted dropout), drawn from
    ``generator`` only (torch's global generator when it is None).
    """
    masks, width = [], None
    for layer in net:
        if isinstance(layer, nn.Linear):
            width = layer.out_features
        elif isinstance(layer, nn.Dropout) and layer.p > 0:
            keep = 1.0 - layer.p
            z = torch.empty((*prefix, width), device=like.device, dtype=like.dtype)
            masks.append(z.bernoulli_(keep, generator=generator) / keep)
    return masks


def forward_with_masks(net: nn.Sequential, x: torch.Tensor, masks) -> torch.Tensor:
    """Run ``net`` with the given dropout ``masks`` (broadcast against the hidden activations)."""
    masks = iter(masks)
    h = x
    for layer in net:
        if isinstance(layer, nn.Dropout):
            if layer.p > 0:
                h = h * next(masks)
        else:
            h = layer(h)
    return h


def masked_output_samples(
    net: nn.Sequential,
    Xt: torch.Tensor,
    n_draws: int,
    seed: int,
    width: int,
    reduce=None,
    out: torch.Tensor | None = None,
    transform=None,
) -> torch.Tensor:
    """Outputs of ``net`` on ``Xt`` for ``n_draws`` dropout draws: (n_draws, n, n_out), float64
    on the CPU.

    Every draw uses one mask for all rows, from a generator on ``Xt``'s device seeded with
    ``seed``. The rows go by chunks whose hidden activations hold at most
    ``PREDICT_CHUNK_ELEMENTS`` elements (``width``: the widest layer); ``reduce`` maps each
    chunk's outputs (n_draws, rows, n_out) to (rows, ...) before the chunks are joined. With
    ``out``, a preallocated (n_draws, n, n_out) tensor, each chunk's float64 outputs, mapped by
    ``transform`` when given (e.g. a softmax over the last axis), are written into its rows of
    ``out`` instead, and ``out`` is returned: no second block of the result's size is held.
    """
    generator = torch.Generator(Xt.device).manual_seed(seed)
    T = n_draws
    with torch.no_grad():
        masks = draw_masks(net, (T, 1), generator, Xt)
        rows = max(1, PREDICT_CHUNK_ELEMENTS // (T * width))
        chunks, start = [], 0
        for chunk in Xt.split(rows):
            f = forward_with_masks(net, chunk, masks).expand(T, len(chunk), -1)
            f = f.cpu().double()
            if out is not None:
                out[:, start : start + len(chunk)].copy_(f if transform is None else transform(f))
                start += len(chunk)
            else:
                chunks.append(f if reduce is None else reduce(f))
    if out is not None:
        return out
    return torch.cat(chunks, dim=1 if reduce is None else 0)
