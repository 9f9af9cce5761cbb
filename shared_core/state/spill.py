"""Large arrays kept in memory-mapped temporary files rather than on the heap.

A million passages hold about 4.4 M sentence vectors: 6.8 GB of float32, which
a build would otherwise keep on the heap, once per batch and again when the
batches are merged. A :class:`VectorSpill` puts large arrays of rows in files
instead, mapped read-only once written: their pages sit in the page cache, which
the kernel fills while memory is free and drops under pressure, so a query reads
them at memory speed on a large machine and a build no longer runs out of memory
on a small one. A saved index maps its vectors from the index folder the same way
(``store``), so a built and a loaded index behave alike. The graph's largest parts
go the same way once built (:func:`spilled_arrays`; the HNSW index through
``state.derived.spilled_search``): the concept pairs, the adjacency and the HNSW
codes, another 3 GB at a million passages; then the unit views
(:func:`held_as_mapped`: concept links both ways, BM25 weights, the walk's sentence
links) and the chunk texts (``state.texts.texts_spilled``), 2.5 GB more.

The files are unlinked as soon as they are created: they take no name in the
folder, nothing has to clean them up, and the kernel frees their blocks once the
last array viewing them is gone (or the process ends, however it ends).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, TypeVar

import numpy as np
import scipy.sparse as sp

# arrays of rows below this many bytes stay on the heap (tests, small corpora)
SPILL_MIN_BYTES = 256 * 2**20
# output rows gathered per step: bounds the index arrays a gather holds
GATHER_BLOCK = 1 << 16
# up to this many parts a gather reads all rows from the part most come from, and fixes up
# the others' (rows left in place: a save and an update's rows); past it, part by part
FEW_PARTS = 4


@dataclass(frozen=True)
class VectorSpill:
    """Where large arrays of vector rows go while an index builds and updates.

    ``folder``: a directory for the (unlinked) files, on a disk with room for
    the corpus's vectors; ``None`` is the system's temporary folder (``TMPDIR``).
    ``min_bytes``: smaller arrays stay on the heap. Pass ``vector_spill=None`` to
    the index to keep every vector on the heap.
    """

    folder: str | os.PathLike[str] | None = None
    min_bytes: int = SPILL_MIN_BYTES

    def __post_init__(self) -> None:
        if self.folder is not None and not isinstance(self.folder, (str, os.PathLike)):
            raise TypeError(f"VectorSpill folder must be a path, got {type(self.folder).__name__}")
        if (not isinstance(self.min_bytes, int) or isinstance(self.min_bytes, bool)
                or self.min_bytes < 0):
            raise ValueError(f"VectorSpill min_bytes must be an int >= 0, got {self.min_bytes!r}")
        if self.folder is not None and not os.path.isdir(self.folder):
            raise ValueError(f"VectorSpill folder {os.fspath(self.folder)!r} is not a directory")

    def spills(self, nbytes: int) -> bool:
        """Whether an array of ``nbytes`` goes to a file rather than the heap."""
        return nbytes >= max(self.min_bytes, 1)

    def log(self) -> RowLog:
        """An append-only log for batches of rows that arrive one at a time."""
        return RowLog(self)

    def temporary_file(self) -> IO[bytes]:
        """A new file in ``folder``, already unlinked: it holds no name there and is
        freed with the last mapping of it, however the process ends."""
        return tempfile.TemporaryFile(dir=self.folder, prefix="conceptgraph-vectors-")


# the index's default: large arrays in the system's temporary folder
DEFAULT_SPILL = VectorSpill()


class RowLog:
    """Batches of rows appended as they arrive, read back as one view per batch.

    They stay on the heap until together they pass the spill's ``min_bytes``;
    from then on every batch (those held so far first) is written to one file,
    which :meth:`views` maps once. A build of many small batches thus holds at
    most ``min_bytes`` of vectors on the heap, however many batches there are.
    """

    def __init__(self, spill: VectorSpill) -> None:
        self._spill = spill
        self._held: list[np.ndarray | tuple[int, tuple[int, ...], np.dtype]] = []
        self._held_bytes = 0
        self._file: IO[bytes] | None = None
        self._written = 0

    def append(self, rows: np.ndarray) -> None:
        if self._file is None and self._spill.spills(self._held_bytes + rows.nbytes):
            self._file = self._spill.temporary_file()
            held, self._held = self._held, []
            for earlier in held:
                assert isinstance(earlier, np.ndarray)
                self._write(earlier)
        if self._file is None:
            self._held.append(rows)
            self._held_bytes += rows.nbytes
        else:
            self._write(rows)

    def _write(self, rows: np.ndarray) -> None:
        assert self._file is not None
        rows = np.ascontiguousarray(rows)
        self._file.write(rows.data.cast("B"))
        self._held.append((self._written, rows.shape, rows.dtype))
        self._written += rows.nbytes

    def views(self) -> list[np.ndarray]:
        """Every batch, in the order appended (read-only views of the file once spilled)."""
        if self._file is None:
            return [entry for entry in self._held if isinstance(entry, np.ndarray)]
        mapped = _mapped(self._file, self._written)
        views = []
        for entry in self._held:
            assert isinstance(entry, tuple)
            start, shape, dtype = entry
            size = int(np.prod(shape)) * dtype.itemsize
            views.append(mapped[start:start + size].view(dtype).reshape(shape))
        return views

    def close(self) -> None:
        """Drop what the log holds (after an error); views already taken stay valid."""
        if self._file is not None:
            self._file.close()
        self._held.clear()


def spilled_arrays(arrays: Sequence[np.ndarray], spill: VectorSpill | None,
                   ) -> list[np.ndarray]:
    """``arrays`` as read-only views of one spill file, when together they are large
    enough to spill; otherwise the arrays themselves.

    For the large arrays a build or an update keeps after it (the concept pairs, the
    adjacency): a loaded index maps them from its folder, and a built one then holds
    them the same way. Each starts at a multiple of 64 bytes, so every view is aligned.
    """
    sizes = [int(a.nbytes) for a in arrays]
    starts = np.cumsum([0, *(-(-size // 64) * 64 for size in sizes)]).tolist()
    if spill is None or not spill.spills(sum(sizes)):
        return list(arrays)
    with spill.temporary_file() as file:
        for array, start in zip(arrays, starts[:-1], strict=True):
            file.seek(start)
            file.write(np.ascontiguousarray(array).data.cast("B"))
        file.truncate(starts[-1])  # the last one's padding, so the mapping spans it
        mapped = _mapped(file, starts[-1])
    return [mapped[start:start + size].view(a.dtype).reshape(a.shape)
            for a, start, size in zip(arrays, starts[:-1], sizes, strict=True)]


Compressed = TypeVar("Compressed", sp.csr_matrix, sp.csc_matrix)


def held_as_mapped(matrix: Compressed, spill: VectorSpill | None) -> Compressed:
    """``matrix`` (CSR or CSC) over arrays in one spill file when they are large enough
    to spill and are not mapped already (read from a save, or spilled before).

    For the matrices a build or an update makes: the adjacency, the sentence-term
    counts (0.66 GB at a million passages) and the unit views (concept links both
    ways, BM25 weights, the walk's sentence links: 2 GB more). A loaded index maps them
    from its save, and a built one then holds them the same way: in a memory limit,
    page cache for the rows a query reads rather than heap.
    """
    arrays = [matrix.data, matrix.indices, matrix.indptr]
    if spill is None or any(is_mapped(a) for a in arrays):
        return matrix
    data, indices, indptr = spilled_arrays(arrays, spill)
    if data is matrix.data:
        return matrix
    held = type(matrix)(matrix.shape, dtype=data.dtype)
    canonical = matrix.has_canonical_format  # read before the arrays move (it may check)
    held.data, held.indices, held.indptr = data, indices, indptr
    held.has_canonical_format = canonical
    return held


def spilled_bytes(pieces: Iterable[bytes], spill: VectorSpill) -> np.ndarray:
    """``pieces`` written one after another to a spill file, mapped back as one
    read-only uint8 array: nothing but the piece being written is held on the heap."""
    with spill.temporary_file() as file:
        written = 0
        for piece in pieces:
            file.write(piece)
            written += len(piece)
        return _mapped(file, written)


def is_mapped(array: np.ndarray) -> bool:
    """Whether ``array`` views a memory-mapped file (its bytes cost no heap)."""
    base: object = array
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap):
            return True
        base = base.base
    return False


def csr_over(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
             shape: tuple[int, int]) -> sp.csr_matrix:
    """A canonical CSR matrix over the given arrays as they are. scipy's constructor
    copies int64 indices that fit int32 into new arrays: the heap again, for arrays
    mapped to keep them off it."""
    matrix = sp.csr_matrix(shape, dtype=data.dtype)
    matrix.data, matrix.indices, matrix.indptr = data, indices, indptr
    matrix.has_canonical_format = True
    return matrix


def _mapped(file: IO[bytes], nbytes: int) -> np.ndarray:
    """The first ``nbytes`` of ``file`` mapped read-only (as bytes); closes the file,
    whose mapping keeps it alive."""
    file.flush()
    mapped = (np.memmap(file, dtype=np.uint8, mode="r", shape=(nbytes,)) if nbytes
              else np.zeros(0, np.uint8))
    file.close()
    return mapped


def gather_rows(parts: Sequence[np.ndarray], index: np.ndarray, dim: int,
                spill: VectorSpill | None, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """Rows ``index`` of the parts' concatenation, without concatenating them.

    The output goes where ``spill`` puts an array of its size (the heap without
    one; a spilled one comes back read-only). It is filled a block at a time,
    each block's rows grouped by the part they come from, so a merge of many
    batches reads each part once per block. A spilled output is written block by
    block through one heap buffer and mapped at the end: writing a file costs a
    fraction of faulting in the pages of a fresh mapping.
    """
    index = np.asarray(index, dtype=np.int64)
    shape = (len(index), dim)
    nbytes = len(index) * dim * np.dtype(dtype).itemsize
    bases = np.cumsum([0, *(len(p) for p in parts)])
    blocks = range(0, len(index), GATHER_BLOCK)
    if spill is None or not spill.spills(nbytes):
        out = np.empty(shape, dtype=dtype)
        for a in blocks:
            rows = index[a:a + GATHER_BLOCK]
            _gather_block(parts, bases, rows, out[a:a + len(rows)])
        return out
    with spill.temporary_file() as file:
        buffer = np.empty((min(GATHER_BLOCK, len(index)), dim), dtype=dtype)
        for a in blocks:
            rows = index[a:a + GATHER_BLOCK]
            block = buffer[:len(rows)]
            _gather_block(parts, bases, rows, block)
            file.write(block.data.cast("B"))
        return _mapped(file, nbytes).view(dtype).reshape(shape)


def _gather_block(parts: Sequence[np.ndarray], bases: np.ndarray, rows: np.ndarray,
                  out: np.ndarray) -> None:
    """Rows ``rows`` of the parts' concatenation (part ``i`` starting at ``bases[i]``)
    into ``out``, read part by part."""
    which = np.searchsorted(bases, rows, side="right") - 1
    if which[0] == which[-1] and (which == which[0]).all():
        part = int(which[0])
        np.take(parts[part], rows - bases[part], axis=0, out=out, mode="clip")
        return
    if len(parts) <= FEW_PARTS:  # rows left in place: the part most come from, then the rest
        counts = np.bincount(which, minlength=len(parts))
        major = int(np.argmax(counts))
        elsewhere = which != major
        np.take(parts[major], np.where(elsewhere, 0, rows - bases[major]), axis=0, out=out,
                mode="clip")  # unbuffered; the rows are in range by construction
        for part in np.flatnonzero(counts).tolist():
            if part != major:
                sel = np.flatnonzero(which == part)
                out[sel] = parts[part][rows[sel] - bases[part]]
        return
    order = np.argsort(which, kind="stable")
    edges = np.searchsorted(which[order], np.arange(len(parts) + 1))
    for part in np.flatnonzero(np.diff(edges)).tolist():
        sel = order[edges[part]:edges[part + 1]]
        out[sel] = parts[part][rows[sel] - bases[part]]
