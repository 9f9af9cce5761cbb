"""An update's passes over the strong pairs, in compiled loops where numba is installed.

A refresh rechecks every carried pair whose concepts moved (at 10 K passages a 1 % add
moves 99 % of the concepts: millions of pairs) and counts the pairs that might newly
pass ``theta_co`` from their two chunk columns. numpy does the first in several passes
with temporaries as long as the pairs, and the second by bit masks over every chunk, a
group of 52 concepts at a time. Here each is one loop. Without numba, or with
``CONCEPTGRAPH_COMPILED=0``, each function returns None and the caller's numpy runs
(:mod:`shared_core.graph.edges`); the results are the same either way: the same float64
and float32 roundings in the same order for the margins, exact integers for the counts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..compiled import CompiledLoops, jit, read_only

# 1 - 2^-23: a margin scaled by it before rounding to float32 cannot round up in magnitude
# (``edges._toward_zero``)
TOWARD_ZERO = 1.0 - 2.0**-23


def recertified_in_place(source: np.ndarray, target: np.ndarray, drift: np.ndarray,
                         margin: np.ndarray, slack: float) -> np.ndarray | None:
    """``edges.recertified`` over every pair whose concepts moved, in one pass.

    Each pair's movement is ``drift[source] + drift[target]``; a pair that moved has its
    ``margin`` (float32, written in place) shrunk by it, and its position is returned
    (ascending) where the shrunk margin no longer clears ``slack``. None without the
    compiled loops.
    """
    loops = _LOOPS.active()
    if not loops:
        return None
    if not (len(source) == len(target) == len(margin)) or margin.dtype != np.float32:
        raise ValueError("source, target and margin must be as long, margin float32")
    if not margin.flags.writeable:
        raise ValueError("the margins are shrunk in place: they must be writeable")
    if len(source) and max(int(source.max()), int(target.max())) >= len(drift):
        raise IndexError(f"a pair's concept is out of range for {len(drift)} drifts")
    redo: np.ndarray = loops["recertify"](read_only(source), read_only(target),
                                          read_only(np.asarray(drift, dtype=np.float64)),
                                          margin, float(slack))
    return redo


def pair_counts_compiled(links_csc: sp.csc_matrix, src: np.ndarray,
                         dst: np.ndarray) -> np.ndarray | None:
    """How many rows (chunks) columns ``src[i]`` and ``dst[i]`` both hold, for every i
    (int64). The pairs are grouped by their longer column; its rows are marked once, and
    each pair's shorter column is read against the marks: the cost numpy's bit masks
    have (:func:`~shared_core.graph.edges.pair_counts`), without their passes over every
    row. Entries are counted once each: a column must not repeat a row. None without the
    compiled loops."""
    loops = _LOOPS.active()
    if not loops:
        return None
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if len(src) != len(dst):
        raise ValueError(f"{len(src)} sources for {len(dst)} targets")
    n = links_csc.shape[1]
    if len(src) and (min(int(src.min()), int(dst.min())) < 0
                     or max(int(src.max()), int(dst.max())) >= n):
        raise IndexError(f"a pair's column is out of range for {n} columns")
    if len(links_csc.indices) and (int(links_csc.indices.min()) < 0
                                   or int(links_csc.indices.max()) >= links_csc.shape[0]):
        raise IndexError(f"a column's entry is out of range for {links_csc.shape[0]} rows")
    counts: np.ndarray = loops["intersections"](read_only(links_csc.indptr),
                                                read_only(links_csc.indices),
                                                read_only(src), read_only(dst),
                                                links_csc.shape[0])
    return counts


def _make_loops(numba: Any) -> dict[str, Any]:
    """The compiled loops (:func:`~shared_core.compiled.jit`)."""
    compile_loop = jit(numba)

    @compile_loop
    def recertify(source: Any, target: Any, drift: Any, margin: Any, slack: float) -> Any:
        redo = np.empty(len(source), np.int64)
        j = 0
        for i in range(len(source)):
            moved = drift[source[i]] + drift[target[i]]
            if moved == 0.0:
                continue
            m = margin[i]
            room = abs(np.float64(m)) - moved
            if not room > slack:
                redo[j] = i
                j += 1
            if room < 0.0:
                room = 0.0
            margin[i] = np.float32(math.copysign(room, m) * TOWARD_ZERO)
        return redo[:j].copy()

    @compile_loop
    def intersections(indptr: Any, indices: Any, src: Any, dst: Any, rows: int) -> Any:
        n, columns = len(src), len(indptr) - 1
        short = np.empty(n, np.int64)
        long = np.empty(n, np.int64)
        starts = np.zeros(columns + 1, np.int64)  # the pairs grouped by longer column
        for p in range(n):
            a, b = src[p], dst[p]
            if indptr[a + 1] - indptr[a] > indptr[b + 1] - indptr[b]:
                a, b = b, a
            short[p], long[p] = a, b
            starts[b + 1] += 1
        for c in range(columns):
            starts[c + 1] += starts[c]
        order = np.empty(n, np.int64)
        filled = starts[:-1].copy()
        for p in range(n):
            order[filled[long[p]]] = p
            filled[long[p]] += 1
        counts = np.zeros(n, np.int64)
        mark = np.zeros(rows, np.uint8)
        for c in range(columns):
            if starts[c + 1] == starts[c]:
                continue
            for e in range(indptr[c], indptr[c + 1]):
                mark[indices[e]] = 1
            for k in range(starts[c], starts[c + 1]):
                p = order[k]
                total = 0
                for e in range(indptr[short[p]], indptr[short[p] + 1]):
                    total += mark[indices[e]]
                counts[p] = total
            for e in range(indptr[c], indptr[c + 1]):
                mark[indices[e]] = 0
        return counts

    return {"recertify": recertify, "intersections": intersections}


_LOOPS = CompiledLoops(_make_loops)
