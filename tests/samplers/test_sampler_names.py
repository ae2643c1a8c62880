"""The lists of sampler names in docstrings and docs follow the registry."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import sklearn_bnn
from sklearn_bnn.samplers import SAMPLERS, sample, sampler_names

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_sampler_names_split_the_registry_by_data_access():
    full, minibatch = sampler_names("full"), sampler_names("minibatch")
    assert sampler_names() == list(SAMPLERS)
    assert sorted(full + minibatch) == sorted(SAMPLERS)
    assert {"hmc", "nuts"} <= set(full) and {"sgld", "sghmc"} <= set(minibatch)
    assert sampler_names("no such access") == []


def _quoted(doc: str) -> set[str]:
    return set(re.findall(r'"(\w+)"', doc))


@pytest.mark.parametrize(
    "obj, access",
    [
        (sklearn_bnn.HMCClassifier, "full"),
        (sklearn_bnn.HMCRegressor, "full"),
        (sklearn_bnn.SGMCMCClassifier, "minibatch"),
        (sklearn_bnn.SGMCMCRegressor, "minibatch"),
    ],
)
def test_estimator_docstrings_list_the_registered_samplers_they_run(obj, access):
    entry = obj.__doc__.split("    sampler :")[1].split("\n    thin")[0].split("\n    n_chains")[0]
    first_lines = "\n".join(entry.splitlines()[:3])
    assert set(sampler_names(access)) <= _quoted(first_lines)
    assert "_samplers}" not in obj.__doc__


def test_the_driver_docstring_lists_every_registered_sampler():
    entry = sample.__doc__.split("    sampler :")[1].split("built with its")[0]
    assert set(SAMPLERS) <= _quoted(entry)
    assert "_samplers}" not in sample.__doc__


def test_the_sampling_page_has_a_row_per_registered_sampler_with_its_parameters():
    text = (DOCS / "sampling.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        m = re.match(r'\| `(\w+)` \| `"(\w+)"` \| (.*) \| .* \|$', line)
        if m:
            rows[m.group(2)] = (m.group(1), set(re.findall(r"`(\w+)[=`]", m.group(3))))
    assert set(rows) == set(SAMPLERS)
    for name, cls in SAMPLERS.items():
        class_name, documented = rows[name]
        assert class_name == cls.__name__
        parameters = set(inspect.signature(cls.__init__).parameters) - {"self"}
        assert parameters == documented, name
