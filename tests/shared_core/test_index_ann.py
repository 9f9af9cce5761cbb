"""The index on its approximate vector path: choice by size, retrieval, persistence, tampering."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core import index as index_module
from shared_core.search.ann import (
    FILE_NAME,
    ROWS_FILE_NAME,
    HnswSegments,
    HnswVectorIndex,
    segment_file,
)
from shared_core.search.candidates import GatheredUnits
from shared_core.search.row_codes import code_rows, codes_ready
from shared_core.state import derived
from shared_core.state.spill import VectorSpill
from shared_core.store import CorruptIndexError, bytes_digest, index_folder
from tests.shared_core.test_paging import advice_at, advice_of, needs_smaps
from tests.shared_core.test_store import TEXTS

DIM = 64
QUERIES = ["Who wrote the first compiler?", "analytical engine", "punched cards and looms"]


def build(**knobs: object) -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(DIM),
                                        config=ConceptGraphConfig(**knobs))  # type: ignore[arg-type]


def contexts(index: ConceptGraphIndex) -> list[list[tuple[str, float]]]:
    return [[(c.id, round(c.score, 9)) for c in index.retrieve(q).chunks] for q in QUERIES]


def test_auto_is_exact_below_the_threshold_and_hnsw_from_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    n_sentences = len(build().state.corpus.sentence_spans)
    assert build().stats()["vector_index"] == "exact"  # a dozen sentences
    monkeypatch.setattr(derived, "ANN_MIN_ROWS", n_sentences)
    index = build()
    assert index.stats()["vector_index"] == "hnsw"
    assert isinstance(index.state.graph.ann, HnswSegments)
    assert len(index.state.graph.ann) == n_sentences  # max similarity: sentences indexed
    assert build(vector_index="exact").stats()["vector_index"] == "exact"


@pytest.mark.parametrize("knobs", [{}, {"chunk_similarity": "mean"},
                                   {"chunk_similarity": "direct", "unit_tokens": 12}])
def test_on_a_small_corpus_hnsw_retrieves_what_exact_retrieves(knobs: dict[str, object]) -> None:
    # every unit is a candidate here, and HNSW over a few rows finds them all
    exact = build(**knobs, vector_index="exact")
    approximate = exact.reconfigured(vector_index="hnsw")
    assert approximate.state.graph.ann is not None
    rows = (len(exact.state.graph.unit_tokens) if knobs else
            len(exact.state.corpus.sentence_spans))
    assert len(approximate.state.graph.ann) == rows
    assert contexts(approximate) == contexts(exact)


@pytest.mark.parametrize("bm25_beside", [False, True])
def test_a_query_on_two_threads_answers_as_on_one(monkeypatch: pytest.MonkeyPatch,
                                                  bm25_beside: bool) -> None:
    monkeypatch.setattr(derived, "ANN_MIN_ROWS", 1)
    if bm25_beside:  # every BM25 view made on the second thread, however short its postings
        monkeypatch.setattr(index_module, "LEXICAL_BESIDE_ENTRIES", 0)
    two = build(unit_tokens=12, candidates=4)  # a pool smaller than the units: ranks estimated
    terms = index_module._term_ids(two.state.corpus, two._analyzer, QUERIES[1])
    assert terms and (index_module._lexical_beside(two.state.graph, terms) is not None
                      ) == bm25_beside
    assert two.config.query_threads == 2 and two.stats()["vector_index"] == "hnsw"
    one = two.reconfigured(query_threads=1)
    assert one.state.graph is two.state.graph  # a query knob: nothing derived again
    assert contexts(two) == contexts(one)
    assert [len(c) for c in contexts(two)] == [len(c) for c in contexts(one)] and contexts(one)[0]


def test_warm_makes_what_a_first_query_would_and_the_query_keeps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(derived, "ANN_MIN_ROWS", 1)
    built = build(unit_tokens=12, concept_search="codes")
    built.save(str(tmp_path / "idx"))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    graph = loaded.state.graph
    assert graph.walk is not None and loaded.stats()["vector_index"] == "hnsw"
    made_on_first_use = ("node_degree", "concept_degree", "unit_starts")
    assert not any(name in graph.walk.__dict__ for name in made_on_first_use)
    assert "concept_codes" not in graph.__dict__
    loaded.warm()
    made = {name: graph.walk.__dict__[name] for name in made_on_first_use}
    codes = graph.__dict__["concept_codes"]
    assert graph.walk.has_postings
    assert any(thread.name.startswith("conceptgraph-query") for thread in threading.enumerate())
    assert contexts(loaded) == contexts(built)  # queries walked and scanned the codes
    assert all(graph.walk.__dict__[name] is made[name] for name in made_on_first_use)
    assert graph.__dict__["concept_codes"] is codes


def test_a_saved_hnsw_index_is_mapped_on_load_not_rebuilt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = build(vector_index="hnsw")
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = len(index.state.corpus.sentence_spans)
    # one segment, coded so that the sentence vectors' largest magnitude is the largest byte
    largest = float(np.abs(np.asarray(index.state.corpus.sentence_vectors)).max())
    assert manifest["ann"] == {"file": FILE_NAME, "rows": rows, "row_map": ROWS_FILE_NAME,
                               "segments": [rows], "scales": [pytest.approx(127 / largest)]}

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the saved HNSW index should have been loaded")

    monkeypatch.setattr(HnswVectorIndex, "build", no_build)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert loaded.stats()["vector_index"] == "hnsw"
    assert contexts(loaded) == contexts(index)


@needs_smaps
def test_a_loaded_index_with_hnsw_advises_random_reads_of_its_sentence_vectors(
        tmp_path: Path) -> None:
    # its queries gather scattered rows: no read-around (see paging.advise_random_reads);
    # the exact path scans every row, so its map keeps the kernel's default
    loaded = {}
    for vector_index in ("hnsw", "exact"):
        build(vector_index=vector_index).save(str(tmp_path / vector_index))
        loaded[vector_index] = ConceptGraphIndex.load(str(tmp_path / vector_index),
                                                      HashingEmbedder(DIM))
    hnsw = advice_of(index_folder(tmp_path / "hnsw") / "sentence_embeddings.npy")
    exact = advice_of(index_folder(tmp_path / "exact") / "sentence_embeddings.npy")
    assert "mr" in hnsw and "mr" in exact  # both mapped (may read) ...
    assert "rr" in hnsw and "rr" not in exact  # ... one advised to read at random
    assert contexts(loaded["hnsw"]) == contexts(build(vector_index="hnsw"))


@needs_smaps
@pytest.mark.parametrize("vector_index", ["hnsw", "exact"])
def test_a_built_index_advises_random_reads_of_its_spilled_sentence_vectors(
        tmp_path: Path, vector_index: str) -> None:
    # queried before any save, its rows are the build's spill file: advised as a loaded
    # index's are, and kept so through a save (which copies them with read-ahead) and an
    # update (its rows then sit in the spill and on the heap)
    spills = tmp_path / "spill"
    spills.mkdir()
    index = ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig(vector_index=vector_index),
                                         vector_spill=VectorSpill(spills, min_bytes=0))
    rows = index.state.corpus.sentence_vectors
    assert isinstance(rows, np.memmap)  # the spill's map
    advised = vector_index == "hnsw"
    assert "mr" in advice_at(rows) and ("rr" in advice_at(rows)) is advised
    index.save(str(tmp_path / "idx"))
    assert ("rr" in advice_at(rows)) is advised and "sr" not in advice_at(rows)
    index.add(["Grace Hopper wrote the first compiler in 1952."])
    assert index.state.corpus.sentence_vectors is not rows  # rows in the spill and the heap
    assert ("rr" in advice_at(rows)) is advised
    assert [c.id for c in index.retrieve(QUERIES[0]).chunks]


def test_an_updated_hnsw_index_saves_its_row_map_and_loads_without_a_rebuild(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = build(vector_index="hnsw")
    first = len(index.state.graph.ann)  # type: ignore[arg-type]
    index.delete([index.chunk_ids[1]])  # its sentences' rows stay in the graph, dead
    index.add(["Grace Hopper wrote the first compiler in 1952."])  # a segment of its rows
    ann, rows = index.state.graph.ann, index.state.graph.ann_rows
    assert isinstance(ann, HnswSegments) and ann.sizes() == [first, 1]
    assert rows is not None and (rows < 0).any() and len(ann) == len(rows)
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    saved = np.load(folder / ROWS_FILE_NAME, allow_pickle=False)
    np.testing.assert_array_equal(saved, rows)
    assert json.loads((folder / "manifest.json").read_text())["ann"]["segments"] == [first, 1]
    assert (folder / segment_file(1)).is_file()

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the saved HNSW index should have been loaded")

    monkeypatch.setattr(HnswVectorIndex, "build", no_build)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert loaded.state.graph.ann.sizes() == [first, 1]  # type: ignore[union-attr]
    np.testing.assert_array_equal(loaded.state.graph.ann_rows, rows)  # type: ignore[arg-type]
    assert contexts(loaded) == contexts(index)


@pytest.mark.parametrize("change", ["duplicate", "below -1", "missing vector"])
def test_a_row_map_that_does_not_cover_every_vector_once_is_refused(
        tmp_path: Path, change: str) -> None:

    folder = _saved_hnsw(tmp_path)
    rows = np.load(folder / ROWS_FILE_NAME, allow_pickle=False)
    if change == "duplicate":
        rows[1] = rows[0]
    elif change == "below -1":
        rows[0] = -2
    else:
        rows[-1] = -1
    np.save(folder / ROWS_FILE_NAME, rows, allow_pickle=False)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][ROWS_FILE_NAME] = bytes_digest((folder / ROWS_FILE_NAME).read_bytes())
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match="must map"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_an_hnsw_index_saved_before_row_maps_loads_in_vector_order(tmp_path: Path) -> None:
    folder = _saved_hnsw(tmp_path)
    rows = json.loads((folder / "manifest.json").read_text())["ann"]["rows"]
    _as_version_6(folder)
    _rewrite(folder, None, {"file": FILE_NAME, "rows": rows})  # as the first v3 saves wrote it
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    np.testing.assert_array_equal(loaded.state.graph.ann_rows, np.arange(rows))  # type: ignore[arg-type]
    assert contexts(loaded) == contexts(build(vector_index="hnsw"))


def test_an_hnsw_index_saved_in_one_file_before_segments_loads_as_one_segment(
        tmp_path: Path) -> None:
    folder = _saved_hnsw(tmp_path)
    rows = json.loads((folder / "manifest.json").read_text())["ann"]["rows"]
    _as_version_6(folder)
    _rewrite(folder, None, {"file": FILE_NAME, "rows": rows, "row_map": ROWS_FILE_NAME})
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert loaded.state.graph.ann.sizes() == [rows]  # type: ignore[union-attr]
    assert contexts(loaded) == contexts(build(vector_index="hnsw"))


def test_a_version_6_save_loads_grows_and_saves_its_ranged_segment_beside_a_coded_one(
        tmp_path: Path) -> None:
    folder = _saved_hnsw(tmp_path)
    _as_version_6(folder)
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert loaded.state.graph.ann.scales() == [None]  # type: ignore[union-attr]
    assert contexts(loaded) == contexts(build(vector_index="hnsw"))
    loaded.add(["Grace Hopper wrote the first compiler for the Harvard Mark I."], ids=["new"])
    ann = loaded.state.graph.ann
    assert isinstance(ann, HnswSegments) and len(ann.segments) == 2
    scale = ann.scales()[1]
    assert ann.scales()[0] is None and scale is not None and scale > 0
    answers = contexts(loaded)
    loaded.save(str(tmp_path / "idx"))
    manifest = json.loads((index_folder(tmp_path / "idx") / "manifest.json").read_text())
    assert manifest["version"] == 7 and manifest["ann"]["scales"] == [None, scale]
    again = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    assert again.state.graph.ann.scales() == [None, scale]  # type: ignore[union-attr]
    assert contexts(again) == answers


@pytest.mark.parametrize(("version", "scales", "error"), [
    (7, None, "must list 'scales'"),  # the key missing
    (7, [], "must list 'scales'"),
    (7, [1.0, 1.0], "must list 'scales'"),  # one segment
    (7, [0.0], "must list 'scales'"),
    (7, [-2.5], "must list 'scales'"),
    (7, ["2.5"], "must list 'scales'"),
    (7, [True], "must list 'scales'"),
    (7, [None], "codes its vectors as"),  # a coded file said to be coded by ranges
    (6, [2.5], "does not have"),  # scales came with version 7
])
def test_wrong_segment_scales_are_refused(tmp_path: Path, version: int, scales: object,
                                          error: str) -> None:
    folder = _saved_hnsw(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["version"] = version
    if scales is None:
        del manifest["ann"]["scales"]
    else:
        manifest["ann"]["scales"] = scales
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match=error):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_an_exact_index_saves_no_hnsw_file(tmp_path: Path) -> None:
    build().save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    assert not (folder / FILE_NAME).exists()
    assert "ann" not in json.loads((folder / "manifest.json").read_text())


def _saved_hnsw(tmp_path: Path) -> Path:
    build(vector_index="hnsw").save(str(tmp_path / "idx"))
    return index_folder(tmp_path / "idx")


def _as_version_6(folder: Path) -> None:
    """Make a one-segment save one of format version 6: its HNSW file coded by ranges
    trained per dimension (faiss's ``QT_8bit``), as that version built it, and its
    manifest without scales."""
    import faiss

    vectors = np.load(folder / "sentence_embeddings.npy")
    old = faiss.IndexHNSWSQ(DIM, faiss.ScalarQuantizer.QT_8bit, 32, faiss.METRIC_INNER_PRODUCT)
    old.hnsw.efConstruction = 100
    old.train(vectors)
    old.add(vectors)
    faiss.write_index(old, str(folder / FILE_NAME))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][FILE_NAME] = bytes_digest((folder / FILE_NAME).read_bytes())
    manifest["version"] = 6
    del manifest["ann"]["scales"]
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_changed_hnsw_file_fails_its_checksum(tmp_path: Path) -> None:
    folder = _saved_hnsw(tmp_path)
    data = bytearray((folder / FILE_NAME).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / FILE_NAME).write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError, match="checksum"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def _rewrite(folder: Path, payload: bytes | None, ann: object) -> None:
    """Replace the HNSW file and its manifest entry, with checksums that agree."""
    manifest = json.loads((folder / "manifest.json").read_text())
    if payload is not None:
        (folder / FILE_NAME).write_bytes(payload)
        manifest["files"][FILE_NAME] = bytes_digest(payload)
    manifest["ann"] = ann
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_file_that_is_not_an_hnsw_index_is_refused_before_it_is_mapped(
        tmp_path: Path) -> None:
    folder = _saved_hnsw(tmp_path)
    rows = json.loads((folder / "manifest.json").read_text())["ann"]["rows"]
    _rewrite(folder, b"not an index" * 100, {"file": FILE_NAME, "rows": rows, "scales": [1.0]})
    with pytest.raises(CorruptIndexError, match="not an HNSW index"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


@pytest.mark.parametrize("entry", [
    {"file": FILE_NAME, "rows": 3},
    {"file": "../elsewhere", "rows": 12},
    {"file": FILE_NAME, "rows": True}, "ann.usearch",
    {"file": FILE_NAME, "rows": 12, "row_map": ROWS_FILE_NAME, "segments": [11]},
    {"file": FILE_NAME, "rows": 12, "row_map": ROWS_FILE_NAME, "segments": []},
    {"file": FILE_NAME, "rows": 12, "row_map": ROWS_FILE_NAME, "segments": [13, -1]},
    {"file": FILE_NAME, "rows": 12, "row_map": ROWS_FILE_NAME, "segments": "12"},
    {"file": FILE_NAME, "rows": 12, "row_map": ROWS_FILE_NAME, "segments": [6, 6]},
])
def test_a_wrong_hnsw_manifest_entry_is_refused(tmp_path: Path, entry: object) -> None:
    folder = _saved_hnsw(tmp_path)
    _rewrite(folder, None, entry)
    with pytest.raises(CorruptIndexError, match=r"ann|holds"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_a_faiss_index_of_another_kind_is_refused(tmp_path: Path) -> None:
    import faiss

    folder = _saved_hnsw(tmp_path)
    rows = json.loads((folder / "manifest.json").read_text())["ann"]["rows"]
    flat = faiss.IndexFlatIP(DIM)
    flat.add(np.zeros((rows, DIM), dtype=np.float32))
    faiss.write_index(flat, str(tmp_path / "flat.faiss"))
    _rewrite(folder, (tmp_path / "flat.faiss").read_bytes(),
             {"file": FILE_NAME, "rows": rows, "scales": [1.0]})
    with pytest.raises(CorruptIndexError, match="holds a IndexFlat"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))


def test_auto_without_the_ann_extra_scans_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared_core.search import ann

    n_sentences = len(build().state.corpus.sentence_spans)
    monkeypatch.setattr(derived, "ANN_MIN_ROWS", n_sentences)
    monkeypatch.setattr(index_module, "ANN_MIN_ROWS", n_sentences)
    monkeypatch.setattr(ann, "ann_available", lambda: False)
    stats = build().stats()
    assert stats["vector_index"] == "exact"
    assert any("conceptgraph[ann]" in w for w in stats["warnings"])


def test_an_add_to_a_loaded_hnsw_index_leaves_its_mapped_segment_and_appends_one(
        tmp_path: Path) -> None:
    """The mapped file is read-only, and copying it to grow it had been an update's
    largest allocation: the new rows get a segment of their own."""
    build(vector_index="hnsw").save(str(tmp_path / "idx"))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    mapped = loaded.state.graph.ann
    assert isinstance(mapped, HnswSegments) and mapped.segments[0].source is not None
    rows = len(mapped)
    loaded.add(["Grace Hopper wrote the first compiler in 1952."])
    grown = loaded.state.graph.ann
    assert isinstance(grown, HnswSegments) and grown.sizes() == [rows, 1]
    assert grown.segments[0] is mapped.segments[0] and len(mapped) == rows
    fresh = ConceptGraphIndex.from_texts([*TEXTS, "Grace Hopper wrote the first compiler in 1952."],
                                         embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig(vector_index="hnsw"))
    assert contexts(loaded) == contexts(fresh)


def test_a_loaded_index_grows_after_a_later_save_removed_the_file_it_maps(
        tmp_path: Path) -> None:
    """The grown copy is read from the mapped file, held open: the save that replaced
    the version (and removed its folder) does not take it away."""
    build(vector_index="hnsw").save(str(tmp_path / "idx"))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    first_version = index_folder(tmp_path / "idx")
    loaded.save(str(tmp_path / "idx"))
    assert not first_version.exists()
    new_text = "Grace Hopper wrote the first compiler in 1952."
    loaded.add([new_text])
    fresh = ConceptGraphIndex.from_texts([*TEXTS, new_text], embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig(vector_index="hnsw"))
    assert contexts(loaded) == contexts(fresh)


def test_a_built_index_grows_a_copy_and_keeps_its_own_rows() -> None:
    vectors = HashingEmbedder(DIM).embed(TEXTS)
    built = HnswVectorIndex.build(vectors[:3])
    assert built.source is None  # nothing mapped: a clone owns its codes
    before = built.search(vectors[0], 3)
    grown = built.with_rows(vectors[3:])
    assert len(built) == 3 and len(grown) == len(TEXTS)
    after = built.search(vectors[0], 3)
    assert before[0].tolist() == after[0].tolist()
    rows, _ = grown.search(vectors[-1], 1)
    assert rows.tolist() == [len(TEXTS) - 1]


def mapped_from(folder: Path) -> int:
    """How many of this process's mappings view an unlinked file made in ``folder``."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        return sum(1 for line in maps if str(folder) in line and line.rstrip().endswith(
            "(deleted)"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="faiss maps by /proc name")
