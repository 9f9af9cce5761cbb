"""KET-RAG: KNN chunk graph + PageRank selection (the keyword channel: tests/benchmarks).

Expected values are worked out by hand in the comments; networkx and a brute-force
loop serve as independent references for the vectorised code.
"""

from __future__ import annotations

import re

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from shared_core.embeddings import FunctionEmbedder, HashingEmbedder
from shared_core.select import knn_chunk_graph, knn_pagerank_scores, select_by_scores

AXES = ("alpha", "beta", "gamma", "delta")


def axis_embedder() -> FunctionEmbedder:
    """Bag of the four axis words: a text's vector is its normalised axis-word counts."""

    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(AXES)), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                if word in AXES:
                    out[row, AXES.index(word)] += 1.0
        return out

    return FunctionEmbedder(embed, "axis-4", len(AXES))


# ------------------------------------------------------------------------ KNN graph
def test_knn_neighbours_and_cycle_pagerank() -> None:
    # Keywords per chunk: c0 {t0,t1,t2}, c1 {t0,t1}, c2 {t2,t3}, c3 {t4}.
    # Shared-keyword counts: c0-c1 = 2, c0-c2 = 1, every pair with c3 = 0, c1-c2 = 0.
    terms = sp.csr_matrix(np.array([
        [1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 1, 0],
        [0, 0, 0, 0, 1],
    ]))
    # Unit vectors; cosines: c0c1 0, c0c2 .8, c0c3 .6, c1c2 .6, c1c3 .8, c2c3 .96.
    vectors = np.array([[1, 0], [0, 1], [0.8, 0.6], [0.6, 0.8]], dtype=np.float32)
    graph = knn_chunk_graph(terms, vectors, k=2)
    # K=2: one lexical neighbour: c0->c1 (2 beats 1), c1->c0, c2->c0 (its only overlap),
    # c3 -> none (it shares no keyword; a zero overlap is not a lexical neighbour).
    assert graph.lexical[:, 0].tolist() == [1, 0, 0, -1]
    # One semantic neighbour, never self or the lexical pick:
    # c0: c2 (.8) over c3 (.6); c1: c3 (.8) over c2 (.6); c2: c3 (.96) over c1 (.6);
    # c3: c2 (.96).
    assert graph.semantic[:, 0].tolist() == [2, 3, 3, 2]
    # Undirected edges {0-1, 0-2, 1-3, 2-3}: the 4-cycle 0-1-3-2-0, every degree 2,
    # so PageRank is uniform, 1/4 each.
    dense = graph.adjacency.toarray()
    expected = np.zeros((4, 4))
    for a, b in [(0, 1), (0, 2), (1, 3), (2, 3)]:
        expected[a, b] = expected[b, a] = 1
    np.testing.assert_array_equal(dense, expected)
    np.testing.assert_allclose(graph.scores, [0.25] * 4, atol=1e-9)


def test_knn_path_pagerank_by_hand_and_selection() -> None:
    # No shared keywords at all, so each chunk gets only its semantic neighbour.
    terms = sp.identity(3, format="csr")
    # cos: c0c1 .8, c0c2 0, c1c2 .6 -> c0->c1, c1->c0, c2->c1: the path 0 - 1 - 2.
    vectors = np.array([[1, 0], [0.8, 0.6], [0, 1]], dtype=np.float32)
    graph = knn_chunk_graph(terms, vectors, k=2)
    assert graph.semantic[:, 0].tolist() == [1, 0, 1]
    # PageRank (d = 0.85) on a 3-path, ends x, centre y = 1 - 2x:
    #   x = 0.15/3 + 0.85 * y/2  ->  x = 0.05 + 0.425 (1 - 2x)  ->  x = 0.475 / 1.85
    x = 0.475 / 1.85
    np.testing.assert_allclose(graph.scores, [x, 1 - 2 * x, x], atol=1e-9)
    selection = select_by_scores(["a", "b", "c"], graph.scores, np.array([5, 7, 9]), 1 / 3)
    assert selection.kept_ids == ("b",)
    assert selection.report.tokens_kept == 7


def test_knn_ties_go_to_lower_index_in_every_block_size() -> None:
    # c0 shares exactly one keyword with each of c1, c2, c3: the tie goes to c1.
    terms = sp.csr_matrix(np.array([[1, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]]))
    vectors = np.eye(4, dtype=np.float32)  # all cosines 0: semantic ties too
    for rows in (1, 2, 512):
        graph = knn_chunk_graph(terms, vectors, k=2, block_rows=rows)
        assert graph.lexical[0, 0] == 1
        # c0's semantic candidates exclude c1: c2 and c3 tie at 0, lower index wins.
        assert graph.semantic[0, 0] == 2
        # c1's only lexical neighbour is c0; semantic tie among c2, c3 -> c2.
        assert graph.lexical[1, 0] == 0 and graph.semantic[1, 0] == 2


