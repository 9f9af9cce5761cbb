"""KET-RAG: KNN chunk graph + PageRank selection, and the keyword channel.

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
from shared_core.ketrag import (
    KeywordChannelRetriever,
    keyword_channel,
    knn_chunk_graph,
    knn_pagerank_scores,
)
from shared_core.selection import select_by_scores
from shared_core.strategies import UnitRetriever
from shared_core.text import count_tokens
from shared_core.units import split_into_units

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


# -------------------------------------------------------------------- keyword channel
# One sentence per unit; with the axis embedder a unit's vector is its axis counts.
KW_TEXTS = ["alpha beta.", "alpha gamma.", "beta delta.", "gamma delta.", "delta."]
KW_TOKENS = [10, 10, 5, 10, 5]
# Keyword vectors = normalised mean of the sentences containing them:
#   alpha: u0+u1 ~ (2,1,1,0)/sqrt6; beta: u0+u2 ~ (1,2,0,1)/sqrt6;
#   gamma: u1+u3 ~ (1,0,2,1)/sqrt6; delta: u2+u3+u4 ~ (0,.707,.707,2.414)/2.613.
# Query q ~ (1, .5, 0, 0): q.alpha ~ 2.5/sqrt6, q.beta ~ 2/sqrt6, q.gamma ~ 1/sqrt6,
# q.delta ~ .354/2.613, so seeds come in the order alpha, beta, gamma, delta.
# Units vs q ~ u0 1.5/sqrt2, u1 1/sqrt2, u2 .5/sqrt2, u3 0, u4 0.
KW_QUERY = np.array([1.0, 0.5, 0.0, 0.0], dtype=np.float32)


def kw_retriever(**options: object) -> KeywordChannelRetriever:
    ids = [f"u{i}" for i in range(len(KW_TEXTS))]
    return KeywordChannelRetriever.build(ids, KW_TEXTS, KW_TOKENS, axis_embedder(),
                                         **options)  # type: ignore[arg-type]


def test_keyword_pool_stops_once_it_holds_twice_the_budget() -> None:
    retriever = kw_retriever()
    # budget 10 -> need 20 tokens: alpha alone brings u0 + u1 = 20 -> stop.
    small = retriever.search("q", KW_QUERY, 10)
    assert small.seeds == ("alpha",)
    assert (small.pool_units, small.pool_tokens) == (2, 20)
    assert small.units == [0]
    # budget 15 -> need 30: alpha 20, beta adds u2 (+5) = 25, gamma adds u3 (+10) = 35.
    search = retriever.search("q", KW_QUERY, 15)
    assert search.seeds == ("alpha", "beta", "gamma")
    assert (search.pool_units, search.pool_tokens) == (4, 35)
    # rerank u0 > u1 > u2 > u3; fill 15: u0 (10), u1 would make 20: skipped, u2 (15).
    assert search.units == [0, 2]
    assert search.tokens_used == 15
    assert [(h.keyword, h.seed_rank) for h in search.hits] == [("alpha", 0), ("beta", 1)]
    np.testing.assert_allclose([h.score for h in search.hits],
                               [1.5 / np.sqrt(1.25) / np.sqrt(2), 0.5 / np.sqrt(1.25) / np.sqrt(2)],
                               atol=1e-6)
    np.testing.assert_allclose(search.hits[0].keyword_similarity,
                               2.5 / np.sqrt(6) / np.sqrt(1.25), atol=1e-6)


def test_keyword_overflow_stop_ends_at_first_misfit() -> None:
    # Same pool as above; with "stop" the context ends when u1 does not fit.
    assert kw_retriever(overflow="stop").retrieve("q", KW_QUERY, 15) == [0]


def test_keyword_unit_outside_the_pool_is_never_returned() -> None:
    # q = delta axis: delta is the top seed; its units u2, u3, u4 hold 20 tokens >= 2 x 10.
    # u0 and u1 contain no delta and are outside the pool even though budget remains.
    q = np.array([0, 0, 0, 1], dtype=np.float32)
    search = kw_retriever().search("q", q, 10)
    assert search.seeds == ("delta",)
    # u4 (cos 1) then u2 (cos .707) = 10 tokens; u3 (cos .707, higher index) no longer fits
    assert search.units == [4, 2]


def test_keyword_pool_is_minimal_and_budget_holds_with_tiktoken() -> None:
    rng = np.random.default_rng(3)
    words = ["river", "castle", "king", "battle", "treaty", "museum", "painter", "novel",
             "island", "bridge", "election", "senator", "orchestra", "festival", "harbour"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 12)))).capitalize() + "."
             for _ in range(60)]
    tokens = [count_tokens(t) for t in texts]
    embedder = HashingEmbedder(64)
    retriever = keyword_channel([f"p{i}" for i in range(60)], texts, tokens, embedder)
    assert isinstance(retriever, UnitRetriever)
    unit_sets = {kw: {int(u) for u in retriever.keyword_units[:, j].nonzero()[0]}
                 for j, kw in enumerate(retriever.keywords)}
    for query in ("king battle", "painter museum novel", "harbour bridge island"):
        q = embedder.embed([query])[0]
        for budget in (1, 7, 25, 60, 200):
            search = retriever.search(query, q, budget)
            used = sum(count_tokens(texts[u]) for u in search.units)
            assert used <= budget
            assert len(set(search.units)) == len(search.units)
            pool: set[int] = set().union(*(unit_sets[s] for s in search.seeds))
            before: set[int] = set().union(*(unit_sets[s] for s in search.seeds[:-1]))
            assert sum(tokens[u] for u in pool) == search.pool_tokens
            if search.pool_tokens >= 2 * budget:  # else every keyword was used
                assert sum(tokens[u] for u in before) < 2 * budget
            assert set(search.units) <= pool


def test_keyword_channel_over_sub_chunk_units() -> None:
    chunk = ("The river flows past the castle. The king signed the treaty there. "
             "A painter lived on the island. The museum shows his novel paintings.")
    units = split_into_units(["c0"], [chunk], 12)
    assert len(units) > 1
    embedder = HashingEmbedder(64)
    retriever = keyword_channel(units.ids, units.texts, units.tokens, embedder)
    q = embedder.embed(["Which king signed the treaty?"])[0]
    out = retriever.retrieve("Which king signed the treaty?", q, 12)
    assert out and sum(units.tokens[out]) <= 12
    assert "treaty" in units.texts[out[0]]


def test_keyword_rejects_bad_input() -> None:
    embedder = HashingEmbedder(16)
    with pytest.raises(ValueError, match="empty"):
        keyword_channel([], [], [], embedder)
    with pytest.raises(ValueError, match="empty or whitespace"):
        keyword_channel(["a"], ["  "], [1], embedder)
    with pytest.raises(ValueError, match="length"):
        keyword_channel(["a", "b"], ["x y", "z w"], [1], embedder)
    with pytest.raises(ValueError, match="unique"):
        keyword_channel(["a", "a"], ["x y", "z w"], [1, 1], embedder)
    retriever = keyword_channel(["a"], ["river castle"], [2], embedder)
    q = embedder.embed(["river"])[0]
    with pytest.raises(ValueError, match="budget"):
        retriever.retrieve("river", q, 0)
    with pytest.raises(TypeError, match="budget"):
        retriever.retrieve("river", q, "10")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        retriever.retrieve("river", q[:8], 10)
    with pytest.raises(ValueError, match="pool_factor"):
        KeywordChannelRetriever.build(["a"], ["river"], [1], embedder, pool_factor=0.5)


def test_fill_budget_skip_and_stop() -> None:
    from shared_core.retrieval import fill_budget

    tokens = np.array([5, 8, 3, 2])
    order = np.arange(4)
    # skip: 0 (5), 1 would make 13 > 10: passed over, 2 (8), 3 (10)
    assert fill_budget(order, tokens, 10, "skip").tolist() == [0, 2, 3]
    # stop: the context ends at unit 1
    assert fill_budget(order, tokens, 10, "stop").tolist() == [0]
    # nothing after unit 0 fits (8, 6, 6 > 5 left): skip keeps only unit 0
    assert fill_budget(order, np.array([5, 8, 6, 6]), 10, "skip").tolist() == [0]
    assert fill_budget(np.array([3, 1]), tokens, 100, "skip").tolist() == [3, 1]
