"""Retrieval over the concept graph: local search, fused evidence search, BM25."""

from .bm25 import BM25Scorer
from .fused import (
    ConceptWeighting,
    concept_weights,
    descending_ranks,
    fused_search,
    inverse_document_frequency,
    strongest_concept,
)
from .local import ChunkScorer, Hit, SearchTrace, Stage, fill_budget, local_search
from .sparse_values import SparseValues
from .vector_index import top_k_indices

__all__ = [
    "BM25Scorer",
    "ChunkScorer",
    "ConceptWeighting",
    "Hit",
    "SearchTrace",
    "SparseValues",
    "Stage",
    "concept_weights",
    "descending_ranks",
    "fill_budget",
    "fused_search",
    "inverse_document_frequency",
    "local_search",
    "strongest_concept",
    "top_k_indices",
]
