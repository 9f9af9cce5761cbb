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

from .text import chunk_by_tokens, count_tokens_batch, split_sentences


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


def _pack_sentences(text: str, max_tokens: int) -> list[str]:
    spans = split_sentences(text)
    if not spans:
        return []
    sentences = [text[s:e] for s, e in spans]
    sizes = count_tokens_batch(sentences)
    pieces: list[str] = []
    start = 0  # span index where the open unit starts
    used = 0
    for i, size in enumerate(sizes.tolist()):
        if size > max_tokens:  # a sentence longer than a unit: close the open one, cut it
            if i > start:
                pieces.append(text[spans[start][0]:spans[i - 1][1]])
            pieces.extend(chunk_by_tokens(sentences[i], max_tokens, 0))
            start, used = i + 1, 0
            continue
        # +1 for the space that joins two sentences in the chunk text
        if i > start and used + size + 1 > max_tokens:
            pieces.append(text[spans[start][0]:spans[i - 1][1]])
            start, used = i, 0
        used += size + (1 if i > start else 0)
    if start < len(spans):
        pieces.append(text[spans[start][0]:spans[-1][1]])
    return [p for p in pieces if p.strip()]
