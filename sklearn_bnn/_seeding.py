"""One seeding scheme: every random choice of a fit comes from one ``SeedSequence``.

A fit turns ``random_state`` into one :class:`numpy.random.SeedSequence` (:func:`root_seed`)
and hands each consumer its own child, named by purpose (:func:`child`: ``"network"``,
``"sampling"``, ``"data"``, ...) and then by index (``child(seq, c)``: chain c, box b, member
k). A child depends only on the root and its path of names and indices, never on the order in
which children are asked for, so adding a consumer does not move the others' streams, and a
chain's stream is the same whether the chains run one after the other or as parallel jobs.
``numpy.random.SeedSequence`` guarantees that children with different paths give independent
streams (O'Neill's SeedSequence design, used by ``SeedSequence.spawn``).

Standard library, numpy and scikit-learn only: a leaf that every layer may import.
"""

from __future__ import annotations

import zlib
from numbers import Integral

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["child", "numpy_rng", "root_seed", "torch_seed"]


def root_seed(random_state) -> np.random.SeedSequence:
    """The one ``SeedSequence`` of a fit.

    Parameters
    ----------
    random_state : None, int, numpy.random.RandomState or numpy.random.SeedSequence
        An int (or a sequence returned as it is) gives the same root every time; None fresh
        operating-system entropy; a ``RandomState`` one draw from it (scikit-learn's
        convention: successive fits with the same instance differ).

    Returns
    -------
    numpy.random.SeedSequence
    """
    if isinstance(random_state, np.random.SeedSequence):
        return random_state
    if random_state is None:
        return np.random.SeedSequence()
    if isinstance(random_state, Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be non-negative, got {random_state}.")
        return np.random.SeedSequence(int(random_state))
    draw = check_random_state(random_state).randint(0, 2**31 - 1)  # ValueError for others
    return np.random.SeedSequence(int(draw))


def child(seq: np.random.SeedSequence, key) -> np.random.SeedSequence:
    """The child of ``seq`` for ``key``: a purpose (str) or an index (int >= 0).

    The same child that ``SeedSequence.spawn`` would give as its ``key``-th for an index; a
    purpose is mapped to a fixed 32-bit number (its CRC-32), so names and small indices do not
    collide and no table of purposes needs keeping.
    """
    if isinstance(key, str):
        key = zlib.crc32(key.encode()) | 2**32  # above every index a run could use
    elif not (isinstance(key, Integral) and key >= 0):
        raise ValueError(f"key must be a purpose name or an index >= 0, got {key!r}.")
    return np.random.SeedSequence(
        seq.entropy, spawn_key=(*seq.spawn_key, int(key)), pool_size=seq.pool_size
    )


def torch_seed(seq: np.random.SeedSequence) -> int:
    """A seed for ``torch.Generator.manual_seed`` (or ``torch.manual_seed``) from ``seq``."""
    return int(seq.generate_state(1, dtype=np.uint64)[0] % (2**63 - 1))


def numpy_rng(seq: np.random.SeedSequence) -> np.random.Generator:
    """A numpy ``Generator`` (PCG64) on ``seq``'s stream."""
    return np.random.default_rng(seq)
