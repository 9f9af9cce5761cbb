"""Chunk texts held as UTF-8 bytes and decoded one at a time, as they are read.

A million passages are about 600 MB of text, which as Python strings took
650 MB of a loaded index's 1.4 GB heap. A saved index keeps its texts as one
UTF-8 byte run (``chunk_texts.npy``); :class:`ChunkTexts` reads them from that
mapped run instead of holding a string per chunk. A text is decoded when it is
read (a retrieved chunk, a unit's sentences), which costs microseconds against
the query around it.

Updates never copy the bytes: a state's texts are byte ranges of one or more
runs, and taking or merging states gathers the ranges. The runs of texts added
since the load stay on the heap; the texts of deleted chunks in them are dropped
once they are more than half of those runs' bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

from .spill import VectorSpill, is_mapped, spilled_bytes

# the heap-held runs are rewritten once dead bytes are more than this share of them
MAX_DEAD_SHARE = 0.5


class ChunkTexts(Sequence[str]):
    """Texts as ranges of UTF-8 byte runs: text ``i`` is ``runs[run[i]][start[i]:end[i]]``.

    Build one with :meth:`of_strings` or :meth:`of_bytes` (a saved run and each
    text's end); :func:`texts_taken` and :func:`texts_joined` make the texts of
    a taken or merged state. It compares equal to any sequence of the same
    strings (a tuple of them included).
    """

    __slots__ = ("_end", "_run", "_runs", "_start", "_views")

    def __init__(self, runs: Sequence[np.ndarray], run: np.ndarray, start: np.ndarray,
                 end: np.ndarray) -> None:
        if not len(run) == len(start) == len(end):
            raise ValueError("ChunkTexts: run, start and end differ in length")
        self._runs = tuple(runs)
        # decoding from a buffer's slice skips numpy's (and memmap's) slicing: 1 µs, not 2.4
        self._views = tuple(np.ascontiguousarray(r, dtype=np.uint8).data for r in self._runs)
        self._run = np.asarray(run, dtype=np.int32)
        self._start = np.asarray(start, dtype=np.int64)
        self._end = np.asarray(end, dtype=np.int64)
        for array in (self._run, self._start, self._end):
            array.setflags(write=False)

    @classmethod
    def of_strings(cls, texts: Sequence[str]) -> ChunkTexts:
        """The given strings, encoded into one run on the heap."""
        encoded = [t.encode("utf-8") for t in texts]
        ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
        return cls.of_bytes(np.frombuffer(b"".join(encoded), dtype=np.uint8), ends)

    @classmethod
    def of_bytes(cls, run: np.ndarray, ends: np.ndarray) -> ChunkTexts:
        """Texts stored back to back in ``run`` (uint8), each ending at ``ends[i]``."""
        ends = np.asarray(ends, dtype=np.int64)
        starts = np.zeros(len(ends), dtype=np.int64)
        starts[1:] = ends[:-1]
        return cls((run,), np.zeros(len(ends), dtype=np.int32), starts, ends)

    def __len__(self) -> int:
        return len(self._run)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return str(self._bytes(i), "utf-8")

    def encoded(self, i: int) -> bytes:
        """Text ``i`` as its UTF-8 bytes (no decoding)."""
        return bytes(self._bytes(i))

    def _bytes(self, i: int) -> memoryview:
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"text {i} of {len(self)}")
        return self._views[int(self._run[i])][int(self._start[i]):int(self._end[i])]

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other,
                                                                      strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ChunkTexts({len(self)} texts in {len(self._runs)} runs)"

    @property
    def nbytes(self) -> int:
        """The UTF-8 bytes of the texts held (not of the runs they sit in)."""
        return int((self._end - self._start).sum())

    @property
    def heap_bytes(self) -> int:
        """Bytes of the runs held on the heap (a mapped run costs none)."""
        return sum(len(r) for r in self._runs if not is_mapped(r))

    def byte_runs(self) -> Iterator[np.ndarray]:
        """The texts' bytes in order, as few slices of the runs as there are breaks:
        what a save writes, without decoding or copying a text."""
        n = len(self)
        if not n:
            return
        breaks = np.flatnonzero((self._run[1:] != self._run[:-1])
                                | (self._start[1:] != self._end[:-1])) + 1
        firsts = np.concatenate([[0], breaks]).tolist()
        lasts = np.concatenate([breaks - 1, [n - 1]]).tolist()
        for a, b in zip(firsts, lasts, strict=True):
            yield self._runs[int(self._run[a])][int(self._start[a]):int(self._end[b])]

    def ends(self) -> np.ndarray:
        """Each text's end in the saved run: the running total of the texts' sizes."""
        return np.cumsum(self._end - self._start, dtype=np.int64)


def as_chunk_texts(texts: Sequence[str]) -> ChunkTexts:
    """``texts`` as byte ranges (encoded into one heap run unless they already are)."""
    return texts if isinstance(texts, ChunkTexts) else ChunkTexts.of_strings(texts)


def texts_spilled(texts: Sequence[str], spill: VectorSpill | None) -> Sequence[str]:
    """Strings as byte ranges of one spill file, when their bytes are large enough to
    spill; anything else as it is. A built index then holds its texts as a loaded one
    does (a million passages: 650 MB of strings off the heap), encoded one at a time."""
    if spill is None or isinstance(texts, ChunkTexts) or not spill.spills(sum(map(len, texts))):
        return texts
    sizes = np.empty(len(texts), dtype=np.int64)

    def encoded() -> Iterator[bytes]:
        for i, text in enumerate(texts):
            piece = text.encode("utf-8")
            sizes[i] = len(piece)
            yield piece

    run = spilled_bytes(encoded(), spill)
    return ChunkTexts.of_bytes(run, np.cumsum(sizes))


def texts_taken(texts: Sequence[str], positions: np.ndarray) -> Sequence[str]:
    """The texts at ``positions``, in that order: ranges gathered, bytes not copied
    (a tuple of strings stays a tuple)."""
    if not isinstance(texts, ChunkTexts):
        return tuple(texts[i] for i in np.asarray(positions).tolist())
    at = np.asarray(positions, dtype=np.int64)
    return _compacted(texts._runs, texts._run[at], texts._start[at], texts._end[at])


def texts_joined(parts: Sequence[Sequence[str]]) -> Sequence[str]:
    """The parts' texts one after another. Strings stay strings unless a part's texts
    are byte ranges (a loaded index's): then the others are encoded beside them."""
    if not any(isinstance(p, ChunkTexts) for p in parts):
        return tuple(t for p in parts for t in p)
    runs: list[np.ndarray] = []
    run, start, end = [], [], []
    for part in parts:
        held = as_chunk_texts(part)
        run.append(held._run + len(runs))
        start.append(held._start)
        end.append(held._end)
        runs.extend(held._runs)
    return _compacted(runs, np.concatenate(run), np.concatenate(start), np.concatenate(end))


def _compacted(runs: Sequence[np.ndarray], run: np.ndarray, start: np.ndarray,
               end: np.ndarray) -> ChunkTexts:
    """Texts over ``runs`` with the runs no text uses dropped, and the heap-held runs
    rewritten as one when most of their bytes are no text's any more."""
    used = np.flatnonzero(np.bincount(run, minlength=len(runs)))  # 7 ms at 1 M; np.unique 20
    renumber = np.full(len(runs), -1, dtype=np.int32)
    renumber[used] = np.arange(len(used), dtype=np.int32)
    runs, run = [runs[i] for i in used.tolist()], renumber[run]
    on_heap = np.array([not is_mapped(r) for r in runs], dtype=bool)
    held = on_heap[run]
    heap_bytes = sum(len(r) for r, h in zip(runs, on_heap, strict=True) if h)
    live = int((end[held] - start[held]).sum())
    if heap_bytes and (heap_bytes - live > MAX_DEAD_SHARE * heap_bytes or on_heap.sum() > 1):
        which = np.flatnonzero(held)
        pieces = [runs[int(r)][int(a):int(b)]
                  for r, a, b in zip(run[which], start[which], end[which], strict=True)]
        sizes = end[which] - start[which]
        kept = [r for r, h in zip(runs, on_heap, strict=True) if not h]
        run = run.copy()
        start, end = start.copy(), end.copy()
        mapped_number = np.full(len(runs), -1, dtype=np.int32)
        mapped_number[~on_heap] = np.arange(len(kept), dtype=np.int32)
        run[~held] = mapped_number[run[~held]]
        run[which] = len(kept)
        end[which] = np.cumsum(sizes)
        start[which] = end[which] - sizes
        runs = [*kept, np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)]
    return ChunkTexts(runs, run, start, end)
