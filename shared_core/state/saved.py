"""A derived graph read back from disk, checked against the chunks it claims to come from.

Deriving the graph is most of what a load would cost, and most of that is finding
the edges: co-occurrence counts over every pair of concepts that share chunks,
then a cosine for each. A save therefore keeps the edges (pairs and counts) and
PageRank; a load derives everything else again, exactly as a build would, and
checks the saved parts against it: every edge's cosine is recomputed from the
re-derived concept vectors and must pass ``theta_sem``, every count must pass
``theta_co``, and PageRank must be a fixed point of the edges. Only the counts
themselves (and that no pair is missing) rest on the checksum: recounting them
is the cost a saved graph avoids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ConceptGraphConfig
from ..graph.edges import ConceptEdges, adjacency, chunk_counts, concept_vectors, pair_cosines
from ..graph.pagerank import pagerank_residual
from .corpus import CorpusState
from .derived import (
    DerivedGraph,
    VectorSearch,
    assemble_graph,
    link_concepts,
    unit_vectors_of,
    vector_search_index,
)

# L1 distance a saved PageRank may move in one more power step, per concept: ten times
# the per-node tolerance PageRank stops at
RANK_RESIDUAL_PER_CONCEPT = 1e-9


@dataclass(frozen=True, eq=False)
class SavedGraph:
    """The parts of a derived graph a save keeps: edge pairs, their counts, PageRank."""

    source: np.ndarray
    target: np.ndarray
    cooccurrence: np.ndarray
    rank: np.ndarray


def saved_parts(graph: DerivedGraph) -> SavedGraph:
    return SavedGraph(graph.edges.source, graph.edges.target, graph.edges.cooccurrence,
                      graph.rank)


def restore_graph(corpus: CorpusState, config: ConceptGraphConfig, saved: SavedGraph,
                  ann: VectorSearch | None = None) -> DerivedGraph:
    """The graph of ``corpus`` with its saved edges and PageRank; ValueError if they disagree."""
    found = link_concepts(corpus, config)
    n = len(found.concept_terms)
    vectors, counts = concept_vectors(found.sentence_concepts, corpus.sentence_vectors)
    src, dst, co = saved.source, saved.target, saved.cooccurrence
    if not len(src) == len(dst) == len(co):
        raise ValueError("the saved edge arrays differ in length")
    if len(src) and not (np.all((src >= 0) & (src < dst) & (dst < n))
                         and np.all(np.diff(src * n + dst) > 0)):
        raise ValueError(f"saved edges must join two of the {n} concepts, source < target, "
                         "sorted, each pair once")
    cos = pair_cosines(vectors, src, dst)
    if np.any(co < max(config.theta_co, 1)) or np.any(cos < config.theta_sem):
        raise ValueError("a saved edge is below theta_co or theta_sem")
    linked = chunk_counts(found.links)
    if np.any(co > np.minimum(linked[src], linked[dst])):
        raise ValueError("a saved edge's count exceeds the chunks its concepts link")
    edges = ConceptEdges(src, dst, co, cos, 2.0 * co / (linked[src] + linked[dst]))
    rank = saved.rank
    rank_adj = adjacency(edges, n, weighted=config.pagerank_weighted)
    if rank.shape != (n,) or not np.all(rank >= 0) or (
            n and pagerank_residual(rank_adj, rank, config.pagerank_damping)
            > RANK_RESIDUAL_PER_CONCEPT * n):
        raise ValueError("the saved PageRank is not the PageRank of the saved edges")
    unit_vectors = unit_vectors_of(corpus, config)
    search = vector_search_index(config, corpus, unit_vectors, ann)
    return assemble_graph(corpus, config, found, vectors, counts, edges, unit_vectors, search,
                          rank=rank)
