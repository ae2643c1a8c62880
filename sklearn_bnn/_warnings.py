"""Warnings that name the user's line.

A fixed ``stacklevel`` names the right frame from one call path only: the same warning reached
from ``fit``, from the calibrated ``fit``, from ``sample()`` or from a joblib worker sits at
different depths below the user's call. :func:`warn` names the caller of the outermost frame
of this package instead, which is the line that called ``fit`` / ``sample`` / ``load``.
"""

from __future__ import annotations

import os
import sys
import warnings

# the folder as imported (what frames' file names hold) and with links resolved
_PACKAGE_DIRS = tuple(
    {
        os.path.dirname(os.path.abspath(__file__)) + os.sep,
        os.path.dirname(os.path.realpath(__file__)) + os.sep,
    }
)


def _in_package(filename: str) -> bool:
    return filename.startswith(_PACKAGE_DIRS)


def warn(message, category: type[Warning] = UserWarning) -> None:
    """:func:`warnings.warn` at the caller of the outermost frame of this package.

    Parameters
    ----------
    message : str or Warning
        The warning's text (or a warning instance, as :func:`warnings.warn` takes).
    category : type of Warning, default=UserWarning
        Its class.
    """
    frame, level, stacklevel = sys._getframe(1), 2, 2
    while frame is not None:
        if _in_package(frame.f_code.co_filename):
            stacklevel = level + 1
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=stacklevel)
