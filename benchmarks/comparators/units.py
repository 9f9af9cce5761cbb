"""One calling convention for every retrieval strategy the benchmarks compare.

The benchmark harness builds each method once from ``(unit_ids, unit_texts,
unit_tokens, embedder)`` and then calls ``retrieve(query, query_vector, budget)``
on all of them alike. :class:`shared_core.select.knn.UnitCorpus` is the common
preparation (sentences, their embeddings, sentence x term counts): sentences go
through the embedder passed in, so a
:class:`~shared_core.embeddings.cache.CachedEmbedder` shared between methods
embeds each sentence once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from shared_core.embeddings import Embedder


@runtime_checkable
class UnitRetriever(Protocol):
    """What the harness calls: unit positions in context order, total tokens <= budget."""

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]: ...


class UnitRetrieverFactory(Protocol):
    """How a strategy is built once over a list of units."""

    def __call__(
        self,
        unit_ids: Sequence[str],
        unit_texts: Sequence[str],
        unit_tokens: Sequence[int] | np.ndarray,
        embedder: Embedder,
    ) -> UnitRetriever: ...


def check_budget(budget: object) -> int:
    if not isinstance(budget, (int, np.integer)) or isinstance(budget, bool):
        raise TypeError(f"budget must be an int, got {type(budget).__name__}")
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    return int(budget)


def check_query_vector(query_vector: object, dim: int) -> np.ndarray:
    """A finite (dim,) vector, returned unit-norm so cosines are dot products."""
    q = np.asarray(query_vector, dtype=np.float32)
    if q.ndim == 2 and q.shape[0] == 1:
        q = q[0]
    if q.shape != (dim,):
        raise ValueError(f"query_vector must have shape ({dim},), got {q.shape}")
    norm = float(np.linalg.norm(q))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("query_vector must be finite and non-zero")
    return q / norm
