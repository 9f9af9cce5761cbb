"""Core-chunk selection: chunk scores, the kept set and its cost report, KET-RAG's KNN graph."""

from .cost import CostReport, Selection
from .knn import (
    KnnChunkGraph,
    Lexical,
    UnitCorpus,
    check_units,
    knn_chunk_graph,
    knn_pagerank_scores,
    sentence_to_unit,
)
from .scores import (
    chunk_scores,
    id_random_scores,
    n_core_by_tokens,
    n_core_chunks,
    random_scores,
    rank_by_score,
    select_by_scores,
    value_per_token,
)

__all__ = [
    "CostReport",
    "KnnChunkGraph",
    "Lexical",
    "Selection",
    "UnitCorpus",
    "check_units",
    "chunk_scores",
    "id_random_scores",
    "knn_chunk_graph",
    "knn_pagerank_scores",
    "n_core_by_tokens",
    "n_core_chunks",
    "random_scores",
    "rank_by_score",
    "select_by_scores",
    "sentence_to_unit",
    "value_per_token",
]
