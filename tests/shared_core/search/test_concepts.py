"""Direct concepts found through HNSW over the concept vectors (``concept_search="hnsw"``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.search.concepts import ConceptHnsw, searched_weighting
from shared_core.search.fused import concept_weights
from tests.shared_core.test_store import TEXTS


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def symmetric(n: int, pairs: list[tuple[int, int]]) -> sp.csr_matrix:
    rows = [a for a, b in pairs] + [b for a, b in pairs]
    cols = [b for a, b in pairs] + [a for a, b in pairs]
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))


def test_the_direct_concepts_are_the_best_candidates_and_what_bfs_reaches_is_scored() -> None:
    """Worked by hand. Four 2-d concepts; the graph holds 1 and 2 only (as if it missed 0),
    and 2 links 3. The query is nearest 0, then 2, then 1, then 3. It is asked for two
    candidates per direct concept: 1 and 2, both scored."""
    vectors = np.stack([unit(1, 0), unit(0, 1), unit(1, 1), unit(-1, 1)])
    query = unit(1, 0.2)  # cosines: 0.981, 0.196, 0.832, -0.555
    graph = ConceptHnsw.build(vectors, np.array([1, 2]))
    similarity, (weights, hop_of) = searched_weighting(
        graph, vectors, symmetric(4, [(2, 3)]), query, top_k=1, hops=1, decay=0.5)
    assert hop_of.tolist() == [-1, -1, 0, 1]  # 2 is direct (the best it proposed), 3 reached
    expected = vectors @ query
    # 0 was never proposed nor reached: unread, and NaN says so
    assert np.isnan(similarity[0])
    assert similarity[[1, 2, 3]] == pytest.approx(expected[[1, 2, 3]], abs=1e-6)
    # direct: its cosine; reached at hop 1: max(0, cos) * 0.5 = 0; the rest 0
    assert weights == pytest.approx([0.0, 0.0, expected[2], 0.0], abs=1e-6)
    # an exact-match seed weighs 1 and is scored too, though the graph never proposed it
    similarity, (weights, hop_of) = searched_weighting(
        graph, vectors, symmetric(4, [(2, 3)]), query, top_k=1, hops=0, decay=0.5,
        exact=np.array([0]))
    assert hop_of.tolist() == [0, -1, 0, -1]
    assert similarity[0] == pytest.approx(expected[0], abs=1e-6) and np.isnan(similarity[3])
    assert weights == pytest.approx([1.0, 0.0, expected[2], 0.0], abs=1e-6)


def test_when_the_graph_proposes_every_concept_the_weighting_is_the_scans() -> None:
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((120, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    usable = np.flatnonzero(np.arange(120) % 5 != 0)  # a fifth link no unit
    pairs = [(int(a), int(b)) for a, b in rng.integers(0, 120, size=(200, 2)) if a != b]
    adjacency = symmetric(120, sorted(set(pairs)))
    graph = ConceptHnsw.build(vectors, usable)  # 96 concepts: the beam of 128 sees all
    for query in rng.standard_normal((10, 16)).astype(np.float32):
        query /= np.linalg.norm(query)
        exact = np.array([3, 7])
        scanned = concept_weights(vectors @ query, adjacency, top_k=8, hops=2, decay=0.5,
                                  exact=exact, usable=usable)
        similarity, searched = searched_weighting(graph, vectors, adjacency, query, top_k=8,
                                                  hops=2, decay=0.5, exact=exact)
        assert searched[1].tolist() == scanned[1].tolist()
        assert searched[0] == pytest.approx(scanned[0], abs=1e-6)
        read = scanned[1] >= 0
        assert not np.isnan(similarity[read]).any()


def test_an_index_asked_through_the_graph_answers_as_the_scan_where_it_sees_every_concept(
        ) -> None:
    index = ConceptGraphIndex.from_texts(TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))],
                                         embedder=HashingEmbedder(64))
    searched = index.reconfigured(concept_search="hnsw")
    assert searched.state is index.state or searched.state.graph is index.state.graph
    for query in ["Who wrote the first compiler?", "analytical engine", "looms and cards"]:
        scanned, found = index.retrieve(query), searched.retrieve(query)
        # the same concepts; their order in the trace may differ between equal cosines,
        # as a gathered row's product can differ from the whole scan's in the last bit
        assert set(found.direct_concepts) == set(scanned.direct_concepts)
        assert [(c.id, c.provenance.concept, c.provenance.stage) for c in found.chunks] == [
            (c.id, c.provenance.concept, c.provenance.stage) for c in scanned.chunks]
        assert [c.score for c in found.chunks] == pytest.approx(
            [c.score for c in scanned.chunks], abs=1e-9)


def test_the_graph_finds_the_fused_rankings_concepts_only() -> None:
    with pytest.raises(ValueError, match="ranking='paper' scans them all"):
        ConceptGraphConfig(concept_search="hnsw", ranking="paper")
    with pytest.raises(ValueError, match="concept_search"):
        ConceptGraphConfig(concept_search="ivf")  # type: ignore[arg-type]
