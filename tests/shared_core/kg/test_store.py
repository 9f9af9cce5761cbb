"""KGStore: a crash costs nothing already paid, a torn line is redone, a mismatch is refused.

(The lock between processes is tested with real processes in ``test_store_lock.py``.)
"""

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
    KGStoreLocked,
    ParsedExtraction,
    RelationRecord,
    StoreManifest,
    extract_kg,
    prompt_hash,
    text_hash,
)
from shared_core.kg import store as store_module
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
    assert not store.locked
    store.bind(MANIFEST)
    assert store.locked  # the first write took the lock
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
    with KGStore(tmp_path) as store:
        store.bind(MANIFEST)
        store.append(record("c1"))
        store.append(record("c2"))
    assert not store.locked
    path = tmp_path / "chunks.jsonl"
    path.write_bytes(path.read_bytes()[:-1])
    cut = path.read_bytes()
    with caplog.at_level(logging.WARNING):
        reader = KGStore(tmp_path)
    assert len(reader) == 2 and caplog.text == ""
    assert path.read_bytes() == cut  # a reader never writes
    with caplog.at_level(logging.WARNING):
        again = KGStore(tmp_path, lock=True)
    assert len(again) == 2 and "had no newline; kept it" in caplog.text
    assert path.read_bytes() == cut + b"\n"
    again.append(record("c3"))
    again.close()
    assert len(KGStore(tmp_path)) == 3


@pytest.mark.parametrize("line", [b"{not json}", b'{"chunk_id": "c9"}', b"\xff\xfe",
                                  b'{"chunk_id": "c1", "text_hash": "h", "entities": [], '
                                  b'"relations": [{"source": "A", "target": "B", '
                                  b'"description": "", "strength": 1}], "problems": []}'])
def test_a_corrupt_line_that_is_not_the_last_is_an_error(tmp_path: Path, line: bytes) -> None:
    with KGStore(tmp_path) as store:
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
    with caplog.at_level(logging.INFO, logger="shared_core.kg.store"):
        store = KGStore(tmp_path)
    # a reader cannot tell a dead writer's line from a live one's: it skips it, untouched
    assert "ignored an incomplete last line" in caplog.text
    assert [r.chunk_id for r in store.records()] == ["c1", "c2"]
    assert path.read_bytes() == data[:-25]

    caplog.clear()
    model = ScriptedChat(by_chunk)
    with caplog.at_level(logging.WARNING, logger="shared_core.kg.store"):
        result = extract_kg(chunks(3), runner(model), store)
    assert "dropped a torn last line" in caplog.text  # the writer repairs, under its lock
    assert asked_chunks(model) == [3]
    assert result.done == ("c3",) and result.skipped_as_already_done == ("c1", "c2")
    assert [r.chunk_id for r in KGStore(tmp_path).records()] == ["c1", "c2", "c3"]
    assert path.read_bytes().startswith(two_lines)  # cut back, so the next line started clean


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


# ------------------------------------------------------------------ gleaning modes
@pytest.mark.parametrize(("stored", "run"), [("base", "trial"), ("trial", "base")])
def test_a_store_gleaned_in_one_mode_refuses_the_other(tmp_path: Path, stored: str,
                                                       run: str) -> None:
    def glean(mode: str) -> ExtractionConfig:
        return ExtractionConfig(max_gleanings=1, gleaning_mode=mode)  # type: ignore[arg-type]

    gleaned = "NO" if stored == "trial" else "<|COMPLETE|>"  # trial judges, base asks for more
    model = ScriptedChat([reply_for_chunk(1), gleaned])
    extract_kg(chunks(1), runner(model), tmp_path, config=glean(stored))
    assert len(model.calls) == 2
    assert KGStore(tmp_path).manifest.settings["gleaning_mode"] == stored  # type: ignore[union-attr]
    other = ScriptedChat(by_chunk)
    with pytest.raises(KGStoreError, match=f"gleaning_mode: '{stored}' \\(stored\\) vs '{run}' "
                       "\\(this run\\).*run with the stored setup, or pass restart=True"):
        extract_kg(chunks(2), runner(other), tmp_path, config=glean(run))
    assert other.calls == []
    assert len(KGStore(tmp_path)) == 1  # nothing mixed in


def test_without_gleaning_a_store_records_no_mode_and_resumes_under_either(
        tmp_path: Path) -> None:
    extract_kg(chunks(2), runner(ScriptedChat(by_chunk)), tmp_path,
               config=ExtractionConfig(gleaning_mode="base"))
    manifest = KGStore(tmp_path).manifest
    assert manifest is not None and "gleaning_mode" not in manifest.settings
    assert manifest.prompt_hash == prompt_hash()  # the hash of stores from before modes
    model = ScriptedChat(by_chunk)
    result = extract_kg(chunks(3), runner(model), tmp_path,
                        config=ExtractionConfig(gleaning_mode="trial"))
    assert asked_chunks(model) == [3] and result.skipped_as_already_done == ("c1", "c2")


