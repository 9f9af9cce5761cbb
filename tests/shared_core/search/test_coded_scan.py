"""The direct concepts from a scan of byte codes (``concept_search="codes"``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.search import coded_scan
from shared_core.search.coded_scan import CodedScan
from shared_core.search.vector_index import scan_scores, top_k_indices
from tests.shared_core.search.test_concepts import assert_answers_as_the_scan
from tests.shared_core.test_store import TEXTS

pytest.importorskip("faiss")


def fan(count: int, step_degrees: float) -> np.ndarray:
    """Unit rows at 0, step, 2 * step, ... degrees in the plane."""
    angles = np.radians(np.arange(count) * step_degrees)
    return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def test_the_first_ask_closes_when_the_codes_bound_clears_the_kth_row() -> None:
    """Worked by hand. Forty unit rows 2 degrees apart; the query is row 0's direction, so
    row i has cosine cos(2i degrees). For k = 2 the first ask scores 8 * 2 = 16 rows: 0..15.
    A dimension's range is [cos 78, 1] (x) and [0, 1] (y), so its decoding error is at
    most half a 255th of that: under 0.002. The 16th code's score is within 0.002 of
    cos 30 = 0.866, far below the 2nd best row's cos 2 = 0.9994: no other row can
    reach the best two, and no more rows are scored."""
    vectors = fan(40, 2.0)
    scan = CodedScan.build(vectors, np.arange(40))
    assert np.all(scan.error <= np.array([(1 - np.cos(np.radians(78))) / 510, 1 / 510]) + 1e-7)
    best, scored, scores = scan.top(vectors, np.array([1.0, 0.0], dtype=np.float32), 2)
    assert coded_scan.FIRST_ASK == 8
    assert best.tolist() == [0, 1]
    assert scored.tolist() == list(range(16))
    assert scores == pytest.approx(np.cos(np.radians(2 * np.arange(16))), abs=1e-6)


def test_rows_nearer_the_kth_than_the_bound_are_asked_for_again_then_all_scored() -> None:
    """Worked by hand. Rows 0.01 degrees apart, over 4 degrees. The x range is
    [cos 3.99, 1], so a code errs by under 5e-6 there; with float32 rounding's 1e-4 the
    bound is about 1.05e-4, and every row within 0.81 degrees of the query (cosine above
    1 - 1e-4) might be the best. The first ask (8 rows, to 0.07 degrees) cannot rule the
    rest out; the second (128 rows) can: the 128th best code is at 1.27 degrees, cosine
    1 - 2.46e-4, which plus the bound stays below the best row's 1. Rows 0.001 degrees
    apart instead all lie within 0.4 degrees (cosines above 1 - 2.5e-5), inside the bound
    of the best at every ask: the float32 scan runs, and its cosines are returned."""
    query = np.array([1.0, 0.0], dtype=np.float32)
    vectors = fan(400, 0.01)[::-1].copy()  # the best row last, so position order differs
    best, scored, _ = CodedScan.build(vectors, np.arange(400)).top(vectors, query, 1)
    # rows 399 and 398 (0.01 degrees off) both have cosine 1.0 in float32: the lower wins
    assert best.tolist() == [398] == top_k_indices(scan_scores(vectors, query), 1).tolist()
    assert coded_scan.SECOND_ASK == 128 and len(scored) == 128
    vectors = fan(400, 0.001)[::-1].copy()
    best, scored, scores = CodedScan.build(vectors, np.arange(400)).top(vectors, query, 1)
    assert best.tolist() == top_k_indices(scan_scores(vectors, query), 1).tolist()
    assert scored.tolist() == list(range(400))
    assert scores.tolist() == scan_scores(vectors, query).tolist()


def test_only_the_coded_rows_are_found_and_the_scan_of_all_when_k_is_every_row() -> None:
    vectors = fan(10, 9.0)
    scan = CodedScan.build(vectors, np.array([2, 5, 7]))
    query = np.array([1.0, 0.0], dtype=np.float32)
    best, scored, _ = scan.top(vectors, query, 2)
    assert best.tolist() == [2, 5] and scored.tolist() == [2, 5, 7]
    assert scan.top(vectors, query, 9)[0].tolist() == [2, 5, 7]  # k past the rows held
    empty = CodedScan.build(vectors, np.zeros(0, dtype=np.int64))
    assert len(empty) == 0 and empty.top(vectors, query, 3)[0].tolist() == []


def test_a_build_in_blocks_codes_the_rows_as_one_block_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import faiss

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((50, 8)).astype(np.float32)
    whole = CodedScan.build(vectors, np.arange(3, 50))
    monkeypatch.setattr(coded_scan, "CODE_BLOCK", 7)  # seven blocks, the last short
    blocked = CodedScan.build(vectors, np.arange(3, 50))
    assert np.array_equal(faiss.vector_to_array(blocked.index.codes),
                          faiss.vector_to_array(whole.index.codes))
    assert blocked.error.tolist() == whole.error.tolist()
    # the error is the largest over every row: half a 255th of each range, which the rows
    # at its ends reach (codes decode to the middles of 255 steps), give or take float32
    # rounding in the decoding (values here reach 3, whose last bit is 2.4e-7)
    span = vectors[3:].max(axis=0) - vectors[3:].min(axis=0)
    assert whole.error == pytest.approx(span / 510, abs=1e-6)


# Rows and queries of multiples of 1/8 in [-1, 1]: every product and sum is exact in
# float32, so a gathered row's cosine is the scan's to the bit and ties are real ties.
eighths = st.integers(-8, 8).map(lambda i: i / 8)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dim=st.integers(1, 6), count=st.integers(1, 120),
       k=st.integers(1, 30))
def test_the_answer_is_the_scans_ties_to_the_lower_position(
        data: st.DataObject, dim: int, count: int, k: int) -> None:
    pool = data.draw(arrays(np.float32, (min(count, 12), dim), elements=eighths))
    # rows drawn from a small pool, so many are equal: ties at the k-th place
    vectors = pool[data.draw(arrays(np.int64, count, elements=st.integers(0, len(pool) - 1)))]
    coded = np.flatnonzero(data.draw(arrays(np.bool_, count)))
    query = data.draw(arrays(np.float32, dim, elements=eighths))
    scan = CodedScan.build(vectors, coded)
    best, scored, scores = scan.top(vectors, query, k)
    expected = coded[top_k_indices(scan_scores(vectors[coded], query), k)]
    assert best.tolist() == expected.tolist()
    assert np.all(np.isin(scored, coded)) and np.all(np.diff(scored) > 0)
    assert scores.tolist() == scan_scores(vectors[scored], query).tolist()


# ------------------------------------------------------------------ in the index
def _index(**config: object) -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))],
                                        embedder=HashingEmbedder(64),
                                        config=ConceptGraphConfig(**config))  # type: ignore[arg-type]


def test_an_index_that_scans_codes_answers_as_the_scan() -> None:
    scanned = _index(concept_search="exact")
    coded = scanned.reconfigured(concept_search="codes")
    assert coded.state.graph is scanned.state.graph  # a search knob: the graph is shared
    assert coded.stats()["concept_search"] == "codes"
    assert_answers_as_the_scan(coded, scanned)
    assert "concept_codes" in coded.state.graph.__dict__  # coded once, kept with the state


def test_auto_scans_codes_from_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared_core.search import ann
    from shared_core.state import derived

    concepts = len(_index().state.graph.vectors)
    monkeypatch.setattr(derived, "CONCEPT_CODES_MIN", concepts + 1)
    assert _index().stats()["concept_search"] == "exact"
    monkeypatch.setattr(derived, "CONCEPT_CODES_MIN", concepts)
    at = _index()
    assert at.stats()["concept_search"] == "codes"
    forced = _index(concept_search="codes")
    for query in ["Who wrote the first compiler?", "analytical engine"]:
        assert [(c.id, c.score) for c in at.retrieve(query).chunks] == [
            (c.id, c.score) for c in forced.retrieve(query).chunks]
    # the paper's ranking scans every concept; without the ann extra, so does auto
    assert _index(ranking="paper").stats()["concept_search"] == "exact"
    monkeypatch.setattr(ann, "ann_available", lambda: False)
    assert _index().stats()["concept_search"] == "exact"


def test_codes_find_the_fused_rankings_concepts_only() -> None:
    with pytest.raises(ValueError, match="ranking='paper' scans them all"):
        ConceptGraphConfig(concept_search="codes", ranking="paper")
