import pytest
import torch

import sklearn_bnn
from sklearn_bnn import config_context, get_config, set_config
from sklearn_bnn._utils import host_reads_are_free


def test_a_switch_holds_inside_the_block_and_is_restored_after():
    assert get_config()["hmc_cuda_graphs"] is True
    with config_context(hmc_cuda_graphs=False, stage_draws_on_cpu=True):
        assert get_config()["hmc_cuda_graphs"] is False
        assert get_config()["stage_draws_on_cpu"] is True
        with config_context(hmc_cuda_graphs=True):
            assert get_config()["hmc_cuda_graphs"] is True
        assert get_config()["hmc_cuda_graphs"] is False
    assert get_config()["hmc_cuda_graphs"] is True
    assert get_config()["stage_draws_on_cpu"] is False


def test_a_switch_is_restored_when_the_block_raises():
    with pytest.raises(RuntimeError, match="inside"):
        with config_context(sg_cuda_graphs=False):
            raise RuntimeError("inside")
    assert get_config()["sg_cuda_graphs"] is True


def test_the_switch_reaches_the_code_that_reads_it():
    cpu = torch.zeros(1)
    assert host_reads_are_free(cpu)
    with config_context(host_reads_on_cpu=False):
        assert not host_reads_are_free(cpu)
    set_config(host_reads_on_cpu=False)  # the autouse fixture of conftest.py restores it
    assert not host_reads_are_free(cpu)


@pytest.mark.parametrize(
    "switches, message",
    [
        ({"cuda_graphs": False}, "'cuda_graphs' is not a configuration switch"),
        ({"hmc_cuda_graphs": 0}, "hmc_cuda_graphs must be True or False"),
    ],
)
def test_a_bad_switch_is_refused_and_nothing_changes(switches, message):
    before = sklearn_bnn.get_config()
    with pytest.raises(ValueError, match=message):
        with config_context(**switches):
            pass
    assert get_config() == before


def test_get_config_returns_a_copy():
    get_config()["hmc_cuda_graphs"] = False
    assert get_config()["hmc_cuda_graphs"] is True
