"""An approximate vector backend: an HNSW graph from the ``usearch`` package (the ``ann`` extra).

It only proposes candidates: the ranking rescores what it returns from the
index's own vectors, so its quantised copy of the vectors never decides a
score. Rows are positions in the matrix it was built from (usearch keys).
``benchmarks/ann_compare.py`` measured it against faiss's HNSW and IVF-PQ;
``benchmarks/RESULTS.md`` has the figures that chose it and its settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FILE_NAME = "ann.usearch"
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 64
QUANTISATION = "i8"


def ann_available() -> bool:
    """Whether the ``usearch`` package (the ``ann`` extra) can be imported."""
    import importlib.util

    return importlib.util.find_spec("usearch") is not None


def _usearch() -> Any:
    try:
        from usearch.index import Index
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "vector_index='hnsw' needs the usearch package: pip install 'conceptgraph[ann]'"
        ) from exc
    return Index


@dataclass(frozen=True, eq=False)
class HnswVectorIndex:
    """Inner-product HNSW over unit vectors; satisfies ``VectorIndex``."""

    index: Any
    size: int

    @classmethod
    def build(cls, vectors: np.ndarray, *, threads: int = 0) -> HnswVectorIndex:
        """Index every row of ``vectors`` (unit rows) under its position."""
        index = _usearch()(ndim=vectors.shape[1], metric="cos", dtype=QUANTISATION,
                           connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD,
                           expansion_search=EXPANSION_SEARCH)
        if len(vectors):
            index.add(np.arange(len(vectors), dtype=np.uint64),
                      np.asarray(vectors, dtype=np.float32), threads=threads or _cores())
        return cls(index, len(vectors))

    def __len__(self) -> int:
        return self.size

    def save(self, path: Path) -> None:
        """Write the graph and its quantised vectors (usearch's own binary format)."""
        self.index.save(str(path))

    @classmethod
    def load(cls, path: Path, rows: int, dim: int) -> HnswVectorIndex:
        """Map a saved index read-only; its header must say ``rows`` vectors of ``dim``.

        The header is read and checked before the file is mapped, so a file that is
        not a usearch index of that shape never reaches the graph code.
        """
        index_type = _usearch()
        try:
            header = index_type.metadata(str(path))
        except (ValueError, RuntimeError, OSError) as exc:
            raise ValueError(f"{path} is not an HNSW index: {exc}") from exc
        shape = (header.get("count_present"), header.get("dimensions"))
        if shape != (rows, dim) or header.get("count_deleted"):
            raise ValueError(f"{path} holds {shape[0]} vectors of {shape[1]} dimensions; "
                             f"the index has {rows} of {dim}")
        index = index_type.restore(str(path), view=True)
        if index is None or len(index) != rows:
            raise ValueError(f"{path} could not be mapped as an HNSW index")
        return cls(index, rows)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, self.size)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        # the beam must be at least as wide as the answer, or recall collapses
        self.index.expansion_search = max(EXPANSION_SEARCH, k)
        matches = self.index.search(np.asarray(query, dtype=np.float32), k)
        rows = np.asarray(matches.keys, dtype=np.int64)
        return rows, (1.0 - np.asarray(matches.distances, dtype=np.float32))


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
