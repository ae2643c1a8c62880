"""Ensemble-size reduction: keep only the posterior draws a metric needs (Schmal & Mäder 2026).

A Bayesian classifier predicts with the average of many posterior draws (ensemble members),
and every draw costs a forward pass. Schmal & Mäder 2026 ("Ensemble size reduction", Fig. 5) drops
members greedily while a validation metric is not impaired, repeating the greedy pass over
several random orderings: accuracy survives with under half of the members, calibration needs
almost all of them.

Picking the best few of many members on a small validation set fits that set's noise: the
greedy subset scores better on the validation data than it will on new data.
:func:`random_order_member_selection` (the default of :class:`EnsembleReducer`) therefore
never chooses members by their validation score: it keeps a prefix of one random order of the
members and sizes it with a statistical upper bound on what the prefix loses against the full
ensemble; :func:`greedy_member_selection` is the procedure of Schmal & Mäder 2026.

The selection functions, on a stack of member predictions, live in ``_selection.py``; the
scikit-learn meta-estimator that fits a classifier and applies them, in ``_reducer.py``.
"""

from ._reducer import EnsembleReducer
from ._selection import greedy_member_selection, random_order_member_selection

__all__ = ["EnsembleReducer", "greedy_member_selection", "random_order_member_selection"]
