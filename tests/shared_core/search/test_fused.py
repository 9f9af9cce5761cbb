"""Fused concept ranking on hand-built arrays: idf, evidence, RRF order, provenance, budget."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.search import (
    concept_weights,
    descending_ranks,
    fill_budget,
    fused_search,
    inverse_document_frequency,
    strongest_concept,
)
from shared_core.search.candidates import CandidateSimilarity, similarity_beside
from shared_core.search.sparse_values import SparseValues
from shared_core.search.vector_index import ExactVectorIndex


def _links(pairs: list[tuple[int, int]], shape: tuple[int, int]) -> sp.csr_matrix:
    rows, cols = zip(*pairs, strict=True)
    return sp.csr_matrix((np.ones(len(pairs)), (rows, cols)), shape=shape)


# The arrays of test_retrieval.py: six concepts, six units.
#   concept 0 (sim .9): units 0, 1        concept 1 (sim .8): units 1, 2
#   concept 2 (sim .1): units 2, 3        concept 3 (sim .3): unit 4
#   concept 4 (sim .2): unit 5            concept 5 (sim .99): no unit at all
# edges 1-2, 2-3: from the direct concepts {0, 1}, concept 2 is 1 hop away, 3 is 2 hops
CONCEPT_SIM = np.array([0.9, 0.8, 0.1, 0.3, 0.2, 0.99])
LINKS = _links([(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (4, 3), (5, 4)], (6, 6))
ADJ = _links([(1, 2), (2, 1), (2, 3), (3, 2)], (6, 6))
UNIT_SIM = np.array([0.2, 0.7, 0.9, 0.5, 0.6, 0.4])
TOKENS = np.array([10, 20, 30, 15, 5, 8])

# idf = ln(7 / (df + 1)) + 1:  df 2 -> 1.8473,  df 1 -> 2.2528,  df 0 -> 2.9459
IDF_DF2, IDF_DF1 = np.log(7 / 3) + 1, np.log(7 / 2) + 1
# top_k 2 skips concept 5 (no unit) -> direct {0, 1}; hops 2, decay .5:
#   w = [.9, .8, .1 * .5, .3 * .25, 0, 0];  value = w * idf
#   evidence: u0 = v0 = 1.6626, u1 = v0 + v1 = 3.1404, u2 = v1 + v2 = 1.5702,
#             u3 = v2 = 0.0924, u4 = v3 = 0.1690, u5 = 0
#   evidence ranks u1 1, u0 2, u2 3, u4 4, u3 5 (u5 has none: no term)
#   similarity ranks u2 1, u1 2, u4 3, u3 4, u5 5, u0 6


def search(**kwargs: object) -> tuple[list[tuple[int, int, str, int]], object]:
    args: dict[str, object] = {"top_k": 2, "hops": 2, "decay": 0.5, "rrf_k": 1,
                               "budget": 1000, "overflow": "stop", **kwargs}
    hits, trace = fused_search(CONCEPT_SIM, LINKS, ADJ, UNIT_SIM, TOKENS,
                               inverse_document_frequency(LINKS), **args)  # type: ignore[arg-type]
    return [(h.chunk, h.concept, h.stage, h.hop) for h in hits], trace


def test_idf_and_ranks_by_hand() -> None:
    np.testing.assert_allclose(inverse_document_frequency(LINKS),
                               [IDF_DF2, IDF_DF2, IDF_DF2, IDF_DF1, IDF_DF1, np.log(7) + 1])
    assert descending_ranks(np.array([0.5, 0.9, 0.5])).tolist() == [2.0, 1.0, 3.0]


def test_concept_weights_by_hand() -> None:
    weighting = concept_weights(CONCEPT_SIM, ADJ, top_k=2, hops=2, decay=0.5,
                                usable=np.arange(5))
    # only the concepts reached are held: 4 (no edge to a direct one) and 5 are not
    assert weighting.concepts.tolist() == [0, 1, 2, 3]
    assert weighting.hops.tolist() == [0, 0, 1, 2]
    np.testing.assert_allclose(weighting.weights, [0.9, 0.8, 0.05, 0.075])
    assert weighting.similarity.tolist() == [0.9, 0.8, 0.1, 0.3]
    assert weighting.direct().tolist() == [0, 1] and weighting.expanded_count == 2
    assert weighting.index_of(np.array([3, 4, 0])).tolist() == [3, -1, 0]
    idf = inverse_document_frequency(LINKS)
    values = weighting.values(idf)
    assert values.positions.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(values.values, [0.9 * IDF_DF2, 0.8 * IDF_DF2,
                                               0.05 * IDF_DF2, 0.075 * IDF_DF1])
    # without the usable filter the unit-less concept 5 takes a seed slot; ranked by cosine
    assert concept_weights(CONCEPT_SIM, ADJ, top_k=2, hops=0, decay=0.5).direct().tolist() \
        == [5, 0]
    # an exact seed weighs 1 whatever its cosine, and is a direct concept
    seeded = concept_weights(CONCEPT_SIM, ADJ, top_k=2, hops=0, decay=0.5,
                             exact=np.array([4]), usable=np.arange(5))
    assert seeded.concepts.tolist() == [0, 1, 4]
    np.testing.assert_allclose(seeded.weights, [0.9, 0.8, 1.0])


def test_fused_order_and_provenance_with_rrf_k_1() -> None:
    # fused = 1/(1 + r_sim) + 1/(1 + r_evidence):
    #   u1 1/3 + 1/2 = .833,  u2 1/2 + 1/4 = .75,  u0 1/7 + 1/3 = .476,
    #   u4 1/4 + 1/5 = .45,   u3 1/5 + 1/6 = .367, u5 1/6 = .167
    # each unit credited to its largest w * idf concept: u1 -> 0 (1.66 > 1.48), u2 -> 1
    hits, trace = search()
    assert hits == [(1, 0, "direct", 0), (2, 1, "direct", 0), (0, 0, "direct", 0),
                    (4, 3, "expanded", 2), (3, 2, "expanded", 1), (5, -1, "similarity", 0)]
    assert trace.direct_concepts == (0, 1)  # type: ignore[attr-defined]
    assert trace.expanded_concepts == 2  # type: ignore[attr-defined]


def test_rrf_k_changes_the_order_as_computed() -> None:
    # rrf_k 60: u0 1/66 + 1/62 = .03128 falls below u4 1/63 + 1/64 = .03150
    hits, _ = search(rrf_k=60)
    assert [h[0] for h in hits] == [1, 2, 4, 0, 3, 5]


def test_without_expansion_the_far_units_have_only_similarity() -> None:
    # hops 0 (or decay 0): u3, u4 get no evidence; u0 1/7 + 1/3 = .476 > u4 1/4 > u3 1/5
    for kwargs in ({"hops": 0}, {"decay": 0.0}):
        hits, _ = search(**kwargs)
        assert hits == [(1, 0, "direct", 0), (2, 1, "direct", 0), (0, 0, "direct", 0),
                        (4, -1, "similarity", 0), (3, -1, "similarity", 0),
                        (5, -1, "similarity", 0)]


def test_exact_match_concepts_count_with_weight_one() -> None:
    # concept 4 matched exactly: value 1 * idf(df 1) = 2.2528 -> u5 evidence rank 2
    #   u5 1/6 + 1/3 = .5 passes u0 (1/7 + 1/4 = .393) and u4 (1/4 + 1/6 = .417)
    hits, trace = search(exact=np.array([4]))
    assert [h[0] for h in hits] == [1, 2, 5, 4, 0, 3]
    assert hits[2] == (5, 4, "direct", 0)
    assert trace.direct_concepts == (0, 1, 4)  # type: ignore[attr-defined]


def test_lexical_view_is_a_third_rrf_term() -> None:
    # only u5 matches the query's words: + 1/(1 + 1) lifts it to 1/6 + 1/2 = .667, past
    # u0 (.476); units without a lexical match get no term, so the rest keep their order
    hits, _ = search(lexical=np.array([0.0, 0.0, 0.0, 0.0, 0.0, 3.0]))
    assert [h[0] for h in hits] == [1, 2, 5, 0, 4, 3]
    assert hits[2] == (5, -1, "similarity", 0)  # words are not concepts: no concept credit


@pytest.mark.parametrize("ranks_beside", [False, True])
def test_the_pool_ranked_by_similarity_on_the_second_thread_ranks_as_here(
        ranks_beside: bool) -> None:
    scored_on: list[tuple[list[int], str]] = []

    def cosines(units: np.ndarray) -> np.ndarray:
        scored_on.append((units.tolist(), threading.current_thread().name))
        return UNIT_SIM[units]

    # the vector index finds units 2 and 1 (cosines .9, .7), the evidence view's best two
    # are 1 and 0: unit 0 is in the pool but not in the similarity's list, so it is
    # scored, then ranked from the sample (every unit here: exact, 6th)
    found = CandidateSimilarity(ExactVectorIndex(np.eye(6, dtype=np.float32)), None, cosines,
                                UNIT_SIM.astype(np.float32), 6)
    with similarity_beside(found, 2) as (started, _):
        hits, _ = fused_search(CONCEPT_SIM, LINKS, ADJ, started, TOKENS,
                               inverse_document_frequency(LINKS), top_k=2, hops=2, decay=0.5,
                               rrf_k=1, budget=1000, candidates=2, ranks_beside=ranks_beside)
    # as the full ranking orders them: u1 .833, u2 .75, u0 .476 (test above)
    assert [h.chunk for h in hits] == [1, 2, 0]
    assert [round(h.score, 3) for h in hits] == [0.833, 0.75, 0.476]
    pool_scored = [name for units, name in scored_on if units == [0]]
    assert len(pool_scored) == 1
    assert pool_scored[0].startswith("conceptgraph-query") == ranks_beside


@pytest.mark.parametrize(("overflow", "expected"), [("stop", [1, 2]), ("skip", [1, 2, 4])])
def test_budget_overflow(overflow: str, expected: list[int]) -> None:
    # budget 55: u1 20 + u2 30 = 50; u0 (10) overflows: stop ends, skip takes u4 (5) = 55
    hits, trace = search(budget=55, overflow=overflow)
    assert [h[0] for h in hits] == expected
    assert trace.stopped_by_budget  # type: ignore[attr-defined]


def test_strongest_concept_ties_and_units_without_evidence() -> None:
    # u1 links concepts 0 and 1 with equal value: the lower index wins, as argmax would;
    # u5 links concept 4, worth 0 here: no credit (-1)
    value = np.array([2.0, 2.0, 0.5, 1.0, 0.0, 0.0])
    for valued in (value, SparseValues.of_dense(value)):  # all concepts, or the valued
        assert strongest_concept(LINKS, np.array([1, 5, 2, 4]), valued).tolist() == [
            0, -1, 1, 3]
        assert strongest_concept(LINKS, np.array([], dtype=np.int64), valued).tolist() == []


def test_fill_budget_takes_prefixes_and_skips_like_the_greedy_loop() -> None:
    tokens = np.array([10, 20, 30, 15, 5, 8])
    order = np.array([1, 2, 0, 4, 3, 5])
    # budget 55: 20 + 30 = 50; 10 overflows -> stop ends; skip takes 5 (= 55) and stops
    assert fill_budget(order, tokens, 55, "stop").tolist() == [1, 2]
    assert fill_budget(order, tokens, 55, "skip").tolist() == [1, 2, 4]
    # budget 63: 20 + 30 + 10 = 60, then 5 overflows, 15 too, 8 too -> [1, 2, 0]
    assert fill_budget(order, tokens, 63, "skip").tolist() == [1, 2, 0]
    assert fill_budget(order, tokens, 1000, "stop").tolist() == order.tolist()
    assert fill_budget(order, tokens, 4, "skip").tolist() == []


@pytest.mark.parametrize("valued_share", [0.05, 0.5, 1.0])
def test_evidence_sums_are_the_row_sums_in_concept_order(valued_share: float) -> None:
    """Whether a few postings are read (column copy) or most (one row product), each
    unit's evidence is its concepts' values summed in ascending concept order, bit
    for bit: the result cannot depend on how many concepts a query reaches."""
    from shared_core.search.fused import evidence_view

    rng = np.random.default_rng(7)
    links = sp.random(300, 120, density=0.08, format="csr", random_state=8, dtype=np.float32)
    value = rng.random(120) * (rng.random(120) < valued_share)
    expected = np.zeros(300)
    for u in range(300):
        total = 0.0
        for at in range(links.indptr[u], links.indptr[u + 1]):  # ascending concepts
            total += float(links.data[at]) * value[links.indices[at]]
        expected[u] = total
    with_evidence = np.flatnonzero(expected > 0)
    assert 50 < len(with_evidence) <= 300
    valued = SparseValues.of_dense(value)
    for got in (evidence_view(links.tocsc(), valued),
                evidence_view(links.tocsc(), valued, links)):
        assert got.units.tolist() == with_evidence.tolist()
        assert np.array_equal(got.values, expected[with_evidence])


def test_evidence_found_elsewhere_is_scored_and_ranked_as_the_full_view() -> None:
    """Units an engine found are scored from their own rows, to the bit; found them all,
    the view's best list and every rank equal the full view's; a unit not found is
    missing from the best list but still ranked from its own exact score."""
    from shared_core.search.fused import evidence_view, found_evidence_view

    rng = np.random.default_rng(11)
    links = sp.random(300, 120, density=0.08, format="csr", random_state=9, dtype=np.float32)
    value = SparseValues.of_dense(rng.random(120) * (rng.random(120) < 0.3))
    full = evidence_view(links.tocsc(), value, links)
    # found: every unit with evidence, out of order, twice, with some without evidence
    without = np.setdiff1d(np.arange(300), full.units)[:5]
    found = found_evidence_view(np.concatenate([full.units[::-1], full.units, without]),
                                links, value)
    assert np.array_equal(found.scores_of(full.units), full.values)
    assert np.array_equal(found.scores_of(without), np.zeros(5))
    top = full.top(20)
    assert found.top(20).tolist() == top.tolist()
    pool = np.arange(300)
    assert np.array_equal(found.ranks(pool, top)[top], np.arange(1, 21, dtype=np.float64))
    # the best unit not found: the best list starts with the second, ranks stay exact
    missed = found_evidence_view(full.units[full.units != top[0]], links, value)
    assert missed.top(19).tolist() == top[1:].tolist()
    assert missed.scores_of(top[:1]).tolist() == full.scores_of(top[:1]).tolist()


@given(st.integers(0, 2**32 - 1), st.integers(0, 2))
@settings(max_examples=30, deadline=None)
def test_a_posting_limit_that_never_binds_places_the_same_units(seed: int,
                                                                walk_hops: int) -> None:
    """The bounded walk's sparse view and the dense walk rank alike when nothing is cut off."""
    rng = np.random.default_rng(seed)
    links = sp.csr_matrix((rng.random((60, 20)) < 0.15).astype(np.float32))
    lexical = np.where(rng.random(60) < 0.4, rng.random(60), 0.0)
    args: dict[str, Any] = {
        "top_k": 4, "hops": 0, "decay": 0.5, "rrf_k": 10, "budget": 40,
        "overflow": "skip", "candidates": 15, "walk_hops": walk_hops}
    inputs = (rng.random(20), links, sp.csr_matrix((20, 20)), rng.random(60),
              rng.integers(1, 6, 60), rng.random(20) + 1)
    dense, _ = fused_search(*inputs, lexical=lexical, **args)
    sparse, _ = fused_search(*inputs, lexical=lexical, walk_postings=10**9, **args)
    assert [h.chunk for h in sparse] == [h.chunk for h in dense]
    np.testing.assert_allclose([h.score for h in sparse], [h.score for h in dense],
                               rtol=1e-12)


