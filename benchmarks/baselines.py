"""Baseline retrievers, all on one protocol so the harness treats every method alike:

``retrieve(query, query_vector, budget) -> list[int]`` returns unit positions in
context order whose token counts sum to at most ``budget``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from shared_core.embeddings import EMBED_BATCH, Embedder
from shared_core.search import fill_budget as core_fill_budget
from shared_core.select import rank_by_score
from shared_core.text import split_sentences

RRF_K = 60


@runtime_checkable
class Retriever(Protocol):
    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]: ...


def fill_budget(order: Sequence[int] | np.ndarray, tokens: np.ndarray, budget: int) -> list[int]:
    """Take units in rank order; one that does not fit is skipped, later smaller ones may fit."""
    return core_fill_budget(np.asarray(order, dtype=np.int64), tokens, budget, "skip").tolist()


stable_desc = rank_by_score  # indices by descending score, ties in corpus order


def embed_batched(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    parts = [embedder.embed(list(texts[s : s + EMBED_BATCH]))
             for s in range(0, len(texts), EMBED_BATCH)]
    if not parts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    return np.concatenate(parts)


def sentence_vectors(texts: Sequence[str], embedder: Embedder) -> tuple[np.ndarray, np.ndarray]:
    """Every unit's sentence vectors, stacked, and each unit's first row (units in order).

    Sentences are split exactly as ``ConceptGraphIndex`` splits them, so the
    embedding cache is shared with the concept graph and nothing is paid twice.
    """
    sentences: list[str] = []
    starts: list[int] = []
    for text in texts:
        starts.append(len(sentences))
        pieces = [text[s:e] for s, e in split_sentences(text) if text[s:e].strip()]
        sentences.extend(pieces or [text])
    return embed_batched(embedder, sentences), np.asarray(starts, dtype=np.int64)


def mean_sentence_vectors(texts: Sequence[str], embedder: Embedder) -> np.ndarray:
    """A unit's vector as the normalised mean of its sentence vectors."""
    vectors, starts = sentence_vectors(texts, embedder)
    if not len(starts):
        return np.zeros((0, embedder.dim), dtype=np.float32)
    sums = np.add.reduceat(vectors.astype(np.float64), starts, axis=0)
    norms = np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return (sums / norms).astype(np.float32)


class RandomRetriever:
    """Uniform-random fill: the floor any retriever must clear."""

    def __init__(self, tokens: np.ndarray, seed: int = 0) -> None:
        self.tokens = tokens
        self.rng = np.random.default_rng(seed)

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        return fill_budget(self.rng.permutation(len(self.tokens)), self.tokens, budget)


class DenseRetriever:
    """Text-RAG: units by cosine to the query, top-k until the budget is full."""

    def __init__(self, vectors: np.ndarray, tokens: np.ndarray) -> None:
        self.vectors = vectors
        self.tokens = tokens

    def rank(self, query: str, query_vector: np.ndarray) -> np.ndarray:
        return stable_desc(self.vectors @ np.asarray(query_vector, dtype=np.float32))

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        return fill_budget(self.rank(query, query_vector), self.tokens, budget)


class BestSentenceRetriever:
    """Dense over sentences: a unit scores its best sentence's cosine to the query."""

    def __init__(self, vectors: np.ndarray, starts: np.ndarray, tokens: np.ndarray) -> None:
        self.vectors = vectors
        self.starts = starts
        self.tokens = tokens

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        q = np.asarray(query_vector, dtype=np.float32)
        return fill_budget(stable_desc(np.maximum.reduceat(self.vectors @ q, self.starts)),
                           self.tokens, budget)


class BM25Retriever:
    """BM25 (bm25s, English stopwords, no stemmer) over the unit texts."""

    def __init__(self, texts: Sequence[str], tokens: np.ndarray) -> None:
        import bm25s

        self._bm25s = bm25s
        self.tokens = tokens
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False),
                         show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        words = self._bm25s.tokenize([query], stopwords="en", return_ids=False,
                                     show_progress=False)[0]
        if not words:
            return np.zeros(len(self.tokens), dtype=np.float64)
        return np.asarray(self.model.get_scores(list(words)), dtype=np.float64)

    def rank(self, query: str, query_vector: np.ndarray) -> np.ndarray:
        return stable_desc(self.scores(query))

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        return fill_budget(self.rank(query, query_vector), self.tokens, budget)


def rrf_scores(rankings: Sequence[np.ndarray], n: int, k: int = RRF_K) -> np.ndarray:
    """Reciprocal-rank fusion: sum over rankings of 1 / (k + rank), rank from 1."""
    fused = np.zeros(n, dtype=np.float64)
    for order in rankings:
        ranks = np.empty(n, dtype=np.float64)
        ranks[np.asarray(order, dtype=np.int64)] = np.arange(1, n + 1)
        fused += 1.0 / (k + ranks)
    return fused


class HybridRetriever:
    """Dense + BM25 by reciprocal-rank fusion (k = 60)."""

    def __init__(self, dense: DenseRetriever, bm25: BM25Retriever, k: int = RRF_K) -> None:
        self.dense = dense
        self.bm25 = bm25
        self.k = k
        self.tokens = dense.tokens

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        fused = rrf_scores([self.dense.rank(query, query_vector),
                            self.bm25.rank(query, query_vector)], len(self.tokens), self.k)
        return fill_budget(stable_desc(fused), self.tokens, budget)
