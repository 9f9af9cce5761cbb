"""KG extraction results on disk, next to an index, so no chunk is ever paid for twice.

Layout (JSON and JSON Lines only; nothing is unpickled or executed)::

    <index_dir>/kg/
        manifest.json   format version, model name, prompt hash, settings
        chunks.jsonl    one line per extracted chunk, appended, flushed and fsync'd
        ledger.json     every run's tokens per stage (TokenLedger.save: atomic)

A line holds the chunk id, a hash of the chunk's text, and the chunk's merged
extraction (entities, relations, parser problems). Reopening reads them back:
a chunk already recorded with the same text hash is done. A later line for the
same chunk (its text changed, so it was extracted again) replaces the earlier.

Faults, and what happens:

- the last line has no newline (the process died mid-write): it is dropped with
  a warning and its chunk is extracted again; if it happens to be a complete,
  valid record, it is kept and its newline written;
- any other line is unreadable: :class:`KGStoreError` (the file was edited or
  damaged; nothing guesses which chunks it held);
- the manifest differs from this run's (model, prompts or settings):
  :class:`KGStoreError`, since one graph from two setups is not what anyone
  asked for. ``KGStore(path, restart=True)`` discards the old results.

One process writes a store at a time; nothing here locks it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..llm.ledger import TokenLedger
from .checks import as_list, build, check_text, fields
from .graph import KnowledgeGraph
from .parse import EntityRecord, ParsedExtraction, RelationRecord

logger = logging.getLogger(__name__)

FORMAT = "conceptgraph-kg-store"
VERSION = 1
MANIFEST_FILE = "manifest.json"
CHUNKS_FILE = "chunks.jsonl"
LEDGER_FILE = "ledger.json"

_RESTART_HINT = "pass restart=True to KGStore to discard it, or use another directory"


class KGStoreError(ValueError):
    """A KG store that cannot be used as it is; the message says what to do."""


def text_hash(text: str) -> str:
    """The SHA-256 of a chunk's text: a changed chunk is extracted again."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json_native(value: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as JSON gives them back (tuples become lists), so comparisons are fair."""
    out = json.loads(json.dumps(dict(value), sort_keys=True, allow_nan=False))
    if not isinstance(out, dict):  # pragma: no cover - a dict dumps to an object
        raise TypeError("settings must be a mapping")
    return out


@dataclass(frozen=True)
class StoreManifest:
    """What produced a store's results: they mix with a run's only if all of it matches."""

    model: str
    prompt_hash: str
    settings: Mapping[str, Any]

    def __post_init__(self) -> None:
        check_text(self.model, "the manifest's model")
        check_text(self.prompt_hash, "the manifest's prompt_hash")
        if not isinstance(self.settings, Mapping):
            raise ValueError("the manifest's settings must be an object")
        object.__setattr__(self, "settings", _json_native(self.settings))

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "model": self.model,
                "prompt_hash": self.prompt_hash, "settings": dict(self.settings)}

    @classmethod
    def from_dict(cls, data: object) -> StoreManifest:
        top = fields(data, "manifest", ("format", "version", "model", "prompt_hash",
                                        "settings"))
        if top["format"] != FORMAT:
            raise ValueError(f"manifest: format is {top['format']!r}, not {FORMAT!r}")
        if top["version"] != VERSION:
            raise ValueError(f"manifest: format version {top['version']!r}; this conceptgraph "
                             f"reads version {VERSION}")
        return build(cls, "manifest", top["model"], top["prompt_hash"], top["settings"])

    def differences(self, other: StoreManifest) -> list[str]:
        """What differs, as ``"name: stored vs this run"`` lines."""
        out = [f"{name}: {getattr(self, name)!r} (stored) vs {getattr(other, name)!r} "
               "(this run)" for name in ("model", "prompt_hash")
               if getattr(self, name) != getattr(other, name)]
        for name in sorted(set(self.settings) | set(other.settings)):
            mine, theirs = self.settings.get(name), other.settings.get(name)
            if mine != theirs:
                out.append(f"{name}: {mine!r} (stored) vs {theirs!r} (this run)")
        return out