def test_a_weighting_made_first_and_units_found_elsewhere_rank_as_the_full_search() -> None:
    """An index that asks an engine for the units with evidence makes the concept
    weighting first and passes it with the units found: the hand-worked order above."""
    weighting = concept_weights(CONCEPT_SIM, ADJ, top_k=2, hops=2, decay=0.5,
                                usable=np.arange(5))
    # the units with evidence (u5 has none), found out of order and with a repeat
    found = np.array([4, 3, 1, 0, 2, 1])
    hits, _ = search(weighting=weighting, evidence_found=found)
    expected, _ = search()
    assert hits == expected
    assert [h[0] for h in hits] == [1, 2, 0, 4, 3, 5]
    # the engine missed u1, the best by evidence: the found view ranks u0 1, u2 2, u4 3,
    # u3 4, and u1 by its exact score beyond them, 5 (nothing outside the found beats
    # it). fused: u2 1/2 + 1/3 = .833, u0 1/7 + 1/2 = .643, u1 1/3 + 1/6 = .5,
    # u4 1/4 + 1/4 = .5 (a tie: the lower unit first), u3 1/5 + 1/5 = .4, u5 1/6
    missed, _ = search(weighting=weighting, evidence_found=np.array([0, 2, 3, 4]))
    assert [h[0] for h in missed] == [2, 0, 1, 4, 3, 5]
    with pytest.raises(ValueError, match="needs the weighting"):
        search(evidence_found=found)
