"""Reading a corpus from disk into chunk records, for the CLI and the examples.

Accepted: a ``.jsonl`` file with a ``text`` field per line (``id`` and ``title``
optional, other fields kept as metadata), a ``.txt``/``.md`` file, or a
directory of such files. Optionally re-chunked into token windows (the papers'
1200-token chunks with 100-token overlap).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .text import chunk_by_tokens

TEXT_SUFFIXES = {".txt", ".md"}


@dataclass(frozen=True)
class Record:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


def read_corpus(path: str | Path) -> list[Record]:
    """Records from a JSONL file, a text file or a directory of text files."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"corpus not found: {root}")
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.suffix in TEXT_SUFFIXES | {".jsonl"})
        if not files:
            raise ValueError(f"{root} has no .jsonl, .txt or .md files")
        return [r for f in files for r in read_corpus(f)]
    if root.suffix == ".jsonl":
        return _read_jsonl(root)
    if root.suffix in TEXT_SUFFIXES:
        text = root.read_text(encoding="utf-8")
        if not text.strip():
            raise ValueError(f"{root} is empty")
        return [Record(str(root), text, {"source": str(root)})]
    raise ValueError(f"unsupported corpus file {root}: use .jsonl, .txt or .md")


def _read_jsonl(path: Path) -> list[Record]:
    records: list[Record] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: invalid JSON: {exc}") from exc
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise ValueError(f"{path}:{lineno}: each line needs a string 'text' field")
            if not row["text"].strip():
                raise ValueError(f"{path}:{lineno}: 'text' is empty or whitespace")
            rid = str(row.get("id", f"{path.stem}:{lineno}"))
            if rid in seen:
                raise ValueError(f"{path}:{lineno}: duplicate id {rid!r}")
            seen.add(rid)
            title = row.get("title") or ""
            text = f"{title}\n{row['text']}" if title else row["text"]
            meta = {k: v for k, v in row.items() if k not in ("id", "text")}
            records.append(Record(rid, text, {"source_id": rid, **meta}))
    if not records:
        raise ValueError(f"{path} has no records")
    return records


def window_chunks(records: list[Record], size: int, overlap: int) -> list[Record]:
    """Concatenate records in order and cut token windows (the papers' chunk1200 protocol)."""
    joined = "\n\n".join(r.text for r in records)
    return [Record(f"chunk-{i:05d}", text, {"chunk": i})
            for i, text in enumerate(chunk_by_tokens(joined, size, overlap))]
