"""Persistence: identical results after a round trip, embedder checks, corruption, no pickle."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.faults import rehash
from shared_core.config import ConceptGraphConfig
from shared_core.embeddings import FunctionEmbedder, HashingEmbedder
from shared_core.index import ConceptGraphIndex
from shared_core.state import refresh as refresh_module
from shared_core.state.rows import VectorRows
from shared_core.state.texts import ChunkTexts
from shared_core.store import (
    ARRAYS,
    DERIVED_ARRAYS,
    DERIVED_MATRICES,
    GRAPH_ARRAYS,
    MATRIX_PARTS,
    POINTER,
    TEXT_ARRAYS,
    TOKEN_ARRAYS,
    WALK_ENTRY_UNIT,
    CorruptIndexError,
    index_folder,
    read_manifest,
)
from tests.shared_core.fakes import STORED_COSINE_TOL
from tests.shared_core.state.test_spill import mapped

DIM = 64
TEXTS = [
    "Ada Lovelace wrote the first computer program. She worked with Charles Babbage.",
    "Charles Babbage designed the analytical engine. The engine was mechanical.",
    "The analytical engine could run a program. Programs used punched cards.",
    "Punched cards came from the Jacquard loom. The loom wove silk patterns.",
    "Grace Hopper wrote the first compiler. The compiler translated programs.",
]
CFG = ConceptGraphConfig(theta_co=1, theta_sem=0.0, top_k=2, hops=2, concepts_per_chunk=3,
                         kappa=0.6, budget=200)
QUERIES = ["analytical engine", "first compiler", "punched cards loom", "Ada program"]


def build() -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(
        TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))], embedder=HashingEmbedder(DIM),
        metadatas=[{"n": i, "name": f"doc {i}", "ü": "ñ"} for i in range(len(TEXTS))],
        config=CFG)


def snapshot(index: ConceptGraphIndex) -> list[object]:
    out: list[object] = []
    for q in QUERIES:
        r = index.retrieve(q)
        out.append([(c.id, c.text, c.score, c.provenance, c.chunk.metadata) for c in r.chunks])
        out.append((r.direct_concepts, r.expanded_concepts, r.stopped_by_budget))
    return out


def load_index(path: Path, embedder: object) -> ConceptGraphIndex:
    return ConceptGraphIndex.load(str(path), embedder)  # type: ignore[arg-type]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "idx"
    build().save(str(path))
    return path


@pytest.fixture
def version(saved: Path) -> Path:
    """The folder of the saved index's current version."""
    return index_folder(saved)


def test_round_trip_gives_identical_results(saved: Path) -> None:
    original = build()
    loaded = ConceptGraphIndex.load(str(saved), HashingEmbedder(DIM))
    assert snapshot(loaded) == snapshot(original)
    assert loaded.select() == original.select()
    assert loaded.config == original.config  # CFG with cjk_segmenter resolved from "auto"
    assert original.config.cjk_segmenter in ("jieba", "bigram")
    assert loaded.stats() == original.stats()
    assert loaded.edges == original.edges
    assert loaded.get("t2").metadata == {"n": 2, "name": "doc 2", "ü": "ñ"}


def test_loaded_index_keeps_working(saved: Path) -> None:
    loaded = load_index(saved, HashingEmbedder(DIM))
    loaded.add(["A brand new chunk about engines."], ids=["new"])
    loaded.delete(["t0"])
    assert "new" in loaded and "t0" not in loaded
    fresh = ConceptGraphIndex.from_texts([*TEXTS[1:], "A brand new chunk about engines."],
                                         ids=["t1", "t2", "t3", "t4", "new"],
                                         embedder=HashingEmbedder(DIM), config=CFG)
    assert loaded.stats() == fresh.stats()


def test_round_trip_after_delete_and_of_empty_index(tmp_path: Path) -> None:
    index = build()
    index.delete(["t1"])
    index.save(str(tmp_path / "a"))
    again = ConceptGraphIndex.load(str(tmp_path / "a"), HashingEmbedder(DIM))
    assert snapshot(again) == snapshot(index)
    empty = ConceptGraphIndex(HashingEmbedder(DIM))
    empty.save(str(tmp_path / "empty"))
    assert len(ConceptGraphIndex.load(str(tmp_path / "empty"), HashingEmbedder(DIM))) == 0


