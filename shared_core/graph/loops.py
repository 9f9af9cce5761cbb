"""The graph's passes that numpy makes in many steps, in compiled loops where numba is installed.

A refresh rechecks every carried strong pair one of whose concepts moved (at 10 K
passages a 1 % add moves about 3,000 of 44,566 concepts, and the recheck reads all 868 K
pairs) and counts the pairs that might newly pass ``theta_co`` from their two chunk
columns; every derivation and refresh picks each chunk's top TF-IDF keywords and builds
the Dice adjacency. numpy does the first in several passes with temporaries as long as
the pairs, the second by bit masks over every chunk, a group of 52 concepts at a time,
the third by sorting padded blocks of rows, and the fourth through an edge list and a
sparse sum. Here each is one loop. Without numba, or with ``CONCEPTGRAPH_COMPILED=0``,
each function returns None and the caller's numpy runs (:mod:`shared_core.graph.edges`,
:mod:`shared_core.graph.concepts`, :mod:`shared_core.state.derived`); the results are the
same either way: the same float64 and float32 roundings in the same order for the
margins and the Dice weights, exact integers for the counts, the same entries for the
keywords.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..compiled import CompiledLoops, jit, read_only

# 1 - 2^-23: a margin scaled by it before rounding to float32 cannot round up in magnitude
# (``edges._toward_zero``, which numpy's recheck uses, and the compiled one below)
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


def top_entries_compiled(indptr: np.ndarray, data: np.ndarray, n: int) -> np.ndarray | None:
    """Which entries of each compressed row are among its ``n`` highest (ties to the
    earlier entry) and above zero, as a mask over ``data``; a row of at most ``n``
    entries keeps all that are above zero. None without the compiled loops."""
    loops = _LOOPS.active()
    if not loops:
        return None
    if len(indptr) < 1 or int(indptr[-1]) != len(data):
        raise ValueError(f"indptr ends at {int(indptr[-1]) if len(indptr) else None}, "
                         f"not at the {len(data)} entries")
    keep: np.ndarray = loops["top_entries"](read_only(indptr), read_only(data), int(n))
    return keep


def dice_adjacency_compiled(source: np.ndarray, target: np.ndarray, count: np.ndarray,
                            edge: np.ndarray, chunk_count: np.ndarray
                            ) -> sp.csr_matrix | None:
    """The symmetric Dice adjacency of the pairs marked ``edge``, in canonical CSR form,
    written row by row from the pairs (sorted by source, then target, source < target):
    each row holds its lower entries (its pairs as target, in source order), then its
    upper ones. The weight is ``2·count / (chunk_count[source] + chunk_count[target])`` in
    float64, as :func:`~shared_core.graph.edges.edges_of` computes it. None without the
    compiled loops, or where the pairs are not sorted that way (numpy then sorts them)."""
    loops = _LOOPS.active()
    if not loops:
        return None
    n = len(chunk_count)
    if not (len(source) == len(target) == len(count) == len(edge)):
        raise ValueError("source, target, count and edge must be as long")
    if len(source) and (min(int(source.min()), int(target.min())) < 0
                        or max(int(source.max()), int(target.max())) >= n):
        raise IndexError(f"a pair's concept is out of range for {n} concepts")
    made = loops["dice_adjacency"](read_only(source), read_only(target), read_only(count),
                                   read_only(edge),
                                   read_only(np.asarray(chunk_count, dtype=np.float64)))
    if made is None:
        return None
    data, indices, indptr = made
    index = np.int32 if len(data) < 2**31 and n < 2**31 else np.int64
    matrix = sp.csr_matrix((data, indices.astype(index), indptr.astype(index)), shape=(n, n))
    matrix.has_sorted_indices = True
    matrix.has_canonical_format = True
    return matrix


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

    @compile_loop
    def top_entries(indptr: Any, data: Any, n: int) -> Any:
        keep = np.zeros(len(data), np.bool_)
        if n <= 0:
            return keep
        best = np.empty(n, np.int64)  # a row's best entries so far, best first
        for r in range(len(indptr) - 1):
            start, end = indptr[r], indptr[r + 1]
            if end - start <= n:
                for k in range(start, end):
                    keep[k] = data[k] > 0
                continue
            held = 0
            for k in range(start, end):
                value = data[k]
                if held < n:
                    j = held
                    held += 1
                elif value > data[best[n - 1]]:  # an equal one came first: it stays
                    j = n - 1
                else:
                    continue
                while j > 0 and data[best[j - 1]] < value:
                    best[j] = best[j - 1]
                    j -= 1
                best[j] = k
            for j in range(n):
                keep[best[j]] = data[best[j]] > 0
        return keep

    @compile_loop
    def dice_adjacency(source: Any, target: Any, count: Any, edge: Any,
                       chunk_count: Any) -> Any:
        n = len(chunk_count)
        lower = np.zeros(n, np.int64)  # each row's entries left of the diagonal
        indptr = np.zeros(n + 1, np.int64)
        previous = np.int64(-1)
        for i in range(len(source)):
            s, t = np.int64(source[i]), np.int64(target[i])
            key = s * n + t
            if s >= t or key <= previous:
                return None
            previous = key
            if edge[i]:
                lower[t] += 1
                indptr[s + 1] += 1
                indptr[t + 1] += 1
        for r in range(n):
            indptr[r + 1] += indptr[r]
        data = np.empty(indptr[n], np.float64)
        indices = np.empty(indptr[n], np.int64)
        below = indptr[:-1].copy()  # where each row's next entry left of the diagonal goes
        above = indptr[:-1] + lower  # and right of it
        for i in range(len(source)):
            if not edge[i]:
                continue
            s, t = source[i], target[i]
            weight = 2.0 * np.float64(count[i]) / (chunk_count[s] + chunk_count[t])
            data[above[s]], indices[above[s]] = weight, t
            above[s] += 1
            data[below[t]], indices[below[t]] = weight, s
            below[t] += 1
        return data, indices, indptr

    return {"recertify": recertify, "intersections": intersections, "top_entries": top_entries,
            "dice_adjacency": dice_adjacency}


_LOOPS = CompiledLoops(_make_loops)
