"""The direct concepts from a scan of byte codes (``concept_search="codes"``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.search import ann, coded_scan
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


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(1, 40), count=st.integers(1, 60))
def test_a_codes_score_is_within_the_bound_of_its_rows_exact_score(
        seed: int, dim: int, count: int) -> None:
    """The scan compares the query, scaled by each dimension's step and rounded to signed
    bytes, with the codes as signed bytes. Every code's score from that is within the
    query's rounding (``||r|| * max ||code - 128||``) of its decoded row's score, and
    within the whole bound of its row's exact score, for any rows and query."""
    import faiss

    rng = np.random.default_rng(seed)
    vectors = (rng.standard_normal((count, dim)) * rng.uniform(0.01, 2.0, dim)).astype(np.float32)
    query = rng.standard_normal(dim).astype(np.float32)
    scan = CodedScan.build(vectors, np.arange(count))
    coding = scan._query_coding(query)
    assert np.array_equal(coding.codes, np.rint(coding.codes))  # integers: coded exactly
    found, labels = scan.index.search(coding.codes, count)
    code_scores = np.array([coding.score(f) for f in found[0]])
    rows = labels[0]
    decoded = scan.codec.sa_decode(np.ascontiguousarray(codes_of(scan)[rows])).astype(np.float64)
    step = faiss.vector_to_array(scan.codec.sq.trained)[dim:].astype(np.float64) / 255
    scaled = query.astype(np.float64) * step
    # the largest scaled dimension takes the byte range's end (none where every range is 0)
    assert np.abs(coding.codes).max() == (127 if np.any(scaled) else 0)
    rounding = np.linalg.norm(coding.codes[0] / coding.scale - scaled) * scan.code_norm
    signed = codes_of(scan).astype(np.float64) - 128
    assert scan.code_norm == pytest.approx(np.linalg.norm(signed, axis=1).max(), rel=1e-6)
    assert np.all(np.abs(code_scores - decoded @ query) <= rounding + 1e-4)
    exact = vectors[rows].astype(np.float64) @ query
    assert np.all(np.abs(code_scores - exact) <= coding.bound)


# Rows and queries of multiples of 1/8 in [-1, 1]: every product and sum is exact in
# float32, so a gathered row's cosine is the scan's to the bit and ties are real ties.
eighths = st.integers(-8, 8).map(lambda i: i / 8)
half_eighths = st.integers(-4, 4).map(lambda i: i / 8)


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


# ------------------------------------------------------------------ carried through updates
def codes_of(scan: CodedScan) -> np.ndarray:
    import faiss

    return faiss.vector_to_array(scan.index.codes).reshape(len(scan.rows), scan.index.code_size)


def trained_ranges(scan: CodedScan) -> list[float]:
    import faiss

    return faiss.vector_to_array(scan.codec.sq.trained).tolist()


def test_an_update_codes_only_the_new_and_moved_rows_in_the_trained_ranges() -> None:
    """Worked by hand. Ten rows at 0, 9, ..., 81 degrees, all coded. The update drops old
    row 3 and moves old row 5 (now row 4) from 45 to 47 degrees, and adds row 9 at 44
    degrees: both inside the trained ranges, x in [cos 81, 1] and y in [0, sin 81]. The
    seven rows that did not move keep their bytes; the two others are coded as the trained
    quantiser codes them, and the bound's errors stay half a 255th of each range."""
    before = fan(10, 9.0)
    scan = CodedScan.build(before, np.arange(10))
    new_of_old = np.array([0, 1, 2, -1, 3, 4, 5, 6, 7, 8])
    after = np.concatenate([np.delete(before, 3, axis=0), fan(45, 1.0)[[44]]])
    after[4] = fan(48, 1.0)[47]
    drift = np.zeros(10)
    drift[4] = np.linalg.norm(after[4] - before[5])
    drift[9] = np.inf
    carried = scan.refreshed(after, new_of_old, drift, np.arange(10))
    assert trained_ranges(carried) == trained_ranges(scan)  # not trained again
    assert carried.rows.tolist() == list(range(10)) and carried.beside.tolist() == []
    kept = [0, 1, 2, 4, 6, 7, 8, 9]  # old rows; new rows 0, 1, 2, 3, 5, 6, 7, 8
    assert np.array_equal(codes_of(carried)[[0, 1, 2, 3, 5, 6, 7, 8]], codes_of(scan)[kept])
    assert np.array_equal(codes_of(carried)[[4, 9]], scan.codec.sa_encode(after[[4, 9]]))
    # the code norm: the old one, or the two new codes' where larger (the kept codes are
    # not read again; a dropped row's norm could only make it an overestimate)
    made = codes_of(carried)[[4, 9]].astype(np.float64) - 128
    assert carried.code_norm == pytest.approx(
        max(scan.code_norm, float(np.linalg.norm(made, axis=1).max())), rel=1e-6)
    ranges = np.array([1 - np.cos(np.radians(81)), np.sin(np.radians(81))])
    assert np.all(carried.error <= ranges / 510 + 1e-7)
    query = fan(46, 1.0)[45]  # 45 degrees: rows 9 (44) and 4 (47) are the best two
    best, _, _ = carried.top(after, query, 2)
    assert best.tolist() == [9, 4] == top_k_indices(scan_scores(after, query), 2).tolist()


