"""What the engine backends (``milvus``, ``qdrant``) share: the checks of a write, the
plumbing of a request of term searches, and rows read back by key.

Each backend keeps what is its engine's own (schemas, requests, ids); these take the
engine's part as a function, so both give the same errors for the same mistakes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .external import MissingRowsError


def check_term_rows(where: str, keeps_terms: bool, keys: Sequence[str],
                    terms: Sequence[Mapping[int, float]] | None) -> None:
    """Raise unless rows written with ``terms`` (None: ``upsert``, without) fit a
    collection that keeps term postings or not, one term row per key."""
    if terms is None and keeps_terms:
        raise ValueError(f"{where} keeps term postings: write its rows with upsert_with_terms")
    if terms is not None and not keeps_terms:
        raise ValueError(f"{where} keeps no term postings (make the store with "
                         "term_postings=True)")
    if terms is not None and len(terms) != len(keys):
        raise ValueError(f"{len(keys)} rows but {len(terms)} term rows")


def rows_to_write(keys: Sequence[str], vectors: np.ndarray,
                  metadatas: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """``vectors`` as float32 rows, one per key and metadata, else ``ValueError``."""
    rows = np.asarray(vectors, dtype=np.float32)
    if rows.ndim != 2 or len(rows) != len(keys) or len(metadatas) != len(keys):
        raise ValueError(f"{len(keys)} keys, {len(metadatas)} metadatas and vectors of "
                         f"shape {rows.shape}: one of each per row")
    return rows


def check_dimension(where: str, dim: int, rows: np.ndarray) -> None:
    """Raise unless ``rows`` have the ``dim`` values the collection holds."""
    if rows.shape[1] != dim:
        raise ValueError(f"{where} holds {dim}-dimensional vectors, got {rows.shape[1]}")


def checked_rows(where: str, keeps_terms: bool, dim: int | None,
                 create: Callable[[int], int], keys: Sequence[str], vectors: np.ndarray,
                 metadatas: Sequence[Mapping[str, Any]],
                 terms: Sequence[Mapping[int, float]] | None) -> np.ndarray | None:
    """The rows of a write, each check above made: float32, one per key and metadata
    (and term row, where written with terms), of the collection's dimension. ``dim``
    None: no collection yet, and ``create`` makes it for the rows' dimension and gives
    that back. None for a write of no rows, which creates nothing."""
    check_term_rows(where, keeps_terms, keys, terms)
    if not len(keys):
        return None
    rows = rows_to_write(keys, vectors, metadatas)
    check_dimension(where, dim if dim is not None else create(rows.shape[1]), rows)
    return rows


def term_searches(queries: Sequence[Mapping[int, float]], k: int, searchable: bool,
                  search: Callable[[list[dict[int, float]]], list[list[str]]]
                  ) -> list[list[str]]:
    """``TermPostingsBackend.search_terms``: each query's positive weights, the queries
    with any given to ``search`` in one request (its answer, one key list per query),
    and no keys for the others. Nothing is asked while not ``searchable`` (no collection
    yet) or for ``k <= 0``."""
    asked = [{int(d): float(w) for d, w in weights.items() if w > 0} for weights in queries]
    out: list[list[str]] = [[] for _ in asked]
    searched = [i for i, weights in enumerate(asked) if weights]
    if not searchable or k <= 0 or not searched:
        return out
    for i, keys in zip(searched, search([asked[i] for i in searched]), strict=True):
        out[i] = keys
    return out


def rows_by_key(keys: Sequence[str], dim: int | None, where: str, batch: int,
                read: Callable[[list[str]], Iterable[tuple[str, Sequence[float]]]]
                ) -> np.ndarray:
    """``VectorRowsBackend.vectors_of``: the rows under ``keys`` in their order, each
    distinct key read once, ``batch`` keys a request (``read`` gives the rows it found,
    with their keys). :class:`MissingRowsError` for any key not held; a store with no
    collection yet (``dim`` None) holds none."""
    found: dict[str, Sequence[float]] = {}
    if dim is not None:
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), batch):
            found.update(read(unique[start:start + batch]))
    missing = [k for k in keys if k not in found]
    if missing:
        raise MissingRowsError(
            f"{where} does not hold {len(missing)} of the {len(keys)} rows asked for "
            f"(e.g. {missing[0]!r})")
    if not len(keys):
        return np.zeros((0, dim or 0), dtype=np.float32)
    return np.array([found[key] for key in keys], dtype=np.float32)  # one conversion


def scores_by_key(keys: Sequence[str], dim: int | None, batch: int,
                  score: Callable[[list[str]], Iterable[tuple[str, float]]]) -> np.ndarray:
    """``VectorScoresBackend.scores_of``: the scores ``score`` gives the keys it finds
    (``batch`` distinct keys a request), float32 in ``keys``' order, NaN for the rest.
    A store with no collection yet (``dim`` None) scores none."""
    found: dict[str, float] = {}
    if dim is not None:
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), batch):
            found.update(score(unique[start:start + batch]))
    return np.array([found.get(key, np.nan) for key in keys], dtype=np.float32)
