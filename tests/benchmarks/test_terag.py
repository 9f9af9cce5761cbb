"""TERAG Personalized PageRank retrieval: graph shape, seed weights (Eq. 3-5), PPR values.

Expected values are derived by hand in the comments; networkx is the independent
reference for PPR on graphs too big to solve by hand.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from benchmarks.comparators.terag import TeragPprRetriever, personalized_pagerank, terag_ppr
from benchmarks.comparators.units import UnitRetriever
from shared_core.embeddings import HashingEmbedder
from shared_core.select import UnitCorpus
from shared_core.text import count_tokens, split_into_units, term_analyzer
from tests.shared_core.select.test_knn import axis_embedder

# Units: u0 "alpha beta", u1 "beta gamma", u2 "delta". With every term a concept:
#   alpha -> u0, beta -> u0 u1, gamma -> u1, delta -> u2; f = 1, 2, 1, 1
#   co-occurrence: alpha <-> beta (u0), beta <-> gamma (u1); delta has none.
TEXTS = ["alpha beta.", "beta gamma.", "delta."]
TOKENS = [4, 4, 2]
ALPHA_AXIS = np.array([1, 0, 0, 0], dtype=np.float32)
DELTA_AXIS = np.array([0, 0, 0, 1], dtype=np.float32)


def retriever(**options: object) -> TeragPprRetriever:
    return TeragPprRetriever.build(["u0", "u1", "u2"], TEXTS, TOKENS, axis_embedder(),
                                   concept_links="contains", tol=1e-13,
                                   **options)  # type: ignore[arg-type]


def hand_graph() -> nx.DiGraph:
    """The TERAG graph of TEXTS written out from §3.2 by hand."""
    g = nx.DiGraph()
    g.add_nodes_from(["u0", "u1", "u2", "alpha", "beta", "gamma", "delta"])
    g.add_edges_from([("alpha", "u0"), ("beta", "u0"), ("beta", "u1"), ("gamma", "u1"),
                      ("delta", "u2")])  # has_passage
    g.add_edges_from([("alpha", "beta"), ("beta", "alpha"), ("beta", "gamma"),
                      ("gamma", "beta")])  # co_occurrence
    return g


def test_graph_matches_the_hand_built_graph() -> None:
    r = retriever()
    assert r.concepts == ["alpha", "beta", "gamma", "delta"]
    assert r.frequency.tolist() == [1, 2, 1, 1]
    names = ["u0", "u1", "u2", *r.concepts]
    built = {(names[i], names[j]) for i, j in zip(*r.adjacency.nonzero(), strict=True)}
    assert built == set(hand_graph().edges)
    assert r.dangling.tolist() == [True, True, True, False, False, False, False]


def test_exact_seed_ppr_by_hand() -> None:
    # Query "Where is beta?": "where", "is" are stop words; beta matches exactly,
    # s = 1, f = 2, w = 1/2, normalised to 1. Restart vector p = e_beta.
    # PPR (d = .85); units are dangling and restart at beta; out-degrees:
    # alpha 2 (u0, beta), beta 4 (u0, u1, alpha, gamma), gamma 2 (u1, beta).
    #   x_alpha = x_gamma = .85 x_beta / 4 = .2125 x_beta
    #   x_u0 = x_u1 = .85 (x_alpha / 2 + x_beta / 4) = .85 * .35625 x_beta = .3028125 x_beta
    #   x_u2 = x_delta = 0; the sum is 1: x_beta (1 + 2 * .2125 + 2 * .3028125) = 1
    x_beta = 1 / 2.030625
    x_unit = 0.3028125 * x_beta  # = 0.14912...
    search = retriever().search("Where is beta?", ALPHA_AXIS, 100)
    assert [(s.concept, s.group, s.similarity, s.frequency, s.weight)
            for s in search.seeds] == [("beta", "exact", 1.0, 2, 1.0)]
    # u0 and u1 tie: lower index first; u2 is unreachable and never returned
    assert search.units == [0, 1]
    np.testing.assert_allclose([h.score for h in search.hits], [x_unit, x_unit], atol=1e-9)
    assert [h.seed for h in search.hits] == ["beta", "beta"]


def test_eq5_weights_within_the_exact_group() -> None:
    # w = s / f: alpha 1/1, beta 1/2, gamma 1/1; sum 2.5 -> .4, .2, .4
    seeds = retriever().seeds("alpha beta gamma", ALPHA_AXIS)
    assert [(s.concept, s.group) for s in seeds] == [
        ("alpha", "exact"), ("beta", "exact"), ("gamma", "exact")]
    np.testing.assert_allclose([s.weight for s in seeds], [0.4, 0.2, 0.4])


def test_exact_match_is_preferred_over_semantic() -> None:
    # The query vector points at delta, but "alpha" matches exactly: in the default
    # "fallback" mode no semantic seed is added, so u2 (delta's unit) gets no mass.
    search = retriever().search("alpha", DELTA_AXIS, 100)
    assert [(s.concept, s.group) for s in search.seeds] == [("alpha", "exact")]
    assert 2 not in search.units
    assert search.units[0] == 0  # alpha's own unit first


def test_semantic_fallback_when_nothing_matches_exactly() -> None:
    # "epsilon" is no concept -> top-3 by cosine to the query vector (delta axis).
    # Concept vectors: alpha (1,1,0,0)/r2, beta (1,2,1,0)/r6, gamma (0,1,1,0)/r2,
    # delta (0,0,0,1): cosines 0, 0, 0, 1 -> delta, then alpha and beta (ties, lower
    # index). s/f = 1, 0, 0: only delta carries restart mass; zero-weight seeds are dropped.
    search = retriever().search("epsilon", DELTA_AXIS, 100)
    assert [(s.concept, s.group, s.similarity, s.weight) for s in search.seeds] == [
        ("delta", "semantic", 1.0, 1.0)]
    assert search.units == [2]


def test_both_mode_normalises_each_group_separately() -> None:
    # Query "alpha", vector (0,0,1,1)/r2. Exact group: alpha, weight 1.
    # Semantic group (alpha excluded): cos beta = 1/(r2 r6) = .2887, gamma = 1/2,
    # delta = 1/r2 = .7071; all three are the top 3. w = s/f: delta .7071, gamma .5,
    # beta .2887/2 = .1443; sum 1.3514 -> .5232, .3700, .1068.
    q = np.array([0, 0, 1, 1], dtype=np.float32) / np.sqrt(2)
    search = retriever(seed_mode="both").search("alpha", q, 100)
    got: dict[tuple[str, str], float] = {(s.concept, s.group): s.weight for s in search.seeds}
    s_delta, s_gamma, s_beta = 1 / np.sqrt(2), 0.5, 1 / (np.sqrt(2) * np.sqrt(6))
    total = s_delta + s_gamma + s_beta / 2
    expected = {("alpha", "exact"): 1.0, ("delta", "semantic"): s_delta / total,
                ("gamma", "semantic"): s_gamma / total, ("beta", "semantic"): s_beta / 2 / total}
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-6)
    # Each group holds half the restart mass (the two groups sum to 1 each, then the
    # whole vector is normalised), so u2 is now reachable through delta.
    assert 2 in search.units
    # Parity with networkx on the hand-built graph with the same personalization.
    personalization = {s.concept: s.weight for s in search.seeds}
    reference = nx.pagerank(hand_graph(), alpha=0.85, personalization=personalization,
                            tol=1e-14, max_iter=1000)
    for hit in search.hits:
        assert hit.score == pytest.approx(reference[f"u{hit.unit}"], abs=1e-9)


def test_personalized_pagerank_matches_networkx_on_random_digraph() -> None:
    rng = np.random.default_rng(11)
    n = 30
    dense = (rng.random((n, n)) < 0.1).astype(float)
    np.fill_diagonal(dense, 0)
    dense[:5] = 0  # five dangling nodes
    p = np.zeros(n)
    p[[5, 9, 20]] = [0.5, 0.3, 0.2]
    scores, iterations = personalized_pagerank(sp.csr_matrix(dense), p, tol=1e-14,
                                               max_iter=2000)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(*np.nonzero(dense), strict=True))
    reference = nx.pagerank(g, alpha=0.85, personalization={5: 0.5, 9: 0.3, 20: 0.2},
                            tol=1e-14, max_iter=2000)
    np.testing.assert_allclose(scores, [reference[i] for i in range(n)], atol=1e-10)
    assert 1 < iterations < 2000


def test_ppr_parity_on_a_real_text_corpus() -> None:
    texts = [
        "Ada Lovelace wrote notes on the Analytical Engine.",
        "Charles Babbage designed the Analytical Engine in London.",
        "London is the capital of England.",
        "The Difference Engine was also designed by Babbage.",
        "Lovelace was the daughter of Lord Byron.",
        "Byron was a poet of the Romantic movement.",
    ]
    tokens = [count_tokens(t) for t in texts]
    r = TeragPprRetriever.build([f"p{i}" for i in range(6)], texts, tokens, HashingEmbedder(32),
                                concepts_per_unit=4, tol=1e-13)
    q = HashingEmbedder(32).embed(["Who was the father of Ada Lovelace?"])[0]
    search = r.search("Who was the father of Ada Lovelace?", q, 10_000)
    assert {s.concept for s in search.seeds} <= {"father", "ada", "lovelace"}
    g = nx.DiGraph()
    g.add_nodes_from(range(len(texts) + len(r.concepts)))
    g.add_edges_from(zip(*r.adjacency.nonzero(), strict=True))
    personalization = {len(texts) + r.concept_index[s.concept]: s.weight for s in search.seeds}
    reference = nx.pagerank(g, alpha=0.85, personalization=personalization, tol=1e-14,
                            max_iter=1000)
    for hit in search.hits:
        assert hit.score == pytest.approx(reference[hit.unit], abs=1e-9)
    assert search.units[0] in (0, 4)  # a Lovelace passage comes first


def test_budget_never_exceeded_by_tiktoken_count() -> None:
    rng = np.random.default_rng(5)
    words = ["river", "castle", "king", "battle", "treaty", "museum", "painter", "novel",
             "island", "bridge", "election", "senator", "orchestra", "festival", "harbour"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 14)))).capitalize() + "."
             for _ in range(50)]
    tokens = [count_tokens(t) for t in texts]
    embedder = HashingEmbedder(64)
    r = terag_ppr([f"p{i}" for i in range(50)], texts, tokens, embedder)
    assert isinstance(r, UnitRetriever)
    for query in ("king battle", "painter museum novel", "zzz unknown words"):
        q = embedder.embed([query])[0]
        for budget in (1, 6, 30, 90, 1000):
            for overflow in ("skip", "stop"):
                r2 = replace(r, overflow=overflow)
                out = r2.retrieve(query, q, budget)
                assert sum(count_tokens(texts[u]) for u in out) <= budget
                assert len(set(out)) == len(out)
            # "skip" fills at least as much as "stop" with the same ranking
            skip = r.retrieve(query, q, budget)
            stop = replace(r, overflow="stop").retrieve(query, q, budget)
            assert skip[: len(stop)] == stop


def test_units_from_sub_chunks_and_shared_corpus() -> None:
    chunk = ("The river flows past the castle. The king signed the treaty there. "
             "A painter lived on the island. The museum shows his novel paintings.")
    units = split_into_units(["c0"], [chunk], 12)
    embedder = HashingEmbedder(64)
    r = terag_ppr(units.ids, units.texts, units.tokens, embedder)
    q = embedder.embed(["Which king signed the treaty?"])[0]
    out = r.retrieve("Which king signed the treaty?", q, 12)
    assert out and sum(units.tokens[out]) <= 12
    assert "treaty" in units.texts[out[0]]
    # building from an already prepared corpus gives the same retriever
    corpus = UnitCorpus.build(units.ids, units.texts, units.tokens, embedder, term_analyzer())
    same = TeragPprRetriever.from_corpus(corpus)
    assert same.retrieve("Which king signed the treaty?", q, 12) == out


def test_terag_rejects_bad_input() -> None:
    embedder = HashingEmbedder(16)
    with pytest.raises(ValueError, match="empty"):
        terag_ppr([], [], [], embedder)
    with pytest.raises(ValueError, match="length"):
        terag_ppr(["a"], ["x y"], [1, 2], embedder)
    with pytest.raises(TypeError, match="embedder"):
        terag_ppr(["a"], ["x y"], [1], object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed_mode"):
        TeragPprRetriever.build(["a"], ["x y"], [1], embedder,
                                seed_mode="all")  # type: ignore[arg-type]
    r = terag_ppr(["a"], ["river castle"], [2], embedder)
    q = embedder.embed(["river"])[0]
    with pytest.raises(ValueError, match="budget"):
        r.retrieve("river", q, -3)
    with pytest.raises(TypeError, match="query"):
        r.retrieve(None, q, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-zero"):
        r.retrieve("river", np.zeros(16, dtype=np.float32), 5)
    with pytest.raises(ValueError, match="personalization"):
        personalized_pagerank(sp.identity(2, format="csr"), np.zeros(2))
