"""An approximate vector backend: faiss HNSW over 8-bit quantised vectors (the ``ann`` extra).

It only proposes candidates: the ranking rescores what it returns from the
index's own float32 vectors, so the quantised copy never decides a score. Rows
are positions in the matrix it was built from.

A row is coded as ``round(scale * row)`` in signed bytes, with one ``scale`` for the
whole index (``ROW_CODE_MAX`` over its largest magnitude), and a query is coded alike
with a scale of its own: faiss then compares integers, exactly. One scale for every
dimension keeps a code's inner products proportional to the rows' own, up to the
rounding. The per-dimension ranges coded before (``QT_8bit``, which saves of format
version 6 and earlier hold, and which still load) decoded every byte to a float in
each comparison: building over the scale corpus's 442 K rows took 104 of its 160
seconds, twice what the byte codes take (``benchmarks/results/NOTES.md``,
forty-ninth round). ``benchmarks/ann_compare.py``
measured it against usearch's HNSW (float16 and int8) and faiss's HNSW-flat and
IVF-PQ on MiniLM vectors of the dev corpora: at 1,000 candidates it had the best
recall for its latency (0.993 at efSearch 1,000) and a quarter of float32's bytes
(``benchmarks/RESULTS.md``, Scale).

An index's rows live in one or more segments (:class:`HnswSegments`): a build makes
one, and an update puts its new rows in a small later segment
(:func:`segment_plan`) rather than copying the large one to grow it, which faiss
requires of a mapped index and which had been an update's largest allocation.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np

FILE_NAME = "ann.faiss"
ROWS_FILE_NAME = "ann_rows.npy"  # each HNSW row's vector in the saved corpus (-1: dead)
LINKS_PER_NODE = 32  # HNSW's M
EF_CONSTRUCTION = 100  # the units' construction beam (the concept graph's is wider)
EF_SEARCH = 128  # the search beam; never narrower than the answer asked for
ROW_CODE_MAX = 127  # a coded row's largest magnitude: faiss's signed byte codes
CACHE_READ_BLOCK = 8 << 20  # bytes of a mapped index's file read at a time into the cache
BUILD_BLOCK = 131_072  # rows coded and added at a time: 200 MB of float32 at 384 dimensions
# link slots sized per row before a build in blocks: level 0's 2 M, and a margin for the
# upper levels (about one row in M reaches level 1, with M slots; 65.0 a row were used
# over 20,000 rows)
LINK_SLOTS_PER_ROW = 2 * LINKS_PER_NODE + LINKS_PER_NODE // 8


def ann_available() -> bool:
    """Whether the ``faiss`` package (the ``ann`` extra) can be imported."""
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def _faiss(wanted_by: str = "vector_index='hnsw'") -> Any:
    # spinning OpenMP threads steal the other core from everything else on a small machine
    # (OpenMP reads this once; a query's searches also run on a team of one, since this
    # was measured not to help where the first import came during a load)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"{wanted_by} needs the faiss-cpu package: pip install 'conceptgraph[ann]'"
        ) from exc
    return faiss


def one_query_search(index: Any, query: np.ndarray, k: int, **kwargs: Any
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` of the one ``query`` row, on this thread's OpenMP team of one.

    A team for one query has nothing to share out: its idle second thread waited beside
    the rest of the query and, spinning, took the other core from the query's numpy
    work. The wait policy :func:`_faiss` sets did not stop that where faiss was first
    imported during a load (why was not found). The scale corpus's 80 K-passage query
    took 35-42 ms p50 with a team of two, 23-29 ms with one
    (``benchmarks/results/NOTES.md``, forty-seventh round). OpenMP keeps the count per
    calling thread, so a build on another thread keeps its team.
    """
    faiss = _faiss()
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        found: tuple[np.ndarray, np.ndarray] = index.search(
            np.asarray(query, dtype=np.float32).reshape(1, -1), k, **kwargs)
        return found
    finally:
        faiss.omp_set_num_threads(before)


def code_scales(largest: np.ndarray) -> np.ndarray:
    """``ROW_CODE_MAX`` over each largest magnitude (1 where it is 0)."""
    largest = np.asarray(largest, dtype=np.float64)
    return np.where(largest > 0, ROW_CODE_MAX / np.where(largest > 0, largest, 1.0), 1.0)