def brute_force_neighbours(terms: np.ndarray, vectors: np.ndarray, half: int
                           ) -> tuple[list[list[int]], list[list[int]]]:
    """Algorithm 3 lines 3-6 as a plain double loop (ties: lower index)."""
    n = len(terms)
    binary = (terms > 0).astype(int)
    lexical, semantic = [], []
    for i in range(n):
        shared = [(int(binary[i] @ binary[j]), j) for j in range(n) if j != i]
        shared = [(c, j) for c, j in shared if c > 0]
        lex = [j for c, j in sorted(shared, key=lambda t: (-t[0], t[1]))[:half]]
        cos = [(float(vectors[i] @ vectors[j]), j) for j in range(n) if j != i and j not in lex]
        sem = [j for c, j in sorted(cos, key=lambda t: (-t[0], t[1]))[:half]]
        lexical.append(lex)
        semantic.append(sem)
    return lexical, semantic


@pytest.mark.parametrize("k", [2, 4, 6])
def test_knn_matches_brute_force_and_networkx(k: int) -> None:
    rng = np.random.default_rng(7)
    n = 40
    terms = (rng.random((n, 25)) < 0.12).astype(np.int64)
    vectors = rng.normal(size=(n, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    graph = knn_chunk_graph(sp.csr_matrix(terms), vectors, k=k, block_rows=7)
    lexical, semantic = brute_force_neighbours(terms, vectors, k // 2)
    for i in range(n):
        assert [j for j in graph.lexical[i] if j >= 0] == lexical[i]
        assert [j for j in graph.semantic[i] if j >= 0] == semantic[i]
    g = nx.Graph()
    g.add_nodes_from(range(n))
    for i in range(n):
        g.add_edges_from((i, j) for j in lexical[i] + semantic[i])
    reference = nx.pagerank(g, alpha=0.85, tol=1e-13, max_iter=1000)
    np.testing.assert_allclose(graph.scores, [reference[i] for i in range(n)], atol=1e-8)


def test_knn_tfidf_lexical_mode() -> None:
    # c0 = {t0, t1}, c1 = {t0}, c2 = {t1, t2}, c3 = {t1}. By count, c0's ties (c1, c2, c3
    # all share one keyword) go to c1. By TF-IDF cosine, df(t0) = 2 and df(t1) = 3, so
    # t0 is rarer and weighs more: cos(c0, c1) > cos(c0, c3) (c3 holds only t1), and
    # cos(c0, c2) < cos(c0, c3) because c2's row also carries the rare t2.
    terms = sp.csr_matrix(np.array([[1, 1, 0], [1, 0, 0], [0, 1, 1], [0, 1, 0]]))
    vectors = np.eye(4, dtype=np.float32)
    graph = knn_chunk_graph(terms, vectors, k=6, lexical="tfidf")
    assert graph.lexical[0].tolist() == [1, 3, 2]
    count = knn_chunk_graph(terms, vectors, k=6, lexical="count")
    assert count.lexical[0].tolist() == [1, 2, 3]


def test_knn_rejects_bad_input() -> None:
    terms = sp.identity(3, format="csr")
    vectors = np.eye(3, dtype=np.float32)
    for bad_k in (0, 1, 3, True):
        with pytest.raises(ValueError, match="k must be"):
            knn_chunk_graph(terms, vectors, k=bad_k)
    with pytest.raises(ValueError, match="rows"):
        knn_chunk_graph(terms, vectors[:2])
    with pytest.raises(ValueError, match="lexical"):
        knn_chunk_graph(terms, vectors, lexical="bm25")  # type: ignore[arg-type]


def test_knn_pagerank_scores_from_texts() -> None:
    texts = [
        "Paris is the capital of France.",
        "France borders Spain and Italy.",
        "Spain has a long coastline. Its capital is Madrid.",
        "Photosynthesis converts light into chemical energy.",
    ]
    scores = knn_pagerank_scores(texts, HashingEmbedder(64), k=2)
    assert scores.shape == (4,) and abs(scores.sum() - 1.0) < 1e-9
    # the France/Spain chunks link to each other; the biology chunk shares no keyword,
    # so it only has the edges chunks choose semantically and ends up least central
    assert int(np.argmin(scores)) == 3


def test_fill_budget_skip_and_stop() -> None:
    from shared_core.search import fill_budget

    tokens = np.array([5, 8, 3, 2])
    order = np.arange(4)
    # skip: 0 (5), 1 would make 13 > 10: passed over, 2 (8), 3 (10)
    assert fill_budget(order, tokens, 10, "skip").tolist() == [0, 2, 3]
    # stop: the context ends at unit 1
    assert fill_budget(order, tokens, 10, "stop").tolist() == [0]
    # nothing after unit 0 fits (8, 6, 6 > 5 left): skip keeps only unit 0
    assert fill_budget(order, np.array([5, 8, 6, 6]), 10, "skip").tolist() == [0]
    assert fill_budget(np.array([3, 1]), tokens, 100, "skip").tolist() == [3, 1]