@pytest.mark.parametrize(
    "embedder",
    [HashingEmbedder(128),  # other dim (and so other model id)
     FunctionEmbedder(lambda t: np.ones((len(t), DIM)), "some-other-model", DIM)],
)
def test_loading_with_another_embedder_raises(saved: Path, embedder: object) -> None:
    with pytest.raises(ValueError, match=r"was built with embedding model 'hashing-bow-64'"):
        ConceptGraphIndex.load(str(saved), embedder)  # type: ignore[arg-type]


@pytest.mark.parametrize(("built", "given", "wanted"), [
    ("sentence-transformers/all-MiniLM-L6-v2@bf16", "sentence-transformers/all-MiniLM-L6-v2",
     "bf16"),
    ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2@bf16",
     "fp32")])
def test_an_index_built_at_another_precision_says_which_to_load_it_with(
        tmp_path: Path, built: str, given: str, wanted: str) -> None:
    # precision="auto" embeds in bf16 only where the CPU computes it natively, so an index
    # built on one machine can meet the other precision on another
    def vectors(texts: list[str]) -> np.ndarray:
        return HashingEmbedder(DIM).embed(texts)

    ConceptGraphIndex.from_texts(TEXTS, embedder=FunctionEmbedder(vectors, built, DIM),
                                 config=CFG).save(str(tmp_path / "idx"))
    with pytest.raises(ValueError, match=rf"another precision: load it with "
                                         rf"minilm_embedder\(precision='{wanted}'\)"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), FunctionEmbedder(vectors, given, DIM))
    other = FunctionEmbedder(vectors, "some-other-model", DIM)
    with pytest.raises(ValueError, match=r"would not be comparable$"):  # no hint there
        ConceptGraphIndex.load(str(tmp_path / "idx"), other)


def test_missing_manifest(saved: Path, version: Path) -> None:
    (version / "manifest.json").unlink()
    with pytest.raises(CorruptIndexError, match=r"is missing manifest\.json"):
        load_index(saved, HashingEmbedder(DIM))
    (saved / POINTER).unlink()
    with pytest.raises(CorruptIndexError, match=r"no manifest\.json: not a conceptgraph index"):
        load_index(saved, HashingEmbedder(DIM))


def test_not_a_directory_at_all(tmp_path: Path) -> None:
    with pytest.raises(CorruptIndexError):
        load_index(tmp_path / "does-not-exist", HashingEmbedder(DIM))


