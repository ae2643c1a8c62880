"""Warnings that name the user's line, and one convergence warning per fit.

A fixed ``stacklevel`` names the right frame from one call path only: the same warning reached
from ``fit``, from the calibrated ``fit``, from ``sample()`` or from a joblib worker sits at
different depths below the user's call, and scikit-learn's ``Pipeline``, ``GridSearchCV`` or
``cross_validate`` (through joblib) add their own frames above the package. :func:`warn` names
the first frame outside the package, scikit-learn, joblib, skorch and the standard library's
``contextlib`` / ``functools`` / ``concurrent`` above the package's outermost frame: the line
that called ``fit`` / ``search.fit`` / ``sample`` / ``load``.

A fit reports its convergence problems (:class:`~sklearn_bnn.exceptions.ConvergenceWarning`:
divergences, chains that have not converged, warmup restarts and stalls) in one warning:
:func:`one_convergence_warning` collects those raised through :func:`warn` inside it and gives
one warning, listing them all, when the block ends. Joblib jobs collect their own
(:class:`collecting`) and hand them back with their results (:func:`reissue`), so that a fit's
chains run in worker processes still give one warning, raised in the caller's process under
the caller's filters.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator
from typing import NamedTuple

from .exceptions import ConvergenceWarning


def _folders(path: str) -> set[str]:
    """A folder as imported (what frames' file names hold) and with links resolved."""
    return {os.path.abspath(path) + os.sep, os.path.realpath(path) + os.sep}


def _library_folders(name: str) -> set[str]:
    """The folders of an installed package, found without importing it (none if absent)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return set()
    if spec is None:
        return set()
    out = set()
    for path in spec.submodule_search_locations or ():
        out |= _folders(path)
    return out


def _files(module) -> set[str]:
    return {os.path.abspath(module.__file__), os.path.realpath(module.__file__)}


_PACKAGE_DIRS = tuple(_folders(os.path.dirname(os.path.abspath(__file__))))
# what lies between the user's call and the package: the libraries that call an estimator's
# fit for the user (Pipeline, GridSearchCV, cross_validate, joblib's sequential backend, skorch)
# and the standard library's decorators, context managers and executors they go through
_PASSED_DIRS = tuple(
    set().union(*(_library_folders(name) for name in ("sklearn", "joblib", "skorch", "concurrent")))
)
_PASSED_FILES = frozenset(_files(contextlib) | _files(functools))


def _in_package(filename: str) -> bool:
    return filename.startswith(_PACKAGE_DIRS)


def _passed(filename: str) -> bool:
    return filename in _PASSED_FILES or filename.startswith(_PASSED_DIRS)


def _user_stacklevel(frame) -> int:
    """The ``stacklevel`` of the user's line for :func:`warnings.warn` called from the function
    whose caller is ``frame``: the first frame, going outward from the package's outermost one,
    that is neither the package's nor a library's it passes through (:data:`_PASSED_DIRS`);
    the caller of the package's outermost frame when every frame above it is a library's (a
    job in a worker thread or process)."""
    files = []
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    inside = [i for i, name in enumerate(files) if _in_package(name)]
    outermost = inside[-1] if inside else -1
    level = outermost + 1
    while level < len(files) and (_passed(files[level]) or _in_package(files[level])):
        level += 1
    if level == len(files):
        level = outermost + 1
    return level + 2  # files[0] is the caller of warn, which is stacklevel 2 there


def warn(message, category: type[Warning] = UserWarning, *, kind: str = "other") -> None:
    """:func:`warnings.warn` at the user's line (the module docstring says which).

    A :class:`~sklearn_bnn.exceptions.ConvergenceWarning` raised inside
    :func:`one_convergence_warning` (or :class:`collecting`) is collected there instead.

    Parameters
    ----------
    message : str or Warning
        The warning's text (or a warning instance, as :func:`warnings.warn` takes).
    category : type of Warning, default=UserWarning
        Its class.
    kind : str, default="other"
        For a convergence warning, what it is about: ``"warmup"``, ``"divergence"``,
        ``"rhat"``, ``"training"`` or ``"other"`` (:func:`one_convergence_warning` keeps
        some kinds only).
    """
    if issubclass(category, ConvergenceWarning):
        problems = _COLLECTOR.get()
        if problems is not None:
            problems.append(Problem(kind, str(message)))
            return
    warnings.warn(message, category, stacklevel=_user_stacklevel(sys._getframe(1)))


class Problem(NamedTuple):
    """One convergence problem: its kind (:func:`warn`) and its message."""

    kind: str
    message: str


# the convergence problems of the fit under way in this context (None: none is collecting)
_COLLECTOR: contextvars.ContextVar[list[Problem] | None] = contextvars.ContextVar(
    "sklearn_bnn_convergence_problems", default=None
)


@contextlib.contextmanager
def collected_convergence_warnings() -> Iterator[list[Problem]]:
    """Collect the convergence warnings :func:`warn` gives inside the block, in a list of
    :class:`Problem` yielded to the block; nothing is warned."""
    problems: list[Problem] = []
    token = _COLLECTOR.set(problems)
    try:
        yield problems
    finally:
        _COLLECTOR.reset(token)


def reissue(problems, prefix: str = "") -> None:
    """Warn again the problems collected elsewhere (a joblib job), each message after
    ``prefix``: into the collection under way, or one warning each."""
    for kind, message in problems:
        warn(prefix + message, ConvergenceWarning, kind=kind)


@contextlib.contextmanager
def one_convergence_warning(keep=None) -> Iterator[None]:
    """Give the convergence warnings raised inside the block as one warning when it ends.

    The problems collected (:func:`warn`) are combined into one
    :class:`~sklearn_bnn.exceptions.ConvergenceWarning` at the user's line; inside another such
    block (a fit within a fit, a stage of a fit) they join the outer block's instead. Nothing
    is warned when the block raises.

    Parameters
    ----------
    keep : set of str, optional
        The kinds of problem kept (:func:`warn`'s ``kind``); the others are dropped. All by
        default.
    """
    with collected_convergence_warnings() as problems:
        yield
    kept = [p for p in problems if keep is None or p.kind in keep]
    outer = _COLLECTOR.get()
    if outer is not None:
        outer.extend(kept)
    elif kept:
        level = _user_stacklevel(sys._getframe(1))
        warnings.warn(combined_message(kept), ConvergenceWarning, stacklevel=level)


def one_warning_per_call(method):
    """Decorate a ``fit``: its convergence problems in one warning
    (:func:`one_convergence_warning`)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with one_convergence_warning():
            return method(*args, **kwargs)

    return wrapper


def combined_message(problems) -> str:
    """One message for every problem: the message itself for one, a list for several (an
    exact repeat once)."""
    messages = list(dict.fromkeys(message for _, message in problems))
    if len(messages) == 1:
        return messages[0]
    return f"{len(messages)} convergence problems in this fit:\n" + "\n".join(
        f"- {m}" for m in messages
    )


class collecting:  # noqa: N801 - used like a function, delayed(collecting(job))
    """A joblib job's function that collects its convergence warnings: called, it returns
    ``(fn's result, list of Problem)``; :func:`reissue` warns them in the caller. Picklable
    when ``fn`` is."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args, **kwargs):
        with collected_convergence_warnings() as problems:
            result = self.fn(*args, **kwargs)
        return result, problems
