"""The Pareto front of a search's points: which (x, y) pairs no other pair beats in both.

A pure numpy module (no engine import): :func:`front` is what plan's search, the grid's
``on_front`` flags and the sizing tables call; :func:`_undominated` prunes with a sample first
and returns exactly the indices the full sort would keep (the invariant its docstring proves)."""
from __future__ import annotations

import numpy as np


def front(x, y) -> np.ndarray:
    """Indices of the non-dominated points of (x, y), both to maximize, in decreasing x.

    A point is dominated when another has x and y at least as large and one of them larger; of
    exact duplicates one is kept."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not x.size:
        return np.zeros(0, dtype=int)
    # only the points no sample point strictly dominates are sorted (see _undominated: the same
    # indices in the same order as sorting them all, at a fraction of the sort)
    keep = _undominated(x, y)
    order = keep[np.lexsort((-y[keep], -x[keep]))]    # x decreasing, then y decreasing
    ys = y[order]
    best_before = np.concatenate(([-np.inf], np.maximum.accumulate(ys)[:-1]))
    return order[ys > best_before]


#: :func:`_undominated` samples one point in this many (a search's points number 10^4 to 10^5).
FRONT_SAMPLE = 64


def _undominated(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices (increasing) of the points of (x, y) that no point of a sample (every
    :data:`FRONT_SAMPLE`-th) strictly dominates: no sample point has x at least as large and y larger.

    :func:`front` on these alone gives the same indices in the same order: every non-dominated
    point stays (it is strictly dominated by none); a point :func:`front` drops has a point before
    it in the sort with y at least as large, and either an exact duplicate of it (which stays or goes
    with it: the test reads the coordinates only) or a non-dominated point dominating it (which
    stays and also sorts before it) still precedes it; and the sort is stable, so the kept points
    keep their relative order. NaN compares false: a sample with a NaN (left out, or its NaN y
    carried along by the running maximum) drops nothing, and a point with a NaN stays."""
    sx, sy = x[::FRONT_SAMPLE], y[::FRONT_SAMPLE]
    by_x = np.argsort(sx, kind="stable")
    by_x = by_x[~np.isnan(sx[by_x])]               # (a NaN x is no x at least as large)
    sx = sx[by_x]
    # per sample position in increasing x, the largest y of the samples from it on
    most_y = np.maximum.accumulate(sy[by_x][::-1])[::-1]
    at = np.searchsorted(sx, x, side="left")         # the first sample with x at least as large
    above = np.append(most_y, -np.inf)[at]
    return np.flatnonzero(~(above > y))