def test_a_built_hnsw_index_past_the_spill_threshold_is_mapped_from_an_unlinked_file(
        tmp_path: Path) -> None:
    """Its codes leave the heap as a loaded index's do; search, growth and retrieval are
    the heap index's, and the folder keeps no name."""
    new_text = "Grace Hopper wrote the first compiler in 1952."
    config = ConceptGraphConfig(vector_index="hnsw")
    kept = ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(DIM), config=config,
                                        vector_spill=VectorSpill(tmp_path, min_bytes=10**9))
    assert kept.state.graph.ann.segments[0].source is None  # type: ignore[union-attr]
    assert mapped_from(tmp_path) == 0  # under the threshold, on the heap
    spilled = ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(DIM), config=config,
                                           vector_spill=VectorSpill(tmp_path, min_bytes=0))
    heap = ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(DIM), config=config,
                                        vector_spill=None)
    ann = spilled.state.graph.ann
    assert isinstance(ann, HnswSegments) and ann.segments[0].source is not None
    assert heap.state.graph.ann.segments[0].source is None  # type: ignore[union-attr]
    # the vectors' file and the index's own, each mapped from a file without a name
    assert mapped_from(tmp_path) >= 2 and os.listdir(tmp_path) == []
    query = HashingEmbedder(DIM).embed(QUERIES)[0]
    assert [r.tolist() for r in ann.search(query, 4)] == [
        r.tolist() for r in heap.state.graph.ann.search(query, 4)]  # type: ignore[union-attr]
    assert contexts(spilled) == contexts(heap)
    for index in (spilled, heap):
        index.add([new_text])
    grown = spilled.state.graph.ann
    assert isinstance(grown, HnswSegments) and grown.sizes() == [len(ann), 1]
    assert all(segment.source is not None for segment in grown.segments)
    assert contexts(spilled) == contexts(heap)
    del spilled, ann, grown, kept, heap
    import gc

    gc.collect()
    assert mapped_from(tmp_path) == 0  # freed with the last index viewing them


