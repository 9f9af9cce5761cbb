"""The KG store's lock between processes, with real processes: a second writer is refused
at once, a writer killed with SIGKILL leaves no stale lock, a reader beside a writer sees
only complete records and never writes.

The children are ``python -c`` processes (see :mod:`.processes`); nothing is mocked.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
from pathlib import Path

import pytest

from shared_core.kg import (
    KGStore,
    KGStoreLocked,
    extract_kg,
)
from tests.shared_core.kg.processes import HOLD, Child, readable
from tests.shared_core.kg.support import asked_chunks, by_chunk, chunks, runner
from tests.shared_core.llm.scripted import ScriptedChat

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the lock is fcntl.flock (POSIX)")

# runs a real extraction of 4 chunks; on chunk 3 it writes half a line, as a process
# killed mid-append leaves it, says "stuck" and hangs there, holding the lock
EXTRACT_AND_HANG = """
import sys, time
from pathlib import Path
from shared_core.kg import extract_kg
from tests.shared_core.kg.support import by_chunk, chunk_number, chunks, runner
from tests.shared_core.llm.scripted import ScriptedChat

directory = Path(sys.argv[1])

def answer(messages):
    if chunk_number(messages[1].content) == 3:
        with open(directory / "chunks.jsonl", "ab") as fh:
            fh.write(b'{"chunk_id": "c3", "entities": [{"na')
        print("stuck", flush=True)
        time.sleep(60)
    return by_chunk(messages)

extract_kg(chunks(4), runner(ScriptedChat(answer)), directory)
"""

# tries to write a store the parent holds; prints the error it gets
TRY_TO_WRITE = """
import sys
from shared_core.kg import KGStore, KGStoreLocked
try:
    KGStore(sys.argv[1], lock=True)
except KGStoreLocked as exc:
    print("refused:", exc, flush=True)
else:
    print("not refused", flush=True)
"""

# appends records c1..cN of SIZE-character descriptions through KGStore.append
APPEND = """
import sys
from shared_core.kg import ChunkRecord, EntityRecord, KGStore, ParsedExtraction, StoreManifest
directory, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with KGStore(directory, lock=True) as store:
    store.bind(StoreManifest("m", "p", {}))
    print("bound", flush=True)
    sys.stdin.readline()
    for i in range(1, n + 1):
        store.append(ChunkRecord(f"c{i}", "h", ParsedExtraction(
            (EntityRecord(f"E{i}", "person", str(i % 10) * size),))))
print("done", flush=True)
"""

# two records through the store, then a third line written in two halves, on cue
HALF_A_LINE = """
import json, sys
from pathlib import Path
from shared_core.kg import ChunkRecord, EntityRecord, KGStore, ParsedExtraction, StoreManifest

def record(i):
    return ChunkRecord(f"c{i}", "h", ParsedExtraction((EntityRecord(f"E{i}", "person", ""),)))

directory = Path(sys.argv[1])
with KGStore(directory, lock=True) as store:
    store.bind(StoreManifest("m", "p", {}))
    store.append(record(1))
    store.append(record(2))
    line = (json.dumps(record(3).to_dict(), sort_keys=True) + "\\n").encode()
    with open(directory / "chunks.jsonl", "ab", buffering=0) as fh:
        fh.write(line[:20])
        print("half", flush=True)
        sys.stdin.readline()
        fh.write(line[20:])
    print("whole", flush=True)
    sys.stdin.readline()
