"""Vectors left where they are: an update gathers row numbers, not rows.

A state holds its sentence vectors in canonical (chunk id) order, and at a million
passages they are 6.8 GB. An add or a delete used to write every one of them again
in the new order: 20 s of a 1 % add's 80 s, most of it reading the mapped save,
and at 10 K passages a quarter of the first add after a load (benchmarks/results/
NOTES.md). :class:`VectorRows` instead keeps the rows in the arrays they already
sit in (the loaded save's mapped file, a spill file, the new chunks' rows on the
heap) with the row of those arrays at each position. Taking and merging states
gathers that index; reading rows gathers the rows asked for, as the query path's
rescoring always did. A refresh keeps the concept vectors the same way: the
unchanged concepts' rows where they were, the changed ones' in a small array
(at 10 K passages the 68 MB of concept vectors were written again by every update).

The arrays stay few: past ``MAX_ROW_RUNS`` every array but the largest is
gathered into one (an add's rows, never the save's), and once more than
``MAX_DEAD_SHARE`` of the arrays' rows are no position's any more, everything is
gathered into one plain array again. A state whose rows are one array in order
holds that array itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from ..search.products import grouped_product
from .spill import VectorSpill, gather_rows

# arrays a state's rows may sit in; past that, all but the largest are gathered into one
MAX_ROW_RUNS = 2
# once more than this share of the arrays' rows are dead, the rows are gathered into one
MAX_DEAD_SHARE = 0.5
# rows a save or a full read takes at a time
ROW_BLOCK = 1 << 16
# what rows may be: vectors, and the fixed-point sums of concept vectors
ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.int64))


class VectorRows:
    """Rows of float32 vectors over arrays (runs): row ``i`` is row ``index[i]`` of the
    runs' concatenation, read without concatenating them. A graph's kept concept sums
    (int64 fixed point) are held the same way.

    It answers what the index asks of its sentence vectors: ``len``, ``shape``,
    ``dtype``, rows by position (an int, a slice, an array of positions; a copy),
    ``vectors @ query`` (each run scanned once), and ``np.asarray`` (all rows, a
    copy). It is read-only. Make one with :func:`rows_taken` or :func:`rows_joined`.
    """

    __slots__ = ("_bases", "_index", "_runs", "dtype", "shape")
    ndim = 2

    def __init__(self, runs: Sequence[np.ndarray], index: np.ndarray) -> None:
        runs = tuple(runs)
        if not runs:
            raise ValueError("VectorRows needs at least one array of rows")
        dim, dtype = int(runs[0].shape[1]), runs[0].dtype
        if dtype not in ROW_DTYPES:
            raise ValueError(f"VectorRows holds float32 vectors or int64 sums, not {dtype}")
        for run in runs:
            if run.ndim != 2 or int(run.shape[1]) != dim or run.dtype != dtype:
                raise ValueError(f"VectorRows: every array must be {dtype} rows of "
                                 f"{dim} values, got {run.dtype} of shape {run.shape}")
        for run in runs:
            run.setflags(write=False)
        self._runs = runs
        self._bases = np.cumsum([0, *(len(r) for r in runs)]).astype(np.int64)
        index = np.array(index, dtype=np.int64)  # its own copy: nobody else can change it
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= int(self._bases[-1])):
            raise ValueError(f"VectorRows: a row outside the {int(self._bases[-1])} rows held")
        index.setflags(write=False)
        self._index = index
        self.shape = (len(index), dim)
        self.dtype = np.dtype(dtype)

    @property
    def runs(self) -> tuple[np.ndarray, ...]:
        """The arrays the rows sit in."""
        return self._runs

    @property
    def index(self) -> np.ndarray:
        """Each position's row in the runs' concatenation (read-only)."""
        return self._index

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple):
            raise TypeError("VectorRows is read by row: rows[i], rows[a:b] or rows[positions]")
        rows = self._index[key]
        if np.ndim(rows) == 0:
            return gather_rows(self._runs, np.asarray([rows]), self.shape[1], None,
                               self.dtype)[0]
        return gather_rows(self._runs, rows, self.shape[1], None, self.dtype)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise ValueError("assignment destination is read-only: a state's vectors never change")

    def located(self, positions: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Where rows ``positions`` sit: each array that holds any of them, with their row
        numbers in it (in the order of ``positions``)."""
        runs, run_of, at = self.located_in_order(positions)
        return [(runs[i], at[run_of == i]) for i in np.unique(run_of).tolist()]

    def located_in_order(self, positions: np.ndarray
                         ) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
        """``(runs, run_of, at)``: for each of ``positions``, the run that holds it
        (``runs[run_of[i]]``) and its row in that run (``at[i]``)."""
        at = self._index[np.asarray(positions, dtype=np.int64)]
        run_of = np.searchsorted(self._bases, at, side="right") - 1
        return self._runs, run_of, at - self._bases[run_of]

    def __matmul__(self, query: np.ndarray) -> np.ndarray:
        """Every row's product with ``query`` (float32): each run scanned once in full,
        dead rows included (at most ``MAX_DEAD_SHARE`` of them), then gathered."""
        if self.dtype != np.float32:
            raise TypeError(f"a product is of float32 vectors, not of {self.dtype} rows")
        q = np.asarray(query, dtype=np.float32)
        scores = np.concatenate([grouped_product(np.asarray(run), q) for run in self._runs])
        return scores[self._index]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("VectorRows cannot be read as an array without a copy")
        rows = self.gathered(None)
        return rows if dtype is None else rows.astype(dtype, copy=False)

    def gathered(self, spill: VectorSpill | None) -> np.ndarray:
        """Every row in order as one array, where ``spill`` puts one of its size."""
        return gather_rows(self._runs, self._index, self.shape[1], spill, self.dtype)

    def blocks(self, size: int = ROW_BLOCK) -> Iterator[np.ndarray]:
        """The rows in order, ``size`` at a time: what a save writes."""
        for start in range(0, len(self), size):
            yield self[start:start + size]

    @property
    def nbytes(self) -> int:
        """Bytes of the rows held (not of the arrays they sit in)."""
        return len(self) * self.shape[1] * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"VectorRows({len(self)} rows of {self.shape[1]} in {len(self._runs)} arrays)"