def test_bad_json_manifest(saved: Path, version: Path) -> None:
    (version / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(CorruptIndexError, match="not valid JSON"):
        load_index(saved, HashingEmbedder(DIM))


def _edit_manifest(path: Path, **changes: object) -> None:
    folder = index_folder(path)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest.update(changes)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def test_wrong_version(saved: Path) -> None:
    _edit_manifest(saved, version=99)
    with pytest.raises(CorruptIndexError, match="version 99"):
        load_index(saved, HashingEmbedder(DIM))


def test_wrong_format(saved: Path) -> None:
    _edit_manifest(saved, format="something-else")
    with pytest.raises(CorruptIndexError, match="bad manifest format"):
        load_index(saved, HashingEmbedder(DIM))


def test_unknown_config_key_in_manifest(saved: Path, version: Path) -> None:
    manifest = json.loads((version / "manifest.json").read_text(encoding="utf-8"))
    manifest["config"]["bogus_knob"] = 1
    (version / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(CorruptIndexError, match="bogus_knob"):
        load_index(saved, HashingEmbedder(DIM))


def test_tampered_npy_fails_the_checksum(saved: Path, version: Path) -> None:
    path = version / "sentence_embeddings.npy"
    arr = np.load(path, allow_pickle=False)
    arr[0, 0] += 0.5
    np.save(path, arr, allow_pickle=False)  # still a valid .npy, but not the saved bytes
    with pytest.raises(CorruptIndexError, match="does not match its checksum"):
        load_index(saved, HashingEmbedder(DIM))


def test_tampered_json_fails_the_checksum(saved: Path, version: Path) -> None:
    chunks = json.loads((version / "chunks.json").read_text(encoding="utf-8"))
    chunks["ids"][0] = "something-else"
    (version / "chunks.json").write_text(json.dumps(chunks), encoding="utf-8")
    with pytest.raises(CorruptIndexError, match="checksum"):
        load_index(saved, HashingEmbedder(DIM))


def test_texts_are_saved_as_utf8_bytes_and_read_back_whole(tmp_path: Path) -> None:
    texts = ["Ada Lovelace wrote the first program.", "Zoë's café served crème brûlée.",
             "東京は日本の首都である。", "Emoji too: 🚀 launched."]
    index = ConceptGraphIndex.from_texts(texts, ids=["a", "b", "c", "d"],
                                         embedder=HashingEmbedder(DIM))
    index.save(str(tmp_path / "idx"))
    folder = index_folder(tmp_path / "idx")
    blob = np.load(folder / "chunk_texts.npy", allow_pickle=False)
    ends = np.load(folder / "chunk_text_ends.npy", allow_pickle=False)
    assert blob.tobytes() == "".join(texts).encode("utf-8")
    assert ends.tolist() == np.cumsum([len(t.encode("utf-8")) for t in texts]).tolist()
    assert "texts" not in json.loads((folder / "chunks.json").read_text(encoding="utf-8"))
    loaded = load_index(tmp_path / "idx", HashingEmbedder(DIM))
    assert [loaded.get(i).text for i in "abcd"] == texts


def test_missing_data_file(saved: Path, version: Path) -> None:
    (version / "sentence_spans.npy").unlink()
    with pytest.raises(CorruptIndexError, match=r"missing sentence_spans\.npy"):
        load_index(saved, HashingEmbedder(DIM))


def test_inconsistent_counts_are_caught(saved: Path) -> None:
    _edit_manifest(saved, chunks=99)  # checksums are fine, the counts disagree
    with pytest.raises(CorruptIndexError, match="ids has 5 entries, the manifest says 99"):
        load_index(saved, HashingEmbedder(DIM))


def test_saving_over_a_foreign_directory_refuses(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "precious.txt").write_text("do not delete", encoding="utf-8")
    with pytest.raises(FileExistsError, match="not a conceptgraph index"):
        build().save(str(target))
    assert (target / "precious.txt").read_text(encoding="utf-8") == "do not delete"
    a_file = tmp_path / "file.txt"
    a_file.write_text("x", encoding="utf-8")
    with pytest.raises(FileExistsError):
        build().save(str(a_file))
    # an empty directory is fine
    (tmp_path / "empty").mkdir()
    build().save(str(tmp_path / "empty"))
    assert (index_folder(tmp_path / "empty") / "manifest.json").is_file()


def test_saving_over_an_index_replaces_it(saved: Path) -> None:
    smaller = ConceptGraphIndex.from_texts(TEXTS[:2], embedder=HashingEmbedder(DIM), config=CFG)
    smaller.save(str(saved))
    assert len(load_index(saved, HashingEmbedder(DIM))) == 2
    assert read_manifest(saved)["chunks"] == 2
    leftovers = [p.name for p in saved.parent.iterdir() if p.name != saved.name]
    assert leftovers == []  # no temp or old directories left behind


def test_a_loaded_index_reads_its_texts_and_term_counts_from_the_mapped_files(saved: Path,
                                                             tmp_path: Path) -> None:
    # no string per chunk on the heap: the texts are ranges of chunk_texts.npy's bytes
    loaded = load_index(saved, HashingEmbedder(DIM))
    texts = loaded.state.corpus.texts
    assert isinstance(texts, ChunkTexts) and texts.heap_bytes == 0
    assert texts == tuple(TEXTS)
    # so are the sentence-term counts: scipy would copy int64 indices that fit int32
    terms = loaded.state.corpus.sentence_terms
    assert all(mapped(a) for a in (terms.data, terms.indices, terms.indptr))
    assert (terms != build().state.corpus.sentence_terms).nnz == 0
    # an add between the saved ids and a delete: ranges of the file and of the heap
    loaded.add(["Alan Turing broke codes. The codes were German."], ids=["t2a"])
    loaded.delete(["t1"])
    expected = [*TEXTS[:1], TEXTS[2], "Alan Turing broke codes. The codes were German.",
                *TEXTS[3:]]
    assert [loaded.get(i).text for i in loaded.chunk_ids] == expected
    loaded.save(str(tmp_path / "again"))
    again = load_index(tmp_path / "again", HashingEmbedder(DIM))
    assert again.state.corpus.texts == tuple(expected)
    assert snapshot(again) == snapshot(loaded)


@pytest.mark.parametrize("concept_dead_share", [1.0, 0.0])
def test_updates_leave_the_saved_vectors_in_their_file(
        saved: Path, tmp_path: Path, concept_dead_share: float,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sentence vectors stay in the save's file. So do the unchanged concepts' vectors
    until ``CONCEPT_MAX_DEAD_SHARE`` of the rows held are dead (``test_rows.py`` checks
    the rule): with 1.0 never gathered, with 0.0 as soon as one row is dead."""
    monkeypatch.setattr(refresh_module, "CONCEPT_MAX_DEAD_SHARE", concept_dead_share)
    loaded = load_index(saved, HashingEmbedder(DIM))
    file_rows = loaded.state.corpus.sentence_vectors
    assert isinstance(file_rows, np.memmap)
    concept_file = loaded.state.graph.vectors
    assert isinstance(concept_file, np.memmap)
    added = "Alan Turing broke codes. The codes were German."
    loaded.add([added], ids=["t2a"])  # its sentences fall between the saved ones
    rows = loaded.state.corpus.sentence_vectors
    assert isinstance(rows, VectorRows) and rows.runs[0] is file_rows  # not rewritten
    # the add brings new concepts and changes no old one's vector: none of the file's
    # concept rows is dead, and the new ones sit in a small array
    concepts = loaded.state.graph.vectors
    assert isinstance(concepts, VectorRows) and concepts.runs[0] is concept_file
    assert len(concepts.runs) == 2 and len(concepts.runs[1]) < len(concepts)
    loaded.delete(["t2a"])  # the file's rows in order again: the mapped array itself
    assert loaded.state.corpus.sentence_vectors is file_rows
    assert loaded.state.graph.vectors is concept_file
    loaded.add([added], ids=["t2a"])
    loaded.delete(["t1"])
    rows = loaded.state.corpus.sentence_vectors
    assert isinstance(rows, VectorRows) and rows.runs[0] is file_rows
    # the same rows, graph and retrieval as an index built from these chunks
    kept = [0, 2, 3, 4]
    fresh = ConceptGraphIndex.from_texts(
        [TEXTS[0], TEXTS[2], added, *TEXTS[3:]], ids=["t0", "t2", "t2a", "t3", "t4"],
        embedder=HashingEmbedder(DIM),
        metadatas=[{"n": i, "name": f"doc {i}", "ü": "ñ"} for i in kept[:2]] + [{}] + [
            {"n": i, "name": f"doc {i}", "ü": "ñ"} for i in kept[2:]], config=CFG)
    assert np.array_equal(np.asarray(rows), fresh.state.corpus.sentence_vectors)
    # deleting t1 left concept rows of the file dead
    assert isinstance(loaded.state.graph.vectors, VectorRows) == (concept_dead_share == 1.0)
    assert np.array_equal(np.asarray(loaded.state.graph.vectors), fresh.state.graph.vectors)
    assert snapshot(loaded) == snapshot(fresh)
    # a save writes the rows in order, block by block
    loaded.save(str(tmp_path / "again"))
    again = load_index(tmp_path / "again", HashingEmbedder(DIM))
    assert np.array_equal(again.state.corpus.sentence_vectors, np.asarray(rows))
    assert np.array_equal(again.state.graph.vectors, fresh.state.graph.vectors)
    assert snapshot(again) == snapshot(loaded)


def test_files_hold_no_pickle(saved: Path, version: Path) -> None:
    assert {p.name for p in saved.iterdir()} == {POINTER, ".lock", version.name}
    names = {p.name for p in version.iterdir()}
    written = {**ARRAYS, **TOKEN_ARRAYS, **GRAPH_ARRAYS, **DERIVED_ARRAYS}
    # 10 sentences: no concept is in enough of them for the default rule to keep its sum
    assert build().state.graph.concept_sums is None
    del written["concept_sums"], written["summed_concepts"]
    # chunks are the units here: their links are the concept links, not saved twice
    matrices = {f"{name}_{part}": (dtype if part == "data" else np.int32, 1)
                for name, (dtype, _) in DERIVED_MATRICES.items() if name != "unit_links"
                for part in MATRIX_PARTS}
    matrices[WALK_ENTRY_UNIT.removesuffix(".npy")] = (np.int32, 1)  # queries walk here
    written.update(TEXT_ARRAYS)
    assert names == {f"{n}.npy" for n in {**written, **matrices}} | {
        "chunks.json", "terms.json", "manifest.json"}
    for name, (dtype, ndim) in {**written, **matrices}.items():
        arr = np.load(version / f"{name}.npy", allow_pickle=False)
        assert arr.dtype == dtype and arr.ndim == ndim
        assert arr.dtype != object
    manifest = read_manifest(saved)
    assert manifest["embedding_model"] == "hashing-bow-64" and manifest["embedding_dim"] == DIM
    assert manifest["config"] == build().config.to_dict()
    for name in ("chunks.json", "terms.json"):
        json.loads((version / name).read_text(encoding="utf-8"))


def _rechecksum(path: Path, name: str) -> None:
    rehash(index_folder(path), name)


def test_a_pickled_array_is_refused_even_with_a_matching_checksum(saved: Path,
                                                                   version: Path) -> None:
    # an attacker who also rewrites the manifest: the object array must still not unpickle
    np.save(version / "unit_starts.npy", np.array([{"x": 1}] * 5, dtype=object),
            allow_pickle=True)
    _rechecksum(saved, "unit_starts.npy")
    with pytest.raises(CorruptIndexError, match="has dtype object"):
        load_index(saved, HashingEmbedder(DIM))


def test_wrong_dtype_with_a_matching_checksum(saved: Path, version: Path) -> None:
    spans = np.load(version / "sentence_spans.npy", allow_pickle=False)
    np.save(version / "sentence_spans.npy", spans.astype(np.float64), allow_pickle=False)
    _rechecksum(saved, "sentence_spans.npy")
    with pytest.raises(CorruptIndexError, match="dtype float64"):
        load_index(saved, HashingEmbedder(DIM))


def test_direct_unit_vectors_round_trip_and_are_checked(tmp_path: Path) -> None:
    cfg = ConceptGraphConfig(**{**CFG.to_dict(), "chunk_similarity": "direct"})
    original = ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(DIM), config=cfg)
    path = tmp_path / "direct"
    original.save(str(path))
    folder = index_folder(path)
    vectors = np.load(folder / "unit_vectors.npy", allow_pickle=False)
    in_index_order = [original.get(cid).text for cid in original.chunk_ids]  # sorted ids
    np.testing.assert_allclose(vectors, HashingEmbedder(DIM).embed(in_index_order),
                               atol=STORED_COSINE_TOL)
    assert snapshot(ConceptGraphIndex.load(str(path), HashingEmbedder(DIM))) == snapshot(original)
    # one row short, with a matching checksum: the counts disagree
    np.save(folder / "unit_vectors.npy", vectors[:-1], allow_pickle=False)
    _rechecksum(path, "unit_vectors.npy")
    with pytest.raises(CorruptIndexError, match=r"unit_vectors\.npy: has shape \(4, 64\)"):
        load_index(path, HashingEmbedder(DIM))
    (folder / "unit_vectors.npy").unlink()
    with pytest.raises(CorruptIndexError, match=r"missing unit_vectors\.npy"):
        load_index(path, HashingEmbedder(DIM))


def test_indexes_without_direct_vectors_do_not_write_them(version: Path) -> None:
    assert not (version / "unit_vectors.npy").exists()


def test_an_index_saved_before_select_by_keeps_kappa_as_a_share_of_chunks(saved: Path,
                                                                         version: Path) -> None:
    manifest = json.loads((version / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["config"].pop("select_by") == "tokens"
    _edit_manifest(saved, config=manifest["config"])
    loaded = load_index(saved, HashingEmbedder(DIM))
    assert loaded.config.select_by == "chunks"
    assert loaded.select(0.6).report.chunks_kept == 3  # ceil(0.6 * 5), as it was saved
    assert ConceptGraphIndex.load(str(saved), HashingEmbedder(DIM)).config == loaded.config


def test_an_index_saved_with_a_legacy_llama_index_model_id_loads(tmp_path: Path) -> None:
    inner = HashingEmbedder(DIM)
    old = FunctionEmbedder(inner.embed, "llama-index:MyEmbedding:my-model", DIM)
    ConceptGraphIndex.from_texts(TEXTS, embedder=old, config=CFG).save(str(tmp_path / "i"))
    new = FunctionEmbedder(inner.embed, "llama-index/MyEmbedding/my-model", DIM)
    assert len(ConceptGraphIndex.load(str(tmp_path / "i"), new)) == len(TEXTS)
    other = FunctionEmbedder(inner.embed, "llama-index/MyEmbedding/other-model", DIM)
    with pytest.raises(ValueError, match="was built with embedding model"):
        ConceptGraphIndex.load(str(tmp_path / "i"), other)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), max_size=5), max_size=6))
def test_increasing_within_runs_matches_a_check_row_by_row(rows: list[list[int]]) -> None:
    from shared_core.store import _increasing_within

    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    indices = np.array([i for r in rows for i in r], dtype=np.int64)
    expected = all(all(b > a for a, b in itertools.pairwise(r)) for r in rows)
    assert _increasing_within(indptr, indices) == expected
