"""Datasets in the shared format and the chunking protocols built from them.

Every retrieval unit carries its character span in one concatenated corpus
string, so "is this supporting passage fully inside the context?" is interval
arithmetic, not fuzzy string matching, and works for chunks, sub-chunks and
passages alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared_core.text import chunk_by_tokens, count_tokens_batch, split_into_units

DATA_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATASETS = ("musique", "hotpotqa", "2wiki")  # the dev sets under DATA_ROOT
# protocols a dev set cannot be measured under, and why (see DATA_ROOT/README.md)
UNSUPPORTED: dict[str, dict[str, str]] = {
    "2wiki": {"passage": "its corpus is one sentence per line with no titles, so passages "
                         "cannot be rebuilt; use chunk1200 or sub<N>"},
}
CHUNK_TOKENS = 1200
CHUNK_OVERLAP = 100
SEPARATOR = "\n\n"
_SUB = re.compile(r"^sub(\d+)$")


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answers: tuple[str, ...]
    supporting_ids: tuple[str, ...]
    hops: int | None


@dataclass(frozen=True)
class Dataset:
    name: str
    passages: list[Passage]
    questions: list[Question]


def _read_jsonl(path: Path) -> list[dict[str, object]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: invalid JSON: {exc}") from exc
    return rows


def load_dataset(data_dir: str | Path, limit_questions: int | None = None) -> Dataset:
    """Read ``corpus.jsonl`` and ``questions.jsonl`` from ``data_dir``."""
    root = Path(data_dir)
    for name in ("corpus.jsonl", "questions.jsonl"):
        if not (root / name).is_file():
            raise FileNotFoundError(f"{root / name} not found (expected the shared data format)")
    passages = [
        Passage(str(r["id"]), str(r.get("title") or ""), str(r["text"]))
        for r in _read_jsonl(root / "corpus.jsonl")
    ]
    questions = []
    for r in _read_jsonl(root / "questions.jsonl"):
        answers = r.get("answers") or []
        support = r.get("supporting_ids") or []
        hops = r.get("hops")
        questions.append(Question(
            str(r["id"]), str(r["question"]),
            tuple(str(a) for a in answers),  # type: ignore[union-attr]
            tuple(str(s) for s in support),  # type: ignore[union-attr]
            int(hops) if isinstance(hops, int) else None,
        ))
    if limit_questions is not None:
        questions = questions[:limit_questions]
    return Dataset(root.resolve().name, passages, questions)


def limit_passages(dataset: Dataset, max_passages: int) -> Dataset:
    """The dataset cut to ``max_passages`` passages, for quick or structural runs.

    The kept questions' supporting passages come first (in question order), then
    the others in file order, so every question can still be answered while the
    distractors thin out; the corpus order of what is kept is unchanged. Results
    on a cut corpus are not comparable with full-corpus ones.
    """
    if isinstance(max_passages, bool) or not isinstance(max_passages, int) or max_passages < 1:
        raise ValueError(f"max_passages must be an int >= 1, got {max_passages!r}")
    wanted = dict.fromkeys(s for q in dataset.questions for s in q.supporting_ids)
    known = {p.id for p in dataset.passages}
    keep = [s for s in wanted if s in known][:max_passages]
    keep_set = set(keep)
    for passage in dataset.passages:
        if len(keep_set) >= max_passages:
            break
        keep_set.add(passage.id)
    return Dataset(dataset.name, [p for p in dataset.passages if p.id in keep_set],
                   dataset.questions)


def passage_text(p: Passage) -> str:
    """Title and text as a chunker sees them (the title only when there is one)."""
    return f"{p.title}\n{p.text}" if p.title.strip() else p.text


@dataclass(frozen=True)
class UnitSet:
    """Texts in corpus order with their token counts and ``[start, end)`` corpus spans."""

    ids: list[str]
    texts: list[str]
    tokens: np.ndarray
    spans: np.ndarray
    parent: np.ndarray  # position of each unit's selection chunk

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Corpus:
    """One protocol's view of a dataset.

    ``units`` are what retrieval returns; ``chunks`` are the units of core-chunk
    selection (the 1200-token chunks, or the passages in the passage protocol).
    ``passage_spans`` locate each passage's text (title excluded) in ``text``.
    """

    protocol: str
    text: str
    passage_ids: list[str]
    passage_spans: np.ndarray
    chunks: UnitSet
    units: UnitSet

    def passage_index(self) -> dict[str, int]:
        return {pid: i for i, pid in enumerate(self.passage_ids)}


def _locate(haystack: str, piece: str, cursor: int) -> tuple[int, int]:
    """Span of ``piece`` in ``haystack`` at or after ``cursor``.

    A token window can cut a multi-byte character, which decodes to U+FFFD;
    such edge characters are dropped before searching and counted back into
    the span, so offsets inside ``piece`` still map onto ``haystack``.
    """
    at = haystack.find(piece, cursor)
    if at >= 0:
        return at, at + len(piece)
    core = piece.strip("\ufffd")
    at = haystack.find(core, cursor)
    if at < 0 or not core:
        raise ValueError(f"cannot locate a unit in the corpus text near offset {cursor}")
    lead = len(piece) - len(piece.lstrip("\ufffd"))
    trail = len(piece) - len(piece.rstrip("\ufffd"))
    return max(0, at - lead), min(len(haystack), at + len(core) + trail)


def _concatenate(passages: Sequence[Passage]) -> tuple[str, list[str], np.ndarray, list[str]]:
    parts: list[str] = []
    ids: list[str] = []
    spans: list[tuple[int, int]] = []
    pieces: list[str] = []
    offset = 0
    for p in passages:
        if not p.text.strip():
            continue
        full = passage_text(p)
        if parts:
            offset += len(SEPARATOR)
        text_start = offset + len(full) - len(p.text)
        parts.append(full)
        pieces.append(full)
        ids.append(p.id)
        spans.append((text_start, text_start + len(p.text)))
        offset += len(full)
    spans_arr = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    return SEPARATOR.join(parts), ids, spans_arr, pieces


def _unit_set(ids: list[str], texts: list[str], spans: list[tuple[int, int]],
              parent: Sequence[int]) -> UnitSet:
    return UnitSet(ids, texts, count_tokens_batch(texts) if texts else np.zeros(0, np.int64),
                   np.asarray(spans, dtype=np.int64).reshape(-1, 2),
                   np.asarray(parent, dtype=np.int64))


def build_corpus(passages: Sequence[Passage], protocol: str,
                 chunk_tokens: int = CHUNK_TOKENS, overlap: int = CHUNK_OVERLAP) -> Corpus:
    """Chunk the passages by ``protocol``: ``chunk1200``, ``passage`` or ``sub<N>``."""
    text, pids, pspans, pieces = _concatenate(passages)
    if protocol == "passage":
        spans: list[tuple[int, int]] = []
        offset = 0
        for piece in pieces:
            spans.append((offset, offset + len(piece)))
            offset += len(piece) + len(SEPARATOR)
        chunks = _unit_set(list(pids), pieces, spans, range(len(pieces)))
        return Corpus(protocol, text, pids, pspans, chunks, chunks)
    sub = _SUB.match(protocol)
    if protocol != "chunk1200" and sub is None:
        raise ValueError(f"unknown protocol {protocol!r}; use chunk1200, passage or sub<N>")
    windows = [w for w in chunk_by_tokens(text, chunk_tokens, overlap) if w.strip()]
    chunk_spans = []
    cursor = 0
    for w in windows:
        span = _locate(text, w, cursor)
        chunk_spans.append(span)
        cursor = span[0] + 1
    chunk_ids = [f"chunk-{i:05d}" for i in range(len(windows))]
    chunks = _unit_set(chunk_ids, windows, chunk_spans, range(len(windows)))
    if sub is None:
        return Corpus(protocol, text, pids, pspans, chunks, chunks)
    raw = split_into_units(chunk_ids, windows, int(sub.group(1)))
    unit_spans = []
    last_parent, cursor = -1, 0
    for unit_text, parent in zip(raw.texts, raw.parent.tolist(), strict=True):
        if parent != last_parent:
            last_parent, cursor = parent, 0
        s, e = _locate(windows[parent], unit_text, cursor)
        cursor = s + 1
        base = chunk_spans[parent][0]
        unit_spans.append((base + s, base + e))
    units = UnitSet(list(raw.ids), list(raw.texts), np.asarray(raw.tokens, dtype=np.int64),
                    np.asarray(unit_spans, dtype=np.int64).reshape(-1, 2),
                    np.asarray(raw.parent, dtype=np.int64))
    return Corpus(protocol, text, pids, pspans, chunks, units)


def corpus_for(dataset: Dataset, protocol: str) -> Corpus:
    """``build_corpus`` for a loaded dataset, refusing a protocol the data cannot support."""
    reason = UNSUPPORTED.get(dataset.name, {}).get(protocol)
    if reason is not None:
        raise ValueError(f"protocol {protocol!r} is not supported for {dataset.name}: {reason}")
    return build_corpus(dataset.passages, protocol)