class RowsElsewhere(Protocol):
    """Rows this process does not hold, read by position: a read-only replica's, read
    from the vector store that holds them (``search.external.EngineRows``)."""

    shape: tuple[int, int]
    dtype: np.dtype
    ndim: int

    def __len__(self) -> int: ...

    def __getitem__(self, key: Any) -> np.ndarray: ...

    def __matmul__(self, query: np.ndarray) -> np.ndarray: ...

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray: ...


class RowsToAttach:
    """Stands for rows an outside store holds by key, in a state taken or merged from a
    state whose rows are there (:func:`rows_gathered`). A store's rows are found by chunk
    id and text, not by position, so nothing is gathered: the index attaches the store's
    rows for the new state's chunks (``search.external.EngineRows``) before any read.
    Any read raises."""

    ndim = 2

    def __init__(self, rows: int, dim: int) -> None:
        self.shape = (int(rows), int(dim))
        self.dtype = np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def _unread(self, *_: Any, **__: Any) -> np.ndarray:
        raise RuntimeError("these rows are in the vector store and not attached to this "
                           "state yet: attach the store's rows before reading them")

    __getitem__ = __matmul__ = __array__ = _unread


# a state's sentence vectors: one array in order, rows left in place, or rows elsewhere
Rows = np.ndarray | VectorRows | RowsElsewhere


def rows_taken(vectors: Rows, positions: np.ndarray, spill: VectorSpill | None) -> Rows:
    """The rows at ``positions``, in that order: their numbers gathered, the rows not
    copied unless the arrays they sit in have become mostly dead (:func:`_compacted`)."""
    return rows_gathered([vectors], positions, spill)


def rows_joined(parts: Sequence[Rows], spill: VectorSpill | None) -> Rows:
    """The parts' rows one after another (:func:`rows_gathered` of all of them)."""
    total = sum(len(p) for p in parts)
    return rows_gathered(parts, np.arange(total, dtype=np.int64), spill)


