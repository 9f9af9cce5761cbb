"""Postings read with a bound, highest impact first, and exact sums over a unit's own entries.

A view of the units (concept evidence, BM25, the walk) scores each unit by a
sum over the query's concepts or words of what one posting entry carries. At a
million units the common ones hold hundreds of thousands of entries each, and
summing them into a corpus-long array is most of a query. On the candidate path
a view instead reads whole postings in descending order of the most one of
their entries can add and stops before the posting that would pass a bound (the
"quit" rule of accumulator-limited text retrieval, Moffat and Zobel 1996). That
finds the units worth ranking; their exact scores, and those of any unit the
ranking asks about, are sums over the units' own entries
(:class:`~shared_core.search.candidates.RescoredView`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..graph.entries import entry_counts, entry_positions
from .candidates import PositiveView


def highest_impact(per_entry: np.ndarray, lengths: np.ndarray, max_entries: int) -> np.ndarray:
    """Which postings to read (positions, ascending): whole ones, in descending order of
    ``per_entry`` (ties to the lower position), up to ``max_entries`` entries in all."""
    order = np.lexsort((np.arange(len(per_entry)), -per_entry))
    fits = np.cumsum(lengths[order]) <= max_entries
    return np.sort(order[:len(fits) if fits.all() else int(np.argmin(fits))])


def summed_by_index(indices: np.ndarray, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``indices`` (ascending) and each one's summed ``mass``.

    A stable sort keeps each index's entries in their given order, so every sum
    adds in the order a ``bincount`` over all indices would: the same float.
    """
    order = np.argsort(indices, kind="stable")
    ordered = indices[order]
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    group = np.cumsum(first) - 1
    return ordered[first], np.bincount(group, weights=mass[order], minlength=int(first.sum()))


# a bounded read sums what it read by sorting it unless the entries are at least a
# 1/DENSE_SUM_SHARE of the units: then one pass over a unit-long array costs less
DENSE_SUM_SHARE = 5


def summed_view(units: np.ndarray, mass: np.ndarray, n_units: int | None) -> PositiveView:
    """The distinct ``units`` with their summed ``mass``, those above zero, by a sort of
    the entries or (many entries for ``n_units``) a pass over an array of all units."""
    if n_units is not None and len(units) * DENSE_SUM_SHARE >= n_units:
        return PositiveView.of_scores(np.bincount(units, weights=mass, minlength=n_units))
    reached, summed = summed_by_index(units, mass)
    positive = summed > 0
    return PositiveView(reached[positive], summed[positive])


def bounded_view(postings: sp.csc_matrix, columns: np.ndarray, column_weight: np.ndarray,
                 column_peak: np.ndarray | None, max_postings: int) -> PositiveView:
    """Each unit's ``sum over columns of column_weight * postings[unit, column]`` from at
    most ``max_postings`` entries: the columns whose entries can add the most are read.

    ``column_peak`` is each column's largest entry (None: every entry is 1), so that
    ``column_weight * column_peak`` bounds what one entry of that column adds.
    """
    columns = np.asarray(columns, dtype=np.int64)
    impact = column_weight if column_peak is None else column_weight * column_peak[columns]
    read = highest_impact(impact, entry_counts(postings, columns), max_postings)
    positions, owner = entry_positions(postings, columns[read])
    mass = column_weight[read][owner]
    if column_peak is not None:
        mass = mass * postings.data[positions]
    return summed_view(postings.indices[positions], mass, postings.shape[0])


def row_sums(rows: sp.csr_matrix, units: np.ndarray, column_value: np.ndarray) -> np.ndarray:
    """``rows[units] @ column_value``: each unit's entries, weighted, summed in column order."""
    positions, owner = entry_positions(rows, np.asarray(units, dtype=np.int64))
    weights = column_value[rows.indices[positions]] * rows.data[positions]
    return np.bincount(owner, weights=weights, minlength=len(units))


def column_lookup_sums(postings: sp.csc_matrix, columns: np.ndarray,
                       units: np.ndarray) -> np.ndarray:
    """``postings[units][:, columns].sum(axis=1)`` by a binary search of each column's
    sorted entries: a unit's weights without a row copy of the matrix."""
    units = np.asarray(units, dtype=np.int64)
    out = np.zeros(len(units), dtype=np.float64)
    for column in np.asarray(columns, dtype=np.int64).tolist():
        start, end = int(postings.indptr[column]), int(postings.indptr[column + 1])
        if start == end:
            continue
        entries = postings.indices[start:end]
        at = np.minimum(np.searchsorted(entries, units), end - start - 1)
        hit = entries[at] == units
        out[hit] += postings.data[start + at[hit]]
    return out


def column_peaks(postings: sp.csc_matrix) -> np.ndarray:
    """Each column's largest entry (0 for an empty column), float64."""
    peaks = np.zeros(postings.shape[1], dtype=np.float64)
    filled = np.flatnonzero(np.diff(postings.indptr) > 0)
    if len(filled):
        peaks[filled] = np.maximum.reduceat(postings.data, postings.indptr[filled])
    return peaks
