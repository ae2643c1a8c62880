"""The target protocol's optional members: defaults for a minimal target, the build-time check."""

import pytest
import torch

from sklearn_bnn.samplers import HMC, SGLD
from sklearn_bnn.targets import FunctionTarget, TargetCapabilities, capabilities, require


class _Gaussian:
    """A user's minimal target: value_and_grad only."""

    def value_and_grad(self, theta):
        return -0.5 * (theta * theta).sum(-1), -theta


def test_minimal_target_gets_the_declared_defaults():
    found = capabilities(_Gaussian())
    assert found == TargetCapabilities()
    assert found.temperature == 1.0 and found.n_hyper == 0
    assert found.dim is None and found.log_prob_grad is None and found.gibbs_blocks is None


def test_members_are_read_and_non_callables_count_as_absent():
    target = FunctionTarget(lambda th: -(th * th).sum(), 3, dtype=torch.float64)
    target.temperature = 0.5
    target.gibbs_blocks = "not a function"
    found = capabilities(target)
    assert (found.dim, found.dtype, found.temperature) == (3, torch.float64, 0.5)
    assert found.gibbs_blocks is None


def test_require_names_the_missing_member():
    with pytest.raises(ValueError, match="needs a minibatch target.*'batch_value_and_grad'"):
        require(_Gaussian(), ("batch_value_and_grad",), "SGLD", "a minibatch target")
    with pytest.raises(ValueError, match="_Gaussian has no 'batch_value_and_grad'"):
        SGLD(step_size=1e-3).build(_Gaussian())


def test_kernel_reads_the_capabilities_of_its_current_target():
    kernel = HMC(step_size=0.1, n_steps=2).build(_Gaussian())
    assert kernel.capabilities.dim is None
    other = FunctionTarget(lambda th: -(th * th).sum(), 2, dtype=torch.float64)
    moved = kernel.with_target(other)
    assert moved.capabilities.dim == 2 and kernel.capabilities.dim is None
    state = moved.init(torch.zeros(2, dtype=torch.float64))
    assert state.log_prob.shape == (1,)