def row_scale(vectors: np.ndarray) -> float:
    """The scale that codes ``vectors`` into signed bytes: ``ROW_CODE_MAX`` over their
    largest magnitude (1 where every value is 0), read a block of rows at a time."""
    largest = 0.0
    for start in range(0, len(vectors), BUILD_BLOCK):
        block = np.asarray(vectors[start:start + BUILD_BLOCK])
        if block.size:
            largest = max(largest, float(np.abs(block).max()))
    return float(code_scales(np.asarray(largest)))


def coded_rows(vectors: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    """``vectors`` as float32 integers in ``[-ROW_CODE_MAX, ROW_CODE_MAX]`` (``scale``
    times, rounded, clipped; one scale, or a column of one a row): faiss's signed byte
    codes then hold them exactly."""
    scaled = np.multiply(vectors, np.asarray(scale, dtype=np.float32),
                         dtype=np.float32)  # the one copy
    np.rint(scaled, out=scaled)
    return np.clip(scaled, -ROW_CODE_MAX, ROW_CODE_MAX, out=scaled)


def coded_queries(queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each query row coded by a scale of its own (:func:`row_scale` of that row alone),
    and those scales: a query's codes use the byte range whatever its magnitudes."""
    queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    scales = code_scales(np.abs(queries).max(axis=1, initial=0.0))
    return coded_rows(queries, scales[:, None]), scales


def reserve_rows(index: Any, rows: int) -> None:
    """Size an empty HNSW index's codes and links for ``rows`` before they are added a
    block at a time.

    Each add grows both vectors, and a vector that outgrows its capacity moves to one
    twice as large, holding the old copy beside it: the 1 M build's heap peak rose from
    6.5 to 7.5 GB when the rows were first added in blocks. A vector resized down keeps
    its capacity, so the adds that follow never move it.
    """
    faiss = _faiss()
    storage = faiss.downcast_index(index.storage)
    storage.codes.resize(rows * storage.code_size)
    storage.codes.resize(0)
    links = index.hnsw.neighbors
    links.resize(rows * LINK_SLOTS_PER_ROW)
    links.resize(0)


@dataclass(frozen=True, eq=False)
class HnswVectorIndex:
    """Inner-product HNSW over unit vectors; satisfies ``VectorIndex``."""

    index: Any
    # a descriptor of the saved file whose codes ``index`` maps, held open (and closed
    # with this object): a later save may remove its folder, and the file must stay
    # readable for as long as the codes are used
    source: int | None = None
    # rows are coded as round(scale * row) in signed bytes; None: an index of format
    # version 6 or earlier, coded by trained per-dimension ranges (``QT_8bit``)
    scale: float | None = None

    @classmethod
    def build(cls, vectors: np.ndarray, wanted_by: str = "vector_index='hnsw'",
              ef_construction: int = EF_CONSTRUCTION) -> HnswVectorIndex:
        """Index every row of ``vectors`` (unit rows) under its position, each row linked
        through a search with a beam of ``ef_construction`` (saved with the graph, so rows
        appended later are linked alike).

        The rows are read in order, twice (their largest magnitude, then their codes) and a
        block at a time: no float32 copy of a mapped matrix is made, and faiss reads only
        the block it is given."""
        faiss = _faiss(wanted_by)
        index = faiss.IndexHNSWSQ(vectors.shape[1], faiss.ScalarQuantizer.QT_8bit_direct_signed,
                                  LINKS_PER_NODE, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_construction  # byte codes need no training
        scale = row_scale(vectors)
        if len(vectors) > BUILD_BLOCK:
            reserve_rows(index, len(vectors))
        for start in range(0, len(vectors), BUILD_BLOCK):
            index.add(coded_rows(vectors[start:start + BUILD_BLOCK], scale))
        return cls(index, scale=scale)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def read_into_cache(self) -> int:
        """Read the saved file this index maps once, in order, so that the page cache
        holds it before a search visits it; returns the bytes read (0 for an index on
        the heap). A search reads one node after another, each where the last one
        points, so its reads cannot be asked for ahead (``paging``): at a million
        passages about 1,270 page faults a question, one at a time, where the file
        was not cached (``benchmarks/results/NOTES.md``, fifty-eighth round)."""
        if self.source is None:
            return 0
        read = _reader_at(self.source)
        done = 0
        while count := len(read(CACHE_READ_BLOCK)):
            done += count
        return done

    def with_rows(self, vectors: np.ndarray) -> HnswVectorIndex:
        """A copy with ``vectors`` appended as the next rows; this index is unchanged.

        Readers may be searching this one, so the graph is copied (about 300
        bytes a row) rather than grown in place. The rows are coded with the scale
        (or the trained ranges) of the rows before them; a value beyond those is
        clipped, which only blurs which rows are proposed, never a score (rescoring
        is exact).
        """
        faiss = _faiss()
        if self.source is None:
            grown = faiss.clone_index(self.index)
        else:
            # a clone of a mapped index still views the mapped codes, and faiss aborts
            # the process when those are grown: an owned copy is read from the file
            # (through faiss's bytes, the copy had taken ten times as long at 1 M rows)
            grown = faiss.read_index(faiss.PyCallbackIOReader(_reader_at(self.source)))
        grown.add(self._coded(vectors))
        return HnswVectorIndex(grown, scale=self.scale)

    def _coded(self, vectors: np.ndarray) -> np.ndarray:
        """Rows as this index codes them: its byte codes' integers, or as they are for an
        index coded by trained ranges."""
        if self.scale is None:
            return np.ascontiguousarray(vectors, dtype=np.float32)
        return coded_rows(vectors, self.scale)

    def search(self, query: np.ndarray, k: int, beam: int = EF_SEARCH
               ) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self))
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        # the beam is a per-call parameter, so concurrent queries never share it
        params = _faiss().SearchParametersHNSW(efSearch=max(beam, k))
        # a query is coded with a scale of its own, as rows are (faiss codes it as it codes
        # rows, truncating: integers pass exactly), and scores are given back as cosines
        unscale = 1.0
        if self.scale is not None:
            coded, query_scale = coded_queries(query)
            query, unscale = coded[0], 1.0 / (self.scale * float(query_scale[0]))
        scores, rows = one_query_search(self.index, query, k, params=params)
        found = rows[0] >= 0  # faiss pads with -1 when it finds fewer than k
        return (rows[0][found].astype(np.int64),
                (scores[0][found] * unscale).astype(np.float32))

    def code_bytes(self) -> int:
        """Bytes of its quantised vectors: what mapping it takes off the heap."""
        return len(self) * int(self.index.d)

    def mapped_through(self, file: IO[bytes]) -> HnswVectorIndex:
        """This index written to ``file`` (an open temporary file, unlinked) and mapped
        back read-only, as a loaded index is: its quantised codes (a byte a dimension,
        1.7 GB at a million passages) become page cache instead of heap.

        faiss maps a file by name, so this needs ``/proc/self/fd`` (Linux); elsewhere
        the index stays as it is. ``file`` may be closed afterwards: the copy holds a
        descriptor of its own, which :meth:`with_rows` reads from.
        """
        name = f"/proc/self/fd/{file.fileno()}"
        if not os.path.exists(name):  # pragma: no cover - not Linux
            return self
        faiss = _faiss()
        faiss.write_index(self.index, faiss.PyCallbackIOWriter(file.write))
        file.flush()
        index = faiss.read_index(name, faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
        return HnswVectorIndex._holding(index, os.dup(file.fileno()), self.scale)

    @classmethod
    def _holding(cls, index: Any, source: int, scale: float | None) -> HnswVectorIndex:
        """``index``, which maps the file open as ``source``; closes it with the index."""
        held = cls(index, source, scale)
        weakref.finalize(held, os.close, source)
        return held

    def save(self, path: Path) -> None:
        """Write the graph and its quantised vectors (faiss's own binary format)."""
        _faiss().write_index(self.index, str(path))

    @classmethod
    def load(cls, path: Path, rows: int, dim: int,
             wanted_by: str = "vector_index='hnsw'", scale: float | None = None
             ) -> HnswVectorIndex:
        """Map a saved index read-only; it must be an HNSW-SQ index of ``rows`` x ``dim``,
        coded in signed bytes by ``scale`` (the manifest's), or by trained ranges where
        ``scale`` is None (saves of format version 6 and earlier).

        A mapped index is never added to: a changed corpus derives a new one.
        """
        faiss = _faiss(wanted_by)
        try:
            # the quantised codes are mapped, the graph (~256 bytes a row) is read
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError as exc:
            raise ValueError(f"{path} is not an HNSW index: "
                             f"{str(exc).splitlines()[0][:200]}") from exc
        if not isinstance(index, faiss.IndexHNSWSQ):
            raise ValueError(f"{path} is not an HNSW index: it holds a {type(index).__name__}")
        if (index.ntotal, index.d) != (rows, dim):
            raise ValueError(f"{path} holds {index.ntotal} vectors of {index.d} dimensions; "
                             f"the index has {rows} of {dim}")
        coding = faiss.downcast_index(index.storage).sq.qtype
        expected = (faiss.ScalarQuantizer.QT_8bit if scale is None
                    else faiss.ScalarQuantizer.QT_8bit_direct_signed)
        if coding != expected:
            said = "no scale" if scale is None else "a scale"
            raise ValueError(f"{path} codes its vectors as faiss quantiser type {coding}; the "
                             f"manifest gives {said}, which means type {expected}")
        return cls._holding(index, os.open(path, os.O_RDONLY), scale)


SegmentPlan = Literal["grow", "append", "merge", "rebuild"]
MAX_SEGMENTS = 4  # searched one after another: past this, small segments are merged
GROW_SHARE = 1 / 8  # a later segment is grown in place of a new one while this small
LATER_SEGMENT_K = EF_SEARCH  # rows a later segment is first asked for: one beam's worth


def segment_file(segment: int, stem: str = "ann") -> str:
    """The saved file of one segment: ``ann.faiss`` for the first, ``ann.<i>.faiss`` after
    (``stem``: another index's, as the concept graph's ``concept_ann``)."""
    return f"{stem}.faiss" if segment == 0 else f"{stem}.{segment}.faiss"


def segment_plan(sizes: Sequence[int], added: int) -> SegmentPlan:
    """How an update places ``added`` new rows beside segments of ``sizes`` rows.

    - ``"grow"``: copy the last segment with the rows appended, while it is a later
      segment that stays within ``GROW_SHARE`` of all rows (its copy is small);
    - ``"append"``: a new segment of the added rows alone;
    - ``"merge"``: past ``MAX_SEGMENTS``, rebuild every segment after the first, with
      the added rows, into one, while they hold no more rows than the first;
    - ``"rebuild"``: one new segment of everything.

    The first segment is never copied: at a million passages it is 2.9 GB that an
    update had read onto the heap to grow. Each later merge at least doubles what
    it writes, so a row is rebuilt a logarithmic number of times.
    """
    total = sum(sizes) + added
    if len(sizes) > 1 and sizes[-1] + added <= GROW_SHARE * total:
        return "grow"
    if 0 < len(sizes) < MAX_SEGMENTS:
        return "append"
    if len(sizes) > 1 and sum(sizes[1:]) + added <= sizes[0]:
        return "merge"
    return "rebuild"


@dataclass(frozen=True, eq=False)
class HnswSegments:
    """Rows held by consecutive HNSW indexes, searched together; satisfies ``VectorIndex``.

    faiss cannot add to a mapped index, so an update that grows one index copies
    all of it first. An update here builds or grows a small segment after the
    large one instead (:func:`segment_plan`). Row ``r`` of segment ``i`` is row
    ``offset_i + r`` of the whole.
    """

    segments: tuple[HnswVectorIndex, ...]

    @classmethod
    def build(cls, vectors: np.ndarray) -> HnswSegments:
        """One segment over every row of ``vectors``."""
        return cls((HnswVectorIndex.build(vectors),))

    def __len__(self) -> int:
        return sum(len(segment) for segment in self.segments)

    def sizes(self) -> list[int]:
        return [len(segment) for segment in self.segments]

    def read_into_cache(self) -> int:
        """Each mapped segment's file read once (:meth:`HnswVectorIndex.read_into_cache`);
        the bytes read."""
        return sum(segment.read_into_cache() for segment in self.segments)

    def scales(self) -> list[float | None]:
        """Each segment's code scale (None: coded by trained ranges), as a save lists them."""
        return [segment.scale for segment in self.segments]

    def offsets(self) -> list[int]:
        """Each segment's first row in the whole."""
        return np.cumsum([0, *self.sizes()[:-1]]).tolist()

    @property
    def dim(self) -> int:
        return int(self.segments[0].index.d)

    def search(self, query: np.ndarray, k: int, beam: int = EF_SEARCH
               ) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` rows of all segments by their quantised scores, each segment
        searched with ``beam``.

        The first segment's ``k`` best set a floor: a later segment's row enters the
        answer only above it. HNSW's cost is set by its beam, not its size (at a
        million passages a 1 % segment took 2.1 ms a search, the 4.4 M-row first one
        3.1 ms), so a later segment is asked for ``LATER_SEGMENT_K`` rows, and twice
        as many again while the last one it returns still beats the floor.
        """
        if len(self.segments) == 1:
            return self.segments[0].search(query, k, beam)
        first_rows, first_scores = self.segments[0].search(query, k, beam)
        floor = first_scores[k - 1] if len(first_scores) >= k else -np.inf
        found = [(first_rows, first_scores)]
        for segment, offset in zip(self.segments[1:], self.offsets()[1:], strict=True):
            rows, scores = _above(segment, query, k, floor, beam)
            found.append((rows + offset, scores))
        rows = np.concatenate([r for r, _ in found])
        scores = np.concatenate([s for _, s in found])
        order = np.lexsort((rows, -scores))[:k]  # ties go to the lower row
        return rows[order], scores[order]

    def search_each(self, query: np.ndarray, asks: Sequence[int], beam: int = EF_SEARCH
                    ) -> np.ndarray:
        """Each segment's best ``asks[i]`` rows by its own quantised scores, as rows of
        the whole: for a caller that scores them all exactly, which then never compares
        two segments' quantisers (each is trained on its own rows)."""
        found = [segment.search(query, ask, beam)[0] + offset
                 for segment, ask, offset in zip(self.segments, asks, self.offsets(),
                                                 strict=True)
                 if ask > 0]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def grown(self, vectors: np.ndarray) -> HnswSegments:
        """The last segment copied with ``vectors`` appended; this index is unchanged."""
        return HnswSegments((*self.segments[:-1], self.segments[-1].with_rows(vectors)))

    def with_segment(self, first: int, vectors: np.ndarray,
                     wanted_by: str = "vector_index='hnsw'",
                     ef_construction: int = EF_CONSTRUCTION) -> HnswSegments:
        """The first ``first`` segments, then one new segment of ``vectors``."""
        return HnswSegments((*self.segments[:first],
                             HnswVectorIndex.build(vectors, wanted_by, ef_construction)))


def _above(segment: HnswVectorIndex, query: np.ndarray, k: int, floor: float,
           beam: int = EF_SEARCH) -> tuple[np.ndarray, np.ndarray]:
    """A later segment's best rows, up to ``k``: enough that every row it can add to
    an answer whose ``k``-th score is ``floor`` is among them (a row that only ties
    the floor loses to the lower rows of the first segment)."""
    want = min(k, LATER_SEGMENT_K)
    while True:
        rows, scores = segment.search(query, want, beam)
        if want >= min(k, len(segment)) or len(scores) < want or scores[-1] <= floor:
            return rows, scores
        want = min(k, 2 * want)


def _reader_at(source: int) -> Callable[[int], bytes]:
    """Reads of the file ``source`` from its start, at an offset of their own
    (``os.pread``): they never move the position another reader of it uses."""
    offset = 0

    def read(size: int) -> bytes:
        nonlocal offset
        if hasattr(os, "pread"):
            chunk = os.pread(source, size, offset)
        else:  # pragma: no cover - Windows; only the one writer grows an index
            os.lseek(source, offset, os.SEEK_SET)
            chunk = os.read(source, size)
        offset += len(chunk)
        return chunk
    return read
