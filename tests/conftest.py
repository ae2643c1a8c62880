import os

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture
def generator():
    g = torch.Generator()
    g.manual_seed(0)
    return g
