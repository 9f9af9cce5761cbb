"""Values at a few positions of a long axis: what one query reaches of the vocabulary.

A query reads tens of concepts of a vocabulary that grows with the corpus. Arrays as
long as the vocabulary cost each query a pass apiece whatever it reached: at 1.55 M
concepts a score, a hop, a weight and a mask per concept, and the passes that looked
for the few set among them, were a quarter of a query (benchmarks/results/NOTES.md,
forty-third round). These hold the positions reached and nothing else.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class SparseValues(NamedTuple):
    """``values[i]`` at ``positions[i]`` (ascending, distinct) and 0 everywhere else."""

    positions: np.ndarray
    values: np.ndarray

    @classmethod
    def of_dense(cls, dense: np.ndarray) -> SparseValues:
        """The nonzero entries of an array as long as the axis."""
        positions = np.flatnonzero(dense)
        return cls(positions, dense[positions])

    def where(self, keep: np.ndarray) -> SparseValues:
        """The entries ``keep`` (a mask over them) marks; the others become 0."""
        return SparseValues(self.positions[keep], self.values[keep])

    def index_of(self, positions: np.ndarray) -> np.ndarray:
        """Where each of ``positions`` sits among the entries, -1 where it is not one."""
        return sorted_index_of(self.positions, positions)

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The value at each of ``positions`` (0 where there is no entry)."""
        found = self.index_of(positions)
        out = np.zeros(len(found), dtype=self.values.dtype)
        out[found >= 0] = self.values[found[found >= 0]]
        return out

    def dense(self, size: int) -> np.ndarray:
        """The values as an array as long as the axis, for a product over all of it."""
        out = np.zeros(size, dtype=self.values.dtype)
        out[self.positions] = self.values
        return out


def sorted_index_of(ascending: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Each of ``wanted``'s index in ``ascending`` (sorted, distinct), -1 where absent."""
    wanted = np.asarray(wanted)
    if not len(ascending):
        return np.full(len(wanted), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(ascending, wanted), len(ascending) - 1)
    return np.where(ascending[at] == wanted, at, -1).astype(np.int64, copy=False)


def distinct_sorted(ids: np.ndarray) -> np.ndarray:
    """``np.unique`` of integer ids (ascending, distinct, the same dtype) by a sort and a
    comparison of neighbours. numpy 2's ``unique`` took 100-180 us on the one to three
    thousand ids a query pools, ten times this (benchmarks/results/NOTES.md, fifty-second
    round), and a query at a million passages asked it several times."""
    ordered = np.sort(np.asarray(ids).ravel())
    if len(ordered) < 2:
        return ordered
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first]
