"""An approximate vector backend: faiss HNSW over 8-bit quantised vectors (the ``ann`` extra).

It only proposes candidates: the ranking rescores what it returns from the
index's own float32 vectors, so the quantised copy never decides a score. Rows
are positions in the matrix it was built from. ``benchmarks/ann_compare.py``
measured it against usearch's HNSW (float16 and int8) and faiss's HNSW-flat and
IVF-PQ on MiniLM vectors of the dev corpora: at 1,000 candidates it had the best
recall for its latency (0.993 at efSearch 1,000) and a quarter of float32's bytes
(``benchmarks/RESULTS.md``, Scale).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

FILE_NAME = "ann.faiss"
ROWS_FILE_NAME = "ann_rows.npy"  # each HNSW row's vector in the saved corpus (-1: dead)
LINKS_PER_NODE = 32  # HNSW's M
EF_CONSTRUCTION = 100
EF_SEARCH = 128  # the search beam; never narrower than the answer asked for


def ann_available() -> bool:
    """Whether the ``faiss`` package (the ``ann`` extra) can be imported."""
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def _faiss() -> Any:
    # spinning OpenMP threads steal the other core from everything else on a small machine
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "vector_index='hnsw' needs the faiss-cpu package: pip install 'conceptgraph[ann]'"
        ) from exc
    return faiss


@dataclass(frozen=True, eq=False)
class HnswVectorIndex:
    """Inner-product HNSW over unit vectors; satisfies ``VectorIndex``."""

    index: Any
    # a descriptor of the saved file whose codes ``index`` maps, held open (and closed
    # with this object): a later save may remove its folder, and the file must stay
    # readable for as long as the codes are used
    source: int | None = None

    @classmethod
    def build(cls, vectors: np.ndarray) -> HnswVectorIndex:
        """Index every row of ``vectors`` (unit rows) under its position."""
        faiss = _faiss()
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        index = faiss.IndexHNSWSQ(rows.shape[1], faiss.ScalarQuantizer.QT_8bit,
                                  LINKS_PER_NODE, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = EF_CONSTRUCTION
        if len(rows):
            index.train(rows)  # the quantiser's range per dimension
            index.add(rows)
        return cls(index)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def with_rows(self, vectors: np.ndarray) -> HnswVectorIndex:
        """A copy with ``vectors`` appended as the next rows; this index is unchanged.

        Readers may be searching this one, so the graph is copied (about 300
        bytes a row) rather than grown in place. The quantiser keeps the value
        range it was trained on; rows outside it are clipped, which only blurs
        which rows are proposed, never a score (rescoring is exact).
        """
        faiss = _faiss()
        if self.source is None:
            grown = faiss.clone_index(self.index)
        else:
            # a clone of a mapped index still views the mapped codes, and faiss aborts
            # the process when those are grown: an owned copy is read from the file
            # (through faiss's bytes, the copy had taken ten times as long at 1 M rows)
            grown = faiss.read_index(faiss.PyCallbackIOReader(_reader_at(self.source)))
        grown.add(np.ascontiguousarray(vectors, dtype=np.float32))
        return HnswVectorIndex(grown)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self))
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        # the beam is a per-call parameter, so concurrent queries never share it
        params = _faiss().SearchParametersHNSW(efSearch=max(EF_SEARCH, k))
        scores, rows = self.index.search(np.asarray(query, dtype=np.float32)[None, :], k,
                                         params=params)
        found = rows[0] >= 0  # faiss pads with -1 when it finds fewer than k
        return rows[0][found].astype(np.int64), scores[0][found].astype(np.float32)

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
        return HnswVectorIndex._holding(index, os.dup(file.fileno()))

    @classmethod
    def _holding(cls, index: Any, source: int) -> HnswVectorIndex:
        """``index``, which maps the file open as ``source``; closes it with the index."""
        held = cls(index, source)
        weakref.finalize(held, os.close, source)
        return held

    def save(self, path: Path) -> None:
        """Write the graph and its quantised vectors (faiss's own binary format)."""
        _faiss().write_index(self.index, str(path))

    @classmethod
    def load(cls, path: Path, rows: int, dim: int) -> HnswVectorIndex:
        """Map a saved index read-only; it must be an HNSW-SQ index of ``rows`` x ``dim``.

        A mapped index is never added to: a changed corpus derives a new one.
        """
        faiss = _faiss()
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
        return cls._holding(index, os.open(path, os.O_RDONLY))


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
