"""New chunks turned into a :class:`CorpusState` of their own, ready to merge.

This is the expensive, failure-prone half of an update (sentence splitting,
embedding, term counting): it reads nothing of the index it will join, so an
embedder that times out halfway leaves the index exactly as it was.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ..embeddings.base import EMBED_BATCH, Embedder, normalise_rows
from ..text.sentences import split_sentences
from ..text.terms import Analyzer, count_terms, term_analyzer
from ..text.tokens import count_tokens_batch
from ..text.units import packed_runs
from .corpus import VECTOR_DTYPE, CorpusState, sorted_by_id


@functools.lru_cache(maxsize=4)
def _analyzer(analysis: tuple[int, int, str, bool]) -> Analyzer:
    return term_analyzer(*analysis)


def prepare_shard(ids: Sequence[str], texts: Sequence[str], metadata: Sequence[str],
                  embedder: Embedder, analysis: tuple[int, int, str, bool], unit_tokens: int,
                  direct_units: bool) -> CorpusState:
    """:func:`prepare_chunks` in a worker (another process or machine): the analyzer
    is built there from ``analysis``, ``term_analyzer``'s arguments, since a closure
    does not travel; the embedder travels as itself (the ``Embedder``s here rebuild
    their model or cache connection on the worker)."""
    return prepare_chunks(ids, texts, metadata, embedder=embedder, analyzer=_analyzer(analysis),
                          unit_tokens=unit_tokens, direct_units=direct_units)


def prepare_chunks(
    ids: Sequence[str],
    texts: Sequence[str],
    metadata: Sequence[str],
    *,
    embedder: Embedder,
    analyzer: Analyzer,
    unit_tokens: int,
    direct_units: bool,
    show_progress: bool = False,
) -> CorpusState:
    """Split, embed and count the given chunks (metadata as JSON text), in canonical order."""
    spans = [split_sentences(t) for t in texts]
    sentences = [t[s:e] for t, sp_ in zip(texts, spans, strict=True) for s, e in sp_]
    vectors = embed_in_batches(embedder, sentences, show_progress, "embedding sentences")
    vocabulary: dict[str, int] = {}
    counts = count_terms(sentences, vocabulary, analyzer)
    sizes = np.fromiter((len(s) for s in spans), dtype=np.int64, count=len(spans))
    flat_spans = np.asarray([x for s in spans for x in s], dtype=np.int64).reshape(-1, 2)
    starts = np.zeros(0, dtype=np.int64)
    unit_sizes = np.zeros(0, dtype=np.int64)
    unit_texts = list(texts)
    if unit_tokens:
        starts, unit_texts = _pack_units(texts, spans, sentences, unit_tokens)
        unit_sizes = count_tokens_batch(unit_texts)
    unit_vectors = None
    if direct_units:
        unit_vectors = embed_in_batches(embedder, unit_texts, show_progress, "embedding units")
    # terms in string order: a term's column never depends on which text showed it first
    terms = sorted(vocabulary)
    column = np.empty(len(vocabulary), dtype=np.int64)
    column[[vocabulary[t] for t in terms]] = np.arange(len(terms))
    matrix = sp.csr_matrix((counts.data, column[counts.indices], counts.indptr),
                           shape=(len(sentences), len(terms)))
    matrix.sort_indices()
    state = CorpusState(
        ids=tuple(ids),
        texts=tuple(texts),
        metadata=tuple(metadata),
        tokens=count_tokens_batch(texts),
        sentence_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        sentence_spans=flat_spans,
        sentence_vectors=vectors,
        terms=tuple(terms),
        sentence_terms=sp.csr_matrix(
            (matrix.data.astype(np.int32), matrix.indices.astype(np.int64),
             matrix.indptr.astype(np.int64)), shape=matrix.shape),
        unit_starts=starts,
        unit_tokens=unit_sizes,
        unit_vectors=unit_vectors,
    )
    return sorted_by_id(state)


def embed_in_batches(embedder: Embedder, texts: list[str], show_progress: bool,
                     label: str) -> np.ndarray:
    """Unit rows (``VECTOR_DTYPE``) for ``texts``, ``EMBED_BATCH`` at a time, each validated."""
    dim = embedder.dim
    if not texts:
        return np.zeros((0, dim), dtype=VECTOR_DTYPE)
    batches = range(0, len(texts), EMBED_BATCH)
    if show_progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=label, unit="batch")
    parts = []
    for start in batches:
        batch = texts[start : start + EMBED_BATCH]
        rows = normalise_rows(embedder.embed(batch), len(batch), dim, embedder.model_id)
        parts.append(rows.astype(VECTOR_DTYPE))
    return np.concatenate(parts)


def _pack_units(texts: Sequence[str], spans: list[list[tuple[int, int]]],
                sentences: list[str], max_tokens: int) -> tuple[np.ndarray, list[str]]:
    """Where each unit starts (a sentence position) and its text, chunk by chunk."""
    sizes = count_tokens_batch(sentences).tolist()
    starts: list[int] = []
    unit_texts: list[str] = []
    first = 0
    for text, chunk_spans in zip(texts, spans, strict=True):
        for a, b in packed_runs(sizes[first:first + len(chunk_spans)], max_tokens):
            starts.append(first + a)
            unit_texts.append(text[chunk_spans[a][0]:chunk_spans[b - 1][1]])
        first += len(chunk_spans)
    return np.asarray(starts, dtype=np.int64), unit_texts


def unit_texts(texts: Sequence[str], sentence_spans: np.ndarray, sentence_offsets: np.ndarray,
               unit_starts: np.ndarray) -> list[str]:
    """The text of every retrieval unit: sentence runs (``unit_starts``), or whole chunks."""
    if not len(unit_starts):
        return list(texts)
    offsets = np.append(unit_starts, len(sentence_spans)).tolist()
    chunk_of = np.repeat(np.arange(len(texts)), np.diff(sentence_offsets)).tolist()
    spans = sentence_spans.tolist()
    return [texts[chunk_of[first]][spans[first][0]:spans[end - 1][1]]
            for first, end in itertools.pairwise(offsets)]
