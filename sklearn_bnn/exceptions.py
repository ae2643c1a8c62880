"""The package's warning classes."""

from __future__ import annotations

import sklearn.exceptions

__all__ = ["ConvergenceWarning"]


class ConvergenceWarning(sklearn.exceptions.ConvergenceWarning):
    """Raised when a fit stops before its sampler or optimiser has converged.

    The MCMC estimators raise it when a chain has not become stationary (its own split R-hat
    above 1.1), when more than 5 % of the sampling transitions diverged, or when warmup had to
    restart or left a chain stalled; the gradient-trained estimators when training ran out of
    epochs (``max_iter``) while its loss was still improving. A fit raises it at most once,
    one message listing every problem of that fit (docs/messages.md).

    It is a subclass of :class:`sklearn.exceptions.ConvergenceWarning`, so filtering either
    class silences it::

        warnings.filterwarnings("ignore", category=sklearn.exceptions.ConvergenceWarning)
    """
