"""The first stage of a derivation: concepts and the chunks and sentences they link."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.graph.edges import adjacency
from shared_core.state.derived import link_concepts, rank_adjacency
from tests.shared_core.state.test_refresh import CHUNKS


@pytest.mark.parametrize("mode", ["contains", "extracted"])
def test_sentences_link_the_concepts_they_contain_within_linked_chunks(mode: str) -> None:
    """Eq. 1's sentence sets: a sentence links a concept it contains when its chunk links it.
    Under "contains" every chunk links what its sentences contain, so that is all of them."""
    config = ConceptGraphConfig(concept_links=mode, concepts_per_chunk=3)  # type: ignore[arg-type]
    index = ConceptGraphIndex.from_texts(CHUNKS, embedder=HashingEmbedder(64), config=config)
    corpus = index.state.corpus
    found = link_concepts(corpus, config)
    contains = corpus.sentence_terms[:, found.concept_terms].toarray() > 0
    chunk_links = found.links.toarray()[corpus.sentence_chunk()] > 0
    got = found.sentence_concepts
    assert got.has_canonical_format
    np.testing.assert_array_equal(got.toarray(), (contains & chunk_links).astype(np.float32))
    if mode == "contains":
        np.testing.assert_array_equal(got.toarray() > 0, contains)
    else:  # a chunk's top keywords leave out terms its sentences hold
        assert (contains & ~chunk_links).any()


def test_the_graph_holds_no_edge_list_and_derives_the_one_its_adjacency_holds() -> None:
    """Edges come from the pairs on demand: the cosine-passing pairs, Dice-weighted by
    their concepts' chunks, each once in the upper triangle of the adjacency (and twice
    in it); unweighted PageRank walks those entries as ones."""
    index = ConceptGraphIndex.from_texts(CHUNKS, embedder=HashingEmbedder(64),
                                         config=ConceptGraphConfig(theta_co=1))
    graph = index.state.graph
    assert graph.edge_list is None and "edges" not in vars(graph)
    pairs = graph.pairs
    assert pairs is not None
    edges = graph.edges
    assert graph.edges is edges  # derived once
    np.testing.assert_array_equal(edges.source, pairs.source[pairs.edge])
    np.testing.assert_array_equal(edges.target, pairs.target[pairs.edge])
    chunks = np.diff(graph.links_csc.indptr).astype(np.float64)
    np.testing.assert_array_equal(
        edges.dice, 2.0 * edges.cooccurrence / (chunks[edges.source] + chunks[edges.target]))
    upper = sp.triu(graph.adjacency, k=1).tocoo()
    assert graph.edge_count == len(edges) == upper.nnz == graph.adjacency.nnz // 2 > 0
    np.testing.assert_array_equal(upper.row, edges.source)
    np.testing.assert_array_equal(upper.col, edges.target)
    np.testing.assert_array_equal(upper.data, edges.dice)
    ones = rank_adjacency(graph.adjacency, weighted=False)
    np.testing.assert_array_equal(ones.toarray(),
                                  adjacency(edges, len(graph.concepts), weighted=False).toarray())
    assert rank_adjacency(graph.adjacency, weighted=True) is graph.adjacency