def test_the_rank_sample_is_gathered_once_per_graph_and_ranks_as_gathered_afresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # ten sentence units, two candidates per view: some rank beyond the candidates
    index = build(vector_index="hnsw", candidates=2, unit_tokens=12)
    kept = index.state.graph.gathered_units
    assert len(kept) == 0
    first = contexts(index)
    assert len(kept) == 1  # the rank sample's rows, kept for the next queries
    assert contexts(index) == first
    monkeypatch.setattr(GatheredUnits, "rows", lambda self, units, gather: gather(units))
    assert contexts(index) == first  # gathering every time ranks the same
    monkeypatch.undo()
    index.add(["Konrad Zuse built the Z3 computer in Berlin."], ids=["z3"])
    assert len(index.state.graph.gathered_units) == 0  # a new state gathers its own


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="faiss maps by /proc name")
def test_what_the_first_walk_builds_is_kept_in_the_spill_not_on_the_heap(
        tmp_path: Path) -> None:
    spilled = ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(DIM),
                                           vector_spill=VectorSpill(tmp_path, min_bytes=0))
    heap = ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(DIM), vector_spill=None)
    before = mapped_from(tmp_path)
    assert contexts(spilled) == contexts(heap)  # the walk ran: short units
    walk = spilled.state.graph.walk
    assert walk is not None and mapped_from(tmp_path) == before + 1  # one file, four arrays
    assert not walk.links_csc.indices.flags.writeable  # a read-only view of it
    assert heap.state.graph.walk.links_csc.indices.flags.writeable  # type: ignore[union-attr]