@dataclass(frozen=True)
class ChunkRecord:
    """One extracted chunk as stored: its id, its text's hash, what the model said."""

    chunk_id: str
    text_hash: str
    extraction: ParsedExtraction

    def __post_init__(self) -> None:
        check_text(self.chunk_id, "a record's chunk_id")
        check_text(self.text_hash, "a record's text_hash")
        if not isinstance(self.extraction, ParsedExtraction):
            raise TypeError("a record's extraction must be a ParsedExtraction")
        missing = self.extraction.undeclared()
        if missing:
            raise ValueError(f"chunk {self.chunk_id!r}: relation endpoint {missing[0]!r} is "
                             "not among its entities")

    def to_dict(self) -> dict[str, Any]:
        x = self.extraction
        return {
            "chunk_id": self.chunk_id,
            "text_hash": self.text_hash,
            "entities": [{"name": e.name, "type": e.type, "description": e.description}
                         for e in x.entities],
            "relations": [{"source": r.source, "target": r.target,
                           "description": r.description, "strength": r.strength}
                          for r in x.relations],
            "problems": list(x.problems),
        }

    @classmethod
    def from_dict(cls, data: object) -> ChunkRecord:
        top = fields(data, "record", ("chunk_id", "text_hash", "entities", "relations",
                                      "problems"))
        entities = []
        for i, item in enumerate(as_list(top["entities"], "entities")):
            e = fields(item, f"entities[{i}]", ("name", "type", "description"))
            entities.append(build(EntityRecord, f"entities[{i}]", e["name"], e["type"],
                                  e["description"]))
        relations = []
        for i, item in enumerate(as_list(top["relations"], "relations")):
            r = fields(item, f"relations[{i}]", ("source", "target", "description", "strength"))
            relations.append(build(RelationRecord, f"relations[{i}]", r["source"], r["target"],
                                   r["description"], r["strength"]))
        problems = as_list(top["problems"], "problems")
        for i, p in enumerate(problems):
            check_text(p, f"problems[{i}]", empty=True)
        extraction = ParsedExtraction(tuple(entities), tuple(relations), tuple(problems))
        return build(cls, "record", top["chunk_id"], top["text_hash"], extraction)


def _record_from_line(line: bytes) -> ChunkRecord:
    return ChunkRecord.from_dict(json.loads(line.decode("utf-8")))