def test_rows_beyond_the_trained_ranges_wait_beside_the_codes_and_are_always_scored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Worked by hand. The same ten rows; new row 10 a little past the x range's low end
    (x = cos 81 - 0.0005) and row 11 far past the y range's (y = -0.5). Coded at the
    ranges' ends they would err by 0.0005 and 0.5 more than the codes' half step, so
    they are kept beside the codes and every query scores them: the bound is unchanged,
    and the first ask of a query at row 11 (k = 1: 8 codes) finds it, although its code
    would have scored it at 0.5 * 0.866 - 0.5 * 0 below rows 0..3. Past MAX_BESIDE rows
    beside, the codes are trained again on every row's ranges."""
    before = fan(10, 9.0)
    scan = CodedScan.build(before, np.arange(10))
    x = np.cos(np.radians(81)) - 0.0005
    after = np.concatenate([before, np.array([[x, np.sqrt(1 - x * x)],
                                              [np.sqrt(0.75), -0.5]], dtype=np.float32)])
    drift = np.r_[np.zeros(10), np.inf, np.inf]
    carried = scan.refreshed(after, np.arange(10), drift, np.arange(12))
    assert carried.rows.tolist() == list(range(10)) and carried.beside.tolist() == [10, 11]
    assert carried.error.tolist() == scan.error.tolist() and len(carried) == 12
    best, scored, _ = carried.top(after, after[11], 1)
    assert best.tolist() == [11] and len(scored) == 8 + 2
    assert carried.top(after, after[10], 1)[0].tolist() == [10]
    monkeypatch.setattr(coded_scan, "MAX_BESIDE", 1)
    trained = scan.refreshed(after, np.arange(10), drift, np.arange(12))
    assert trained.rows.tolist() == list(range(12)) and trained.beside.tolist() == []
    assert trained.low.tolist() == after.min(axis=0).tolist()
    assert trained.error == pytest.approx(np.ptp(after, axis=0) / 510, abs=1e-6)


@settings(max_examples=120, deadline=None)
@given(data=st.data(), dim=st.integers(1, 4), count=st.integers(1, 80),
       k=st.integers(1, 3))
def test_carried_codes_answer_as_the_scan_of_the_rows_after_the_update(
        data: st.DataObject, dim: int, count: int, k: int) -> None:
    """Any update: rows gone, moved (to any vector, past the old ranges too: the rows
    before are within [-1/2, 1/2]) or new, and rows no longer coded; the carried codes'
    answer is the float32 scan's, and a row that did not move keeps its bytes. (A few
    best rows of many, so that most rows are left to the bound.)"""
    before = data.draw(arrays(np.float32, (count, dim), elements=half_eighths))
    scan = CodedScan.build(before, np.flatnonzero(data.draw(arrays(np.bool_, count))))
    survives = data.draw(arrays(np.bool_, count))
    new_count = int(survives.sum()) + data.draw(st.integers(0, 10))
    if not new_count:
        return
    new_of_old = np.where(survives, np.cumsum(survives) - 1, -1)
    moved = data.draw(arrays(np.bool_, new_count))
    moved[int(survives.sum()):] = True  # the new rows
    after = np.zeros((new_count, dim), dtype=np.float32)
    after[new_of_old[survives]] = before[survives]
    after[moved] = data.draw(arrays(np.float32, (int(moved.sum()), dim), elements=eighths))
    drift = np.where(moved, np.inf, 0.0)
    held = np.flatnonzero(data.draw(arrays(np.bool_, new_count)))
    carried = scan.refreshed(after, new_of_old, drift, held)
    assert np.union1d(carried.rows, carried.beside).tolist() == held.tolist()
    assert len(carried) == len(held) and np.all(np.diff(carried.beside) > 0)
    # the code norm bounds every code's, and is the old one or a code's (not read again)
    signed = codes_of(carried).astype(np.float64) - 128
    largest = float(np.linalg.norm(signed, axis=1).max()) if len(signed) else 0.0
    assert largest <= carried.code_norm * (1 + 1e-6)
    assert carried.code_norm <= max(scan.code_norm, largest) * (1 + 1e-6)
    query = data.draw(arrays(np.float32, dim, elements=eighths))
    best, _, _ = carried.top(after, query, k)
    assert best.tolist() == held[top_k_indices(scan_scores(after[held], query), k)].tolist()
    if len(scan) and trained_ranges(carried) == trained_ranges(scan):  # the same quantiser
        old_code = np.full(new_count, -1)
        survived = new_of_old[scan.rows] >= 0
        old_code[new_of_old[scan.rows][survived]] = np.flatnonzero(survived)
        coded = carried.rows
        still = ~moved[coded] & (old_code[coded] >= 0)
        assert np.array_equal(codes_of(carried)[still], codes_of(scan)[old_code[coded][still]])
        # what is beside lies outside the ranges, what is coded inside
        outside = np.any((after < scan.low) | (after > scan.high), axis=1)
        assert np.all(outside[carried.beside]) and not np.any(outside[coded[~still]])


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


