"""``ConceptGraphIndex``: chunks in, core-chunk selection and concept-graph retrieval out.

Stored state is only what is expensive or cannot be recomputed: chunk texts and
metadata, sentence spans, sentence embeddings and the sentence x term counts.
Everything else (TF-IDF concepts, concept vectors, edges, PageRank) is sparse
algebra on that state, recomputed after every add/delete in well under the
time the new sentences took to embed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from .concepts import count_terms, extract_concepts, term_analyzer
from .config import ConceptGraphConfig, SelectBy
from .embeddings import Embedder, QueryEmbedder, check_texts, normalise_rows
from .evidence import fused_search, inverse_document_frequency
from .fusion import ContextItem
from .graph import ConceptEdges, adjacency, concept_edges, concept_vectors, pagerank
from .lexical import BM25Scorer
from .retrieval import Hit, SearchTrace, Stage, local_search
from .selection import (
    Selection,
    chunk_scores,
    random_scores,
    select_by_scores,
    value_per_token,
)
from .text import count_tokens_batch, split_sentences
from .units import pack_sentences

EMBED_BATCH = 512
SelectionMethod = Literal["concept", "knn", "random"]


def content_id(text: str) -> str:
    """The id a chunk gets from its text alone, so re-adding it is a no-op."""
    return "c" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Chunk:
    id: str
    text: str
    tokens: int
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Why a chunk is in the context: the concept that brought it and at which stage.

    Stage ``"similarity"`` (fused ranking only): the unit contains no concept the
    query reached and is there on its own similarity; it has no concept.
    """

    concept: str | None
    concept_similarity: float | None
    stage: Stage
    hop: int

    def to_dict(self) -> dict[str, Any]:
        return {"concept": self.concept, "concept_similarity": self.concept_similarity,
                "stage": self.stage, "hop": self.hop}


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    chunk: Chunk
    score: float
    provenance: Provenance

    @property
    def id(self) -> str:
        return self.chunk.id

    @property
    def text(self) -> str:
        return self.chunk.text

    def metadata(self) -> dict[str, Any]:
        """What a framework object carries: the chunk's metadata plus id, score, provenance."""
        return {**self.chunk.metadata, "chunk_id": self.chunk.id, "score": self.score,
                "provenance": self.provenance.to_dict()}

    def to_context_item(self) -> ContextItem:
        """This hit as fusion input; a unit votes through the chunk it was cut from."""
        return ContextItem(self.chunk.id, self.chunk.text, self.chunk.tokens, self.score,
                           self.metadata(),
                           source_id=self.chunk.metadata.get("parent_chunk_id", ""))


@dataclass(frozen=True)
class RetrievalResult:
    query: str
    chunks: tuple[RetrievedChunk, ...]
    direct_concepts: tuple[str, ...]
    expanded_concepts: int
    stopped_by_budget: bool
    budget: int

    @property
    def tokens(self) -> int:
        return sum(c.chunk.tokens for c in self.chunks)

    @property
    def context(self) -> str:
        return "\n\n".join(c.text for c in self.chunks)

    def tokens_by_stage(self) -> dict[str, int]:
        out = {"direct": 0, "expanded": 0, "similarity": 0}
        for c in self.chunks:
            out[c.provenance.stage] += c.chunk.tokens
        return out


@dataclass
class _Derived:
    """Everything recomputed from the stored state after a change."""

    concepts: list[str]
    concept_terms: np.ndarray
    links: sp.csr_matrix
    links_csc: sp.csc_matrix
    vectors: np.ndarray
    sentence_counts: np.ndarray
    edges: ConceptEdges
    adjacency: sp.csr_matrix
    rank: np.ndarray
    unit_offsets: np.ndarray
    unit_tokens: np.ndarray
    unit_chunk: np.ndarray
    unit_links_csc: sp.csc_matrix
    unit_links_csr: sp.csr_matrix
    unit_linked_concepts: np.ndarray
    unit_idf: np.ndarray
    unit_bm25: BM25Scorer
    unit_vectors: np.ndarray | None
    concept_position: dict[str, int]
    concept_chunk_counts: np.ndarray


