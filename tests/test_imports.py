"""The package's internal imports form no cycle.

Reads every module of ``sklearn_bnn`` with :mod:`ast` (nothing is imported), resolves relative
imports, and builds the graph "module A imports module B" over package modules. Imports at
module level and inside functions or methods both count: a function-level import hides a
cycle from the interpreter at import time, not from the design. Works on whatever modules
exist, so modules added, moved or removed elsewhere need no change here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sklearn_bnn

PACKAGE = "sklearn_bnn"
ROOT = Path(sklearn_bnn.__file__).resolve().parent


def _module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Map dotted module names (``sklearn_bnn.metrics`` for a package) to their files."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return modules


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name of the module an ``ImportFrom`` reads from."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _target(name: str, modules: dict[str, Path]) -> str | None:
    """The longest package module that ``name`` (a module or an attribute of one) names."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(
    modules: dict[str, Path] | None = None, package: str = PACKAGE
) -> dict[str, set[str]]:
    """Edges ``module -> modules it imports`` between modules of ``package``.

    ``from . import x`` points at the submodule ``x`` when there is one and at the package
    otherwise; ``from .a import f`` points at ``a`` (at ``a.f`` when that is a module).
    Importing ``a.b`` also runs ``a``'s ``__init__``, but that edge is left out: it would make
    every subpackage import its own ``__init__`` and report cycles that are not design faults.
    """
    modules = _module_files() if modules is None else modules
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(node, name, is_package)
                # each imported name is a submodule of source, or an attribute of source
                names = [f"{source}.{alias.name}" for alias in node.names]
            else:
                continue
            for imported in names:
                if imported == package or imported.startswith(package + "."):
                    target = _target(imported, modules)
                    if target is not None and target != name:
                        graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[m0, m1, ..., m0]``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_package_modules_are_found():
    modules = _module_files()
    assert PACKAGE in modules and f"{PACKAGE}.metrics" in modules
    assert all(path.is_file() for path in modules.values())


def test_no_import_cycle_in_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    "files, cycle",
    [
        # a function-level relative import closes the circle
        (
            {
                "__init__.py": "",
                "a.py": "from .sub import b\n",
                "sub/__init__.py": "",
                "sub/b.py": "def f():\n    from ..a import g\n",
            },
            ["pkg.a", "pkg.sub.b", "pkg.a"],
        ),
        # an absolute import one way, a two-dot import of a sibling package's module back
        (
            {
                "__init__.py": "",
                "a.py": "import pkg.sub.c\n",
                "sub/__init__.py": "",
                "sub/c.py": "from .. import a\n",
            },
            ["pkg.a", "pkg.sub.c", "pkg.a"],
        ),
        # no cycle: both import a shared helper module
        (
            {
                "__init__.py": "",
                "a.py": "from ._h import x\n",
                "b.py": "from . import _h\nfrom .a import y\n",
                "_h.py": "import numpy\n",
            },
            None,
        ),
    ],
)
def test_cycle_finder_on_small_packages(tmp_path, files, cycle):
    _write(tmp_path / "pkg", files)
    modules = _module_files(tmp_path / "pkg", "pkg")
    assert find_cycle(import_graph(modules, "pkg")) == cycle


def test_the_persistence_registry_is_a_leaf():
    """Classes register for ``load`` through ``_persistence_registry``, which imports nothing
    but the standard library; the modules that only register do not pull in the codec."""
    import sys

    graph = import_graph()
    assert graph[f"{PACKAGE}._persistence_registry"] == set()
    tree = ast.parse((ROOT / "_persistence_registry.py").read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    for module in ("priors", "samples"):
        assert f"{PACKAGE}._persistence_registry" in graph[f"{PACKAGE}.{module}"]
        assert not {f"{PACKAGE}._persistence", f"{PACKAGE}._codec"} & graph[f"{PACKAGE}.{module}"]


def test_every_registering_module_reaches_only_the_leaf_registry():
    """Whatever registers (estimators, priors, samplers, metrics, samples) imports the leaf
    ``_persistence_registry`` (or the samplers' registry, itself on the leaf), never the codec:
    only the package's ``__init__`` imports ``_persistence`` (for save and load), only
    ``_persistence`` the codec, and there is one registry of samplers."""
    from sklearn_bnn import _persistence_registry as leaf
    from sklearn_bnn.samplers import _by_name as samplers_registry

    graph = import_graph()
    assert {m for m, deps in graph.items() if f"{PACKAGE}._persistence" in deps} == {PACKAGE}
    assert {m for m, deps in graph.items() if f"{PACKAGE}._codec" in deps} == {
        f"{PACKAGE}._persistence"
    }
    registering = {
        m
        for m, deps in graph.items()
        if f"{PACKAGE}._persistence_registry" in deps or f"{PACKAGE}.samplers._by_name" in deps
    }
    assert len(registering) >= 10, registering  # the test covers the registering modules
    assert samplers_registry.SAMPLERS is leaf.SAMPLERS
    assert f"{PACKAGE}._persistence_registry" in graph[f"{PACKAGE}.samplers._by_name"]