def test_an_update_carries_the_codes_a_query_made_and_answers_as_the_scan() -> None:
    coded = _index(concept_search="codes")
    coded.retrieve("analytical engine")  # the first query codes the concepts
    assert coded.state.graph.held_concept_codes() is not None
    coded.add(["Charles Babbage also designed a difference engine."], ids=["t5"])
    carried = coded.state.graph.coded_concepts  # the update's, not a query's
    assert carried is not None
    held = np.union1d(carried.rows, carried.beside)
    assert held.tolist() == coded.state.graph.unit_linked_concepts.tolist()
    assert_answers_as_the_scan(coded, coded.reconfigured(concept_search="exact"))
    coded.delete(["t1"])
    assert coded.state.graph.coded_concepts is not None
    assert_answers_as_the_scan(coded, coded.reconfigured(concept_search="exact"))
    # an index that scans the floats drops the codes a view of its graph made
    scanned = _index(concept_search="exact")
    scanned.reconfigured(concept_search="codes").retrieve("analytical engine")
    assert scanned.state.graph.held_concept_codes() is not None
    scanned.add(["Charles Babbage also designed a difference engine."], ids=["t5"])
    assert scanned.state.graph.held_concept_codes() is None


# ------------------------------------------------------------------ in a save
def test_a_save_keeps_the_codes_and_a_load_answers_with_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.faults import rehash
    from shared_core.store import CorruptIndexError, index_folder, read_manifest

    unqueried = _index(concept_search="codes")
    assert unqueried.state.graph.held_concept_codes() is None
    unqueried.save(str(tmp_path / "unqueried"))  # the save makes them: a load reads them
    assert read_manifest(tmp_path / "unqueried")["concept_codes"]["rows"] > 0
    coded = _index(concept_search="codes")
    coded.retrieve("analytical engine")
    coded.add(["Charles Babbage also designed a difference engine."], ids=["t5"])
    held = coded.state.graph.coded_concepts  # carried by the add
    assert held is not None
    coded.save(str(tmp_path / "idx"))
    assert read_manifest(tmp_path / "idx")["concept_codes"] == {
        "rows": len(held.rows), "beside": len(held.beside)}
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
    restored = loaded.state.graph.coded_concepts
    assert restored is not None  # read from the save, not coded by a query
    np.testing.assert_array_equal(restored.codes(), held.codes())
    for name in ("rows", "beside", "error", "low", "high"):
        np.testing.assert_array_equal(getattr(restored, name), getattr(held, name), name)
    assert_answers_as_the_scan(loaded, loaded.reconfigured(concept_search="exact"))
    ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64), verify=True)
    # "auto" saves them where it scans them; where faiss is not installed the load leaves
    # them, and "auto" scans the floats
    from shared_core.state import derived

    monkeypatch.setattr(derived, "CONCEPT_CODES_MIN", 1)
    _index().save(str(tmp_path / "auto"))
    assert "concept_codes" in read_manifest(tmp_path / "auto")
    monkeypatch.setattr(ann, "ann_available", lambda: False)
    without = ConceptGraphIndex.load(str(tmp_path / "auto"), HashingEmbedder(64))
    assert without.state.graph.coded_concepts is None
    assert without.stats()["concept_search"] == "exact"
    monkeypatch.undo()
    # an index that scans the floats saves no codes
    _index(concept_search="exact").save(str(tmp_path / "exact"))
    assert "concept_codes" not in read_manifest(tmp_path / "exact")

    folder = index_folder(tmp_path / "idx")

    def rewritten(name: str, array: np.ndarray) -> None:
        (folder / name).unlink()
        np.save(folder / name, array, allow_pickle=False)
        rehash(folder, name)  # past the checksum, as an attacker would

    codes = np.load(folder / "concept_codes.npy")
    error = np.load(folder / "concept_code_error.npy")
    rewritten("concept_code_error.npy", error / 4)  # a bound the codes do not keep
    ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))  # rests on the checksum
    with pytest.raises(CorruptIndexError, match="farther from their vectors"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64), verify=True)
    rewritten("concept_code_error.npy", error)
    rewritten("concept_codes.npy", 255 - codes)  # every code another's
    with pytest.raises(CorruptIndexError, match="farther from their vectors"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64), verify=True)
    rewritten("concept_codes.npy", codes)
    low = np.load(folder / "concept_code_low.npy")
    rewritten("concept_code_low.npy", low - 0.25)  # trained on other ranges: decoded apart
    with pytest.raises(CorruptIndexError, match="farther from their vectors"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64), verify=True)
    rewritten("concept_code_low.npy", low)
    ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64), verify=True)
    rows = np.load(folder / "concept_code_rows.npy")
    rewritten("concept_code_rows.npy", rows[::-1].copy())
    with pytest.raises(CorruptIndexError, match="ascending, distinct"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
    rewritten("concept_code_rows.npy", rows)
    rewritten("concept_code_beside.npy", rows[-1:])  # a concept both coded and beside
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest["concept_codes"]["beside"] = 1
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(CorruptIndexError, match="do not hold the concepts"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
