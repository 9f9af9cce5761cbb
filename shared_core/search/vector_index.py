"""Top-k inner-product search over an index's vectors: the one seam for a vector backend.

Ranking code asks a :class:`VectorIndex` for the best rows of a query and rescores
what it returns exactly, so a backend only has to find candidates: an exact scan
(:class:`ExactVectorIndex`, the reference), an approximate graph index
(:class:`~shared_core.search.ann.HnswVectorIndex`), or an external engine later.
Rows are positions in the matrix the index was built from; scores are inner
products of unit vectors, i.e. cosines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from ..paging import read_rows_ahead
from .products import grouped_product

if TYPE_CHECKING:  # the state package imports this module
    from ..state.rows import Rows

SCAN_BLOCK = 65_536  # rows per block of an exact scan: bounded float32 temporaries
TOP_K_SAMPLE = 4096  # values read to guess a floor the k best reach (top_k_indices)


@runtime_checkable
class VectorIndex(Protocol):
    """What ranking needs from a vector backend: the ``k`` best rows, best first."""

    def __len__(self) -> int: ...

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)``: int64 row positions and their float32 cosines, best first."""
        ...


def scan_scores(matrix: Rows, query: np.ndarray) -> np.ndarray:
    """``matrix @ query`` as float32, a block at a time whatever ``matrix``'s dtype.

    A float16 (or memory-mapped) matrix is converted one block at a time, so the
    scan never holds a float32 copy of the whole matrix.
    """
    q = np.asarray(query, dtype=np.float32)
    if matrix.dtype == np.float32:
        if isinstance(matrix, np.ndarray):
            return grouped_product(matrix, q)
        return np.asarray(matrix @ q, dtype=np.float32)  # rows in runs: each run grouped
    out = np.empty(len(matrix), dtype=np.float32)
    for start in range(0, len(matrix), SCAN_BLOCK):
        block = np.asarray(matrix[start:start + SCAN_BLOCK], dtype=np.float32)
        out[start:start + len(block)] = grouped_product(block, q)
    return out


@runtime_checkable
class ScoredRows(Protocol):
    """Rows that score a subset of themselves against a query without handing the rows
    over: a replica's rows in a store (``search.external.EngineRows``)."""

    def scores_at(self, positions: np.ndarray, query: np.ndarray) -> np.ndarray: ...


def row_scores(matrix: Rows, positions: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``matrix[positions] @ query`` as float32, by the rows themselves where they score
    (:class:`ScoredRows`), else gathered and scanned here."""
    if isinstance(matrix, ScoredRows):
        return matrix.scores_at(positions, query)
    return scan_scores(rows_at(matrix, positions), query)


def rows_at(matrix: Rows, positions: np.ndarray) -> np.ndarray:
    """The float32 rows ``positions`` of ``matrix``, one row each (a copy). Rows of a map
    read at random that are not in memory are asked for together first (``paging``)."""
    read_rows_ahead(matrix, positions)
    return np.asarray(matrix[positions], dtype=np.float32).reshape(len(positions),
                                                                   matrix.shape[1])


def top_k_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first; ties go to the lower index."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < len(scores):
        candidates = _at_least_kth(scores, k, _sampled_floor(scores, k))
    else:
        candidates = np.arange(len(scores))
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order][:k].astype(np.int64)


def _at_least_kth(scores: np.ndarray, k: int, floor: float | None) -> np.ndarray:
    """Positions of every score reaching the ``k``-th largest (ties at it all kept).

    The k-th largest is found by partitioning the values alone (twice as fast as
    partitioning their positions), and only those not below ``floor`` when that
    leaves at least ``k``: the k-th largest is among them, so the answer is the same.
    """
    within = None
    if floor is not None:
        within = np.flatnonzero(~(scores < floor))  # NaN kept: partition ranks it highest
        if len(within) < k:
            within = None
    values = scores if within is None else scores[within]
    kth = np.partition(values, len(values) - k)[len(values) - k]
    if np.isnan(kth):  # NaNs among the best: the plain path's order, on every score
        return np.argpartition(-scores, k - 1)[:k]
    found = np.flatnonzero(values >= kth)
    return found if within is None else within[found]


def _sampled_floor(scores: np.ndarray, k: int) -> float | None:
    """A value that about ``2k + 8`` of ``scores`` reach, read off an even sample of them;
    None where the scores are too few for a sample to save anything."""
    step = len(scores) // TOP_K_SAMPLE
    if step < 4 or k * 8 > len(scores):
        return None
    sample = scores[::step]
    reach = min(len(sample), int(2 * k / step) + 8)
    return float(np.partition(sample, len(sample) - reach)[len(sample) - reach])


@dataclass(frozen=True, eq=False)
class ExactVectorIndex:
    """Every row scored: the reference the approximate backends are measured against."""

    vectors: np.ndarray

    def __len__(self) -> int:
        return len(self.vectors)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = scan_scores(self.vectors, query)
        rows = top_k_indices(scores, k)
        return rows, scores[rows]
