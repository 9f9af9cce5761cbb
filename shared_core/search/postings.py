"""Postings read with a bound, highest impact first: how the walk finds its units at scale.

A walk step scatters what each posting entry of its concepts carries over the
units. At a million passages its concepts hold hundreds of thousands of entries,
and summing them into a corpus-long array was most of a query. On the candidate
path a step instead reads whole postings in descending order of what one of
their entries carries and stops before the posting that would pass a bound (the
"quit" rule of accumulator-limited text retrieval, Moffat and Zobel 1996). That
finds the units worth ranking; their exact masses, and those of any unit the
ranking asks about, are sums over the units' own rows
(:class:`~shared_core.search.candidates.RescoredView`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .candidates import PositiveView
from .summing import compiled, gathered_entries, posting_sums, summed_by_index


def highest_impact(per_entry: np.ndarray, lengths: np.ndarray, max_entries: int) -> np.ndarray:
    """Which postings to read (positions, ascending): whole ones, in descending order of
    ``per_entry`` (ties to the lower position), up to ``max_entries`` entries in all."""
    order = np.lexsort((np.arange(len(per_entry)), -per_entry))
    fits = np.cumsum(lengths[order]) <= max_entries
    return np.sort(order[:len(fits) if fits.all() else int(np.argmin(fits))])


# postings read are summed by sorting them unless the entries are at least a
# 1/DENSE_SUM_SHARE of the units: then one pass over a unit-long array costs less
# (measured at a million units: a sort ~25-40 ns an entry, the pass ~2.2 ms in all)
DENSE_SUM_SHARE = 14


def summed_view(units: np.ndarray, mass: np.ndarray, n_units: int | None) -> PositiveView:
    """The distinct ``units`` with their summed ``mass``, those above zero: in compiled
    loops (``search.summing``), else by a sort of the entries or (many entries for
    ``n_units``) a pass over an array of all units."""
    if compiled():
        return PositiveView(*summed_by_index(units, mass, n_units, positive=True))
    if n_units is not None and len(units) * DENSE_SUM_SHARE >= n_units:
        return PositiveView.of_scores(np.bincount(units, weights=mass, minlength=n_units))
    reached, summed = summed_by_index(units, mass)
    positive = summed > 0
    return PositiveView(reached[positive], summed[positive])


# up to this many postings are read as slices, one per posting: no array of entry
# positions. Measured at a million passages over 100 queries' evidence and BM25 views
# (356 K entries a query, both views, median): 0.8 ms against 1.9 ms by positions; past a
# few hundred postings (a wide BFS expansion) the loop's per-posting cost would not pay
FEW_POSTINGS = 256


def posting_entries(postings: sp.csc_matrix, columns: np.ndarray,
                    column_value: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every entry of the ``columns``' postings, in the order given: its unit (int64) and
    what it carries (times its column's ``column_value``; float64 either way)."""
    columns = np.asarray(columns, dtype=np.int64)
    if len(columns) > FEW_POSTINGS:
        return gathered_entries(postings, columns, column_value)
    if not len(columns):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    bounds = zip(postings.indptr[columns].tolist(), postings.indptr[columns + 1].tolist(),
                 strict=True)
    units, masses = [], []
    for at, (start, end) in enumerate(bounds):
        units.append(postings.indices[start:end])
        # the same float64 product, entry by entry, as the positions' gather makes
        masses.append(postings.data[start:end] if column_value is None
                      else postings.data[start:end] * column_value[at])
    return (np.concatenate(units).astype(np.int64, copy=False),
            np.concatenate(masses).astype(np.float64, copy=False))


def postings_view(postings: sp.csc_matrix, columns: np.ndarray,
                  column_value: np.ndarray | None = None) -> PositiveView:
    """The units the ``columns``' postings reach and the sum of their entries there (each
    entry times its column's ``column_value``), columns added in the order given."""
    if compiled():
        return PositiveView(*posting_sums(postings, columns, column_value))
    units, mass = posting_entries(postings, columns, column_value)
    return summed_view(units, mass, postings.shape[0])
