"""Retrieval units finer than the selection chunk (KET-RAG's τ splitting).

The 1200-token chunk stays the unit of core-chunk selection and KG extraction,
where the cost is; retrieval can return its sub-chunks instead, so a 12k-token
budget holds ~40 focused units rather than ~10 whole chunks. Units pack whole
sentences up to ``max_tokens``, so an answer is never cut in two at a boundary
unless a single sentence is longer than a unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .sentences import split_sentences
from .tokens import chunk_by_tokens, count_tokens_batch


@dataclass(frozen=True)
class Units:
    """Units in chunk order; ``parent[i]`` is the position of unit i's chunk."""

    ids: list[str]
    texts: list[str]
    parent: np.ndarray
    tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)


def split_into_units(
    chunk_ids: Sequence[str], chunk_texts: Sequence[str], max_tokens: int
) -> Units:
    """Split every chunk into sentence-packed units of at most ``max_tokens`` tokens."""
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if len(chunk_ids) != len(chunk_texts):
        raise ValueError("chunk_ids and chunk_texts must have the same length")
    ids: list[str] = []
    texts: list[str] = []
    parent: list[int] = []
    for position, (chunk_id, text) in enumerate(zip(chunk_ids, chunk_texts, strict=True)):
        pieces = _pack_sentences(text, max_tokens)
        for k, piece in enumerate(pieces):
            ids.append(f"{chunk_id}#u{k}")
            texts.append(piece)
            parent.append(position)
    return Units(ids, texts, np.asarray(parent, dtype=np.int64), count_tokens_batch(texts))


def pack_sentences(sizes: Sequence[int], max_tokens: int) -> list[int]:
    """Where each unit starts: greedy runs of sentences within ``max_tokens``.

    A join costs one token (the space between two sentences); a sentence longer
    than ``max_tokens`` forms a unit by itself.
    """
    starts: list[int] = []
    used = 0
    for i, size in enumerate(sizes):
        if not starts or used + 1 + size > max_tokens or size > max_tokens:
            starts.append(i)
            used = size
        else:
            used += 1 + size
        if size > max_tokens:
            used = max_tokens  # nothing may join an oversized sentence
    return starts


def packed_runs(sizes: Sequence[int], max_tokens: int) -> list[tuple[int, int]]:
    """:func:`pack_sentences` as (start, end) sentence ranges: what both packers slice by."""
    starts = pack_sentences(sizes, max_tokens)
    return list(zip(starts, [*starts[1:], len(sizes)], strict=True))


def _pack_sentences(text: str, max_tokens: int) -> list[str]:
    spans = split_sentences(text)
    if not spans:
        return []
    sentences = [text[s:e] for s, e in spans]
    sizes = count_tokens_batch(sentences).tolist()
    pieces: list[str] = []
    for start, end in packed_runs(sizes, max_tokens):
        if end - start == 1 and sizes[start] > max_tokens:  # cut an oversized sentence
            pieces.extend(chunk_by_tokens(sentences[start], max_tokens, 0))
        else:
            pieces.append(text[spans[start][0]:spans[end - 1][1]])
    return [p for p in pieces if p.strip()]
