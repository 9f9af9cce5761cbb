"""KGStore: a crash costs nothing already paid, a torn line is redone, a mismatch is refused."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from shared_core.kg import (
    ChunkRecord,
    EntityRecord,
    ExtractionConfig,
    KGStore,
    KGStoreError,
    ParsedExtraction,
    RelationRecord,
    StoreManifest,
    extract_kg,
    text_hash,
)
from shared_core.llm import TokenLedger
from tests.shared_core.kg.support import (
    asked_chunks,
    by_chunk,
    chunk_text,
    chunks,
    reply_for_chunk,
    runner,
)
from tests.shared_core.llm.scripted import ScriptedChat

MANIFEST = StoreManifest("m", "p", {"max_gleanings": 0, "entity_types": ("person",)})


def record(chunk_id: str, name: str = "Ada") -> ChunkRecord:
    return ChunkRecord(chunk_id, text_hash(chunk_id), ParsedExtraction(
        (EntityRecord(name, "person", "x"), EntityRecord("Bob", "person", "")),
        (RelationRecord(name, "Bob", "knows", 2.0),), ("a problem",)))


def test_records_survive_a_reopen(tmp_path: Path) -> None:
    store = KGStore(tmp_path / "kg")
    assert not (tmp_path / "kg").exists()  # opening writes nothing
    store.bind(MANIFEST)
    store.append(record("c1"))
    store.append(record("c2"))
    store.append(record("c1", "Ada Lovelace"))  # the latest record of a chunk wins
    again = KGStore(tmp_path / "kg")
    assert again.manifest == MANIFEST
    assert again.manifest.settings == {"max_gleanings": 0, "entity_types": ["person"]}
    assert [r.chunk_id for r in again.records()] == ["c2", "c1"]
    assert again.get("c1") == record("c1", "Ada Lovelace")
    assert "c2" in again and len(again) == 2
    lines = (tmp_path / "kg" / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {
        "chunk_id": "c1", "text_hash": text_hash("c1"),
        "entities": [{"name": "Ada", "type": "person", "description": "x"},
                     {"name": "Bob", "type": "person", "description": ""}],
        "relations": [{"source": "Ada", "target": "Bob", "description": "knows",
                       "strength": 2.0}],
        "problems": ["a problem"]}
    assert again.graph(["c1"]).entity("ada lovelace") is not None
    with pytest.raises(KeyError, match="'c9' has no record"):
        again.graph(["c9"])


def test_append_needs_a_manifest_first(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="bind"):
        KGStore(tmp_path).append(record("c1"))


def test_a_complete_last_line_without_newline_is_kept(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    store = KGStore(tmp_path)
    store.bind(MANIFEST)
    store.append(record("c1"))
    store.append(record("c2"))
    path = tmp_path / "chunks.jsonl"
    path.write_bytes(path.read_bytes()[:-1])
    with caplog.at_level(logging.WARNING):
        again = KGStore(tmp_path)
    assert len(again) == 2 and "had no newline; kept it" in caplog.text
    assert path.read_bytes().endswith(b"}\n")
    again.append(record("c3"))
    assert len(KGStore(tmp_path)) == 3


@pytest.mark.parametrize("line", [b"{not json}", b'{"chunk_id": "c9"}', b"\xff\xfe",
                                  b'{"chunk_id": "c1", "text_hash": "h", "entities": [], '
                                  b'"relations": [{"source": "A", "target": "B", '
                                  b'"description": "", "strength": 1}], "problems": []}'])
def test_a_corrupt_line_that_is_not_the_last_is_an_error(tmp_path: Path, line: bytes) -> None:
    store = KGStore(tmp_path)
    store.bind(MANIFEST)
    store.append(record("c1"))
    store.append(record("c2"))
    path = tmp_path / "chunks.jsonl"
    _first, second = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(line + b"\n" + second)
    with pytest.raises(KGStoreError, match=r"line 1, is corrupt .*Delete that line .*restart=True"):
        KGStore(tmp_path)
    assert len(KGStore(tmp_path, restart=True)) == 0
    assert not path.exists()


def test_chunks_without_a_manifest_or_a_bad_manifest_are_refused(tmp_path: Path) -> None:
    store = KGStore(tmp_path)
    store.bind(MANIFEST)
    store.append(record("c1"))
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"format": "conceptgraph-kg-store", "version": 99}', encoding="utf-8")
    with pytest.raises(KGStoreError, match=r"manifest.json is unreadable .*restart=True"):
        KGStore(tmp_path)
    manifest.unlink()
    with pytest.raises(KGStoreError, match=r"no manifest.json beside it.*restart=True"):
        KGStore(tmp_path)


def test_a_corrupt_ledger_says_what_to_do(tmp_path: Path) -> None:
    store = KGStore(tmp_path)
    assert store.load_ledger().to_dict() == {}
    (tmp_path / "ledger.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(KGStoreError, match="delete it to start the token count afresh"):
        store.load_ledger()


def test_a_file_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "kg").write_text("x", encoding="utf-8")
    with pytest.raises(KGStoreError, match="is a file"):
        KGStore(tmp_path / "kg")


# ------------------------------------------------------------------ resuming extract_kg
def test_a_crash_after_six_chunks_resumes_with_exactly_the_other_four(tmp_path: Path) -> None:
    ten = chunks(10)
    crashing = ScriptedChat([reply_for_chunk(i) for i in range(1, 7)]
                            + [RuntimeError("the process dies here")])
    with pytest.raises(RuntimeError, match="the process dies here"):
        extract_kg(ten, runner(crashing), KGStore(tmp_path / "resumed"))
    assert asked_chunks(crashing) == [1, 2, 3, 4, 5, 6, 7]
    after_crash = KGStore(tmp_path / "resumed")
    assert [r.chunk_id for r in after_crash.records()] == [f"c{i}" for i in range(1, 7)]
    assert after_crash.load_ledger()["extract"].calls == 6  # the spend was saved too

    fresh = ScriptedChat(by_chunk)
    resumed = extract_kg(ten, runner(fresh), KGStore(tmp_path / "resumed"))
    assert asked_chunks(fresh) == [7, 8, 9, 10]
    assert resumed.skipped_as_already_done == tuple(f"c{i}" for i in range(1, 7))
    assert resumed.done == ("c7", "c8", "c9", "c10") and resumed.failed == ()
    assert resumed.run_ledger["extract"].calls == 4

    whole = extract_kg(ten, runner(ScriptedChat(by_chunk), concurrency=4),
                       KGStore(tmp_path / "whole"))
    assert resumed.graph == whole.graph
    assert len(whole.graph) == 21 and len(whole.graph.relations) == 20
    shared = whole.graph.entity("shared person")
    assert shared is not None and shared.source_chunk_ids == tuple(f"c{i}" for i in range(1, 11))
    assert resumed.ledger.to_dict() == whole.ledger.to_dict()  # paid once, in two runs
    assert TokenLedger.load(tmp_path / "resumed" / "ledger.json").to_dict() == \
        whole.ledger.to_dict()

    nothing = ScriptedChat([])
    third = extract_kg(ten, runner(nothing), KGStore(tmp_path / "resumed"))
    assert nothing.calls == [] and len(third.skipped_as_already_done) == 10
    assert third.graph == whole.graph and third.ledger.to_dict() == whole.ledger.to_dict()


def test_a_torn_last_line_is_dropped_and_its_chunk_redone(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    extract_kg(chunks(3), runner(ScriptedChat(by_chunk)), KGStore(tmp_path))
    path = tmp_path / "chunks.jsonl"
    data = path.read_bytes()
    two_lines = data[: data.rindex(b"\n", 0, len(data) - 1) + 1]
    path.write_bytes(data[:-25])  # the process died writing chunk 3's line
    with caplog.at_level(logging.WARNING, logger="shared_core.kg.store"):
        store = KGStore(tmp_path)
    assert "dropped a torn last line" in caplog.text
    assert [r.chunk_id for r in store.records()] == ["c1", "c2"]
    assert path.read_bytes() == two_lines  # cut back, so the next line starts clean

    model = ScriptedChat(by_chunk)
    result = extract_kg(chunks(3), runner(model), store)
    assert asked_chunks(model) == [3]
    assert result.done == ("c3",) and result.skipped_as_already_done == ("c1", "c2")
    assert [r.chunk_id for r in KGStore(tmp_path).records()] == ["c1", "c2", "c3"]


@pytest.mark.parametrize(("name", "config", "differs"), [
    ("other-model", ExtractionConfig(), "model: 'scripted' (stored) vs 'other-model'"),
    ("scripted", ExtractionConfig(entity_types=("person",)), "prompt_hash: "),
    ("scripted", ExtractionConfig(max_gleanings=1), "max_gleanings: 0 (stored) vs 1"),
    ("scripted", ExtractionConfig(max_tokens=100), "max_tokens: 4096 (stored) vs 100"),
])
def test_another_setup_on_the_same_store_is_refused(
        tmp_path: Path, name: str, config: ExtractionConfig, differs: str) -> None:
    extract_kg(chunks(2), runner(ScriptedChat(by_chunk)), KGStore(tmp_path))
    other = ScriptedChat(by_chunk, name=name)
    with pytest.raises(KGStoreError,
                       match=f"{re.escape(differs)}.*restart=True .*another directory"):
        extract_kg(chunks(3), runner(other), KGStore(tmp_path), config=config)
    assert other.calls == []
    restarted = extract_kg(chunks(3), runner(other), KGStore(tmp_path, restart=True),
                           config=config)
    assert restarted.done == ("c1", "c2", "c3")
    assert restarted.ledger.to_dict() == restarted.run_ledger.to_dict()  # the old spend is gone


def test_batch_size_is_not_a_setting(tmp_path: Path) -> None:
    extract_kg(chunks(2), runner(ScriptedChat(by_chunk)), KGStore(tmp_path))
    model = ScriptedChat(by_chunk)
    extract_kg(chunks(3), runner(model), tmp_path, config=ExtractionConfig(batch_size=1))
    assert asked_chunks(model) == [3]


def test_a_changed_chunk_is_extracted_again(tmp_path: Path) -> None:
    extract_kg(chunks(3), runner(ScriptedChat(by_chunk)), KGStore(tmp_path))
    edited = [("c1", chunk_text(1)), ("c2", chunk_text(9)), ("c3", chunk_text(3))]
    model = ScriptedChat(by_chunk)
    result = extract_kg(edited, runner(model), KGStore(tmp_path))
    assert asked_chunks(model) == [9]
    assert result.done == ("c2",) and result.skipped_as_already_done == ("c1", "c3")
    assert result.graph.entity("Person9") is not None
    assert result.graph.entity("Person2") is None  # the stale record is superseded
    assert KGStore(tmp_path).get("c2").text_hash == text_hash(chunk_text(9))  # type: ignore[union-attr]
