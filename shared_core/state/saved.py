"""A derived graph read back from disk, checked against the chunks it claims to come from.

Deriving the graph is most of what a load would cost, and most of that is counting
co-occurrences over every pair of concepts that share chunks. A save therefore
keeps every pair passing ``theta_co`` with its count (the strong pairs, which a
later refresh updates instead of recounting) and PageRank; a load derives
everything else again, exactly as a build would, and checks the saved parts
against it: every count must pass ``theta_co`` and fit in both concepts' chunk
counts, every pair's cosine is recomputed from the re-derived concept vectors (so
its edge decision and margin are fresh, never read from disk), and PageRank must
be a fixed point of the resulting edges. Only the counts themselves (and that no
pair is missing) rest on the checksum: recounting them is the cost a saved graph
avoids.

Saves from before strong pairs were kept hold only the edges; they still load,
each edge's cosine checked against ``theta_sem``, but such a graph has no strong
pairs, so its first refresh derives the graph whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ConceptGraphConfig
from ..graph.edges import (
    ConceptEdges,
    StrongPairs,
    adjacency,
    chunk_counts,
    concept_vectors,
    cosine_decisions,
    edges_of,
    strong_pairs_of,
)
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
    """The parts of a derived graph a save keeps: concept pairs, their counts, PageRank.

    ``strong`` says what the pairs are: every pair passing theta_co (True), or only
    the edges (False: saves made before strong pairs were kept, and graphs loaded
    from them and not refreshed since).
    """

    source: np.ndarray
    target: np.ndarray
    cooccurrence: np.ndarray
    rank: np.ndarray
    strong: bool = True


def saved_parts(graph: DerivedGraph) -> SavedGraph:
    if graph.pairs is None:
        edges = graph.edges
        return SavedGraph(edges.source, edges.target, edges.cooccurrence, graph.rank,
                          strong=False)
    pairs = graph.pairs
    return SavedGraph(pairs.source, pairs.target, pairs.count, graph.rank)


def restore_graph(corpus: CorpusState, config: ConceptGraphConfig, saved: SavedGraph,
                  ann: VectorSearch | None = None) -> DerivedGraph:
    """The graph of ``corpus`` with its saved pairs and PageRank; ValueError if they disagree."""
    found = link_concepts(corpus, config)
    n = len(found.concept_terms)
    vectors, counts = concept_vectors(found.sentence_concepts, corpus.sentence_vectors)
    src, dst, co = (np.asarray(a, dtype=np.int64) for a in
                    (saved.source, saved.target, saved.cooccurrence))
    what = "pair" if saved.strong else "edge"
    if not len(src) == len(dst) == len(co):
        raise ValueError(f"the saved {what} arrays differ in length")
    if len(src) and not (np.all((src >= 0) & (src < dst) & (dst < n))
                         and np.all(np.diff(src * n + dst) > 0)):
        raise ValueError(f"saved {what}s must join two of the {n} concepts, source < target, "
                         "sorted, each pair once")
    if np.any(co < max(config.theta_co, 1)):
        raise ValueError(f"a saved {what} is below theta_co")
    links_csc = found.links.tocsc()
    linked = chunk_counts(links_csc)
    if np.any(co > np.minimum(linked[src], linked[dst])):
        raise ValueError(f"a saved {what}'s count exceeds the chunks its concepts link")
    pairs: StrongPairs | None = None
    if saved.strong:
        pairs = strong_pairs_of(src, dst, co, vectors, config.theta_sem)
        edges = edges_of(pairs, linked)
    else:
        edge, _ = cosine_decisions(vectors, src, dst, config.theta_sem)
        if not np.all(edge):
            raise ValueError("a saved edge is below theta_co or theta_sem")
        edges = ConceptEdges(src, dst, co, 2.0 * co / (linked[src] + linked[dst]))
    rank = saved.rank
    rank_adj = adjacency(edges, n, weighted=config.pagerank_weighted)
    if rank.shape != (n,) or not np.all(rank >= 0) or (
            n and pagerank_residual(rank_adj, rank, config.pagerank_damping)
            > RANK_RESIDUAL_PER_CONCEPT * n):
        raise ValueError("the saved PageRank is not the PageRank of the saved "
                         f"{'pairs' if saved.strong else 'edges'}")
    unit_vectors = unit_vectors_of(corpus, config)
    search = vector_search_index(config, corpus, unit_vectors, ann)
    return assemble_graph(corpus, config, found, vectors, counts, edges, pairs, unit_vectors,
                          search, rank=rank, links_csc=links_csc)