def test_changing_only_the_vector_index_keeps_the_graph_and_derives_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:

    approximate = build(vector_index="hnsw")
    exact_built = build(vector_index="exact")

    derive_graph = index_module.derive_graph

    def no_derivation(corpus: Any, *args: Any, **kwargs: Any) -> Any:
        if len(corpus):  # a new index object starts from an empty graph
            raise AssertionError("only the vector index changed: the graph is the same")
        return derive_graph(corpus, *args, **kwargs)

    monkeypatch.setattr(index_module, "derive_graph", no_derivation)
    exact = approximate.reconfigured(vector_index="exact")
    graph, before = exact.state.graph, approximate.state.graph
    assert graph.ann is None and graph.ann_rows is None and graph.ann_row_unit is None
    assert graph.adjacency is before.adjacency and graph.walk is before.walk
    assert graph.gathered_units is not before.gathered_units  # rows of another search
    assert contexts(exact) == contexts(exact_built)
    again = exact.reconfigured(vector_index="hnsw")
    assert isinstance(again.state.graph.ann, HnswSegments)
    assert contexts(again) == contexts(approximate)
    assert before.ann is approximate.state.graph.ann  # the first index is untouched
    with pytest.raises(AssertionError, match="graph is the same"):
        approximate.reconfigured(vector_index="exact", theta_co=5)  # a graph knob too


