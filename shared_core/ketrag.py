"""KET-RAG without the LLM: KNN-chunk-graph PageRank selection and the keyword channel.

KET-RAG (§5.1, Algorithm 3 lines 2-8) links every chunk to its K/2 lexically
most similar chunks (shared keywords) and its K/2 semantically most similar
other chunks (cosine), and ranks chunks by PageRank on that graph to choose the
core chunks. Its keyword channel (§5.1 lines 10-15, §5.2) links keywords to the
units that contain them; a keyword's vector is the mean embedding of the
sentences containing it. At query time seed keywords are taken in similarity
order until their units hold twice the budget, and that pool is reranked
against the query.

Memory: the KNN graph computes dense similarity rows in blocks of
``block_rows`` x n, never the whole n x n matrix. A block's working set (the
near-dense sparse product, its float64 copy, argpartition's int64 indices, the
float32 cosines) is about 30-40·block_rows·n bytes: ~100 MB peak measured for n = 6.8k,
~400 MB for n = 20k at the default 512 rows; pass a smaller ``block_rows`` to
trade speed for memory. Time is O(n²) dense work either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from .concepts import term_analyzer, tfidf
from .config import ChunkSimilarity, Overflow
from .embeddings import Embedder
from .graph import concept_vectors, pagerank
from .retrieval import fill_budget, top_k_indices
from .strategies import UnitCorpus, check_budget, check_query_vector

Lexical = Literal["count", "tfidf"]


# --------------------------------------------------------------------------- KNN graph
@dataclass(frozen=True)
class KnnChunkGraph:
    """The KNN chunk graph and its PageRank.

    ``lexical[i]`` / ``semantic[i]`` are the neighbours chunk i chose, best
    first, padded with -1 (no chunk shares a keyword with i, or n is small).
    ``adjacency`` is the undirected 0/1 union of all choices; ``scores`` its
    PageRank, ready for :func:`shared_core.selection.select_by_scores`.
    """

    lexical: np.ndarray
    semantic: np.ndarray
    adjacency: sp.csr_matrix
    scores: np.ndarray


def _row_top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the ``k`` best columns (best first, ties to the lower column), and which are > -inf.

    One argpartition finds each row's k best and its (k+1)-th value; only the
    rows where those two tie (rare for cosines; make integer scores unique
    before calling) are redone exactly: every column above the k-th value,
    then the columns equal to it, lowest first.
    """
    n_rows, n_cols = scores.shape
    k = min(k, n_cols)
    if k == 0 or n_rows == 0:
        return np.zeros((n_rows, 0), dtype=np.int64), np.zeros((n_rows, 0), dtype=bool)
    if k < n_cols:
        part = np.argpartition(-scores, (k - 1, k), axis=1)
        pick = part[:, :k]
        kth = np.take_along_axis(scores, part[:, k - 1 : k], axis=1).ravel()
        nxt = np.take_along_axis(scores, part[:, k : k + 1], axis=1).ravel()
        for row in np.flatnonzero(kth == nxt):
            at = scores[row] == kth[row]
            above = np.flatnonzero(scores[row] > kth[row])
            pick[row] = np.r_[above, np.flatnonzero(at)[: k - len(above)]]
    else:
        pick = np.tile(np.arange(n_cols), (n_rows, 1))
    values = np.take_along_axis(scores, pick, axis=1)
    order = np.lexsort((pick, -values), axis=1)
    pick = np.take_along_axis(pick, order, axis=1).astype(np.int64)
    valid = np.isfinite(np.take_along_axis(values, order, axis=1))
    return pick, valid


