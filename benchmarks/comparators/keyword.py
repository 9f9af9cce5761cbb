"""KET-RAG's keyword channel without the LLM, a benchmark comparator.

Its keyword channel (KET-RAG §5.1 lines 10-15, §5.2) links keywords to the
units that contain them; a keyword's vector is the mean embedding of the
sentences containing it. At query time seed keywords are taken in similarity
order until their units hold twice the budget, and that pool is reranked
against the query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from shared_core.config import ChunkSimilarity, Overflow
from shared_core.embeddings import Embedder
from shared_core.graph import concept_vectors
from shared_core.search import fill_budget, top_k_indices
from shared_core.select import UnitCorpus
from shared_core.text import term_analyzer

from .units import check_budget, check_query_vector


# ----------------------------------------------------------------------- keyword channel
@dataclass(frozen=True)
class KeywordHit:
    """A unit in the context and the seed keyword whose neighbourhood brought it."""

    unit: int
    score: float
    tokens: int
    keyword: str
    keyword_similarity: float
    seed_rank: int


@dataclass(frozen=True)
class KeywordSearch:
    """The hits in context order, the seed keywords and the candidate pool they gave."""

    hits: tuple[KeywordHit, ...]
    seeds: tuple[str, ...]
    pool_units: int
    pool_tokens: int
    budget: int

    @property
    def units(self) -> list[int]:
        return [h.unit for h in self.hits]

    @property
    def tokens_used(self) -> int:
        return sum(h.tokens for h in self.hits)


@dataclass(frozen=True)
class KeywordChannelRetriever:
    """KET-RAG's Keyword-RAG over any list of units (chunks, passages or sub-chunks).

    ``pool_factor`` is the "2·(1-θ)·λ" of §5.2 over the channel's own budget:
    seeds are added until their units hold ``pool_factor x budget`` tokens.
    ``unit_similarity`` compares a unit to the query by the mean of its sentence
    vectors (the stand-in for φ(t_i)) or by its best sentence.
    """

    corpus: UnitCorpus
    keywords: list[str]
    keyword_vectors: np.ndarray
    keyword_units: sp.csc_matrix
    unit_vectors: np.ndarray
    pool_factor: float = 2.0
    unit_similarity: ChunkSimilarity = "mean"
    overflow: Overflow = "skip"

    @classmethod
    def build(
        cls,
        unit_ids: Sequence[str],
        unit_texts: Sequence[str],
        unit_tokens: Sequence[int] | np.ndarray,
        embedder: Embedder,
        *,
        ngram_max: int = 1,
        min_chars: int = 2,
        pool_factor: float = 2.0,
        unit_similarity: ChunkSimilarity = "mean",
        overflow: Overflow = "skip",
    ) -> KeywordChannelRetriever:
        """Keywords are the units' terms; each keyword's vector is Eq. 1's sentence mean."""
        corpus = UnitCorpus.build(
            unit_ids, unit_texts, unit_tokens, embedder, term_analyzer(ngram_max, min_chars)
        )
        return cls.from_corpus(corpus, pool_factor=pool_factor,
                               unit_similarity=unit_similarity, overflow=overflow)

    @classmethod
    def from_corpus(
        cls,
        corpus: UnitCorpus,
        *,
        pool_factor: float = 2.0,
        unit_similarity: ChunkSimilarity = "mean",
        overflow: Overflow = "skip",
    ) -> KeywordChannelRetriever:
        """Build over an already prepared :class:`UnitCorpus` (its analyzer gives the keywords)."""
        if not isinstance(pool_factor, (int, float)) or pool_factor < 1.0:
            raise ValueError(f"pool_factor must be a number >= 1, got {pool_factor!r}")
        if unit_similarity not in ("mean", "max"):
            raise ValueError(f"unit_similarity must be 'mean' or 'max', got {unit_similarity!r}")
        if overflow not in ("stop", "skip"):
            raise ValueError(f"overflow must be 'stop' or 'skip', got {overflow!r}")
        vectors, _ = concept_vectors(corpus.sentence_terms, corpus.sentence_embeddings)
        links = sp.csc_matrix(corpus.unit_terms != 0, dtype=np.int8)
        links.sort_indices()
        return cls(corpus, corpus.terms(), vectors, links, corpus.unit_vectors(),
                   float(pool_factor), unit_similarity, overflow)

    def _unit_similarity(self, q: np.ndarray) -> np.ndarray:
        if self.unit_similarity == "mean":
            return np.asarray(self.unit_vectors @ q, dtype=np.float64)
        sentence_sim = self.corpus.sentence_embeddings @ q
        return np.maximum.reduceat(sentence_sim, self.corpus.offsets[:-1]).astype(np.float64)

    def search(self, query: str, query_vector: np.ndarray, budget: int) -> KeywordSearch:
        """Seed keywords until the pool holds pool_factor x budget tokens; rerank; fill."""
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        budget = check_budget(budget)
        q = check_query_vector(query_vector, self.keyword_vectors.shape[1])
        similarity = np.asarray(self.keyword_vectors @ q, dtype=np.float64)
        tokens = self.corpus.tokens
        need = self.pool_factor * budget
        seed_of = np.full(len(self.corpus), -1, dtype=np.int64)
        seeds: list[int] = []
        pool_tokens = 0
        indptr, indices = self.keyword_units.indptr, self.keyword_units.indices
        taken = 0
        batch = 64
        while pool_tokens < need and taken < len(similarity):
            ranked = top_k_indices(similarity, taken + batch)[taken:]
            for keyword in ranked.tolist():
                units = indices[indptr[keyword] : indptr[keyword + 1]]
                new = units[seed_of[units] < 0]
                seeds.append(keyword)
                if len(new):
                    seed_of[new] = len(seeds) - 1
                    pool_tokens += int(tokens[new].sum())
                if pool_tokens >= need:
                    break
            taken += len(ranked)
            batch *= 4
        pool = np.flatnonzero(seed_of >= 0)
        unit_sim = self._unit_similarity(q)
        order = pool[np.lexsort((pool, -unit_sim[pool]))]
        chosen = fill_budget(order, tokens, budget, self.overflow)
        hits = tuple(
            KeywordHit(
                unit=int(u), score=float(unit_sim[u]), tokens=int(tokens[u]),
                keyword=self.keywords[seeds[seed_of[u]]],
                keyword_similarity=float(similarity[seeds[seed_of[u]]]),
                seed_rank=int(seed_of[u]),
            )
            for u in chosen
        )
        return KeywordSearch(hits, tuple(self.keywords[s] for s in seeds), len(pool),
                             pool_tokens, budget)

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        return self.search(query, query_vector, budget).units


def keyword_channel(
    unit_ids: Sequence[str],
    unit_texts: Sequence[str],
    unit_tokens: Sequence[int] | np.ndarray,
    embedder: Embedder,
) -> KeywordChannelRetriever:
    """The harness factory (:class:`~benchmarks.comparators.units.UnitRetrieverFactory`)."""
    return KeywordChannelRetriever.build(unit_ids, unit_texts, unit_tokens, embedder)
