"""One calling convention for every retrieval strategy, and the sentence-level state they share.

The benchmark harness builds each method once from ``(unit_ids, unit_texts,
unit_tokens, embedder)`` and then calls ``retrieve(query, query_vector, budget)``
on all of them alike. :class:`UnitCorpus` is the common preparation (sentences,
their embeddings, sentence x term counts): sentences go through the embedder
passed in, so a :class:`~shared_core.embeddings.CachedEmbedder` shared between
methods embeds each sentence once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from .concepts import Analyzer, count_terms
from .derived import segment_matrix, unit_norm_rows
from .embeddings import EMBED_BATCH, Embedder, check_texts
from .text import split_sentences


@runtime_checkable
class UnitRetriever(Protocol):
    """What the harness calls: unit positions in context order, total tokens <= budget."""

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]: ...


class UnitRetrieverFactory(Protocol):
    """How a strategy is built once over a list of units."""

    def __call__(
        self,
        unit_ids: Sequence[str],
        unit_texts: Sequence[str],
        unit_tokens: Sequence[int] | np.ndarray,
        embedder: Embedder,
    ) -> UnitRetriever: ...


def check_units(
    unit_ids: Sequence[str], unit_texts: Sequence[str], unit_tokens: Sequence[int] | np.ndarray
) -> tuple[list[str], list[str], np.ndarray]:
    """Validate the harness inputs: same lengths, non-blank texts, unique ids, tokens >= 0."""
    texts = check_texts(unit_texts, "unit_texts")
    if not texts:
        raise ValueError("unit_texts is empty: a retriever needs at least one unit")
    if isinstance(unit_ids, (str, bytes)) or not isinstance(unit_ids, Sequence):
        raise TypeError(f"unit_ids must be a sequence of str, got {type(unit_ids).__name__}")
    ids = list(unit_ids)
    if any(not isinstance(i, str) for i in ids):
        raise TypeError("unit_ids must all be str")
    if len(set(ids)) != len(ids):
        raise ValueError("unit_ids must be unique")
    tokens = np.asarray(unit_tokens)
    if tokens.ndim != 1 or not (np.issubdtype(tokens.dtype, np.integer) or tokens.size == 0):
        raise TypeError("unit_tokens must be a 1-d sequence of ints")
    if not len(ids) == len(texts) == len(tokens):
        raise ValueError(
            f"unit_ids, unit_texts and unit_tokens differ in length "
            f"({len(ids)}, {len(texts)}, {len(tokens)})"
        )
    if (tokens < 0).any():
        raise ValueError("unit_tokens must be >= 0")
    return ids, texts, tokens.astype(np.int64)


def check_budget(budget: object) -> int:
    if not isinstance(budget, (int, np.integer)) or isinstance(budget, bool):
        raise TypeError(f"budget must be an int, got {type(budget).__name__}")
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    return int(budget)


def check_query_vector(query_vector: object, dim: int) -> np.ndarray:
    """A finite (dim,) vector, returned unit-norm so cosines are dot products."""
    q = np.asarray(query_vector, dtype=np.float32)
    if q.ndim == 2 and q.shape[0] == 1:
        q = q[0]
    if q.shape != (dim,):
        raise ValueError(f"query_vector must have shape ({dim},), got {q.shape}")
    norm = float(np.linalg.norm(q))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("query_vector must be finite and non-zero")
    return q / norm


@dataclass(frozen=True)
class UnitCorpus:
    """Units split into sentences, with sentence embeddings and sentence x term counts.

    ``offsets[i]:offsets[i+1]`` are unit i's sentences; ``unit_terms`` is the
    sum of its sentences' term counts, so unit- and sentence-level terms agree.
    Build it once and pass it to several strategies' ``from_corpus`` to split
    and embed the sentences once (sentence splitting dominates build time).
    """

    ids: list[str]
    texts: list[str]
    tokens: np.ndarray
    offsets: np.ndarray
    sentence_embeddings: np.ndarray
    sentence_terms: sp.csr_matrix
    unit_terms: sp.csr_matrix
    vocabulary: dict[str, int]
    analyzer: Analyzer

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(
        cls,
        unit_ids: Sequence[str],
        unit_texts: Sequence[str],
        unit_tokens: Sequence[int] | np.ndarray,
        embedder: Embedder,
        analyzer: Analyzer,
        batch_size: int = EMBED_BATCH,
    ) -> UnitCorpus:
        ids, texts, tokens = check_units(unit_ids, unit_texts, unit_tokens)
        if not isinstance(embedder, Embedder):
            raise TypeError(f"embedder must implement the Embedder protocol, got "
                            f"{type(embedder).__name__}")
        sentences: list[str] = []
        offsets = [0]
        for text in texts:
            pieces = [text[s:e] for s, e in split_sentences(text) if text[s:e].strip()]
            sentences.extend(pieces or [text.strip()])
            offsets.append(len(sentences))
        parts = [embedder.embed(sentences[i : i + batch_size])
                 for i in range(0, len(sentences), batch_size)]
        embeddings = np.ascontiguousarray(np.vstack(parts), dtype=np.float32)
        vocabulary: dict[str, int] = {}
        sentence_terms = count_terms(sentences, vocabulary, analyzer)
        offs = np.asarray(offsets, dtype=np.int64)
        unit_terms = sp.csr_matrix(sentence_to_unit(offs) @ sentence_terms)
        return cls(ids, texts, tokens, offs, embeddings, sentence_terms, unit_terms, vocabulary,
                   analyzer)

    def unit_vectors(self) -> np.ndarray:
        """Each unit's vector: the unit-norm mean of its sentence embeddings."""
        # float32 sums, not derived.segment_means' float64: the baselines' scores depend on it
        sums = np.add.reduceat(self.sentence_embeddings, self.offsets[:-1], axis=0)
        return np.ascontiguousarray(unit_norm_rows(sums), dtype=np.float32)

    def terms(self) -> list[str]:
        """Terms by column index."""
        out = [""] * len(self.vocabulary)
        for term, col in self.vocabulary.items():
            out[col] = term
        return out


def sentence_to_unit(offsets: np.ndarray) -> sp.csr_matrix:
    """(units x sentences) 0/1 matrix: which sentences make up each unit."""
    return segment_matrix(offsets, int(offsets[-1]))
