"""Reading a corpus from disk into chunk records, for the CLI and the examples.

Accepted: a ``.jsonl`` file with a ``text`` field per line (``id`` and ``title``
optional, other fields kept as metadata), a ``.txt``/``.md`` file, or a
directory of such files. Optionally re-chunked into token windows (the papers'
1200-token chunks with 100-token overlap).

Files must be UTF-8, and no string in them may hold a lone surrogate or a NUL
(JSON escapes can smuggle both in). Anything that would be lost or changed on
the way into an index (a non-string title, a null id, such a character, the same
id in two files) is an error naming the file and line, never a silent fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .text.hygiene import invalid_character
from .text.tokens import chunk_by_tokens

TEXT_SUFFIXES = {".txt", ".md"}
T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


def read_corpus(path: str | Path) -> list[Record]:
    """Records from a JSONL file, a text file or a directory of text files.

    Ids must be unique across the whole corpus: a duplicate is an error naming
    both places, since one record would otherwise shadow the other in the index.
    """
    return list(iter_corpus(path))


def iter_corpus(path: str | Path) -> Iterator[Record]:
    """:func:`read_corpus` one record at a time, for corpora larger than memory.

    Files are read lazily, line by line for JSONL; an error names ``file:line``
    when the stream reaches it. Only the ids seen so far are held.
    """
    first_seen: dict[str, str] = {}
    for file in _corpus_files(path):
        for record, where in _read_file(file):
            if record.id in first_seen:
                raise ValueError(f"{where}: duplicate id {record.id!r} "
                                 f"(first at {first_seen[record.id]})")
            first_seen[record.id] = where
            yield record


def count_records(path: str | Path) -> int:
    """How many records :func:`iter_corpus` will give, from one quick pass over the bytes
    (a JSONL file's non-blank lines; one per text file), for a progress bar's ETA.
    Nothing is parsed: a bad line is counted here and reported by the reading."""
    count = 0
    for file in _corpus_files(path):
        if file.suffix != ".jsonl":
            count += 1
            continue
        with file.open("rb") as fh:
            count += sum(1 for raw in fh if raw.strip())
    return count


class CountedStream(Iterable[T]):
    """An iterable that knows how many items it gives (``__length_hint__``), so that
    ``ConceptGraphIndex.add`` can show an ETA for a stream it reads once."""

    def __init__(self, items: Iterable[T], count: int) -> None:
        self._items, self._count = items, count

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __length_hint__(self) -> int:
        return self._count


def _corpus_files(path: str | Path) -> list[Path]:
    """The files of a corpus: the one file given, or a directory's text and JSONL files."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"corpus not found: {root}")
    if not root.is_dir():
        return [root]
    files = sorted(p for p in root.rglob("*")
                   if p.suffix in TEXT_SUFFIXES | {".jsonl"} and p.is_file())
    if not files:
        raise ValueError(f"{root} has no .jsonl, .txt or .md files")
    return files


def _read_file(path: Path) -> Iterator[tuple[Record, str]]:
    """A file's records, each with where it came from (``file:line``)."""
    if path.suffix not in TEXT_SUFFIXES | {".jsonl"}:
        raise ValueError(f"unsupported corpus file {path}: use .jsonl, .txt or .md")
    bad = invalid_character(str(path))
    if bad is not None:  # an undecodable file name, smuggled into str as surrogates
        raise ValueError(f"corpus file name {str(path)!r} contains {bad[1]}: rename the file")
    if path.suffix == ".jsonl":
        yield from _read_jsonl(path)
        return
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(f"{path}:{line}: not valid UTF-8 ({exc.reason} at byte "
                         f"{exc.start}); save the file as UTF-8") from exc
    if not text.strip():
        raise ValueError(f"{path} is empty")
    bad = invalid_character(text)
    if bad is not None:
        line = text.count("\n", 0, bad[0]) + 1
        raise ValueError(f"{path}:{line}: contains {bad[1]} at character {bad[0]}")
    yield Record(str(path), text, {"source": str(path)}), str(path)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _read_jsonl(path: Path) -> Iterator[tuple[Record, str]]:
    count = 0
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start} "
                                 "of the line); save the file as UTF-8") from exc
            if not line.strip():
                continue
            try:
                row = json.loads(line, parse_constant=_reject_constant)
            except ValueError as exc:  # JSONDecodeError, or NaN/Infinity
                raise ValueError(f"{where}: invalid JSON: {exc}") from exc
            count += 1
            yield _record(row, where, f"{path.stem}:{lineno}"), where
    if not count:
        raise ValueError(f"{path} has no records")


def _record(row: object, where: str, default_id: str) -> Record:
    """One JSONL row as a record; every field the index would store is checked here."""
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        raise ValueError(f"{where}: each line needs a string 'text' field")
    text = row["text"]
    if not text.strip():
        raise ValueError(f"{where}: 'text' is empty or whitespace")
    rid = row.get("id", default_id)
    if isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    if not isinstance(rid, str) or not rid.strip():
        raise ValueError(f"{where}: 'id' must be a non-empty string or an integer, "
                         f"got {rid!r}")
    title = row.get("title")
    if title is not None and not isinstance(title, str):
        raise ValueError(f"{where}: 'title' must be a string or null, "
                         f"got {type(title).__name__} {title!r}")
    _check_characters(row, where)
    if title and title.strip():
        text = f"{title}\n{text}"
    meta = {k: v for k, v in row.items() if k not in ("id", "text")}
    return Record(rid, text, {"source_id": rid, **meta})


def _check_characters(row: dict[str, Any], where: str) -> None:
    """Name the field holding a lone surrogate or NUL. JSON escapes (``\\ud800``,
    ``\\u0000``) carry both into valid UTF-8 lines; this says where, which the
    index, refusing the same characters later, no longer knows."""
    for key, value in row.items():
        bad = invalid_character(key)
        if bad is not None:
            raise ValueError(f"{where}: the field name {key!r} contains {bad[1]}")
        if isinstance(value, str):
            bad = invalid_character(value)
            if bad is not None:
                raise ValueError(f"{where}: field {key!r} contains {bad[1]} "
                                 f"at character {bad[0]}")
            continue
        for item in _strings(value):
            bad = invalid_character(item)
            if bad is not None:
                raise ValueError(f"{where}: field {key!r} contains {bad[1]}")


def _strings(value: object) -> Iterator[str]:
    """Every string in a parsed JSON value: keys, values, list items."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def window_chunks(records: list[Record], size: int, overlap: int) -> list[Record]:
    """Concatenate records in order and cut token windows (the papers' chunk1200 protocol)."""
    joined = "\n\n".join(r.text for r in records)
    return [Record(f"chunk-{i:05d}", text, {"chunk": i})
            for i, text in enumerate(chunk_by_tokens(joined, size, overlap))]