"""


def test_a_second_process_cannot_write_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    with Child(HOLD, str(tmp_path)) as holder:
        holder.expect("locked")
        pattern = (re.escape(str(tmp_path)) + r" is locked for writing: another process "
                   rf"\(pid {holder.pid} on [^)]*\) is extracting into it .*wait for it to "
                   r"finish, or use another directory")
        with pytest.raises(KGStoreLocked, match=pattern):
            KGStore(tmp_path, lock=True)
        model = ScriptedChat([])
        with pytest.raises(KGStoreLocked, match=pattern):
            extract_kg(chunks(2), runner(model), tmp_path)
        assert model.calls == []  # refused before anything was paid for
        assert not (tmp_path / "manifest.json").exists()
        assert len(KGStore(tmp_path)) == 0  # reading needs no lock

        holder.say()  # let go
        holder.expect("released")
        result = extract_kg(chunks(2), runner(ScriptedChat(by_chunk)), tmp_path)
        assert result.done == ("c1", "c2")


def test_the_lock_refuses_another_process_in_the_other_direction_too(tmp_path: Path) -> None:
    with KGStore(tmp_path, lock=True), Child(TRY_TO_WRITE, str(tmp_path)) as other:
        other.expect(f"refused: {tmp_path} is locked for writing: another process "
                     f"(pid {os.getpid()} on {os.uname().nodename}) is extracting into it "
                     "(conceptgraph extract or extract_kg): wait for it to finish, or use "
                     "another directory. Reading it needs no lock; the lock goes when its "
                     "holder closes the store or dies, even by kill -9")
    with Child(TRY_TO_WRITE, str(tmp_path)) as other:
        other.expect("not refused")  # closed with the with block


def test_a_writer_killed_with_sigkill_leaves_no_stale_lock_and_the_next_resumes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with Child(EXTRACT_AND_HANG, str(tmp_path)) as writer:
        writer.expect("stuck")
        with pytest.raises(KGStoreLocked, match=f"pid {writer.pid} "):
            KGStore(tmp_path, lock=True)
        torn = (tmp_path / "chunks.jsonl").read_bytes()
        assert not torn.endswith(b"\n")
        assert [r.chunk_id for r in KGStore(tmp_path).records()] == ["c1", "c2"]
        assert writer.kill() == -signal.SIGKILL
    assert (tmp_path / "writer.lock").exists()  # the file stays; its lock died with the writer

    model = ScriptedChat(by_chunk)
    with caplog.at_level(logging.WARNING, logger="shared_core.kg.store"):
        result = extract_kg(chunks(4), runner(model), tmp_path)
    assert "dropped a torn last line" in caplog.text
    assert asked_chunks(model) == [3, 4]  # what the killed run stored is not paid again
    assert result.skipped_as_already_done == ("c1", "c2") and result.done == ("c3", "c4")
    assert result.ledger["extract"].calls == 4  # the killed run booked its two calls
    lines = (tmp_path / "chunks.jsonl").read_bytes().splitlines()
    assert [json.loads(line)["chunk_id"] for line in lines] == ["c1", "c2", "c3", "c4"]


def test_a_reader_skips_a_line_being_written_and_leaves_it_alone(tmp_path: Path) -> None:
    path = tmp_path / "chunks.jsonl"
    with Child(HALF_A_LINE, str(tmp_path)) as writer:
        writer.expect("half")
        half = path.read_bytes()
        reader = KGStore(tmp_path)
        assert [r.chunk_id for r in reader.records()] == ["c1", "c2"]
        assert path.read_bytes() == half  # not cut back under the writer's feet
        writer.say()
        writer.expect("whole")
        assert [r.chunk_id for r in KGStore(tmp_path).records()] == ["c1", "c2", "c3"]
        writer.say()
    assert len(KGStore(tmp_path)) == 3
    assert len(path.read_bytes().splitlines()) == 3


def test_a_reader_beside_an_appending_writer_sees_only_complete_records(
        tmp_path: Path) -> None:
    # Linux rarely lets a read see half of one write() (the test above makes that case
    # happen for sure); this one reads over and over while real appends land
    n, size = 40, 100_000
    path = tmp_path / "chunks.jsonl"
    seen: list[int] = []
    with Child(APPEND, str(tmp_path), str(n), str(size)) as writer:
        writer.expect("bound")
        writer.say()
        assert writer.proc.stdout is not None
        done = False
        last_size = 0
        while not done:
            done = readable(writer.proc.stdout, 0)
            store = KGStore(tmp_path)  # raises on any unreadable complete line
            ids = [r.chunk_id for r in store.records()]
            assert ids == [f"c{i}" for i in range(1, len(ids) + 1)]
            for i, r in enumerate(store.records(), 1):
                assert r.extraction.entities[0].description == str(i % 10) * size
            assert not seen or len(ids) >= seen[-1]
            now = path.stat().st_size if path.exists() else 0
            assert now >= last_size  # no reader ever cut the file
            last_size = now
            seen.append(len(ids))
        writer.expect("done")
    assert seen[-1] == n and len(set(seen)) > 2, seen  # it read while the writer appended
    assert len(path.read_bytes().splitlines()) == n
