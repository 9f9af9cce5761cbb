"""An index's state: the stored corpus, what is derived from it, and how chunks get in."""

from .corpus import (
    CorpusState,
    empty_corpus,
    merge,
    merge_many,
    replaced,
    sorted_by_id,
    take,
    with_sorted_terms,
)
from .derived import DerivedGraph, chunk_term_counts, derive_graph, segment_means
from .ingest import embed_in_batches, prepare_chunks, unit_texts
from .refresh import refresh_graph

__all__ = [
    "CorpusState",
    "DerivedGraph",
    "chunk_term_counts",
    "derive_graph",
    "embed_in_batches",
    "empty_corpus",
    "merge",
    "merge_many",
    "prepare_chunks",
    "refresh_graph",
    "replaced",
    "segment_means",
    "sorted_by_id",
    "take",
    "unit_texts",
    "with_sorted_terms",
]
