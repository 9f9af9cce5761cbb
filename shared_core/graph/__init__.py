"""The concept graph: TF-IDF concepts, filtered co-occurrence edges, PageRank and walks."""

from .concepts import extract_concepts, smoothed_idf, tfidf, top_n_per_row
from .edges import (
    ConceptEdges,
    adjacency,
    concept_edges,
    concept_vectors,
    cooccurrence,
)
from .pagerank import bfs_hops, bfs_reached, pagerank, power_iteration

__all__ = [
    "ConceptEdges",
    "adjacency",
    "bfs_hops",
    "bfs_reached",
    "concept_edges",
    "concept_vectors",
    "cooccurrence",
    "extract_concepts",
    "pagerank",
    "power_iteration",
    "smoothed_idf",
    "tfidf",
    "top_n_per_row",
]