def test_a_gleaning_store_from_before_modes_resumes_as_trial(tmp_path: Path) -> None:
    # what extract_kg wrote before gleaning modes existed: no gleaning_mode in the settings
    old = ExtractionConfig(max_gleanings=2, gleaning_mode="trial").settings(0.0)
    del old["gleaning_mode"]
    with KGStore(tmp_path) as store:
        store.bind(StoreManifest("scripted", prompt_hash(), old))
        store.append(ChunkRecord("c1", text_hash(chunk_text(1)), ParsedExtraction(
            (EntityRecord("Person1", "person", ""),))))
    assert "gleaning_mode" not in json.loads((tmp_path / "manifest.json").read_text())["settings"]
    assert KGStore(tmp_path).manifest.settings["gleaning_mode"] == "trial"  # type: ignore[union-attr]

    with pytest.raises(KGStoreError, match="gleaning_mode: 'trial' \\(stored\\) vs 'base'"):
        extract_kg(chunks(2), runner(ScriptedChat([])), tmp_path,
                   config=ExtractionConfig(max_gleanings=2))
    model = ScriptedChat([reply_for_chunk(2), "NO"])
    result = extract_kg(chunks(2), runner(model), tmp_path,
                        config=ExtractionConfig(max_gleanings=2, gleaning_mode="trial"))
    assert result.skipped_as_already_done == ("c1",) and result.done == ("c2",)
    assert len(model.calls) == 2


# ------------------------------------------------------------------ the lock, in one process
def test_a_second_writer_in_the_same_process_is_refused(tmp_path: Path) -> None:
    first = KGStore(tmp_path, lock=True)
    assert first.locked and (tmp_path / "writer.lock").exists()
    with pytest.raises(KGStoreLocked, match=re.escape(str(tmp_path)) + " is locked for "
                       "writing: another KGStore object in this process .*close\\(\\) that one"):
        KGStore(tmp_path, lock=True)
    second = KGStore(tmp_path)  # reading needs no lock
    with pytest.raises(KGStoreLocked):
        second.bind(MANIFEST)
    with pytest.raises(KGStoreLocked):
        KGStore(tmp_path, restart=True)  # discarding results is a write
    model = ScriptedChat([])
    with pytest.raises(KGStoreLocked):
        extract_kg(chunks(1), runner(model), second)
    assert model.calls == [] and not second.locked
    assert isinstance(KGStoreLocked("x"), KGStoreError)
    first.close()
    first.close()  # twice is harmless
    assert not first.locked
    second.bind(MANIFEST)
    assert second.locked
    second.close()


def test_extract_kg_keeps_a_lock_its_caller_holds_and_lets_go_one_it_took(
        tmp_path: Path) -> None:
    store = KGStore(tmp_path)
    extract_kg(chunks(1), runner(ScriptedChat(by_chunk)), store)
    assert not store.locked
    with KGStore(tmp_path, lock=True) as held:
        extract_kg(chunks(2), runner(ScriptedChat(by_chunk)), held)
        assert held.locked
        with pytest.raises(KGStoreLocked):
            KGStore(tmp_path, lock=True)
    assert not held.locked
    KGStore(tmp_path, lock=True).close()


def test_taking_the_lock_reads_what_another_writer_added_meanwhile(tmp_path: Path) -> None:
    early = KGStore(tmp_path)  # opened to read, before the other run
    extract_kg(chunks(2), runner(ScriptedChat(by_chunk)), tmp_path)
    assert len(early) == 0
    model = ScriptedChat(by_chunk)
    result = extract_kg(chunks(3), runner(model), early)
    assert asked_chunks(model) == [3]  # c1 and c2 were not paid for again
    assert result.skipped_as_already_done == ("c1", "c2")


def test_a_store_restarted_by_another_writer_is_not_appended_to(tmp_path: Path) -> None:
    store = KGStore(tmp_path)
    store.bind(MANIFEST)
    store.close()
    other = StoreManifest("m2", "p", {"max_gleanings": 0})
    with KGStore(tmp_path, restart=True) as restarted:
        restarted.bind(other)
    with pytest.raises(KGStoreError, match="changed by another process since this store was "
                       "bound"):
        store.append(record("c1"))
    assert not store.locked and len(KGStore(tmp_path)) == 0


def test_without_fcntl_writing_goes_on_unlocked_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(store_module, "fcntl", None)  # what Windows has
    with caplog.at_level(logging.WARNING, logger="shared_core.kg.store"):
        result = extract_kg(chunks(2), runner(ScriptedChat(by_chunk)), tmp_path)
    assert result.done == ("c1", "c2")
    assert "not locked, since file locking needs fcntl (POSIX)" in caplog.text
    assert "run one extraction per directory" in caplog.text
    assert not (tmp_path / "writer.lock").exists()
    a, b = KGStore(tmp_path, lock=True), KGStore(tmp_path, lock=True)  # nothing stops them
    assert a.locked and b.locked
    a.close()
    b.close()
