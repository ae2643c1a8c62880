"""Rewrite tests/data/reference_draws.pt from the current code.

Run only when a change of algorithm or seeding is meant to move the draws, in a commit of its
own: ``python tests/data/write_reference_draws.py``.
"""

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "samplers"))

from test_euclidean_metrics import REFERENCE_CASES, reference_run  # noqa: E402

if __name__ == "__main__":
    draws = {key: reference_run(key).draws for key in REFERENCE_CASES}
    torch.save(draws, HERE / "reference_draws.pt")
    print({key: tuple(value.shape) for key, value in draws.items()})
