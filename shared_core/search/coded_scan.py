"""The ``k`` rows of a matrix most similar to a query, exactly, from a scan of byte codes.

A float32 scan reads 1.5 KB a row at 384 dimensions and is bound by memory: the scale
corpus's 65 K concept vectors take 8.4 ms a query on this 2-core machine
(``benchmarks/results/NOTES.md``, forty-fourth round). :class:`CodedScan` also holds each
row as a byte a dimension (faiss's scalar quantiser over the rows' range in each
dimension), scans those, and scores the best ``n`` rows exactly from the matrix. Each
dimension's largest decoding error, measured on the rows as they are coded, bounds how
far a code's score can be from its row's: ``|q.v - q.v'| <= sum_d |q_d| err_d``. When
the ``n``-th code's score plus that bound (and float32 rounding) is below the ``k``-th
exact score, no row outside the ``n`` can reach the ``k`` best, so the best ``k`` of the
``n`` are the scan's; otherwise a second pass asks for sixteen times as many, and then the
float32 scan runs after all. The answer is the float32 scan's, up to the last bits of the
cosines: a row and a gathered copy of it can round differently in BLAS, so rows within
float32 rounding of the ``k``-th may swap.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .ann import _faiss
from .vector_index import row_scores, rows_at, scan_scores, top_k_indices

if TYPE_CHECKING:  # the state package imports the search package
    from ..state.rows import Rows

# added to the bound: a float32 dot product of two unit vectors (as concept vectors and
# queries are) in 384 dimensions errs by at most 384 * 2**-24 (under 2.3e-5), and the
# code's and the row's scores each may
ROUNDING = 1e-4
# rows scored exactly per row wanted, by the best codes: first, and where the bound did
# not close on them; then every row. Over 65 K concepts the scale corpus's questions all
# closed on the first (benchmarks/results/NOTES.md, forty-fourth round)
FIRST_ASK = 8
SECOND_ASK = 128
CODE_BLOCK = 8_192  # rows coded at a time: a float32 copy of them is 12 MB at 384 dimensions


@dataclass(frozen=True, eq=False)
class CodedScan:
    """Byte codes of some rows of a matrix (``rows``, ascending positions), and each
    dimension's largest decoding error over them (``error``). Read-only once built:
    concurrent queries may share it."""

    index: Any  # faiss.IndexScalarQuantizer, one code per row of ``rows``, in order
    rows: np.ndarray
    error: np.ndarray

    @classmethod
    def build(cls, vectors: Rows, rows: np.ndarray, wanted_by: str = "concept_search='codes'"
              ) -> CodedScan:
        """Codes of the rows ``rows`` (ascending positions) of ``vectors``, read a block
        at a time: the quantiser's range in each dimension is the rows' own."""
        faiss = _faiss(wanted_by)
        rows = np.asarray(rows, dtype=np.int64)
        dim = int(vectors.shape[1])
        index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit,
                                           faiss.METRIC_INNER_PRODUCT)
        error = np.zeros(dim, dtype=np.float64)
        if len(rows):
            low = np.full(dim, np.inf, dtype=np.float32)
            high = np.full(dim, -np.inf, dtype=np.float32)
            for block in _blocks(vectors, rows):
                low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
            index.train(np.stack([low, high]))  # min-max ranges: its two ends train it
            for block in _blocks(vectors, rows):
                index.add(block)
                decoded = index.sa_decode(index.sa_encode(block))
                error = np.maximum(error, np.abs(block - decoded).max(axis=0))
        return cls(index, rows, error)

    def __len__(self) -> int:
        return len(self.rows)

    def top(self, vectors: Rows, query: np.ndarray, k: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(best, scored, their cosines)``: the ``k`` coded rows most similar to
        ``query`` (positions in ``vectors``, best first, ties to the lower position), and
        the rows scored exactly to find them (ascending) with their float32 cosines."""
        q = np.asarray(query, dtype=np.float32)
        total = len(self.rows)
        k = min(k, total)
        if k <= 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=np.float32)
        bound = float(np.abs(q.astype(np.float64)) @ self.error) + ROUNDING
        for ask in (min(total, FIRST_ASK * k), min(total, SECOND_ASK * k)):
            coded, labels = self.index.search(q[None], ask)
            scored = np.sort(self.rows[labels[0][labels[0] >= 0]])
            scores = row_scores(vectors, scored, q)
            best = top_k_indices(scores, k)
            if ask >= total or coded[0][ask - 1] + bound < scores[best[-1]]:
                return scored[best], scored, scores
        # too many codes within the bound of the k-th (near-ties, or a bound loosened by a
        # dense query over wide ranges): the float32 scan itself, with no gathered copy
        scores = scan_scores(vectors, q)[self.rows]
        return self.rows[top_k_indices(scores, k)], self.rows, scores


def _blocks(vectors: Rows, rows: np.ndarray) -> Iterator[np.ndarray]:
    """The float32 rows ``rows`` of ``vectors``, ``CODE_BLOCK`` at a time."""
    for start in range(0, len(rows), CODE_BLOCK):
        yield rows_at(vectors, rows[start:start + CODE_BLOCK])
