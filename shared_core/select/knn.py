"""KET-RAG's core-chunk selection without the LLM: KNN-chunk-graph PageRank.

KET-RAG (§5.1, Algorithm 3 lines 2-8) links every chunk to its K/2 lexically
most similar chunks (shared keywords) and its K/2 semantically most similar
other chunks (cosine), and ranks chunks by PageRank on that graph to choose the
core chunks. :class:`UnitCorpus` is the sentence-level preparation it scores
from (sentences, their embeddings, sentence x term counts), shared with the
benchmark comparators (``benchmarks.comparators``).

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

from ..embeddings.base import EMBED_BATCH, Embedder, check_texts, unit_norm_rows
from ..graph.concepts import tfidf
from ..graph.pagerank import pagerank
from ..text.sentences import segment_matrix, split_sentences
from ..text.terms import Analyzer, count_terms, term_analyzer

Lexical = Literal["count", "tfidf"]


# --------------------------------------------------------------------------- KNN graph
@dataclass(frozen=True)
class KnnChunkGraph:
    """The KNN chunk graph and its PageRank.

    ``lexical[i]`` / ``semantic[i]`` are the neighbours chunk i chose, best
    first, padded with -1 (no chunk shares a keyword with i, or n is small).
    ``adjacency`` is the undirected 0/1 union of all choices; ``scores`` its
    PageRank, ready for :func:`shared_core.select.scores.select_by_scores`.
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
        # float32 sums, not state.derived.segment_means' float64: the baselines' scores depend on it
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
