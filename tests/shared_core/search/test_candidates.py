"""Candidate ranking: the vector backends, rank estimates, and the fused ranking over a pool."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.search import fused_search
from shared_core.search import vector_index as vector_index_module
from shared_core.search.ann import HnswVectorIndex
from shared_core.search.candidates import (
    RANK_SAMPLE,
    CandidateSimilarity,
    GatheredUnits,
    PositiveView,
    RescoredView,
    ScannedSimilarity,
)
from shared_core.search.fused import similarity_ranks
from shared_core.search.vector_index import ExactVectorIndex, VectorIndex, scan_scores


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# --------------------------------------------------------------- vector backends
def test_exact_index_returns_the_best_rows_best_first_ties_to_the_lower_row() -> None:
    vectors = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    rows, scores = ExactVectorIndex(vectors).search(np.array([0.6, 0.8], np.float32), 3)
    # cosines: row0 .6, row1 1.0, row2 .8, row3 1.0 -> 1 and 3 tie, the lower first
    assert rows.tolist() == [1, 3, 2]
    assert scores.tolist() == pytest.approx([1.0, 1.0, 0.8])
    assert isinstance(ExactVectorIndex(vectors), VectorIndex)


def test_a_float16_scan_runs_block_by_block_and_matches_float32(
        monkeypatch: pytest.MonkeyPatch) -> None:
    vectors = unit_rows(50, 16, seed=1)
    q = vectors[7]
    monkeypatch.setattr(vector_index_module, "SCAN_BLOCK", 8)  # 7 blocks, the last partial
    scores = scan_scores(vectors.astype(np.float16), q)
    assert scores.dtype == np.float32 and scores.shape == (50,)
    # a float16 row's cosine is within 2**-11 of the float32 row's
    np.testing.assert_allclose(scores, vectors @ q, atol=2**-11)


def test_hnsw_finds_what_the_exact_scan_finds() -> None:
    vectors = unit_rows(600, 32, seed=2)
    hnsw = HnswVectorIndex.build(vectors)
    exact = ExactVectorIndex(vectors)
    assert isinstance(hnsw, VectorIndex) and len(hnsw) == 600
    found = []
    for i in range(0, 600, 30):
        rows, scores = hnsw.search(vectors[i], 10)
        assert rows[0] == i and scores[0] == pytest.approx(1.0, abs=0.02)  # 8-bit copy
        truth, _ = exact.search(vectors[i], 10)
        found.append(len(set(rows.tolist()) & set(truth.tolist())) / 10)
    assert np.mean(found) >= 0.9


def test_hnsw_asked_for_more_than_it_holds_returns_what_it_holds() -> None:
    vectors = unit_rows(5, 8, seed=3)
    rows, _ = HnswVectorIndex.build(vectors).search(vectors[0], 50)
    assert sorted(rows.tolist()) == [0, 1, 2, 3, 4]
    empty = HnswVectorIndex.build(np.zeros((0, 8), np.float32))
    assert empty.search(vectors[0], 3)[0].tolist() == []


# ------------------------------------------------------------------ rank estimates
def test_ranks_below_the_candidates_are_estimated_from_a_sample() -> None:
    # unit u has cosine 1 - u/5000, so its true rank is u + 1; 5,000 units are more
    # than the sample, so ranks beyond the 100 found are estimates
    sims = 1.0 - np.arange(5000) / 5000

    def scorer(units: np.ndarray) -> np.ndarray:
        return sims[units]

    view = CandidateSimilarity(ExactVectorIndex(np.eye(5000, 4, dtype=np.float32)), None,
                               scorer, np.ones(4, np.float32), 5000)
    top = np.arange(100)
    units = np.array([150, 2500, 4999])
    estimated = view.ranks_below(units, sims[units], top)
    assert estimated.min() > 100  # never among the units found
    np.testing.assert_allclose(estimated, [151, 2501, 5000], atol=50)  # within 1 % of N
    exact = ScannedSimilarity(sims).ranks_below(units, sims[units], top)
    assert exact.tolist() == [151, 2501, 5000]


def test_the_rank_sample_is_gathered_once_and_ranks_as_when_gathered_afresh() -> None:
    vectors = unit_rows(3000, 8, seed=0)
    q = vectors[7]
    gathered: list[int] = []

    def gather(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gathered.append(len(units))
        return vectors[units], np.arange(len(units))

    kept = GatheredUnits()

    def kept_scorer(units: np.ndarray) -> np.ndarray:
        rows, _ = kept.rows(units, gather)
        return np.asarray(rows @ q, dtype=np.float32)

    def scorer(units: np.ndarray) -> np.ndarray:
        return np.asarray(vectors[units] @ q, dtype=np.float32)

    plain = CandidateSimilarity(ExactVectorIndex(vectors), None, scorer, q, 3000)
    cached = CandidateSimilarity(ExactVectorIndex(vectors), None, scorer, q, 3000, kept_scorer)
    top, _ = plain.top(100)
    below = np.setdiff1d(np.arange(0, 3000, 7), top)
    want = plain.ranks_below(below, scorer(below), top)
    for _ in range(3):  # the sample is gathered on the first query only
        np.testing.assert_array_equal(cached.ranks_below(below, scorer(below), top), want)
    assert gathered == [RANK_SAMPLE + 100] and len(kept) == 1
    other = np.arange(50)  # another set is gathered, and the kept sets stay bounded
    kept.rows(other, gather)
    kept.rows(other[:-1], gather)
    assert gathered[1:] == [50, 49] and len(kept) <= 2


def test_a_sparse_view_ranks_ties_by_unit_and_scores_nothing_at_zero() -> None:
    view = PositiveView.of_scores(np.array([0.0, 2.0, 1.0, 2.0, 0.0, 1.0]))
    assert view.units.tolist() == [1, 2, 3, 5]
    assert view.top(None).tolist() == [1, 3, 2, 5]
    top = view.top(2)
    assert top.tolist() == [1, 3]
    # beyond the top two, 2 and 5 tie at 1.0: the lower unit ranks first (exact: few left)
    assert view.ranks(np.array([0, 1, 2, 3, 5]), top).tolist() == [0, 1, 3, 2, 4]
    assert view.scores_of(np.array([5, 0, 4, 3, 9])).tolist() == [1.0, 0.0, 0.0, 2.0, 0.0]
    assert PositiveView.of_scores(np.zeros(3)).scores_of(np.array([0, 2])).tolist() == [0, 0]


def test_a_rescored_view_reads_no_row_of_a_listed_unit_to_rank_the_pool() -> None:
    exact = np.array([0.0, 3.0, 1.0, 2.0, 0.5, 2.0])  # every unit's exact score
    asked: list[list[int]] = []

    def scorer(units: np.ndarray) -> np.ndarray:
        asked.append(units.tolist())
        return exact[units]

    # the bounded reads found 1, 3 and 4 (partial sums); exact: 1 3.0, 3 2.0, 4 0.5
    view = RescoredView(PositiveView(np.array([1, 3, 4]), np.array([1.0, 1.0, 0.4])),
                        scorer, len(exact), sample_scorer=lambda units: exact[units])
    top = view.top(1)
    assert top.tolist() == [1] and asked == [[1, 3]]  # twice k found, then scored exactly
    asked.clear()
    # beyond unit 1 the other five units rank by exact score, ties to the lower unit:
    # 3 and 5 at 2.0 are 2nd and 3rd, 2 4th, 4 5th, 0 has no score (exact: few units)
    ranks = view.ranks(np.array([0, 1, 2, 4, 5]), top)
    assert ranks.tolist() == [0, 1, 4, 5, 3]
    assert asked == [[0, 2, 4, 5]]  # the listed unit 1 ranks by its place, unread


def test_sentence_rows_give_each_unit_its_best_sentence() -> None:
    sentences = np.array([[1, 0], [0, 1], [0.8, 0.6], [0.6, 0.8]], dtype=np.float32)
    row_unit = np.array([0, 0, 1, 1])  # unit 0: sentences 0-1, unit 1: sentences 2-3
    q = np.array([0.0, 1.0], np.float32)

    def best_sentence(units: np.ndarray) -> np.ndarray:
        return np.array([max(sentences[row_unit == u] @ q) for u in units], np.float32)

    view = CandidateSimilarity(ExactVectorIndex(sentences), row_unit, best_sentence, q, 2)
    units, sims = view.top(2)
    assert units.tolist() == [0, 1] and sims.tolist() == pytest.approx([1.0, 0.8])
    units, sims = view.top(1)
    assert units.tolist() == [0]



def test_dead_rows_and_one_unit_s_sentences_do_not_shorten_the_top() -> None:
    # rows 0-2 belong to deleted chunks (-1) and are the query's closest; unit 0's four
    # sentences come next, then unit 1's and unit 2's one each. Two rows a unit wanted
    # (6 for 3 units) hold unit 0 alone, so the index is asked again, for the missing
    # units at that rate (6 + 12 rows: all 9), and every unit is found
    cosines = np.array([1.0, 0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.5, 0.1])
    sentences = np.stack([cosines, np.sqrt(1 - cosines ** 2)], axis=1).astype(np.float32)
    row_unit = np.array([-1, -1, -1, 0, 0, 0, 0, 1, 2])

    def best_sentence(units: np.ndarray) -> np.ndarray:
        return np.array([cosines[row_unit == u].max() for u in units], np.float32)

    view = CandidateSimilarity(ExactVectorIndex(sentences), row_unit, best_sentence,
                               np.array([1.0, 0.0], np.float32), 3)
    units, sims = view.top(3)
    assert units.tolist() == [0, 1, 2] and sims.tolist() == pytest.approx([0.97, 0.5, 0.1])
    # one unit wanted: two rows are both dead, four rows reach unit 0
    units, sims = view.top(1)
    assert units.tolist() == [0] and sims.tolist() == pytest.approx([0.97])


# ------------------------------------------------------------- fused over a pool
def random_problem(seed: int, n_units: int = 400, n_concepts: int = 60) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    links = sp.random(n_units, n_concepts, density=0.05, format="csr", random_state=seed)
    links.data[:] = 1.0
    adjacency = sp.random(n_concepts, n_concepts, density=0.05, format="csr", random_state=seed)
    adjacency = sp.csr_matrix(((adjacency + adjacency.T) > 0).astype(np.float32))
    lexical = np.where(rng.random(n_units) < 0.2, rng.random(n_units), 0.0)
    return {
        "concept_similarity": rng.uniform(-0.2, 1.0, n_concepts),
        "unit_links": links,
        "adjacency": adjacency,
        "unit_tokens": np.ones(n_units, dtype=np.int64),
        "idf": rng.uniform(1.0, 3.0, n_concepts),
        "lexical": lexical,
        "top_k": 5, "hops": 2, "decay": 0.5, "rrf_k": 4, "overflow": "stop",
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_pool_of_every_candidate_ranks_as_the_full_ranking(seed: int) -> None:
    problem = random_problem(seed)
    sims = unit_rows(400, 8, seed) @ unit_rows(1, 8, seed + 10)[0]
    full, _ = fused_search(unit_similarity=sims, budget=400, **problem)  # type: ignore[arg-type]
    pooled, _ = fused_search(unit_similarity=ScannedSimilarity(sims), budget=400,
                             candidates=400, **problem)  # type: ignore[arg-type]
    assert [(h.chunk, h.score, h.concept, h.stage) for h in pooled] == \
        [(h.chunk, h.score, h.concept, h.stage) for h in full]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_smaller_pool_keeps_the_head_of_the_full_ranking(seed: int) -> None:
    # A unit outside the pool has every rank above C, so it scores under 3/(k + C + 1);
    # the (C + 1 - 2k) / 3 best units by similarity alone score at least that, so the
    # first (C + 1 - 2k) / 3 units of the full ranking are all in the pool, in order.
    problem = random_problem(seed)
    sims = unit_rows(400, 8, seed) @ unit_rows(1, 8, seed + 10)[0]
    c, k = 90, 4
    head = (c + 1 - 2 * k) // 3
    full, _ = fused_search(unit_similarity=sims, budget=head, **problem)  # type: ignore[arg-type]
    pooled, _ = fused_search(unit_similarity=ScannedSimilarity(sims), budget=head,
                             candidates=c, **problem)  # type: ignore[arg-type]
    assert len(full) == head
    assert [h.chunk for h in pooled] == [h.chunk for h in full]
    wide, _ = fused_search(unit_similarity=sims, budget=400, **problem)  # type: ignore[arg-type]
    narrow, _ = fused_search(unit_similarity=ScannedSimilarity(sims), budget=400,
                             candidates=c, **problem)  # type: ignore[arg-type]
    assert len(narrow) < len(wide)  # the pool really is smaller than the corpus


def test_a_candidate_the_vector_index_missed_ranks_by_its_exact_cosine() -> None:
    # units 0-5 have cosines 0.9 .. 0.4; the vector index holds only units 1, 3, 4, 5
    # (as an approximate index may miss rows), so its best two are 1 and 3. Units 0 and 2
    # reach the pool through another view: scored exactly, both beat unit 3, so they rank
    # inside the list (0 first, 2 third), not beyond it as units it did not list.
    sims = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    vectors = np.stack([sims, np.sqrt(1 - sims ** 2)], axis=1).astype(np.float32)
    held = np.array([1, 3, 4, 5])

    def scorer(units: np.ndarray) -> np.ndarray:
        return sims[units]

    view = CandidateSimilarity(ExactVectorIndex(vectors[held]), held, scorer,
                               np.array([1.0, 0.0], np.float32), 6)
    top_units, top_sims = view.top(2)
    assert top_units.tolist() == [1, 3]
    pool = np.array([0, 1, 2, 3, 5])
    got_sims, ranks = similarity_ranks(view, pool, top_units, top_sims)
    assert got_sims.tolist() == sims[pool].tolist()
    assert ranks.tolist() == [1, 2, 3, 4, 6]  # the true ranks: the sample is the corpus
    exact_top = np.arange(6)
    _, exact_ranks = similarity_ranks(ScannedSimilarity(sims), pool, exact_top, sims)
    assert exact_ranks.tolist() == [1, 2, 3, 4, 6]


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=80, deadline=None)
def test_pool_units_rank_in_exact_cosine_order_whatever_the_index_missed(seed: int) -> None:
    # an index holding a random half of the units lists its best 20; the pool adds 30
    # random others. The listed units and the pool units that beat the last listed one
    # take ranks 1..m in exact cosine order (ties to the lower unit), none better than
    # its true rank among all units; every other pool unit ranks after them.
    rng = np.random.default_rng(seed)
    n = 200
    sims = np.round(rng.uniform(-1, 1, n), 2)  # rounded: ties happen
    vectors = np.stack([sims, np.sqrt(1 - sims ** 2)], axis=1).astype(np.float32)
    held = np.sort(rng.choice(n, n // 2, replace=False))

    def scorer(units: np.ndarray) -> np.ndarray:
        return sims[units]

    view = CandidateSimilarity(ExactVectorIndex(vectors[held]), held, scorer,
                               np.array([1.0, 0.0], np.float32), n)
    top_units, top_sims = view.top(20)
    pool = np.union1d(top_units, rng.choice(n, 30, replace=False))
    got_sims, ranks = similarity_ranks(view, pool, top_units, top_sims)
    assert got_sims.tolist() == sims[pool].tolist()
    last_sim, last_unit = sims[top_units[-1]], top_units[-1]
    known = np.isin(pool, top_units) | (sims[pool] > last_sim) | (
        (sims[pool] == last_sim) & (pool < last_unit))
    exact_order = np.lexsort((pool[known], -sims[pool[known]]))
    assert ranks[known][exact_order].tolist() == list(range(1, int(known.sum()) + 1))
    true_rank = np.empty(n)
    true_rank[np.lexsort((np.arange(n), -sims))] = np.arange(1, n + 1)
    assert np.all(ranks[known] <= true_rank[pool[known]])
    assert np.all(ranks[~known] > known.sum())