def rows_gathered(parts: Sequence[Rows], positions: np.ndarray,
                  spill: VectorSpill | None, max_dead_share: float = MAX_DEAD_SHARE) -> Rows:
    """Rows ``positions`` of the parts' concatenation. They stay where they are while
    one array holds most of them (an update's: the save's rows and the new ones);
    rows spread over many arrays (a build's batches) are gathered into one, and so
    are all once more than ``max_dead_share`` of the rows held are no position's.
    Where any part's rows are in a store, the result is a :class:`RowsToAttach`."""
    if not parts:
        raise ValueError("rows_gathered needs at least one part")
    positions = np.asarray(positions, dtype=np.int64)
    if any(not isinstance(part, (np.ndarray, VectorRows)) for part in parts):
        return RowsToAttach(len(positions), int(parts[0].shape[1]))  # a store's, by key
    arrays = [part for part in parts if isinstance(part, np.ndarray)]
    if len(arrays) == len(parts):  # a position of plain arrays' concatenation is its row
        return _compacted(arrays, positions, spill, max_dead_share)
    runs: list[np.ndarray] = []
    indices: list[np.ndarray] = []
    base = 0
    for part in parts:
        part_runs, part_index = _runs_of(part)
        indices.append(part_index + base)
        runs.extend(part_runs)
        base += sum(len(r) for r in part_runs)
    return _compacted(runs, np.concatenate(indices)[positions], spill, max_dead_share)


def held_rows(vectors: Rows) -> np.ndarray | VectorRows:
    """``vectors`` when this process holds them; ``ValueError`` for a replica's, which
    are read from the store row by row and never taken, joined, gathered or saved."""
    if not isinstance(vectors, (np.ndarray, VectorRows)):
        raise ValueError("this index reads its vectors from the vector store (a read-only "
                         "replica): it cannot be updated or saved, nor its rows read whole")
    return vectors


def contiguous_rows(vectors: Rows, spill: VectorSpill | None) -> np.ndarray:
    """``vectors`` as one array in order (for faiss, which reads one): itself, or its
    rows gathered where ``spill`` puts an array of their size."""
    vectors = held_rows(vectors)
    return vectors if isinstance(vectors, np.ndarray) else vectors.gathered(spill)


def _runs_of(vectors: Rows) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    vectors = held_rows(vectors)
    if isinstance(vectors, VectorRows):
        return vectors.runs, vectors.index
    return (vectors,), np.arange(len(vectors), dtype=np.int64)


def _compacted(runs: Sequence[np.ndarray], index: np.ndarray,
               spill: VectorSpill | None, max_dead_share: float = MAX_DEAD_SHARE) -> Rows:
    """Rows ``index`` of the runs, with the runs no row uses dropped. Everything is
    gathered into one array once most rows held are dead, or when there are more than
    ``MAX_ROW_RUNS`` runs and none holds most rows; with more runs and one that does,
    the others are gathered into one. One run read in order is returned as itself."""
    dim, dtype = int(runs[0].shape[1]), runs[0].dtype
    bases = np.cumsum([0, *(len(r) for r in runs)])
    run_of = np.searchsorted(bases, index, side="right") - 1
    used = np.flatnonzero(np.bincount(run_of, minlength=len(runs)))
    if len(used) < len(runs):
        shift = np.zeros(len(runs), dtype=np.int64)  # rows of the dropped runs before each
        sizes = np.diff(bases)
        dropped = np.ones(len(runs), dtype=bool)
        dropped[used] = False
        shift[1:] = np.cumsum(np.where(dropped, sizes, 0))[:-1]
        index = index - shift[run_of]
        runs = [runs[i] for i in used.tolist()]
        bases = np.cumsum([0, *(len(r) for r in runs)])
        run_of = np.searchsorted(bases, index, side="right") - 1
    if not len(index):
        return np.zeros((0, dim), dtype=dtype)
    held = int(bases[-1])
    if held - len(index) > max_dead_share * held:
        return gather_rows(runs, index, dim, spill, dtype)
    if len(runs) > MAX_ROW_RUNS:
        largest = int(np.argmax(np.bincount(run_of, minlength=len(runs))))
        others = np.flatnonzero(run_of != largest)
        if 2 * len(others) >= len(index):  # no array holds most rows: one array of all
            return gather_rows(runs, index, dim, spill, dtype)
        merged = gather_rows(runs, index[others], dim, spill, dtype)
        index = index.copy()
        in_largest = run_of == largest
        index[in_largest] -= bases[largest]
        index[others] = len(runs[largest]) + np.arange(len(others))
        runs = [runs[largest], merged]
    if len(runs) == 1 and len(index) == len(runs[0]) and (
            not len(index) or (index[0] == 0 and bool((np.diff(index) == 1).all()))):
        return runs[0]
    return VectorRows(runs, index)