def _fsync_dir(path: Path) -> None:
    """Make a new or renamed file's directory entry durable (a no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows cannot open a directory
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class KGStore:
    """The extraction results in ``directory``: read at once, appended chunk by chunk.

    Opening creates nothing: the directory is made by the first write.

    >>> store = KGStore("my_index/kg")
    >>> len(store), store.manifest
    (0, None)
    """

    def __init__(self, directory: str | Path, *, restart: bool = False) -> None:
        self._dir = Path(directory)
        if self._dir.exists() and not self._dir.is_dir():
            raise KGStoreError(f"{self._dir} is a file, not a directory for KG results")
        self._lock = threading.Lock()
        self._records: dict[str, ChunkRecord] = {}
        self._manifest: StoreManifest | None = None
        if restart:
            for name in (MANIFEST_FILE, CHUNKS_FILE, LEDGER_FILE, LEDGER_FILE + ".tmp",
                         MANIFEST_FILE + ".tmp"):
                (self._dir / name).unlink(missing_ok=True)
        manifest_path = self._dir / MANIFEST_FILE
        if manifest_path.exists():
            try:
                self._manifest = StoreManifest.from_dict(
                    json.loads(manifest_path.read_text(encoding="utf-8")))
            except ValueError as exc:
                raise KGStoreError(f"{manifest_path} is unreadable ({exc}); "
                                   f"{_RESTART_HINT}") from None
        elif self.chunks_path.exists():
            raise KGStoreError(f"{self.chunks_path} has no {MANIFEST_FILE} beside it, so "
                               f"nothing says how its chunks were extracted; {_RESTART_HINT}")
        self._load_chunks()

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def chunks_path(self) -> Path:
        return self._dir / CHUNKS_FILE

    @property
    def ledger_path(self) -> Path:
        return self._dir / LEDGER_FILE

    @property
    def manifest(self) -> StoreManifest | None:
        return self._manifest

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._records

    def __repr__(self) -> str:
        return f"KGStore({str(self._dir)!r}, {len(self)} chunks)"

    def _load_chunks(self) -> None:
        path = self.chunks_path
        if not path.exists():
            return
        data = path.read_bytes()
        complete = data.rfind(b"\n") + 1
        for number, line in enumerate(data[:complete].split(b"\n")[:-1], 1):
            if not line.strip():
                continue
            try:
                record = _record_from_line(line)
            except ValueError as exc:
                raise KGStoreError(
                    f"{path}, line {number}, is corrupt ({exc}). It is not the last line, so "
                    "it is no interrupted write: the file was edited or damaged. Delete that "
                    "line to extract its chunk again, or pass restart=True to KGStore to "
                    "start over") from None
            self._keep(record)
        tail = data[complete:]
        if not tail:
            return
        try:
            record = _record_from_line(tail)
        except ValueError:
            logger.warning("%s: dropped a torn last line (%d bytes), left by a run that "
                           "stopped mid-write; its chunk will be extracted again", path,
                           len(tail))
            with open(path, "r+b") as fh:
                fh.truncate(complete)
                fh.flush()
                os.fsync(fh.fileno())
            return
        logger.warning("%s: the last line (chunk %r) was complete but had no newline; "
                       "kept it", path, record.chunk_id)
        self._write(b"\n")
        self._keep(record)

    def _keep(self, record: ChunkRecord) -> None:
        self._records.pop(record.chunk_id, None)  # the latest line wins, and moves last
        self._records[record.chunk_id] = record

    def _write(self, data: bytes) -> None:
        new = not self.chunks_path.exists()
        with open(self.chunks_path, "ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if new:
            _fsync_dir(self._dir)

    def bind(self, manifest: StoreManifest) -> None:
        """Record what produces this store's results, or check it is what produced them."""
        if not isinstance(manifest, StoreManifest):
            raise TypeError(f"manifest must be a StoreManifest, got {type(manifest).__name__}")
        if self._manifest is not None:
            diff = self._manifest.differences(manifest)
            if diff:
                raise KGStoreError(
                    f"{self._dir} holds KG results of another setup ({'; '.join(diff)}); "
                    f"extracting on would mix two setups in one graph: {_RESTART_HINT}")
            return
        self._dir.mkdir(parents=True, exist_ok=True)
        path = self._dir / MANIFEST_FILE
        tmp = path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(manifest.to_dict(), fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
        _fsync_dir(self._dir)
        self._manifest = manifest

    def get(self, chunk_id: str) -> ChunkRecord | None:
        return self._records.get(chunk_id)

    def records(self) -> tuple[ChunkRecord, ...]:
        """The current record of every chunk, the latest written last."""
        return tuple(self._records.values())

    def append(self, record: ChunkRecord) -> None:
        """Write one chunk's record durably (flushed and fsync'd) before it counts as done."""
        if self._manifest is None:
            raise RuntimeError("bind() the store to a manifest before appending records")
        if not isinstance(record, ChunkRecord):
            raise TypeError(f"record must be a ChunkRecord, got {type(record).__name__}")
        line = json.dumps(record.to_dict(), ensure_ascii=False, sort_keys=True,
                          allow_nan=False) + "\n"
        with self._lock:
            self._write(line.encode("utf-8"))
            self._keep(record)

    def load_ledger(self) -> TokenLedger:
        """The tokens earlier runs spent on this store (an empty ledger before the first)."""
        if not self.ledger_path.exists():
            return TokenLedger()
        try:
            return TokenLedger.load(self.ledger_path)
        except ValueError as exc:
            raise KGStoreError(f"{self.ledger_path} is unreadable ({exc}); delete it to "
                               "start the token count afresh (the results stay)") from None

    def save_ledger(self, ledger: TokenLedger) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        ledger.save(self.ledger_path)

    def graph(self, chunk_ids: Iterable[str] | None = None) -> KnowledgeGraph:
        """The graph of these chunks' records (all, by default), built in the order given."""
        graph = KnowledgeGraph()
        for chunk_id in self._records if chunk_ids is None else chunk_ids:
            record = self._records.get(chunk_id)
            if record is None:
                raise KeyError(f"chunk {chunk_id!r} has no record in {self._dir}")
            graph.add(record.chunk_id, record.extraction)
        return graph