class ConceptGraphIndex:
    """The G2ConS concept graph over a set of chunks.

    >>> from shared_core import ConceptGraphIndex, HashingEmbedder
    >>> index = ConceptGraphIndex.from_texts(
    ...     ["Ada Lovelace wrote the first program.", "Charles Babbage designed the engine."],
    ...     embedder=HashingEmbedder())
    >>> index.retrieve("Who wrote the first program?").chunks[0].text
    'Ada Lovelace wrote the first program.'
    """

    def __init__(self, embedder: Embedder, config: ConceptGraphConfig | None = None) -> None:
        if not isinstance(embedder, Embedder):
            raise TypeError(
                f"embedder must implement the Embedder protocol (model_id, dim, embed), "
                f"got {type(embedder).__name__}"
            )
        if config is not None and not isinstance(config, ConceptGraphConfig):
            raise TypeError(f"config must be a ConceptGraphConfig, got {type(config).__name__}")
        self.embedder = embedder
        self.config = config or ConceptGraphConfig()
        self._analyzer = term_analyzer(self.config.ngram_max, self.config.min_term_chars)
        self._ids: list[str] = []
        self._position: dict[str, int] = {}
        self._texts: list[str] = []
        self._metadata: list[dict[str, Any]] = []
        self._tokens = np.zeros(0, dtype=np.int64)
        self._spans = np.zeros((0, 2), dtype=np.int64)
        self._offsets = np.zeros(1, dtype=np.int64)
        self._embeddings = np.zeros((0, embedder.dim), dtype=np.float32)
        self._vocabulary: dict[str, int] = {}
        self._sentence_terms = sp.csr_matrix((0, 0), dtype=np.int32)
        self._unit_starts = np.zeros(0, dtype=np.int64)  # first sentence of each unit
        self._unit_tokens = np.zeros(0, dtype=np.int64)
        # each retrieval unit's own embedding, kept only for chunk_similarity="direct"
        self._unit_vectors = np.zeros((0, embedder.dim), dtype=np.float32)
        self._derived: _Derived | None = None

    # ----------------------------------------------------------------- building
    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str],
        *,
        embedder: Embedder,
        ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        config: ConceptGraphConfig | None = None,
        show_progress: bool = False,
    ) -> ConceptGraphIndex:
        index = cls(embedder, config)
        index.add(texts, ids=ids, metadatas=metadatas, show_progress=show_progress)
        return index

    def add(
        self,
        texts: Sequence[str],
        *,
        ids: Sequence[str] | None = None,
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        show_progress: bool = False,
    ) -> list[str]:
        """Add chunks; returns their ids. A chunk already present (same id, same text) is skipped.

        Without ``ids`` a chunk's id is the hash of its text, so identical texts are
        one chunk. Raises on blank text, duplicate explicit ids, mismatched lengths,
        or an existing id that now holds different text.
        """
        texts = check_texts(texts)
        ids = self._check_ids(texts, ids)
        metadatas = self._check_metadatas(texts, metadatas)
        batch_first: dict[str, int] = {}
        for i, cid in enumerate(ids):  # identical texts under content ids are one chunk
            batch_first.setdefault(cid, i)
        new = [i for cid, i in batch_first.items() if not self._is_known(cid, texts[i])]
        if not new:
            return ids
        new_texts = [texts[i] for i in new]
        spans = [split_sentences(t) for t in new_texts]
        sentences = [t[s:e] for t, sp_ in zip(new_texts, spans, strict=True) for s, e in sp_]
        vectors = self._embed(sentences, show_progress)
        counts = count_terms(sentences, self._vocabulary, self._analyzer)

        base = len(self._spans)
        sizes = np.fromiter((len(s) for s in spans), dtype=np.int64, count=len(spans))
        self._offsets = np.concatenate([self._offsets, base + np.cumsum(sizes)])
        self._spans = np.concatenate(
            [self._spans, np.asarray([x for s in spans for x in s], dtype=np.int64).reshape(-1, 2)]
        )
        self._embeddings = np.concatenate([self._embeddings, vectors])
        self._sentence_terms = _vstack_grow(self._sentence_terms, counts, len(self._vocabulary))
        self._tokens = np.concatenate([self._tokens, count_tokens_batch(new_texts)])
        unit_texts = new_texts
        if self.config.unit_tokens:
            unit_texts = self._add_units(new_texts, spans, sentences, base)
        if self.config.chunk_similarity == "direct":
            self._unit_vectors = np.concatenate([self._unit_vectors,
                                                 self._embed(unit_texts, show_progress)])
        for i in new:
            self._position[ids[i]] = len(self._ids)
            self._ids.append(ids[i])
            self._texts.append(texts[i])
            self._metadata.append(metadatas[i])
        self._refresh()
        return ids

    def _add_units(self, texts: list[str], spans: list[list[tuple[int, int]]],
                   sentences: list[str], base: int) -> list[str]:
        """Pack the new chunks' sentences into units; count each unit's exact tokens."""
        sizes = count_tokens_batch(sentences).tolist()
        starts: list[int] = []
        unit_texts: list[str] = []
        first = 0
        for text, chunk_spans in zip(texts, spans, strict=True):
            local = pack_sentences(sizes[first:first + len(chunk_spans)], self.config.unit_tokens)
            for a, b in zip(local, [*local[1:], len(chunk_spans)], strict=True):
                starts.append(base + first + a)
                unit_texts.append(text[chunk_spans[a][0]:chunk_spans[b - 1][1]])
            first += len(chunk_spans)
        self._unit_starts = np.concatenate([self._unit_starts, np.asarray(starts, np.int64)])
        self._unit_tokens = np.concatenate([self._unit_tokens, count_tokens_batch(unit_texts)])
        return unit_texts

    def delete(self, ids: Iterable[str]) -> None:
        """Remove chunks everywhere: text, sentences, embeddings, concepts, edges."""
        if isinstance(ids, str):
            raise TypeError("delete takes an iterable of ids, not a single str")
        doomed = set(ids)
        unknown = sorted(doomed - set(self._position))
        if unknown:
            raise KeyError(f"unknown chunk ids: {', '.join(unknown[:5])}")
        if not doomed:
            return
        keep_chunk = np.array([cid not in doomed for cid in self._ids], dtype=bool)
        sentence_chunk = self._sentence_chunk()
        keep_sentence = keep_chunk[sentence_chunk]
        keep_unit = keep_chunk
        if self.config.unit_tokens:
            keep_unit = keep_sentence[self._unit_starts]
            new_position = np.cumsum(keep_sentence) - 1
            self._unit_starts = new_position[self._unit_starts[keep_unit]]
            self._unit_tokens = self._unit_tokens[keep_unit]
        if self.config.chunk_similarity == "direct":
            self._unit_vectors = self._unit_vectors[keep_unit]
        sizes = np.diff(self._offsets)[keep_chunk]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._spans = self._spans[keep_sentence]
        self._embeddings = self._embeddings[keep_sentence]
        terms = self._sentence_terms[keep_sentence]
        live = np.flatnonzero(np.asarray(terms.sum(axis=0)).ravel() > 0)
        self._sentence_terms = sp.csr_matrix(terms[:, live])
        names = list(self._vocabulary)
        self._vocabulary = {names[t]: i for i, t in enumerate(live)}
        self._tokens = self._tokens[keep_chunk]
        kept = np.flatnonzero(keep_chunk)
        self._ids = [self._ids[i] for i in kept]
        self._texts = [self._texts[i] for i in kept]
        self._metadata = [self._metadata[i] for i in kept]
        self._position = {cid: i for i, cid in enumerate(self._ids)}
        self._refresh()

    def _is_known(self, chunk_id: str, text: str) -> bool:
        pos = self._position.get(chunk_id)
        if pos is None:
            return False
        if self._texts[pos] != text:
            raise ValueError(
                f"chunk id {chunk_id!r} already holds different text; delete it before re-adding"
            )
        return True

    @staticmethod
    def _check_ids(texts: list[str], ids: Sequence[str] | None) -> list[str]:
        if ids is None:
            out = [content_id(t) for t in texts]
        else:
            if isinstance(ids, str) or not isinstance(ids, Sequence):
                raise TypeError(f"ids must be a sequence of str, got {type(ids).__name__}")
            out = list(ids)
            if len(out) != len(texts):
                raise ValueError(f"got {len(out)} ids for {len(texts)} texts")
            for i, cid in enumerate(out):
                if not isinstance(cid, str) or not cid.strip():
                    raise ValueError(f"ids[{i}] must be a non-empty str, got {cid!r}")
            seen: dict[str, int] = {}
            for i, cid in enumerate(out):
                if cid in seen:
                    raise ValueError(f"duplicate chunk id {cid!r} at positions {seen[cid]} and {i}")
                seen[cid] = i
        return out

    @staticmethod
    def _check_metadatas(
        texts: list[str], metadatas: Sequence[Mapping[str, Any]] | None
    ) -> list[dict[str, Any]]:
        if metadatas is None:
            return [{} for _ in texts]
        out = list(metadatas)
        if len(out) != len(texts):
            raise ValueError(f"got {len(out)} metadata entries for {len(texts)} texts")
        for i, meta in enumerate(out):
            if not isinstance(meta, Mapping):
                raise TypeError(f"metadatas[{i}] must be a mapping, got {type(meta).__name__}")
            try:
                json.dumps(dict(meta))
            except (TypeError, ValueError) as exc:
                raise TypeError(f"metadatas[{i}] is not JSON-serialisable: {exc}") from exc
        return [dict(m) for m in out]

    def _embed(self, sentences: list[str], show_progress: bool) -> np.ndarray:
        dim = self.embedder.dim
        if not sentences:
            return np.zeros((0, dim), dtype=np.float32)
        batches = range(0, len(sentences), EMBED_BATCH)
        if show_progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="embedding sentences", unit="batch")
        parts = []
        for start in batches:
            batch = sentences[start : start + EMBED_BATCH]
            parts.append(normalise_rows(self.embedder.embed(batch), len(batch), dim,
                                        self.embedder.model_id))
        return np.concatenate(parts)

    def _sentence_chunk(self) -> np.ndarray:
        return np.repeat(np.arange(len(self._ids)), np.diff(self._offsets))

    def _chunk_sentence_matrix(self) -> sp.csr_matrix:
        return _segment_matrix(self._offsets, len(self._spans))

    def _refresh(self) -> None:
        cfg = self.config
        n_terms = len(self._vocabulary)
        sentence_terms = sp.csr_matrix(self._sentence_terms, shape=(len(self._spans), n_terms))
        chunk_terms = sp.csr_matrix(self._chunk_sentence_matrix() @ sentence_terms)
        extracted = extract_concepts(chunk_terms, cfg.concepts_per_chunk)
        concept_terms = np.flatnonzero(np.diff(extracted.tocsc().indptr) > 0)
        if cfg.concept_links == "extracted":
            links = sp.csr_matrix(extracted[:, concept_terms], dtype=np.float32)
        else:
            links = sp.csr_matrix(chunk_terms[:, concept_terms] > 0, dtype=np.float32)
        # Eq. 1 over the sentences that contain the concept, within its linked chunks
        contains = sp.csr_matrix(sentence_terms[:, concept_terms] > 0, dtype=np.float32)
        in_linked_chunk = links[self._sentence_chunk()]
        sentence_concepts = sp.csr_matrix(contains.multiply(in_linked_chunk))
        vectors, sentence_counts = concept_vectors(sentence_concepts, self._embeddings)
        edges = concept_edges(links, vectors, cfg.theta_co, cfg.theta_sem)
        adj = adjacency(edges, len(concept_terms), weighted=True)
        rank_adj = adj if cfg.pagerank_weighted else adjacency(edges, len(concept_terms), False)
        # retrieval units: the chunks themselves, or sentence runs within them
        if cfg.unit_tokens:
            unit_offsets = np.append(self._unit_starts, len(self._spans)).astype(np.int64)
            unit_sentence = _segment_matrix(unit_offsets, len(self._spans))
            unit_links = sp.csr_matrix((unit_sentence @ sentence_concepts) > 0, dtype=np.float32)
            unit_terms = sp.csr_matrix(unit_sentence @ sentence_terms)
            unit_tokens = self._unit_tokens
        else:
            unit_offsets, unit_links, unit_tokens = self._offsets, links, self._tokens
            unit_terms = chunk_terms
        unit_vectors = None
        if cfg.chunk_similarity == "direct":
            unit_vectors = self._unit_vectors
        elif cfg.chunk_similarity == "mean" and len(self._ids):
            sums = np.asarray(_segment_matrix(unit_offsets, len(self._spans)) @ self._embeddings,
                              dtype=np.float32)
            unit_vectors = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
        names = list(self._vocabulary)
        links_csc = links.tocsc()
        unit_csc = unit_links.tocsc()
        self._derived = _Derived(
            concepts=[names[t] for t in concept_terms],
            concept_terms=concept_terms,
            links=links,
            links_csc=links_csc,
            vectors=vectors,
            sentence_counts=sentence_counts,
            edges=edges,
            adjacency=adj,
            rank=pagerank(rank_adj, cfg.pagerank_damping),
            unit_offsets=unit_offsets,
            unit_tokens=unit_tokens,
            unit_chunk=self._sentence_chunk()[unit_offsets[:-1]],
            unit_links_csc=unit_csc,
            unit_links_csr=unit_links,
            unit_linked_concepts=np.flatnonzero(np.diff(unit_csc.indptr) > 0),
            unit_idf=inverse_document_frequency(unit_links),
            unit_bm25=BM25Scorer.from_counts(unit_terms),
            unit_vectors=unit_vectors,
            concept_position={names[t]: i for i, t in enumerate(concept_terms)},
            concept_chunk_counts=np.diff(links_csc.indptr),
        )

    @property
    def _state(self) -> _Derived:
        if self._derived is None:
            self._refresh()
        assert self._derived is not None
        return self._derived

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._position

    @property
    def chunk_ids(self) -> list[str]:
        return list(self._ids)

    def get(self, chunk_id: str) -> Chunk:
        pos = self._position.get(chunk_id)
        if pos is None:
            raise KeyError(f"unknown chunk id {chunk_id!r}")
        return self._chunk(pos)

    def _chunk(self, pos: int) -> Chunk:
        return Chunk(self._ids[pos], self._texts[pos], int(self._tokens[pos]),
                     dict(self._metadata[pos]))

    @property
    def concepts(self) -> list[str]:
        return list(self._state.concepts)

    def concept_vector(self, concept: str) -> np.ndarray:
        return self._state.vectors[self._state.concepts.index(concept)].copy()

    def concept_chunks(self, concept: str) -> list[str]:
        """The chunk ids a concept links to."""
        state = self._state
        col = state.concepts.index(concept)
        rows = state.links_csc.indices[state.links_csc.indptr[col]:state.links_csc.indptr[col + 1]]
        return [self._ids[r] for r in sorted(rows)]

    @property
    def edges(self) -> list[tuple[str, str, int, float, float]]:
        """(concept, concept, Co, cosine, Dice) for every edge."""
        state = self._state
        e = state.edges
        return [(state.concepts[a], state.concepts[b], int(c), float(s), float(d))
                for a, b, c, s, d in zip(e.source, e.target, e.cooccurrence, e.cosine, e.dice,
                                         strict=True)]

    def concept_pagerank(self) -> dict[str, float]:
        state = self._state
        return dict(zip(state.concepts, state.rank.tolist(), strict=True))

    def stats(self) -> dict[str, Any]:
        state = self._state
        n_concepts = len(state.concepts)
        degree = np.diff(state.adjacency.indptr)
        return {
            "chunks": len(self._ids),
            "tokens": int(self._tokens.sum()),
            "sentences": len(self._spans),
            "terms": len(self._vocabulary),
            "concepts": n_concepts,
            "edges": len(state.edges),
            "isolated_concepts": int((degree == 0).sum()),
            "mean_degree": float(degree.mean()) if n_concepts else 0.0,
            "embedding_model": self.embedder.model_id,
            "embedding_dim": self.embedder.dim,
        }

    # ------------------------------------------------------------ selection
    def chunk_scores(self) -> dict[str, float]:
        """Each chunk's importance from its concepts' PageRank (``config.chunk_score``)."""
        scores = chunk_scores(self._state.links, self._state.rank, self.config.chunk_score)
        return dict(zip(self._ids, scores.tolist(), strict=True))

    def select(
        self,
        kappa: float | None = None,
        *,
        method: SelectionMethod = "concept",
        by: SelectBy | None = None,
        prompt_tokens_per_chunk: int = 0,
        seed: int = 0,
    ) -> Selection:
        """The core chunks: the top ``kappa`` share by chunk score, with the cost report.

        ``method="concept"`` is G2ConS (PageRank of the chunk's concepts);
        ``"knn"`` is KET-RAG's PageRank over a KNN chunk graph (K=2, one lexical
        and one semantic neighbour per chunk) built from this index's terms and
        sentence vectors, so it costs no embedding; ``"random"`` is the baseline.
        ``by`` (default ``config.select_by``) makes ``kappa`` a share of chunks or
        of tokens; by tokens, concept and KNN scores are divided by the chunk's
        tokens (value per token), and random stays a uniform order.
        """
        kappa = self.config.kappa if kappa is None else kappa
        by = self.config.select_by if by is None else by
        ConceptGraphConfig(kappa=kappa, select_by=by)  # validates with the knob's name
        if method == "concept":
            scores = chunk_scores(self._state.links, self._state.rank, self.config.chunk_score)
        elif method == "knn":
            scores = self._knn_scores()
        elif method == "random":
            scores = random_scores(len(self._ids), seed)
        else:
            raise ValueError(f"method must be concept, knn or random, got {method!r}")
        if by == "tokens" and method != "random":
            scores = value_per_token(scores, self._tokens)
        return select_by_scores(self._ids, scores, self._tokens, kappa, prompt_tokens_per_chunk,
                                by=by)

    def _knn_scores(self) -> np.ndarray:
        from .ketrag import knn_chunk_graph

        if len(self._ids) < 2:
            return np.ones(len(self._ids))
        segments = self._chunk_sentence_matrix()
        n_terms = len(self._vocabulary)
        chunk_terms = segments @ sp.csr_matrix(self._sentence_terms,
                                               shape=(len(self._spans), n_terms))
        sums = np.asarray(segments @ self._embeddings, dtype=np.float32)
        vectors = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
        return knn_chunk_graph(chunk_terms, vectors, 2, damping=self.config.pagerank_damping).scores

    # ------------------------------------------------------------ retrieval
    def embed_query(self, query: str) -> np.ndarray:
        """The unit query vector: the model's query embedding where it has one."""
        check_texts([query], "query")
        embedder = self.embedder
        rows = ([embedder.embed_query(query)] if isinstance(embedder, QueryEmbedder)
                else embedder.embed([query]))
        return normalise_rows(rows, 1, embedder.dim, embedder.model_id)[0]

    def retrieve(
        self,
        query: str,
        *,
        top_k: int | None = None,
        hops: int | None = None,
        budget: int | None = None,
    ) -> RetrievalResult:
        """Retrieve for ``query`` with the config's ``ranking``; each chunk has its provenance."""
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        return self.retrieve_by_vector(self.embed_query(query), query=query, top_k=top_k,
                                       hops=hops, budget=budget)

    async def aretrieve(
        self,
        query: str,
        *,
        top_k: int | None = None,
        hops: int | None = None,
        budget: int | None = None,
    ) -> RetrievalResult:
        """:meth:`retrieve` in a worker thread, so an event loop is never blocked."""
        return await asyncio.to_thread(self.retrieve, query, top_k=top_k, hops=hops,
                                       budget=budget)

    def retrieve_by_vector(
        self,
        query_vector: np.ndarray,
        *,
        query: str = "",
        top_k: int | None = None,
        hops: int | None = None,
        budget: int | None = None,
    ) -> RetrievalResult:
        overrides: dict[str, Any] = {"top_k": top_k, "hops": hops, "budget": budget}
        cfg = replace(self.config, **{k: v for k, v in overrides.items() if v is not None})
        q = np.asarray(query_vector, dtype=np.float32)
        if q.shape != (self.embedder.dim,):
            raise ValueError(f"query vector has shape {q.shape}, expected ({self.embedder.dim},)")
        state = self._state
        hits: list[Hit]
        exact = self._exact_seeds(query) if cfg.exact_match_seeds else None
        if not self._ids:
            hits, trace = [], SearchTrace((), 0, 0, False)
        elif cfg.ranking == "fused":
            hits, trace = fused_search(
                state.vectors @ q,
                state.unit_links_csr,
                state.adjacency,
                self._all_unit_similarity(q),
                state.unit_tokens,
                state.unit_idf,
                lexical=state.unit_bm25.scores(self._term_ids(query)) if cfg.lexical else None,
                top_k=cfg.top_k,
                hops=cfg.hops,
                decay=cfg.expansion_decay,
                rrf_k=cfg.rrf_k,
                budget=cfg.budget,
                overflow=cfg.overflow,
                exact=exact,
                usable=state.unit_linked_concepts,
            )
        else:
            hits, trace = local_search(
                state.vectors @ q,
                state.unit_links_csc,
                state.adjacency,
                self._unit_scorer(q),
                state.unit_tokens,
                top_k=cfg.top_k,
                hops=cfg.hops,
                budget=cfg.budget,
                overflow=cfg.overflow,
                seeds=exact,
            )
        chunks = tuple(
            RetrievedChunk(
                self._unit(h.chunk),
                h.score,
                Provenance(state.concepts[h.concept], h.concept_similarity, h.stage, h.hop)
                if h.concept >= 0 else Provenance(None, None, h.stage, 0),
            )
            for h in hits
        )
        return RetrievalResult(
            query=query,
            chunks=chunks,
            direct_concepts=tuple(state.concepts[c] for c in trace.direct_concepts),
            expanded_concepts=trace.expanded_concepts,
            stopped_by_budget=trace.stopped_by_budget,
            budget=cfg.budget,
        )

    def _term_ids(self, query: str) -> list[int]:
        """The query's terms (the concept analyzer's words) that occur in the corpus."""
        return [self._vocabulary[t] for t in self._analyzer(query) if t in self._vocabulary]

    def _exact_seeds(self, query: str) -> np.ndarray:
        """The query's own terms that are concepts, rarest (fewest chunks) first."""
        state = self._state
        found = {state.concept_position[t] for t in self._analyzer(query)
                 if t in state.concept_position}
        return np.asarray(sorted(found, key=lambda c: (state.concept_chunk_counts[c], c)),
                          dtype=np.int64)

    def _unit(self, pos: int) -> Chunk:
        """A retrieval unit: the chunk itself, or a sentence run tagged with its chunk."""
        if not self.config.unit_tokens:
            return self._chunk(pos)
        state = self._state
        parent = int(state.unit_chunk[pos])
        first, end = int(state.unit_offsets[pos]), int(state.unit_offsets[pos + 1])
        text = self._texts[parent][self._spans[first][0]:self._spans[end - 1][1]]
        k = pos - int(np.searchsorted(state.unit_chunk, parent))
        chunk_id = self._ids[parent]
        return Chunk(f"{chunk_id}#u{k}", text, int(state.unit_tokens[pos]),
                     {**self._metadata[parent], "parent_chunk_id": chunk_id, "unit": k})

    def _all_unit_similarity(self, q: np.ndarray) -> np.ndarray:
        """cos(query, unit) for every unit: one pass over the sentence vectors, no copies."""
        state = self._state
        if state.unit_vectors is not None:
            return np.asarray(state.unit_vectors @ q)
        return np.maximum.reduceat(self._embeddings @ q, state.unit_offsets[:-1])

    def _unit_scorer(self, q: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """cos(query, unit) for given unit positions: their best sentence, or their mean."""
        state = self._state
        unit_vectors, offsets, embeddings = state.unit_vectors, state.unit_offsets, self._embeddings

        def score(chunks: np.ndarray) -> np.ndarray:
            if unit_vectors is not None:
                return np.asarray(unit_vectors[chunks] @ q)
            starts = offsets[chunks]
            lengths = offsets[chunks + 1] - starts
            segment = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            sentences = np.arange(lengths.sum()) - np.repeat(segment - starts, lengths)
            return np.maximum.reduceat(embeddings[sentences] @ q, segment)

        return score

    # ---------------------------------------------------------- persistence
    def save(self, path: str) -> None:
        """Write the index to a directory atomically (JSON + .npy, never pickle)."""
        from .store import save_index

        save_index(self, path)

    @classmethod
    def load(cls, path: str, embedder: Embedder) -> ConceptGraphIndex:
        """Read an index saved by :meth:`save`; ``embedder`` must be the one it was built with."""
        from .store import load_index

        return load_index(path, embedder)


def _segment_matrix(offsets: np.ndarray, n_sentences: int) -> sp.csr_matrix:
    """0/1 (segments x sentences) matrix of consecutive sentence ranges given by offsets."""
    return sp.csr_matrix(
        (np.ones(n_sentences, dtype=np.int32), np.arange(n_sentences), offsets),
        shape=(len(offsets) - 1, n_sentences),
    )


def _vstack_grow(top: sp.csr_matrix, bottom: sp.csr_matrix, n_cols: int) -> sp.csr_matrix:
    """Stack two CSR matrices whose column counts grew with the vocabulary."""
    top = sp.csr_matrix((top.data, top.indices, top.indptr), shape=(top.shape[0], n_cols))
    bottom = sp.csr_matrix((bottom.data, bottom.indices, bottom.indptr),
                           shape=(bottom.shape[0], n_cols))
    return sp.csr_matrix(sp.vstack([top, bottom], format="csr"), dtype=np.int32)
