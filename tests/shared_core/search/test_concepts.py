"""Direct concepts found through HNSW over the concept vectors (``concept_search="hnsw"``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from benchmarks.faults import rehash
from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.search import ann
from shared_core.search.concepts import (
    EF_CONSTRUCTION,
    ConceptHnsw,
    direct_concepts,
    searched_weighting,
    self_check_rows,
)
from shared_core.search.fused import concept_weights
from shared_core.store import CorruptIndexError, index_folder, read_manifest
from tests.shared_core.search.test_candidates import unit_rows
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
    weighting = searched_weighting(
        graph, vectors, symmetric(4, [(2, 3)]), query, top_k=1, hops=1, decay=0.5)
    # 2 is direct (the best it proposed), 3 reached; 0 was never proposed nor reached and
    # 1 proposed but not kept: neither is read
    assert weighting.concepts.tolist() == [2, 3] and weighting.hops.tolist() == [0, 1]
    expected = vectors @ query
    assert weighting.similarity.dtype == np.float32
    assert weighting.similarity == pytest.approx(expected[[2, 3]], abs=1e-6)
    # direct: its cosine; reached at hop 1: max(0, cos) * 0.5 = 0
    assert weighting.weights == pytest.approx([expected[2], 0.0], abs=1e-6)
    assert weighting.direct().tolist() == [2] and weighting.expanded_count == 1
    # an exact-match seed weighs 1 and is scored too, though the graph never proposed it
    weighting = searched_weighting(
        graph, vectors, symmetric(4, [(2, 3)]), query, top_k=1, hops=0, decay=0.5,
        exact=np.array([0]))
    assert weighting.concepts.tolist() == [0, 2] and weighting.hops.tolist() == [0, 0]
    assert weighting.similarity == pytest.approx(expected[[0, 2]], abs=1e-6)
    assert weighting.weights == pytest.approx([1.0, expected[2]], abs=1e-6)
    assert weighting.direct().tolist() == [0, 2] and weighting.expanded_count == 0


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
        searched = searched_weighting(graph, vectors, adjacency, query, top_k=8, hops=2,
                                      decay=0.5, exact=exact)
        assert searched.concepts.tolist() == scanned.concepts.tolist()
        assert searched.hops.tolist() == scanned.hops.tolist()
        assert searched.similarity == pytest.approx(scanned.similarity, abs=1e-6)
        assert searched.weights == pytest.approx(scanned.weights, abs=1e-6)


def test_an_index_asked_through_the_graph_answers_as_the_scan_where_it_sees_every_concept(
        ) -> None:
    index = ConceptGraphIndex.from_texts(TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))],
                                         embedder=HashingEmbedder(64))
    searched = index.reconfigured(concept_search="hnsw")
    assert searched.state is index.state or searched.state.graph is index.state.graph
    assert_answers_as_the_scan(searched, index)


def assert_answers_as_the_scan(searched: ConceptGraphIndex, scanned: ConceptGraphIndex
                               ) -> None:
    """The same chunks, concepts and stages, and scores to 1e-9, for three queries."""
    for query in ["Who wrote the first compiler?", "analytical engine", "looms and cards"]:
        expected, found = scanned.retrieve(query), searched.retrieve(query)
        # the same concepts; their order in the trace may differ between equal cosines,
        # as a gathered row's product can differ from the whole scan's in the last bit
        assert set(found.direct_concepts) == set(expected.direct_concepts)
        assert [(c.id, c.provenance.concept, c.provenance.stage) for c in found.chunks] == [
            (c.id, c.provenance.concept, c.provenance.stage) for c in expected.chunks]
        assert [c.score for c in found.chunks] == pytest.approx(
            [c.score for c in expected.chunks], abs=1e-9)


def test_the_graph_finds_the_fused_rankings_concepts_only() -> None:
    with pytest.raises(ValueError, match="ranking='paper' scans them all"):
        ConceptGraphConfig(concept_search="hnsw", ranking="paper")
    with pytest.raises(ValueError, match="concept_search"):
        ConceptGraphConfig(concept_search="ivf")  # type: ignore[arg-type]


# ------------------------------------------------------------------ kept through updates
def test_an_update_keeps_the_rows_that_moved_little_and_puts_the_rest_beside() -> None:
    """Worked by hand. Five concepts, all indexed. The update removes concept 1 and adds
    one at the end; old 2 moved 0.25 (past MAX_ROW_DRIFT = 0.2), old 3 0.12; old 4 no
    longer links a unit."""
    vectors = np.stack([unit(1, 0), unit(0, 1), unit(1, 1), unit(-1, 1), unit(1, -1)])
    graph = ConceptHnsw.build(vectors, np.arange(5))
    new_of_old = np.array([0, -1, 1, 2, 3])
    drift = np.array([0.0, 0.25, 0.12, 0.0, np.inf])  # by new position
    usable = np.array([0, 1, 2, 4])
    kept = graph.refreshed(new_of_old, drift, usable, vectors, max_dead_share=1.0)
    assert kept is not None and kept.graph is graph.graph  # the graph itself is shared
    assert kept.row_concept.tolist() == [0, -1, -1, 2, -1]
    assert kept.row_drift.tolist() == [0.0, 0.0, 0.0, 0.12, 0.0]
    assert kept.beside.tolist() == [1, 4]  # moved too far, and new
    # two of the four concepts held are beside it, three of its five rows dropped
    assert kept.beside_share() == pytest.approx(2 / 4)
    assert kept.dead_share() == pytest.approx(3 / 5)
    # past MAX_DEAD_SHARE (a quarter): build it again
    assert graph.refreshed(new_of_old, drift, usable, vectors) is None
    kept.check_holds(usable, 2)
    # a second move of 0.12 adds up to 0.24: the row of (new) concept 2 is dropped too
    again = kept.refreshed(np.arange(5), np.array([0.0, 0.0, 0.12, 0.0, 0.0]), usable,
                           vectors, max_dead_share=1.0)
    assert again is not None
    assert again.row_concept.tolist() == [0, -1, -1, -1, -1]
    assert again.beside.tolist() == [1, 2, 4]
    # past max_beside, they are written into a segment of their own after the first,
    # which stays as it was; at their vectors after the update (new 1, the old 2, moved;
    # 4 is new)
    after = np.stack([unit(1, 0), unit(0, 1), unit(-1, 1), unit(1, -1), unit(-1, -1)])
    written = graph.refreshed(new_of_old, drift, usable, after, max_beside=1,
                              max_dead_share=1.0)
    assert written is not None and written.graph.sizes() == [5, 2]
    assert written.graph.segments[0] is graph.graph.segments[0]
    assert written.row_concept.tolist() == [0, -1, -1, 2, -1, 1, 4]
    assert written.row_drift.tolist() == [0.0, 0.0, 0.0, 0.12, 0.0, 0.0, 0.0]
    assert written.beside.tolist() == []
    written.check_holds(usable, 2)
    for concept in usable:  # each found by the graph alone, at its vector now
        assert concept in written.candidates(after, after[concept], 1)


def test_concepts_that_wait_beside_are_written_as_the_units_segments_are() -> None:
    """One new concept an update, on a graph of five, none allowed to wait beside it
    (``max_beside=0``). ``ann.segment_plan``: a segment of its own while there are under
    four; then the three later ones and the new one, four rows, merged into one (no more
    rows than the first's five); then segments of their own again. Under the default
    ``MAX_BESIDE`` a new concept waits beside the graph instead."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((11, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    graph: ConceptHnsw | None = ConceptHnsw.build(vectors, np.arange(5))
    assert graph is not None
    first = graph.graph.segments[0]
    waits = graph.refreshed(np.arange(5), np.r_[np.zeros(5), np.inf], np.arange(6), vectors)
    assert waits is not None and waits.graph is graph.graph and waits.beside.tolist() == [5]
    sizes = []
    for held in range(5, 11):
        graph = graph.refreshed(np.arange(held), np.r_[np.zeros(held), np.inf],
                                np.arange(held + 1), vectors, max_beside=0)
        assert graph is not None and graph.graph.segments[0] is first
        assert not len(graph.beside)
        sizes.append(graph.graph.sizes())
        graph.check_holds(np.arange(held + 1), 8)
    assert sizes == [[5, 1], [5, 1, 1], [5, 1, 1, 1], [5, 4], [5, 4, 1], [5, 4, 1, 1]]
    # every segment linked with the concept graph's construction beam, not the units'
    assert EF_CONSTRUCTION != ann.EF_CONSTRUCTION
    assert {s.index.hnsw.efConstruction for s in graph.graph.segments} == {EF_CONSTRUCTION}
    assert graph.row_concept.tolist() == list(range(11))
    for concept in range(11):
        assert concept in graph.candidates(vectors, vectors[concept], 1)


def test_concepts_beside_the_graph_are_scanned_so_a_new_best_concept_is_found() -> None:
    vectors = np.stack([unit(0, 1), unit(-1, 1), unit(1, 0.1)])
    graph = ConceptHnsw.build(vectors[:2], np.arange(2))
    # concept 2 is new: nearest the query, and only beside the graph
    kept = graph.refreshed(np.arange(2), np.array([0.0, 0.0, np.inf]), np.arange(3),
                           vectors)
    assert kept is not None and kept.beside.tolist() == [2]
    query = unit(1, 0)
    # the graph, of fewer rows than the beam, proposes them all; beside it, 2 is the best
    assert kept.candidates(vectors, query, 1).tolist() == [0, 1, 2]
    weighting = searched_weighting(kept, vectors, sp.csr_matrix((3, 3)), query, top_k=1,
                                   hops=0, decay=0.5)
    assert weighting.concepts.tolist() == [2] and weighting.hops.tolist() == [0]
    assert weighting.weights == pytest.approx([float(vectors[2] @ query)], abs=1e-6)


def test_a_held_graph_must_hold_every_usable_concept_once() -> None:
    vectors = np.stack([unit(1, 0), unit(0, 1), unit(1, 1)])
    graph = ConceptHnsw.build(vectors, np.array([0, 2]))
    graph.check_holds(np.array([0, 2]), 2)
    with pytest.raises(ValueError, match="each concept that links a unit once"):
        graph.check_holds(np.array([0, 1, 2]), 2)
    with pytest.raises(ValueError, match="2 dimensions"):
        graph.check_holds(np.array([0, 2]), 3)
    twice = ConceptHnsw(graph.graph, np.array([0, 0]), np.zeros(2), np.array([2]))
    with pytest.raises(ValueError, match="once"):
        twice.check_holds(np.array([0, 2]), 2)


def _hnsw_index(texts: list[str]) -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(texts, ids=[f"t{i}" for i in range(len(texts))],
                                        embedder=HashingEmbedder(64),
                                        config=ConceptGraphConfig(concept_search="hnsw"))


def test_an_index_asked_for_the_graph_builds_it_keeps_it_through_updates_and_saves_it(
        tmp_path: Path) -> None:
    index = _hnsw_index(TEXTS[:3])
    built = index.state.graph.concept_index
    assert built is not None and built.live_rows == len(index.state.graph.unit_linked_concepts)
    index.add(TEXTS[3:], ids=["t3", "t4"])
    index.delete(["t0"])
    graph = index.state.graph
    held = graph.concept_index
    assert held is not None
    held.check_holds(graph.unit_linked_concepts, 64)
    at_once = ConceptGraphIndex.from_texts(TEXTS[1:], ids=[f"t{i}" for i in range(1, 5)],
                                           embedder=HashingEmbedder(64),
                                           config=ConceptGraphConfig(concept_search="hnsw"))
    for query in ["Who wrote the first compiler?", "analytical engine", "looms and cards"]:
        assert [(c.id, c.score) for c in index.retrieve(query).chunks] == [
            (c.id, c.score) for c in at_once.retrieve(query).chunks]
    index.save(str(tmp_path / "idx"))
    manifest = read_manifest(tmp_path / "idx")
    # a graph of so few concepts proposes them all: it found every best match when built
    assert held.self_recall == 1.0
    assert manifest["concept_ann"] == {"file": "concept_ann.faiss",
                                       "rows": len(held.row_concept), "beside": len(held.beside),
                                       "segments": held.graph.sizes(), "self_recall": 1.0,
                                       "scales": held.graph.scales()}
    assert all(scale is not None and scale > 0 for scale in held.graph.scales())
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
    restored = loaded.state.graph.concept_index
    assert restored is not None  # mapped from the save
    assert all(segment.source is not None for segment in restored.graph.segments)
    assert restored.graph.sizes() == held.graph.sizes()
    assert restored.graph.scales() == held.graph.scales()
    assert restored.row_concept.tolist() == held.row_concept.tolist()
    assert restored.row_drift.tolist() == held.row_drift.tolist()
    assert restored.beside.tolist() == held.beside.tolist()
    assert restored.self_recall == 1.0
    for query in ["Who wrote the first compiler?", "analytical engine"]:
        assert [(c.id, c.score) for c in loaded.retrieve(query).chunks] == [
            (c.id, c.score) for c in index.retrieve(query).chunks]


def test_a_saved_graph_that_holds_other_concepts_is_refused(tmp_path: Path) -> None:
    _hnsw_index(TEXTS).save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    rows = np.load(folder / "concept_ann_rows.npy")
    rows[1] = rows[0]  # one concept twice, another not at all
    (folder / "concept_ann_rows.npy").unlink()
    np.save(folder / "concept_ann_rows.npy", rows, allow_pickle=False)
    rehash(folder, "concept_ann_rows.npy")  # past the checksum, as an attacker would
    with pytest.raises(CorruptIndexError, match="each concept that links a unit once"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
    rows[1] = 10**6
    (folder / "concept_ann_rows.npy").unlink()
    np.save(folder / "concept_ann_rows.npy", rows, allow_pickle=False)
    rehash(folder, "concept_ann_rows.npy")
    with pytest.raises(CorruptIndexError, match="positions of the"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))


def test_a_save_without_the_graph_builds_it_on_load_when_asked(tmp_path: Path) -> None:
    index = ConceptGraphIndex.from_texts(TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))],
                                         embedder=HashingEmbedder(64))
    index.save(str(tmp_path / "idx"))
    assert "concept_ann" not in read_manifest(tmp_path / "idx")
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
    assert loaded.state.graph.concept_index is None
    searched = loaded.reconfigured(concept_search="hnsw")
    searched.retrieve("analytical engine")  # the first query builds it
    assert searched.state.graph.held_concept_index() is not None
    # the index it was reconfigured from shares that graph, but does not ask for it: its
    # save leaves it out (a load would need faiss for a graph it never reads)
    loaded.save(str(tmp_path / "idx"))
    assert "concept_ann" not in read_manifest(tmp_path / "idx")
    searched.save(str(tmp_path / "idx"))  # the index that asks for it saves it
    assert "concept_ann" in read_manifest(tmp_path / "idx")