class UnevenEmbedder:
    """Hashing vectors weighted unevenly by dimension: values a byte code cannot hold
    exactly (a hashing vector's few equal values code without error)."""

    model_id = "uneven-hashing-64"
    dim = DIM

    def embed(self, texts: list[str]) -> np.ndarray:
        weights = 1.0 + (np.arange(DIM) % 7) * 0.37
        rows = HashingEmbedder(DIM).embed(texts) * weights
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("knobs", [{}, {"chunk_similarity": "direct", "unit_tokens": 12}])
def test_rescoring_from_codes_scores_units_from_their_decoded_rows(
        knobs: dict[str, object]) -> None:
    index = ConceptGraphIndex.from_texts(TEXTS, embedder=UnevenEmbedder(), config=(
        ConceptGraphConfig(vector_index="hnsw", rescore_from="codes", **knobs)))  # type: ignore[arg-type]
    corpus, graph = index.state.corpus, index.state.graph
    q = UnevenEmbedder().embed(["punched cards and looms"])[0]
    units = np.arange(len(graph.unit_tokens))[::-1]
    coded = index_module._unit_scorer(corpus, graph, q, from_codes=True)(units)
    exact = index_module._unit_scorer(corpus, graph, q)(units)
    rows = np.asarray(graph.unit_vectors if graph.unit_vectors is not None
                      else corpus.sentence_vectors)
    decoded = code_rows(rows).rows(np.arange(len(rows))) @ q
    if graph.unit_vectors is None:  # a unit's best sentence
        offsets = graph.unit_offsets
        expected = np.array([decoded[offsets[u]:offsets[u + 1]].max() for u in units])
    else:
        expected = decoded[units]
    assert coded == pytest.approx(expected, abs=1e-6)
    assert not np.array_equal(coded, exact)  # the codes, not the vectors, were read
    assert np.abs(coded - exact).max() < 0.02


def test_warm_codes_the_rows_a_loaded_index_rescores_and_queries_read_them(
        tmp_path: Path) -> None:
    built = build(vector_index="hnsw", unit_tokens=12, rescore_from="codes")
    built.save(str(tmp_path / "idx"))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM))
    sentences = loaded.state.corpus.sentence_vectors
    assert isinstance(sentences, np.memmap) and not codes_ready(sentences)
    loaded.reconfigured(rescore_from="vectors").warm()
    assert not codes_ready(sentences)  # warm codes the rows only for rescore_from="codes"
    loaded.warm()
    assert codes_ready(sentences)
    assert contexts(loaded) == contexts(built)
    assert len(loaded.state.graph.coded_units) == 1  # the rank sample's decoded rows
    assert len(loaded.state.graph.gathered_units) == 0
