"""G2ConS local search on hand-built arrays: order, provenance, budget and overflow."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.search import Hit, local_search, top_k_indices, vector_index
from shared_core.search.vector_index import _sampled_floor


def _links(n_chunks: int, pairs: list[tuple[int, int]], n_concepts: int) -> sp.csc_matrix:
    rows, cols = zip(*pairs, strict=True)
    return sp.csc_matrix((np.ones(len(pairs)), (rows, cols)), shape=(n_chunks, n_concepts))


def _adj(n: int, edges: list[tuple[int, int]]) -> sp.csr_matrix:
    rows = [a for a, b in edges] + [b for a, b in edges]
    cols = [b for a, b in edges] + [a for a, b in edges]
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))


# Six concepts, six chunks.
#   concept 0 (sim .9): chunks 0, 1        concept 1 (sim .8): chunks 1, 2
#   concept 2 (sim .1): chunks 2, 3        concept 3 (sim .3): chunk 4
#   concept 4 (sim .2): chunk 5            concept 5 (sim .99): no chunk at all
# edges 1-2, 2-3: from the seeds {0, 1}, concept 2 is 1 hop away, concept 3 is 2 hops;
# concept 4 is isolated
CONCEPT_SIM = np.array([0.9, 0.8, 0.1, 0.3, 0.2, 0.99])
LINKS = _links(6, [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (4, 3), (5, 4)], 6)
ADJ = _adj(6, [(1, 2), (2, 3)])
CHUNK_SIM = np.array([0.2, 0.7, 0.9, 0.5, 0.6, 0.4])
TOKENS = np.array([10, 20, 30, 15, 5, 8])

# Unlimited budget, top_k = 2, hops = 2:
#   local reranking: concept 0 first (sim .9): its chunks by similarity, 1 (.7) then 0 (.2);
#   then concept 1: chunk 1 is placed already, chunk 2 (.9)
#   global reranking of the expanded concepts' chunks: chunk 3 (via concept 2, hop 1, .5),
#   chunk 4 (via concept 3, hop 2, .6); chunk 2 is already in -> 4 then 3
FULL = [
    # chunk, concept, stage, hop, score, concept similarity
    (1, 0, "direct", 0, 0.7, 0.9),
    (0, 0, "direct", 0, 0.2, 0.9),
    (2, 1, "direct", 0, 0.9, 0.8),
    (4, 3, "expanded", 2, 0.6, 0.3),
    (3, 2, "expanded", 1, 0.5, 0.1),
]


def _search(budget: int = 10_000, overflow: str = "stop", top_k: int = 2,
            hops: int = 2) -> tuple[list[Hit], object]:
    return local_search(CONCEPT_SIM, LINKS, ADJ, CHUNK_SIM, TOKENS, top_k=top_k, hops=hops,
                        budget=budget, overflow=overflow)  # type: ignore[arg-type]


def _rows(hits: list[Hit]) -> list[tuple[int, int, str, int, float, float]]:
    return [(h.chunk, h.concept, h.stage, h.hop, round(h.score, 6),
             round(h.concept_similarity, 6)) for h in hits]


def test_direct_then_expanded_with_provenance() -> None:
    hits, trace = _search()
    assert _rows(hits) == FULL
    assert [h.tokens for h in hits] == [20, 10, 30, 5, 15]
    # concept 5 has the best similarity but no chunk, so it is never a direct concept
    assert trace.direct_concepts == (0, 1)  # type: ignore[attr-defined]
    assert trace.expanded_concepts == 2  # type: ignore[attr-defined]  # concepts 2 and 3
    assert trace.tokens_used == 80  # type: ignore[attr-defined]
    assert trace.stopped_by_budget is False  # type: ignore[attr-defined]


@pytest.mark.parametrize(("hops", "n"), [(0, 3), (1, 4), (2, 5), (5, 5)])
def test_hops_limit_expansion(hops: int, n: int) -> None:
    hits, _ = _search(hops=hops)
    # hops 1 reaches only concept 2 -> chunk 3; concept 4 (isolated) never joins
    expected = FULL[:3] + ([(3, 2, "expanded", 1, 0.5, 0.1)] if hops == 1 else FULL[3:n])
    assert _rows(hits) == expected


def test_top_k_one_uses_only_the_best_concept() -> None:
    hits, trace = _search(top_k=1)
    # concept 0 alone: chunks 1, 0; concept 0 has no edges, so nothing expands
    assert [h.chunk for h in hits] == [1, 0]
    assert trace.direct_concepts == (0,)  # type: ignore[attr-defined]
    assert trace.expanded_concepts == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("budget", "overflow", "chunks", "used", "stopped"),
    [
        # running totals in FULL order: 20, 30, 60, 65, 80
        (59, "stop", [1, 0], 30, True),          # chunk 2 (30) overflows -> retrieval ends
        (59, "skip", [1, 0, 4, 3], 50, False),   # skip chunk 2; 30+5+15 = 50
        (30, "stop", [1, 0], 30, True),          # exactly full
        (30, "skip", [1, 0], 30, True),          # full: nothing else can fit
        (19, "stop", [], 0, True),               # the very first chunk (20) does not fit
        (19, "skip", [0, 4], 15, False),         # 10 + 5; chunk 3 (15) would make 30
        (80, "stop", [1, 0, 2, 4, 3], 80, True),
        (79, "stop", [1, 0, 2, 4], 65, True),
    ],
)
def test_budget_and_overflow(budget: int, overflow: str, chunks: list[int], used: int,
                             stopped: bool) -> None:
    hits, trace = _search(budget=budget, overflow=overflow)
    assert [h.chunk for h in hits] == chunks
    assert sum(h.tokens for h in hits) == used <= budget
    assert trace.tokens_used == used  # type: ignore[attr-defined]
    assert trace.stopped_by_budget is stopped  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None)
@given(budget=st.integers(1, 100))
def test_stop_is_the_longest_fitting_prefix_and_skip_is_greedy(budget: int) -> None:
    order = [row[0] for row in FULL]
    # stop: the longest prefix of the unlimited order whose running total fits
    prefix, total = [], 0
    for c in order:
        if total + TOKENS[c] > budget:
            break
        prefix.append(c)
        total += TOKENS[c]
    # skip: every chunk of the unlimited order that still fits when its turn comes
    greedy, total = [], 0
    for c in order:
        if total + TOKENS[c] <= budget:
            greedy.append(c)
            total += TOKENS[c]
    stop, _ = _search(budget=budget, overflow="stop")
    skip, _ = _search(budget=budget, overflow="skip")
    assert [h.chunk for h in stop] == prefix
    assert [h.chunk for h in skip] == greedy
    assert sum(h.tokens for h in stop) <= budget and sum(h.tokens for h in skip) <= budget


def test_expanded_chunk_is_credited_to_its_nearest_then_most_similar_concept() -> None:
    # concept 0 (sim .9) is the only seed; edges 0-1, 0-2, 1-3
    #   concept 1: hop 1, sim .2     concept 2: hop 1, sim .4     concept 3: hop 2, sim .8
    # chunk 0 <- concept 0;  chunk 1 <- concepts 1, 2, 3;  chunk 2 <- concepts 1, 3
    sim = np.array([0.9, 0.2, 0.4, 0.8])
    links = _links(3, [(0, 0), (1, 1), (1, 2), (1, 3), (2, 1), (2, 3)], 4)
    adj = _adj(4, [(0, 1), (0, 2), (1, 3)])
    chunk_sim = np.array([0.5, 0.3, 0.6])
    hits, trace = local_search(sim, links, adj, chunk_sim, np.ones(3, dtype=np.int64),
                               top_k=1, hops=2, budget=100)
    # global rerank: chunk 2 (.6) before chunk 1 (.3);
    # chunk 1: hop-1 concepts 1 (.2) and 2 (.4) beat concept 3 (hop 2) -> concept 2
    # chunk 2: concept 1 (hop 1) beats concept 3 (hop 2)
    assert _rows(hits) == [
        (0, 0, "direct", 0, 0.5, 0.9),
        (2, 1, "expanded", 1, 0.6, 0.2),
        (1, 2, "expanded", 1, 0.3, 0.4),
    ]
    assert trace.expanded_concepts == 3


def test_ties_break_to_lower_index() -> None:
    # two concepts tied at .5, both linked to two chunks tied at .5
    links = _links(3, [(2, 0), (1, 0), (0, 1), (2, 1)], 2)
    hits, trace = local_search(np.array([0.5, 0.5]), links, _adj(2, []), np.full(3, 0.5),
                               np.ones(3, dtype=np.int64), top_k=2, hops=1, budget=100)
    assert trace.direct_concepts == (0, 1)
    # concept 0: chunks 1, 2 (tie -> lower first); concept 1: chunk 0 (2 already placed)
    assert [(h.chunk, h.concept) for h in hits] == [(1, 0), (2, 0), (0, 1)]


def test_no_concepts_with_chunks_returns_nothing() -> None:
    links = sp.csc_matrix((2, 3))
    hits, trace = local_search(np.array([0.9, 0.5, 0.1]), links, _adj(3, []),
                               np.array([0.1, 0.2]), np.ones(2, dtype=np.int64),
                               top_k=2, hops=2, budget=100)
    assert hits == [] and trace.direct_concepts == () and trace.tokens_used == 0


@pytest.mark.parametrize(
    ("scores", "k", "expected"),
    [
        ([0.5, 0.9, 0.5, 0.1], 2, [1, 0]),     # tie at .5 goes to index 0
        ([0.5, 0.9, 0.5, 0.1], 3, [1, 0, 2]),
        ([0.5, 0.9, 0.5, 0.1], 10, [1, 0, 2, 3]),
        ([0.5, 0.9, 0.5, 0.1], 0, []),
        ([1.0, 1.0, 1.0, 1.0, 1.0], 2, [0, 1]),
        ([], 3, []),
    ],
)
def test_top_k_indices(scores: list[float], k: int, expected: list[int]) -> None:
    assert top_k_indices(np.array(scores, dtype=np.float64), k).tolist() == expected


@given(st.lists(st.integers(-3, 3), max_size=60), st.integers(0, 70))
@settings(max_examples=200, deadline=None)
def test_top_k_indices_is_the_head_of_a_full_sort(values: list[int], k: int) -> None:
    # few distinct values: most draws have ties at the k-th place
    scores = np.array(values, dtype=np.float64) / 2
    reference = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    assert top_k_indices(scores, k).tolist() == reference


@given(st.integers(0, 2**32 - 1), st.sampled_from(["uniform", "ties", "ascending", "nan"]),
       st.integers(16_384, 60_000), st.integers(1, 3_000))
@settings(max_examples=40, deadline=None)
def test_top_k_indices_past_the_sampled_floor_is_still_the_head_of_a_full_sort(
        seed: int, kind: str, n: int, k: int) -> None:
    # long enough for the sampled floor: the answer must not change
    rng = np.random.default_rng(seed)
    scores = {"uniform": rng.random(n), "ties": rng.integers(0, 4, n) / 3.0,
              "ascending": np.sort(rng.random(n)), "nan": rng.random(n)}[kind]
    if kind == "nan":
        scores[rng.integers(0, n, 3)] = np.nan
        k = int(rng.integers(1, 6))  # at the NaNs' count and past it
    found = top_k_indices(scores, k)
    with pytest.MonkeyPatch.context() as patch:  # no sample: the plain partition
        patch.setattr(vector_index, "TOP_K_SAMPLE", 1)
        assert found.tolist() == top_k_indices(scores, k).tolist()
    if kind != "nan":  # (NaN has no place in a sort by value)
        assert found.tolist() == np.lexsort((np.arange(n), -scores))[:k].tolist()


def test_the_sampled_floor_keeps_a_few_times_k_and_is_skipped_for_short_arrays() -> None:
    scores = np.random.default_rng(0).random(1_000_000)
    floor = _sampled_floor(scores, 1000)
    assert floor is not None and 1000 <= int((scores >= floor).sum()) <= 4000
    assert _sampled_floor(scores[:10_000], 100) is None  # step 2: no saving
    assert _sampled_floor(scores, 200_000) is None  # k too near n
