"""The ``k`` rows of a matrix most similar to a query, exactly, from a scan of byte codes.

A float32 scan reads 1.5 KB a row at 384 dimensions and is bound by memory: the scale
corpus's 65 K concept vectors take 8.4 ms a query on this 2-core machine
(``benchmarks/results/NOTES.md``, forty-fourth round). :class:`CodedScan` also holds each
row as a byte a dimension (faiss's scalar quantiser over the rows' range in each
dimension), scans those, and scores the best ``n`` rows exactly from the matrix. Each
dimension's largest decoding error, measured on the rows as they are coded, bounds how
far a decoded row's score can be from its row's: ``|q.v - q.v'| <= sum_d |q_d| err_d``.

The scan compares integers. A decoded row is ``low + (code + 0.5) * step`` in each
dimension, so ``q.v' = q.(low + 128.5 step) + sum_d q_d step_d (code_d - 128)``: the first
term is the same for every row, and the second is the query, scaled by the steps, against
the codes as signed bytes. Faiss scans signed bytes against a query coded as signed bytes
too, about twice as fast as it decodes each byte into its range (1.8 against 3.4 ms over
the scale corpus's 65 K concepts: ``benchmarks/results/NOTES.md``, fifty-fifth round). The
scaled query is rounded to integers in that coding, each dimension by at most ``r_d``, so
a code's score is also within ``||r|| * max ||code - 128||`` of the decoded row's
(Cauchy-Schwarz; the largest code norm is kept with the codes).

When the ``n``-th code's score plus both bounds (and float32 rounding) is below the
``k``-th exact score, no row outside the ``n`` can reach the ``k`` best, so the best ``k``
of the ``n`` are the scan's; otherwise a second pass asks for sixteen times as many, and
then the float32 scan runs after all. The answer is the float32 scan's: a gathered row
scores as it does in the whole scan (``products.grouped_product``), so ties go the same
way too. A BLAS whose products round by a row's position in other ways could still swap
rows within float32 rounding of the ``k``-th.

An update carries the codes (:meth:`CodedScan.refreshed`): the rows whose vectors did not
change keep theirs, and only the new and moved rows are coded, in the ranges the codes
were trained on. A row beyond those ranges would be coded with a larger error than the
rest, which would widen every query's bound; it is kept beside the codes instead, and
scored exactly by every query. Past ``MAX_BESIDE`` such rows the codes are trained and
made again. On MuSiQue a 1 % update puts about 20 rows beside 26 K codes
(``benchmarks/results/NOTES.md``, forty-fifth round).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from .ann import _faiss, coded_queries, one_query_search
from .sparse_values import distinct_sorted
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
# rows beyond the trained ranges that an update may keep beside the codes, scored exactly
# by every query (1.5 MB of rows at 384 dimensions), before the codes are made again
MAX_BESIDE = 1_024


@dataclass(frozen=True, eq=False)
class CodedScan:
    """Byte codes of some rows of a matrix (``rows``, ascending positions), coded in the
    ranges ``low`` to ``high`` of each dimension, and each dimension's largest decoding
    error over them (``error``); and rows outside those ranges, scored exactly by every
    query (``beside``, ascending). Read-only once built: concurrent queries may share it."""

    index: Any  # faiss.IndexScalarQuantizer over signed bytes: one code per row, in order
    codec: Any  # the 8-bit quantiser trained on the ranges, holding no code: codes, decodes
    rows: np.ndarray
    error: np.ndarray
    low: np.ndarray
    high: np.ndarray
    beside: np.ndarray
    # at least the largest ||code - 128|| over the codes (0 with none): an update keeps its
    # old value for the codes it carries (whose largest it bounds) and measures only those
    # it makes, rather than reading every code again (NOTES, fifty-sixth round)
    code_norm: float

    @classmethod
    def build(cls, vectors: Rows, rows: np.ndarray, wanted_by: str = "concept_search='codes'"
              ) -> CodedScan:
        """Codes of the rows ``rows`` (ascending positions) of ``vectors``, read a block
        at a time: the quantiser's range in each dimension is the rows' own."""
        rows = np.asarray(rows, dtype=np.int64)
        dim = int(vectors.shape[1])
        low = np.full(dim, np.inf, dtype=np.float32)
        high = np.full(dim, -np.inf, dtype=np.float32)
        for block in _blocks(vectors, rows):
            low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
        codec = _trained(low, high, wanted_by) if len(rows) else _quantiser(dim, wanted_by)
        scan = cls(_signed_scan(dim, wanted_by), codec, rows, np.zeros(dim, dtype=np.float64),
                   low, high, np.zeros(0, dtype=np.int64), 0.0)
        return scan._with_coded(vectors, rows, np.full(len(rows), -1), None)

    def refreshed(self, vectors: Rows, new_of_old: np.ndarray, drift: np.ndarray,
                  rows: np.ndarray) -> CodedScan:
        """These codes after an update: of the rows ``rows`` (ascending) of ``vectors``.

        ``new_of_old`` is each old row's new position (-1: gone) and ``drift`` how far
        each new row's vector moved (0: not at all). A row that did not move keeps its
        code; the others are coded in the trained ranges, or kept beside the codes where
        they fall outside them. Past ``MAX_BESIDE`` of those, the codes are built again
        (:meth:`build`)."""
        rows = np.asarray(rows, dtype=np.int64)
        if not len(self.rows):  # nothing coded, so no ranges trained
            return CodedScan.build(vectors, rows)
        moved_to = np.asarray(new_of_old)[self.rows]
        kept = moved_to >= 0
        kept[kept] = np.asarray(drift)[moved_to[kept]] == 0
        old_code = np.full(len(drift), -1, dtype=np.int64)
        old_code[moved_to[kept]] = np.flatnonzero(kept)
        carried = CodedScan(_signed_scan(len(self.low)), self.codec, rows, self.error,
                            self.low, self.high, self.beside[:0], self.code_norm)
        carried = carried._with_coded(vectors, rows, old_code[rows], self.codes())
        return carried if len(carried.beside) <= MAX_BESIDE else CodedScan.build(vectors, rows)

    def codes(self) -> np.ndarray:
        """The codes, one row of bytes per row of ``rows``: a read-only view of the
        scan's own (valid while this scan is)."""
        faiss = _faiss("concept_search='codes'")
        size = len(self.rows) * self.index.code_size
        codes = (np.asarray(faiss.rev_swig_ptr(self.index.codes.data(), size)) if size
                 else np.zeros(0, dtype=np.uint8))
        view = codes.reshape(len(self.rows), self.index.code_size)
        view.flags.writeable = False
        return view

    @classmethod
    def of_codes(cls, codes: np.ndarray, rows: np.ndarray, error: np.ndarray, low: np.ndarray,
                 high: np.ndarray, beside: np.ndarray) -> CodedScan:
        """The scan that :meth:`codes` and these fields were read from (a save's): its
        quantiser trained on the ranges again, which is all its training is. Raises
        ``ValueError`` where the parts do not fit together; what the codes say rests on
        the save's checksum, as the vectors' do (:meth:`check_bound` reads them)."""
        dim = len(low)
        if not (low.shape == high.shape == error.shape == (dim,) and dim
                and np.all(np.isfinite(error)) and np.all(error >= 0)):
            raise ValueError("the saved concept codes must have one range and one finite, "
                             "non-negative error per dimension")
        if len(rows) and not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))
                              and np.all(low <= high)):
            raise ValueError("the saved concept codes' ranges must be finite, low <= high")
        for name, positions in (("rows", rows), ("beside", beside)):
            if positions.ndim != 1 or np.any(np.diff(positions) <= 0) or (
                    len(positions) and positions[0] < 0):
                raise ValueError(f"the saved concept codes' {name} must be ascending, "
                                 "distinct positions")
        codec = _trained(low, high) if len(rows) else _quantiser(dim)
        if codes.shape != (len(rows), codec.code_size):
            raise ValueError(f"the saved concept codes must be {len(rows)} rows of "
                             f"{codec.code_size} bytes, got {codes.shape}")
        index = _signed_scan(dim)
        if len(rows):  # in one call, as _with_coded adds them
            index.add_sa_codes(np.ascontiguousarray(codes, dtype=np.uint8))
        code_norm = max((_largest_code_norm(codes[start:start + CODE_BLOCK])
                         for start in range(0, len(rows), CODE_BLOCK)), default=0.0)
        return cls(index, codec, rows, error, low, high, beside, code_norm)

    def check_holds(self, rows: np.ndarray) -> None:
        """Raise ``ValueError`` unless the codes and the rows beside them are ``rows``."""
        held = np.union1d(self.rows, self.beside)
        if len(held) != len(self.rows) + len(self.beside) or not np.array_equal(held, rows):
            raise ValueError("the saved concept codes do not hold the concepts that link a "
                             "unit (each one coded or beside the codes)")

    def check_bound(self, vectors: Rows) -> None:
        """Raise ``ValueError`` unless every code decodes within ``error`` of its row in
        every dimension: the bound that makes the scan's answer exact (a save's
        ``verify`` reads every code)."""
        codes = self.codes()
        for start in range(0, len(self.rows), CODE_BLOCK):
            block = rows_at(vectors, self.rows[start:start + CODE_BLOCK])
            decoded = self.codec.sa_decode(np.ascontiguousarray(codes[start:start + CODE_BLOCK]))
            if np.any(np.abs(block - decoded) > self.error):
                raise ValueError("the saved concept codes decode farther from their "
                                 "vectors than their error allows")

    def _with_coded(self, vectors: Rows, rows: np.ndarray, old_code: np.ndarray,
                    old_codes: np.ndarray | None) -> CodedScan:
        """This scan with a code added to its empty scan for each row of ``rows`` in
        order: ``old_codes[old_code[i]]`` where that is not -1, else the row's of
        ``vectors``, coded here a block at a time where it lies in the ranges and kept
        beside otherwise; the error and the code norm widened by those of the rows coded."""
        error, code_norm = self.error, self.code_norm
        coded, beside = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        # added to the scan in one call: faiss grows its codes by copying them all, so a
        # block at a time copied them about as often as there are blocks (NOTES, 56th round)
        added = np.empty((len(rows), self.index.code_size), dtype=np.uint8)
        filled = 0
        for start in range(0, len(rows), CODE_BLOCK):
            at = rows[start:start + CODE_BLOCK]
            old = old_code[start:start + CODE_BLOCK]
            codes = np.zeros((len(at), self.index.code_size), dtype=np.uint8)
            fresh = old < 0
            if old_codes is not None and not fresh.all():
                codes[~fresh] = old_codes[old[~fresh]]
            block = rows_at(vectors, at[fresh])
            inside = np.all((block >= self.low) & (block <= self.high), axis=1)
            coded_here = np.flatnonzero(fresh)[inside]
            held = ~fresh
            held[coded_here] = True
            if len(coded_here):
                block = block[inside]
                made = self.codec.sa_encode(block)
                codes[coded_here] = made
                error = np.maximum(error, np.abs(block - self.codec.sa_decode(made)).max(axis=0))
                code_norm = max(code_norm, _largest_code_norm(made))
            count = int(held.sum())
            added[filled:filled + count] = codes[held]
            filled += count
            coded.append(at[held])
            beside.append(at[~held])
        if filled:
            self.index.add_sa_codes(added[:filled])
        return CodedScan(self.index, self.codec, np.concatenate(coded), error, self.low,
                         self.high, np.concatenate(beside), code_norm)

    def __len__(self) -> int:
        return len(self.rows) + len(self.beside)

    def top(self, vectors: Rows, query: np.ndarray, k: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(best, scored, their cosines)``: the ``k`` rows held most similar to
        ``query`` (positions in ``vectors``, best first, ties to the lower position), and
        the rows scored exactly to find them (ascending) with their float32 cosines."""
        q = np.asarray(query, dtype=np.float32)
        coded = len(self.rows)
        k = min(k, len(self))
        if k <= 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=np.float32)
        coding = self._query_coding(q) if coded else None
        for ask in (min(coded, FIRST_ASK * k), min(coded, SECOND_ASK * k)):
            if ask:
                assert coding is not None
                found, labels = one_query_search(self.index, coding.codes, ask)
            else:
                found, labels = np.zeros((1, 0)), np.zeros((1, 0), dtype=np.int64)
            scored = distinct_sorted(np.concatenate([self.rows[labels[0][labels[0] >= 0]],
                                                     self.beside]))
            scores = row_scores(vectors, scored, q)
            best = top_k_indices(scores, k)
            if ask >= coded or (coding is not None and coding.score(found[0][ask - 1])
                                + coding.bound < scores[best[-1]]):
                return scored[best], scored, scores
        # too many codes within the bound of the k-th (near-ties, or a bound loosened by a
        # dense query over wide ranges): the float32 scan itself, with no gathered copy
        every = np.union1d(self.rows, self.beside)
        scores = scan_scores(vectors, q)[every]
        return every[top_k_indices(scores, k)], every, scores

    def _query_coding(self, q: np.ndarray) -> QueryCoding:
        """The query as the scan compares it with the codes, and how far a code's score
        from it can be from its row's exact score."""
        step, middle = self._decoding
        q64 = q.astype(np.float64)
        scaled = q64 * step  # the query against the codes as signed bytes
        codes, scales = coded_queries(scaled)  # as the HNSW over signed bytes codes a query
        scale = float(scales[0])
        rounded = float(np.linalg.norm(codes[0].astype(np.float64) / scale - scaled))
        bound = float(np.abs(q64) @ self.error) + rounded * self.code_norm + ROUNDING
        return QueryCoding(codes, scale, float(q64 @ middle), bound)

    @cached_property
    def _decoding(self) -> tuple[np.ndarray, np.ndarray]:
        """Each dimension's step and the value of its byte 128: a code ``c`` decodes to
        ``middle + step * (c - 128)``, as the quantiser's ``low + step * (c + 0.5)``."""
        trained = _faiss().vector_to_array(self.codec.sq.trained).astype(np.float64)
        dim = len(self.low)
        step = trained[dim:] / 255.0
        return step, trained[:dim] + 128.5 * step


@dataclass(frozen=True)
class QueryCoding:
    """A query coded for :meth:`CodedScan.top`: its signed byte codes (float32 integers,
    which faiss codes exactly), their ``scale``, the part of every decoded row's score
    that does not depend on the row (``offset``), and the ``bound`` on how far a code's
    score is from its row's exact score."""

    codes: np.ndarray
    scale: float
    offset: float
    bound: float

    def score(self, found: float) -> float:
        """The code's score, from what the scan found for it."""
        return self.offset + float(found) / self.scale


def _largest_code_norm(codes: np.ndarray) -> float:
    """The largest ``||code - 128||`` over rows of codes (0 for none)."""
    if not len(codes):
        return 0.0
    signed = codes.astype(np.float32) - 128.0
    return float(np.sqrt(np.einsum("ij,ij->i", signed, signed).max()))


def _signed_scan(dim: int, wanted_by: str = "concept_search='codes'") -> Any:
    """An empty scan over signed byte codes in ``dim`` by inner product (nothing to
    train: a byte is its own value)."""
    faiss = _faiss(wanted_by)
    return faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit_direct_signed,
                                      faiss.METRIC_INNER_PRODUCT)


def _quantiser(dim: int, wanted_by: str = "concept_search='codes'") -> Any:
    """An empty, untrained 8-bit scalar quantiser over inner products in ``dim``."""
    faiss = _faiss(wanted_by)
    return faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit,
                                      faiss.METRIC_INNER_PRODUCT)


def _trained(low: np.ndarray, high: np.ndarray, wanted_by: str = "concept_search='codes'"
             ) -> Any:
    """An empty quantiser trained on the ranges ``low`` to ``high`` (its min-max training
    reads only each dimension's two ends, so these two rows train it)."""
    index = _quantiser(len(low), wanted_by)
    index.train(np.ascontiguousarray(np.stack([low, high]), dtype=np.float32))
    return index


def _blocks(vectors: Rows, rows: np.ndarray) -> Iterator[np.ndarray]:
    """The float32 rows ``rows`` of ``vectors``, ``CODE_BLOCK`` at a time."""
    for start in range(0, len(rows), CODE_BLOCK):
        yield rows_at(vectors, rows[start:start + CODE_BLOCK])
