"""Posting entries summed by unit, in compiled loops where numba is installed.

A query's sparse views (concept evidence, BM25 and the walk) each add up hundreds of
thousands of posting entries by the unit they belong to: 532 K entries a query over
the three views at a million passages. numpy does that with a ``bincount`` over every
unit, a pass over an array as long as the corpus that ``PositiveView.of_scores`` then
scans again, or, for fewer entries, with a sort of them. With numba (the ``fast``
extra), a loop adds each entry into an array that stays zero between calls, one per
thread, marks its unit in a bitmap, and collects the marked units in ascending order:
4.9 ms a query against 11.0-13.7 for the three views' sums
(``benchmarks/results/NOTES.md``, fifty-fifth round). Without numba the numpy code
below runs; :func:`compiled` says which.

The sums are the same floats either way: each unit's sum starts at 0.0 and adds its
entries in the order given, as ``bincount`` does, and a posting entry's mass is its
value in float64 times its column's value, as numpy's promotion makes it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..compiled import COMPILED_ENV, CompiledLoops, jit, read_only
from ..graph.entries import entry_positions

__all__ = ["COMPILED_ENV", "compiled", "gathered_entries", "missing", "posting_sums",
           "prepare", "run_sums", "summed_by_index"]

# the position of a 64-bit word's lowest set bit: (word & -word) * DE_BRUIJN >> 58 indexes it
_DE_BRUIJN = 0x03F79D71B4CB0A89
_LOWEST_BIT = np.array([0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55,
                        59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5, 63, 47, 56,
                        27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11, 46, 26, 40, 15,
                        34, 20, 31, 10, 25, 14, 19, 9, 13, 8, 7, 6], dtype=np.int64)


def compiled() -> bool:
    """Whether the sums run in compiled loops: numba importable, and not turned off by
    ``CONCEPTGRAPH_COMPILED=0``. Compiles them on first call (about a second; numba
    caches them on disk for the next process)."""
    return bool(_LOOPS.active())


def missing() -> str | None:
    """Why the loops cannot run (numba not installed), or None where they can."""
    return _LOOPS.missing()


class _Scratch(threading.local):
    """One thread's sums (float64) and bitmap of units touched, zero between calls."""

    def __init__(self) -> None:
        self.sums = np.zeros(0, dtype=np.float64)
        self.bits = np.zeros(0, dtype=np.uint64)

    def at_least(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self.sums) < size:
            self.sums = np.zeros(size, dtype=np.float64)
            self.bits = np.zeros((size + 63) // 64, dtype=np.uint64)
        return self.sums, self.bits


_scratch = _Scratch()


def summed_by_index(indices: np.ndarray, mass: np.ndarray, size: int | None = None,
                    positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``indices`` (ascending) and each one's summed ``mass`` (only those
    above zero where ``positive``). ``size`` bounds the indices (every one is below it);
    without it the largest index is looked up."""
    indices = np.asarray(indices)
    mass = np.asarray(mass, dtype=np.float64)
    if len(indices) != len(mass):
        raise ValueError(f"{len(indices)} indices for {len(mass)} masses")
    loops = _LOOPS.active()
    if not loops:
        return _numpy_sums(indices.astype(np.int64, copy=False), mass, positive)
    if size is None:
        size = int(indices.max()) + 1 if len(indices) else 0
    sums, bits = _scratch.at_least(size)
    units, values, bad = loops["entries"](read_only(indices), read_only(mass), sums, bits,
                                          size, positive, _LOWEST_BIT)
    if bad >= 0:
        raise IndexError(f"index {int(indices[bad])} out of range for {size}")
    return units, values


def posting_sums(postings: sp.csc_matrix, columns: np.ndarray,
                 column_value: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The units (rows) the ``columns``' postings reach, ascending, and the sum of their
    entries there (each times its column's ``column_value``), those above zero; the
    columns are read in the order given."""
    columns = np.asarray(columns, dtype=np.int64)
    loops = _LOOPS.active()
    if not loops:
        return _numpy_sums(*gathered_entries(postings, columns, column_value), positive=True)
    values = (np.zeros(0, dtype=np.float64) if column_value is None
              else np.asarray(column_value, dtype=np.float64))
    if column_value is not None and len(values) != len(columns):
        raise ValueError(f"{len(values)} column values for {len(columns)} columns")
    size = postings.shape[0]
    sums, bits = _scratch.at_least(size)
    units, summed, bad = loops["postings"](
        read_only(postings.indptr), read_only(postings.indices), read_only(postings.data),
        read_only(columns), read_only(values), column_value is not None, sums, bits, size,
        _LOWEST_BIT)
    if bad >= 0:
        raise IndexError(f"a posting entry of column {int(columns[bad])} is out of range "
                         f"for {size} units")
    return units, summed


def gathered_entries(postings: sp.csc_matrix, columns: np.ndarray,
                     column_value: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every entry of the ``columns``' postings, in the order given, gathered by position:
    its unit (int64) and what it carries (times its column's ``column_value``; float64)."""
    positions, owner = entry_positions(postings, np.asarray(columns, dtype=np.int64))
    mass = postings.data[positions]
    if column_value is not None:
        mass = mass * column_value[owner]
    return (postings.indices[positions].astype(np.int64, copy=False),
            np.asarray(mass, dtype=np.float64))


def run_sums(indptr: np.ndarray, indices: np.ndarray, first: np.ndarray, end: np.ndarray,
             value: np.ndarray) -> np.ndarray | None:
    """For each pair ``first[i], end[i]``, the sum of ``value[indices[e]]`` over the entries
    ``e`` of the compressed rows ``first[i]`` to ``end[i] - 1`` (``indptr``), added in
    entry order from 0.0, as a ``bincount`` of the entries by pair adds them; None
    without the compiled loops (the caller's numpy runs instead)."""
    loops = _LOOPS.active()
    if not loops:
        return None
    first = np.asarray(first, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    if len(first) != len(end) or (len(first) and (
            first.min() < 0 or end.max() >= len(indptr) or np.any(end < first))):
        raise IndexError("row runs out of range of the compressed rows")
    out = loops["runs"](read_only(indptr), read_only(indices), read_only(first),
                        read_only(end), read_only(np.asarray(value, dtype=np.float64)))
    if out is None:
        raise IndexError(f"an entry's index is out of range for {len(value)} values")
    return np.asarray(out)


def prepare(*postings: sp.csc_matrix) -> None:
    """Make the compiled loops for these postings' arrays and for entries of either index
    type (numba compiles a loop for each kind of array it is given, or loads it from its
    cache: 0.2-0.6 s each), so that no query waits for that
    (``ConceptGraphIndex.warm``). Nothing to do without numba."""
    if not compiled():
        return
    for index_type in (np.int32, np.int64):
        summed_by_index(np.zeros(0, dtype=index_type), np.zeros(0), 1, positive=True)
    none = np.zeros(0, dtype=np.int64)
    for matrix in postings:
        posting_sums(matrix, none)
        posting_sums(matrix, none, np.zeros(0))


def _numpy_sums(indices: np.ndarray, mass: np.ndarray, positive: bool
                ) -> tuple[np.ndarray, np.ndarray]:
    """The numpy sums: a stable sort keeps each index's entries in their given order, so
    every sum adds in the order a ``bincount`` over all indices would."""
    order = np.argsort(indices, kind="stable")
    ordered = indices[order]
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    group = np.cumsum(first) - 1
    summed = np.bincount(group, weights=mass[order], minlength=int(first.sum()))
    distinct = ordered[first]
    if positive:
        above = summed > 0
        return distinct[above], summed[above]
    return distinct, summed


def _make_loops(numba: Any) -> dict[str, Any]:
    """The compiled loops (:func:`~shared_core.compiled.jit`)."""
    compile_loop = jit(numba)
    magic = np.uint64(_DE_BRUIJN)
    one, shift = np.uint64(1), np.uint64(58)

    @compile_loop
    def collected(sums: Any, bits: Any, first: int, last: int, cap: int,
                  positive: bool, lowest: Any) -> Any:
        # the marked units from word first to last, ascending, with their sums; both
        # arrays are left zero there
        units = np.empty(cap, np.int64)
        values = np.empty(cap, np.float64)
        j = 0
        for w in range(first, last + 1):
            word = bits[w]
            if word == 0:
                continue
            bits[w] = 0
            while word:
                low = word & (~word + one)
                unit = (w << 6) + lowest[(low * magic) >> shift]
                value = sums[unit]
                sums[unit] = 0.0
                if value > 0 or not positive:
                    units[j] = unit
                    values[j] = value
                    j += 1
                word ^= low
        return units[:j], values[:j]

    @compile_loop
    def cleared(indices: Any, count: int, sums: Any, bits: Any) -> None:
        for i in range(count):
            sums[indices[i]] = 0.0
            bits[indices[i] >> 6] = 0

    @compile_loop
    def entries(indices: Any, mass: Any, sums: Any, bits: Any, size: int, positive: bool,
                lowest: Any) -> Any:
        first, last = len(bits), -1
        for i in range(len(indices)):
            unit = indices[i]
            if unit < 0 or unit >= size:
                cleared(indices, i, sums, bits)
                return np.empty(0, np.int64), np.empty(0, np.float64), i
            sums[unit] += mass[i]
            w = unit >> 6
            bits[w] |= one << np.uint64(unit & 63)
            first = min(first, w)
            last = max(last, w)
        units, values = collected(sums, bits, first, last, min(len(indices), size),
                                  positive, lowest)
        return units, values, -1

    @compile_loop
    def postings(indptr: Any, indices: Any, data: Any, columns: Any, column_value: Any,
                 weighted: bool, sums: Any, bits: Any, size: int, lowest: Any) -> Any:
        first, last, count = len(bits), -1, 0
        for k in range(len(columns)):
            start, end = indptr[columns[k]], indptr[columns[k] + 1]
            for e in range(start, end):
                unit = indices[e]
                if unit < 0 or unit >= size:
                    for kk in range(k + 1):  # what was added so far, then this column's
                        s = indptr[columns[kk]]
                        stop = e if kk == k else indptr[columns[kk] + 1]
                        cleared(indices[s:stop], stop - s, sums, bits)
                    return np.empty(0, np.int64), np.empty(0, np.float64), k
                mass = np.float64(data[e])
                if weighted:
                    mass = mass * column_value[k]
                sums[unit] += mass
                w = unit >> 6
                bits[w] |= one << np.uint64(unit & 63)
                first = min(first, w)
                last = max(last, w)
            count += end - start
        units, values = collected(sums, bits, first, last, min(count, size), True, lowest)
        return units, values, -1

    @compile_loop
    def runs(indptr: Any, indices: Any, first: Any, end: Any, value: Any) -> Any:
        out = np.zeros(len(first), np.float64)
        for i in range(len(first)):
            total = 0.0
            for e in range(indptr[first[i]], indptr[end[i]]):
                column = indices[e]
                if column < 0 or column >= len(value):
                    return None
                total += value[column]
            out[i] = total
        return out

    return {"entries": entries, "postings": postings, "runs": runs}


_LOOPS = CompiledLoops(_make_loops)
