"""Rows as one signed byte a value and one scale a row: the candidate path's rescoring
from a quarter of float32's bytes (``ConceptGraphConfig.rescore_from="codes"``).

At a million passages a query rescores a few thousand of 4.4 M float32 sentence rows
(6.8 GB) beside faiss's HNSW index (2.8 GB). Together they do not stay in an 8 GiB
machine's memory, so a question that reaches rows not read before waits for the disk
(``benchmarks/results/NOTES.md``, fifty-eighth and fifty-ninth rounds). Their codes
take 1.7 GB, held on the heap, where the cache's pressure cannot evict them.

A row ``r`` is held as ``codes = round(r / s)`` with ``s = max|r| / CODE_MAX``, so each
value is off by at most ``s / 2``. The HNSW index's own codes share one scale over the
whole index (faiss compares them as integers), which leaves a typical value only a few
steps; a scale a row keeps every row's full range. Codes are made per array the rows sit
in (``state.rows.VectorRows``'s runs) and kept while that array lives, so an update
codes only its new rows.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np

from ..paging import sequential_reads
from .ann import ROW_CODE_MAX, code_scales

CODE_MAX = ROW_CODE_MAX  # a code's largest magnitude: signed bytes, as HNSW's codes
CODE_BLOCK = 1 << 14  # rows coded at a time: 50 MB of float64 temporaries at 384 dimensions


@dataclass(frozen=True, eq=False)
class RowCodes:
    """Rows as ``codes * scales[:, None]``: int8 codes and one float32 scale a row."""

    codes: np.ndarray
    scales: np.ndarray

    def __post_init__(self) -> None:
        if self.codes.dtype != np.int8 or self.codes.ndim != 2:
            raise ValueError(f"row codes are a 2-d int8 array, got {self.codes.dtype} "
                             f"of shape {self.codes.shape}")
        if self.scales.dtype != np.float32 or self.scales.shape != (len(self.codes),):
            raise ValueError(f"row codes need one float32 scale a row ({len(self.codes)}), "
                             f"got {self.scales.dtype} of shape {self.scales.shape}")

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes)

    def rows(self, at: np.ndarray) -> np.ndarray:
        """Rows ``at`` decoded to float32."""
        out = self.codes[at].astype(np.float32)
        out *= self.scales[at][:, None]
        return out


def code_rows(rows: np.ndarray) -> RowCodes:
    """The codes of float32 ``rows``: each row scaled to ``CODE_MAX`` at its largest
    magnitude and rounded (a row of zeros codes as zeros). Worked in float64, so that
    a row of tiny values still reaches ``CODE_MAX``."""
    rows = np.asarray(rows, dtype=np.float32)
    if rows.ndim != 2:
        raise ValueError(f"rows to code are a 2-d array, got shape {rows.shape}")
    largest = np.abs(rows).max(axis=1, initial=0.0)
    if not np.all(np.isfinite(largest)):
        raise ValueError("rows to code hold a NaN or an infinite value")
    steps = code_scales(largest)  # float64
    codes = np.rint(rows * steps[:, None])
    scales = (1.0 / steps).astype(np.float32)
    np.clip(codes, -CODE_MAX, CODE_MAX, out=codes)
    return RowCodes(codes.astype(np.int8), scales)


def code_array(array: np.ndarray, block: int = CODE_BLOCK) -> RowCodes:
    """:func:`code_rows` of a whole array (a mapped file read in order), a block at a time."""
    codes = np.empty(array.shape, dtype=np.int8)
    scales = np.empty(len(array), dtype=np.float32)
    with sequential_reads(array):
        for start in range(0, len(array), block):
            coded = code_rows(np.asarray(array[start:start + block]))
            codes[start:start + len(coded)] = coded.codes
            scales[start:start + len(coded)] = coded.scales
    return RowCodes(codes, scales)


class _CodesByArray:
    """Each live array's codes, made on first use and dropped with the array."""

    def __init__(self) -> None:
        self._codes: dict[int, RowCodes] = {}
        self._lock = threading.Lock()

    def of(self, array: np.ndarray) -> RowCodes:
        key = id(array)
        found = self._codes.get(key)
        if found is not None:
            return found
        with self._lock:  # one coding of an array, however many queries ask at once
            found = self._codes.get(key)
            if found is None:
                found = code_array(array)
                self._codes[key] = found
                weakref.finalize(array, self._codes.pop, key, None)
        return found

    def __contains__(self, array: object) -> bool:
        return id(array) in self._codes


_CODES = _CodesByArray()


def _arrays(matrix: object) -> tuple[np.ndarray, ...]:
    """The arrays ``matrix``'s rows sit in: its runs (``VectorRows``), or itself."""
    runs = getattr(matrix, "runs", None)
    if isinstance(runs, tuple):
        return runs
    if isinstance(matrix, np.ndarray):
        return (matrix,)
    raise TypeError(f"rows held as {type(matrix).__name__} have no codes: codes are made "
                    "of an index's own vectors (a numpy array, or rows left in place)")


def codes_ready(matrix: object) -> bool:
    """Whether every array ``matrix``'s rows sit in is coded already."""
    return all(array in _CODES for array in _arrays(matrix))


def make_codes(matrix: object) -> int:
    """Code every array ``matrix``'s rows sit in that is not coded yet (what the first
    query would, :meth:`ConceptGraphIndex.warm`); returns the bytes the codes hold."""
    return sum(_CODES.of(array).nbytes for array in _arrays(matrix))


def coded_rows_at(matrix: object, positions: np.ndarray) -> np.ndarray:
    """Rows ``positions`` of ``matrix`` decoded from their codes (float32, one row each),
    the arrays coded first where they are not yet."""
    positions = np.asarray(positions, dtype=np.int64)
    located = getattr(matrix, "located_in_order", None)
    if located is None:
        (array,) = _arrays(matrix)
        return _CODES.of(array).rows(positions)
    runs, run_of, at = located(positions)
    if len(runs) == 1:
        return _CODES.of(runs[0]).rows(at)
    out = np.empty((len(positions), matrix.shape[1]), dtype=np.float32)  # type: ignore[attr-defined]
    for i, run in enumerate(runs):
        mine = run_of == i
        if mine.any():
            out[mine] = _CODES.of(run).rows(at[mine])
    return out