# ------------------------------------------------------------------ concept_search="auto"
def _auto_index(texts: list[str], **config: object) -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(texts, ids=[f"t{i}" for i in range(len(texts))],
                                        embedder=HashingEmbedder(64),
                                        config=ConceptGraphConfig(**config))  # type: ignore[arg-type]


def test_auto_is_the_default_and_searches_the_graph_from_the_threshold(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from shared_core.state import derived

    assert ConceptGraphConfig().concept_search == "auto"
    concepts = len(_auto_index(TEXTS).state.graph.vectors)
    monkeypatch.setattr(derived, "CONCEPT_ANN_MIN", concepts + 1)  # one short: the scan
    below = _auto_index(TEXTS)
    assert below.stats()["concept_search"] == "exact"
    assert below.state.graph.held_concept_index() is None
    below.save(str(tmp_path / "below"))
    assert "concept_ann" not in read_manifest(tmp_path / "below")

    monkeypatch.setattr(derived, "CONCEPT_ANN_MIN", concepts)  # at it: the graph
    at = _auto_index(TEXTS)
    assert at.stats()["concept_search"] == "hnsw"
    held = at.state.graph.concept_index
    assert held is not None  # built with the index, not by its first query
    searched = _auto_index(TEXTS, concept_search="hnsw")
    for query in ["Who wrote the first compiler?", "analytical engine", "looms and cards"]:
        assert [(c.id, c.score) for c in at.retrieve(query).chunks] == [
            (c.id, c.score) for c in searched.retrieve(query).chunks]
    at.save(str(tmp_path / "at"))
    assert read_manifest(tmp_path / "at")["concept_ann"]["rows"] == len(held.row_concept)
    assert ConceptGraphIndex.load(str(tmp_path / "at"),
                                  HashingEmbedder(64)).state.graph.concept_index is not None
    # the paper's ranking scans every concept whatever their number
    assert _auto_index(TEXTS, ranking="paper").stats()["concept_search"] == "exact"


def test_auto_builds_the_graph_when_an_update_reaches_the_threshold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shared_core.state import derived

    index = _auto_index(TEXTS[:3])
    before = len(index.state.graph.vectors)
    index.add(TEXTS[3:], ids=["t3", "t4"])
    after = len(index.state.graph.vectors)
    assert after > before  # the two texts bring new concepts
    monkeypatch.setattr(derived, "CONCEPT_ANN_MIN", after)
    index = _auto_index(TEXTS[:3])
    assert index.state.graph.held_concept_index() is None
    index.add(TEXTS[3:], ids=["t3", "t4"])
    graph = index.state.graph
    assert graph.concept_index is not None and index.stats()["concept_search"] == "hnsw"
    graph.concept_index.check_holds(graph.unit_linked_concepts, 64)


def test_auto_without_the_ann_extra_scans_the_concepts_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shared_core.state import derived

    monkeypatch.setattr(derived, "CONCEPT_ANN_MIN", 1)
    monkeypatch.setattr(ann, "ann_available", lambda: False)
    stats = _auto_index(TEXTS).stats()
    assert stats["concept_search"] == "exact"
    assert any("concept vectors are scanned" in w for w in stats["warnings"])


def test_a_graph_in_segments_is_saved_and_mapped_segment_by_segment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shared_core.search import concepts
    from tests.benchmarks.test_concept_updates import MORE

    monkeypatch.setattr(concepts, "MAX_BESIDE", 0)  # no concept waits beside the graph
    texts = TEXTS + MORE[:3]
    index = _hnsw_index(texts)
    first = index.state.graph.concept_index
    assert first is not None
    index.add(MORE[3:4], ids=["m3"])  # its new concepts: a segment of their own
    held = index.state.graph.concept_index
    assert held is not None and len(held.graph.sizes()) == 2 and not len(held.beside)
    assert held.graph.segments[0] is first.graph.segments[0]
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    assert sorted(p.name for p in folder.glob("concept_ann*.faiss")) == [
        "concept_ann.1.faiss", "concept_ann.faiss"]
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
    restored = loaded.state.graph.concept_index
    assert restored is not None and restored.graph.sizes() == held.graph.sizes()
    assert restored.row_concept.tolist() == held.row_concept.tolist()
    for query in ["Who built Colossus?", "analytical engine", "ciphers and valves"]:
        assert [(c.id, c.score) for c in loaded.retrieve(query).chunks] == [
            (c.id, c.score) for c in index.retrieve(query).chunks]
    # a manifest whose sizes do not add up to the rows is refused by name
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest["concept_ann"]["segments"] = [len(held.row_concept), 1]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(CorruptIndexError, match="'segments': <counts adding up to rows>"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))


