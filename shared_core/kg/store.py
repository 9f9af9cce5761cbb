"""KG extraction results on disk, next to an index, so no chunk is ever paid for twice.

Layout (JSON and JSON Lines only; nothing is unpickled or executed)::

    <index_dir>/kg/
        manifest.json   format version, model name, prompt hash, settings
        chunks.jsonl    one line per extracted chunk, appended, flushed and fsync'd
        ledger.json     every run's tokens per stage (TokenLedger.save: atomic)
        writer.lock     flock'd by the one process writing the store (holds its pid)

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

One process writes a store at a time. A writer holds an exclusive
``fcntl.flock`` on ``writer.lock`` from its first write (or ``lock=True``,
:meth:`KGStore.lock`, ``restart=True``) until :meth:`KGStore.close`, the end of
a ``with`` block, or its death: the kernel drops a dead process's flock, so a
``kill -9`` leaves no stale lock (the lock file stays, empty of meaning unless
locked). A second writer, in this process or another, gets
:class:`KGStoreLocked` at once rather than waiting hours or interleaving lines.
Every repair (dropping a torn last line, ending a complete one) happens under
the lock, right after taking it, from a fresh read of the files.

Readers take no lock, so ``conceptgraph query --kg`` works while an extraction
runs: appends are whole, fsync'd lines, so everything up to the last newline is
complete records; a reader ignores what follows it (a line being written, or
one a killed writer left) and never writes. The manifest and the ledger are
replaced atomically. Without ``fcntl`` (Windows) nothing is locked: taking the
lock logs a warning and writing goes on, as it did before stores had locks.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX (Windows): stores go unlocked, with a warning
    fcntl = None  # type: ignore[assignment]

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
LOCK_FILE = "writer.lock"

_RESTART_HINT = "pass restart=True to KGStore to discard it, or use another directory"


class KGStoreError(ValueError):
    """A KG store that cannot be used as it is; the message says what to do."""


class KGStoreLocked(KGStoreError):
    """Another writer holds the store's lock: two writers would interleave their lines."""


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
        return build(cls, "manifest", top["model"], top["prompt_hash"],
                     _legacy_settings(top["settings"]))

    def differences(self, other: StoreManifest) -> list[str]:
        """What differs, as ``"name: stored vs this run"`` lines."""
        out = [f"{name}: {getattr(self, name)!r} (stored) vs {getattr(other, name)!r} "
               "(this run)" for name in ("model", "prompt_hash")
               if getattr(self, name) != getattr(other, name)]
        for name in sorted(set(self.settings) | set(other.settings)):
            if self.settings.get(name, _UNSET) != other.settings.get(name, _UNSET):
                mine, theirs = (_shown(m.settings, name) for m in (self, other))
                out.append(f"{name}: {mine} (stored) vs {theirs} (this run)")
        return out


_UNSET = object()


def _shown(settings: Mapping[str, Any], name: str) -> str:
    return repr(settings[name]) if name in settings else "not set"


