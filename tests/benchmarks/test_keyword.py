"""KET-RAG's keyword channel, a benchmark comparator (``benchmarks.comparators.keyword``).

Expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.comparators.keyword import KeywordChannelRetriever, keyword_channel
from benchmarks.comparators.units import UnitRetriever
from shared_core.embeddings import HashingEmbedder
from shared_core.text import count_tokens, split_into_units
from tests.shared_core.select.test_knn import axis_embedder

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