def knn_chunk_graph(
    chunk_terms: sp.spmatrix,
    chunk_vectors: np.ndarray,
    k: int = 2,
    *,
    lexical: Lexical = "count",
    damping: float = 0.85,
    block_rows: int = 512,
) -> KnnChunkGraph:
    """Build KET-RAG's KNN chunk graph (Algorithm 3, lines 2-7) and its PageRank (line 8, Eq. 1).

    ``chunk_terms`` is (chunks x keywords) counts; ``lexical="count"`` scores a
    pair by the number of keywords both contain (the paper), ``"tfidf"`` by the
    cosine of their TF-IDF rows. Pairs sharing no keyword are never lexical
    neighbours. Semantic neighbours exclude the chunk and its lexical picks
    (line 5). ``k`` is the paper's K (default 2, §6.1): K/2 of each kind.
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 2 or k % 2:
        raise ValueError(f"k must be an even int >= 2 (K/2 lexical + K/2 semantic), got {k!r}")
    if lexical not in ("count", "tfidf"):
        raise ValueError(f"lexical must be 'count' or 'tfidf', got {lexical!r}")
    if not isinstance(block_rows, int) or block_rows < 1:
        raise ValueError(f"block_rows must be a positive int, got {block_rows!r}")
    terms = sp.csr_matrix(chunk_terms, dtype=np.float64)
    vectors = np.asarray(chunk_vectors, dtype=np.float32)
    n = terms.shape[0]
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise ValueError(f"chunk_vectors must have {n} rows, got shape {vectors.shape}")
    if n == 0:
        raise ValueError("no chunks")
    if lexical == "count":
        terms.data[:] = 1.0
    else:
        terms = tfidf(terms)
        norms = np.sqrt(np.asarray(terms.multiply(terms).sum(axis=1)).ravel())
        terms = sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ terms)
    terms_t = sp.csr_matrix(terms.T)
    half = k // 2
    lex_all = np.full((n, half), -1, dtype=np.int64)
    sem_all = np.full((n, half), -1, dtype=np.int64)
    for start in range(0, n, block_rows):
        stop = min(start + block_rows, n)
        rows = np.arange(stop - start)
        lex = (terms[start:stop] @ terms_t).toarray()
        if lexical == "count":  # unique keys: count first, then the lower column
            lex *= n
            lex += n - 1 - np.arange(n)
            lex[lex < n] = -np.inf
        else:
            lex[lex <= 0] = -np.inf
        lex[rows, rows + start] = -np.inf
        pick, valid = _row_top_k(lex, half)
        lex_all[start:stop, : pick.shape[1]] = np.where(valid, pick, -1)
        sem = vectors[start:stop] @ vectors.T
        sem[rows, rows + start] = -np.inf
        chosen_rows, chosen_slots = np.nonzero(valid)
        sem[chosen_rows, pick[chosen_rows, chosen_slots]] = -np.inf
        pick, valid = _row_top_k(sem, half)
        sem_all[start:stop, : pick.shape[1]] = np.where(valid, pick, -1)
    both = np.hstack([lex_all, sem_all])
    src = np.repeat(np.arange(n), both.shape[1])
    dst = both.ravel()
    keep = dst >= 0
    src, dst = src[keep], dst[keep]
    adj = sp.csr_matrix(
        (np.ones(2 * len(src)), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n)
    )
    adj.data[:] = 1.0  # an edge chosen from both ends is still one unweighted edge
    return KnnChunkGraph(lex_all, sem_all, adj, pagerank(adj, damping=damping))


def knn_pagerank_scores(
    chunk_texts: Sequence[str],
    embedder: Embedder,
    k: int = 2,
    *,
    lexical: Lexical = "count",
    ngram_max: int = 1,
    min_chars: int = 2,
    damping: float = 0.85,
) -> np.ndarray:
    """KET-RAG chunk scores from the texts alone, for ``select_by_scores``.

    Keywords are every non-stop-word term (§5.1, the paper's default); a chunk's
    vector is the mean of its sentence embeddings (sentences embedded once).
    """
    texts = list(chunk_texts)
    corpus = UnitCorpus.build(
        [str(i) for i in range(len(texts))], texts, np.zeros(len(texts), dtype=np.int64),
        embedder, term_analyzer(ngram_max, min_chars),
    )
    return knn_chunk_graph(
        corpus.unit_terms, corpus.unit_vectors(), k, lexical=lexical, damping=damping
    ).scores


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
    """The harness factory (:class:`shared_core.strategies.UnitRetrieverFactory`), defaults."""
    return KeywordChannelRetriever.build(unit_ids, unit_texts, unit_tokens, embedder)