def _legacy_settings(settings: object) -> object:
    """A manifest's settings as this version writes them.

    Stores made before gleaning modes existed glean in the only mode there was,
    "trial", and do not say so: with ``max_gleanings`` above 0 and no
    ``gleaning_mode`` they are read as trial, so they still resume in trial
    mode and refuse base mode by name. (Without gleaning no mode is recorded.)
    """
    if isinstance(settings, Mapping) and "gleaning_mode" not in settings:
        gleanings = settings.get("max_gleanings")
        if isinstance(gleanings, int) and not isinstance(gleanings, bool) and gleanings > 0:
            return {**settings, "gleaning_mode": "trial"}
    return settings


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

    Opening to read creates nothing and locks nothing (the directory is made by
    the first write). Writing takes the store's lock (see the module
    docstring): ``lock=True`` takes it at once, before reading, so a second
    writer hears :class:`KGStoreLocked` before anything is asked of it; else
    :meth:`bind`, :meth:`append` or :meth:`save_ledger` take it when first
    called. :meth:`close`, or leaving a ``with`` block, lets it go.
    ``restart=True`` discards earlier results, which is a write: it locks first.

    >>> store = KGStore("my_index/kg")
    >>> len(store), store.manifest, store.locked
    (0, None, False)
    """

    def __init__(self, directory: str | Path, *, restart: bool = False,
                 lock: bool = False) -> None:
        self._dir = Path(directory)
        if self._dir.exists() and not self._dir.is_dir():
            raise KGStoreError(f"{self._dir} is a file, not a directory for KG results")
        self._appending = threading.Lock()
        self._records: dict[str, ChunkRecord] = {}
        self._manifest: StoreManifest | None = None
        self._fd: int | None = None  # the lock file's descriptor, while this store writes
        self._held = False  # writing: locked (or unlockable, without fcntl)
        if restart or lock:
            self._acquire()
        try:
            if restart:
                # the manifest goes last: a reader meanwhile never sees chunks without one
                for name in (CHUNKS_FILE, LEDGER_FILE, LEDGER_FILE + ".tmp",
                             MANIFEST_FILE + ".tmp", MANIFEST_FILE):
                    (self._dir / name).unlink(missing_ok=True)
            self._read()
        except BaseException:
            self.close()
            raise

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
    def lock_path(self) -> Path:
        return self._dir / LOCK_FILE

    @property
    def manifest(self) -> StoreManifest | None:
        return self._manifest

    @property
    def locked(self) -> bool:
        """Whether this object is the store's writer (holds its lock) now."""
        return self._held

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._records

    def __repr__(self) -> str:
        return f"KGStore({str(self._dir)!r}, {len(self)} chunks)"

    def __enter__(self) -> KGStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        # a store dropped without close() must not keep its lock until the process ends
        if getattr(self, "_fd", None) is not None:
            with contextlib.suppress(Exception):  # interpreter shutdown
                self.close()

    # ------------------------------------------------------------------ the lock
    def lock(self) -> None:
        """Become the store's one writer, or raise :class:`KGStoreLocked` at once.

        Then the files are read again (another writer may have added to them
        since this object read them) and a torn last line is repaired. Calling
        it while holding the lock does nothing.
        """
        if self._held:
            return
        self._acquire()
        try:
            self._read()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Let the lock go (if held); the records stay readable, and a later write relocks."""
        fd, self._fd = self._fd, None
        self._held = False
        if fd is None:
            return
        with contextlib.suppress(OSError):  # the lock goes with the descriptor regardless
            os.ftruncate(fd, 0)  # no pid left behind for the next writer's messages
        os.close(fd)  # the flock belongs to this open file: closing it unlocks

    def _acquire(self) -> None:
        if fcntl is None:
            logger.warning("%s: not locked, since file locking needs fcntl (POSIX) and this "
                           "system has none; nothing stops two processes from writing this "
                           "store at once, so run one extraction per directory", self._dir)
            self._held = True
            return
        self._dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise KGStoreLocked(_locked_message(self._dir, holder)) from None
        except OSError as exc:
            os.close(fd)
            raise KGStoreError(f"cannot lock {self.lock_path} ({exc}); the file system may "
                               "not support locks: put the KG store on a local disk") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {platform.node()}\n".encode())
        self._fd = fd
        self._held = True

    def _writer(self) -> None:
        """Lock before a write, if not yet; the files must still be the setup bound."""
        if self._held:
            return
        bound = self._manifest
        self.lock()
        if bound is not None and self._manifest != bound:
            self.close()
            raise KGStoreError(f"{self._dir} was changed by another process since this store "
                               "was bound (its manifest differs now); open it again")

    # ------------------------------------------------------------------ reading
    def _read(self) -> None:
        """The manifest and the records as the files hold them now (repairing when locked)."""
        self._manifest = None
        self._records = {}
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
            if not self._held:  # a writer may be writing that line this very moment
                logger.info("%s: ignored an incomplete last line (%d bytes): a write in "
                            "progress, or one a stopped run left (the next writer drops it)",
                            path, len(tail))
                return
            logger.warning("%s: dropped a torn last line (%d bytes), left by a run that "
                           "stopped mid-write; its chunk will be extracted again", path,
                           len(tail))
            with open(path, "r+b") as fh:
                fh.truncate(complete)
                fh.flush()
                os.fsync(fh.fileno())
            return
        if self._held:
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

    # ------------------------------------------------------------------ writing
    def bind(self, manifest: StoreManifest) -> None:
        """Record what produces this store's results, or check it is what produced them.

        Takes the lock first (if not yet held), so the check is against the files
        as they are, not as they were when this object read them.
        """
        if not isinstance(manifest, StoreManifest):
            raise TypeError(f"manifest must be a StoreManifest, got {type(manifest).__name__}")
        self._writer()
        if self._manifest is not None:
            diff = self._manifest.differences(manifest)
            if diff:
                raise KGStoreError(
                    f"{self._dir} holds KG results of another setup ({'; '.join(diff)}); "
                    "extracting on would mix two setups in one graph: run with the stored "
                    f"setup, or {_RESTART_HINT}")
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
        with self._appending:
            self._writer()
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
        self._writer()
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


def _holder(fd: int) -> str:
    """What the lock file says of its holder ("pid host"), or "" if it says nothing yet."""
    try:
        return os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
    except OSError:  # pragma: no cover - the message just goes without the pid
        return ""


def _locked_message(directory: Path, holder: str) -> str:
    pid, _, host = holder.partition(" ")
    if pid == str(os.getpid()) and host == platform.node():
        who = (f"another KGStore object in this process (pid {pid}) is writing it: close() "
               "that one first, or write through it")
    else:
        by = f" (pid {pid}{' on ' + host if host else ''})" if pid else ""
        who = (f"another process{by} is extracting into it (conceptgraph extract or "
               "extract_kg): wait for it to finish, or use another directory")
    return (f"{directory} is locked for writing: {who}. Reading it needs no lock; the lock "
            "goes when its holder closes the store or dies, even by kill -9")