def test_a_save_of_the_one_segment_graph_that_listed_no_segments_still_loads(
        tmp_path: Path) -> None:
    """The thirty-seventh round's saves: one ``concept_ann.faiss``, no ``segments`` (and,
    as every save before the fortieth round's, no ``self_recall``)."""
    index = _hnsw_index(TEXTS)
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    del manifest["concept_ann"]["segments"], manifest["concept_ann"]["self_recall"]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
    restored = loaded.state.graph.concept_index
    assert restored is not None and restored.graph.sizes() == [len(restored.row_concept)]
    assert [(c.id, c.score) for c in loaded.retrieve("analytical engine").chunks] == [
        (c.id, c.score) for c in index.retrieve("analytical engine").chunks]


def test_segments_larger_than_the_beam_are_searched_each_by_its_own_quantiser() -> None:
    """Two segments of more rows than the beam: neither is proposed whole, each is
    searched for its own best rows, so a concept is found in either, at its vector."""
    from shared_core.search.concepts import BEAM

    first, later = 3 * BEAM, BEAM + 44
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((first + later, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    graph = ConceptHnsw.build(vectors, np.arange(first)).refreshed(
        np.arange(first), np.r_[np.zeros(first), np.full(later, np.inf)],
        np.arange(first + later), vectors, max_beside=0)
    assert graph is not None and graph.graph.sizes() == [first, later]
    assert not len(graph.whole_rows)
    # each concept proposed for its own vector
    found = [c for c in range(0, first + later, 7)
             if c in graph.candidates(vectors, vectors[c], 5)]
    assert len(found) == len(range(0, first + later, 7))


def _share_found(graph: ConceptHnsw, vectors: np.ndarray, usable: np.ndarray,
                 queried: np.ndarray, k: int) -> float:
    """The self check worked out directly: the scan's ``k``-th cosine by a full sort, and
    the direct concepts' cosines each compared with it."""
    hits = 0
    for concept in queried:
        kth = np.sort(vectors[usable] @ vectors[concept])[-k]
        direct = direct_concepts(graph, vectors, vectors[concept], k)[0]
        hits += int(np.sum(vectors[direct] @ vectors[concept] >= kth - 1e-6))
    return hits / (k * len(queried))


def test_the_self_check_is_the_share_of_the_scans_best_concepts_that_the_graph_finds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shared_core.search import concepts

    monkeypatch.setattr(concepts, "SCAN_BLOCK", 500)  # the check's scan in five blocks
    vectors = unit_rows(2400, 24, seed=5)
    usable = np.flatnonzero(np.arange(len(vectors)) % 7 != 0)  # more rows than the beam
    graph = ConceptHnsw.build(vectors, usable)
    queried = self_check_rows(usable, 30)
    assert len(queried) == 30 and set(queried.tolist()) <= set(usable.tolist())
    assert np.all(np.diff(queried) > 0)
    assert self_check_rows(usable, 30).tolist() == queried.tolist()  # repeatable
    assert self_check_rows(usable[:20], 30).tolist() == usable[:20].tolist()  # all of few
    found = graph.measured_self_recall(vectors, queried, k=10)
    assert found == pytest.approx(_share_found(graph, vectors, usable, queried, 10))
    assert found > 0.9  # 24-d rows: the graph finds nearly all
    # a graph whose rows name the wrong concepts proposes the wrong ones, and the check
    # says so: each query still finds itself through the exact scores of its candidates
    # only where the graph happens to propose it
    wrong = replace(graph, row_concept=np.roll(graph.row_concept, 1))
    missed = wrong.measured_self_recall(vectors, queried, k=10)
    assert missed == pytest.approx(_share_found(wrong, vectors, usable, queried, 10))
    assert missed < 0.5


def test_auto_scans_where_the_graph_failed_its_check_and_saves_it_so_no_load_builds_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from shared_core.search import concepts
    from shared_core.state import derived

    monkeypatch.setattr(derived, "CONCEPT_ANN_MIN", 1)
    passed = _auto_index(TEXTS)
    assert passed.stats()["concept_search"] == "hnsw"
    # the graph over so few concepts finds them all (1.0); a bar above that fails it
    monkeypatch.setattr(concepts, "MIN_SELF_RECALL", 1.01)
    index = _auto_index(TEXTS)
    held = index.state.graph.concept_index
    assert held is not None and held.self_recall == 1.0
    stats = index.stats()
    assert stats["concept_search"] == "exact"
    assert any("found only 100.0%" in w for w in stats["warnings"])
    scanned = _auto_index(TEXTS, concept_search="exact")
    for query in ["Who wrote the first compiler?", "analytical engine"]:
        assert [(c.id, c.score) for c in index.retrieve(query).chunks] == [
            (c.id, c.score) for c in scanned.retrieve(query).chunks]
    index.save(str(tmp_path / "idx"))
    assert read_manifest(tmp_path / "idx")["concept_ann"]["self_recall"] == 1.0
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
    restored = loaded.state.graph.concept_index
    assert restored is not None and all(s.source is not None  # the save's, mapped
                                        for s in restored.graph.segments)
    assert loaded.stats()["concept_search"] == "exact"
    # forced, the graph is searched whatever its check
    assert _auto_index(TEXTS, concept_search="hnsw").stats()["concept_search"] == "hnsw"


@pytest.mark.parametrize("recall", [1.5, -0.1, "0.9", True, None])
def test_a_saved_self_recall_that_is_no_share_is_refused(tmp_path: Path, recall: object
                                                         ) -> None:
    _hnsw_index(TEXTS).save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest["concept_ann"]["self_recall"] = recall
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(CorruptIndexError, match="'self_recall': <share in"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(64))
