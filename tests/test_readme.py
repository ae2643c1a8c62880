"""README.md says what the package is, then gives the two commands; CI runs its test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_lines():
    return (ROOT / "README.md").read_text().splitlines()


def _readme_commands():
    lines = _readme_lines()
    fence = next(i for i, line in enumerate(lines) if line.startswith("```"))
    return lines[fence + 1], lines[fence + 2]


def test_readme_says_what_the_package_is_before_the_commands():
    lines = _readme_lines()
    fence = next(i for i, line in enumerate(lines) if line.startswith("```"))
    assert lines[0].startswith("# ")
    intro = " ".join(lines[1:fence])
    assert "Bayesian neural networks" in intro and "scikit-learn" in intro
    assert not any(line.startswith("## ") for line in lines[:fence]), "commands come first"


def test_readme_starts_with_demo_and_test_commands():
    demo, tests = _readme_commands()
    assert demo.endswith("python -m sklearn_bnn demo")
    # the suite runs on every core (pytest-xdist): each test is single-threaded (conftest.py)
    assert tests.endswith("python -m pytest -n auto")


def test_ci_runs_the_readme_test_command():
    _, tests = _readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci


def test_demo_command_installs_what_the_demo_draws_with():
    import re
    import tomllib

    demo, _ = _readme_commands()
    extras = re.search(r'pip install -e "\.\[(\w+)\]"', demo)
    assert extras, "the demo command installs the package with an extra"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needs = project["optional-dependencies"][extras.group(1)]
    assert any(req.startswith("matplotlib") for req in needs)
