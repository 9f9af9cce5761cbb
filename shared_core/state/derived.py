"""What an index derives from its stored chunks: concepts, the concept graph, PageRank, units.

All of it is sparse algebra on a :class:`~shared_core.state.corpus.CorpusState` (TF-IDF
concepts, Eq. 1 concept vectors, filtered edges, PageRank, the retrieval units'
links, idf and BM25 weights), recomputed when the chunks change in well under the
time the new sentences took to embed. A ``DerivedGraph`` is immutable like the
state it comes from, so readers can hold one while a writer builds the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..config import ConceptGraphConfig
from ..embeddings.base import sparse_times_vectors, unit_norm_rows
from ..graph.concepts import extract_concepts
from ..graph.edges import ConceptEdges, adjacency, concept_edges, concept_vectors
from ..graph.pagerank import pagerank
from ..search.bm25 import BM25Scorer
from ..search.fused import inverse_document_frequency
from ..search.vector_index import VectorIndex
from ..text.sentences import segment_matrix
from .corpus import CorpusState

ANN_MIN_ROWS = 200_000  # vector_index="auto": below this many vectors, an exact scan


@dataclass(frozen=True, eq=False)
class DerivedGraph:
    """The concept graph and the retrieval units' views of it, for one corpus state."""

    concepts: tuple[str, ...]
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
    ann: VectorIndex | None = None
    ann_row_unit: np.ndarray | None = None


def segment_means(offsets: np.ndarray, sentence_vectors: np.ndarray) -> np.ndarray:
    """Unit-norm mean of each segment's sentence vectors (chunks or units), float32.

    The sum runs in float64 (:func:`~shared_core.embeddings.base.sparse_times_vectors`);
    the index's stored results depend on exactly this rounding.
    """
    segments = segment_matrix(offsets, len(sentence_vectors))
    means = sparse_times_vectors(segments, sentence_vectors)
    return unit_norm_rows(np.asarray(means, dtype=np.float32))


def chunk_term_counts(corpus: CorpusState) -> sp.csr_matrix:
    """(chunks x terms) counts: each chunk's sentences summed."""
    n_sent = len(corpus.sentence_spans)
    return sp.csr_matrix(segment_matrix(corpus.sentence_offsets, n_sent) @ corpus.sentence_terms)


def derive_graph(corpus: CorpusState, config: ConceptGraphConfig,
                 ann: VectorIndex | None = None) -> DerivedGraph:
    """Concepts, graph and unit views of ``corpus`` under ``config``'s graph knobs.

    ``ann`` is an approximate vector index built earlier over the same vectors
    (one saved with the index); it is used when it holds as many rows.
    """
    cfg = config
    n_sent = len(corpus.sentence_spans)
    sentence_terms = corpus.sentence_terms
    chunk_terms = chunk_term_counts(corpus)
    extracted = extract_concepts(chunk_terms, cfg.concepts_per_chunk)
    concept_terms = np.flatnonzero(np.diff(extracted.tocsc().indptr) > 0)
    if cfg.concept_links == "extracted":
        links = sp.csr_matrix(extracted[:, concept_terms], dtype=np.float32)
    else:
        links = sp.csr_matrix(chunk_terms[:, concept_terms] > 0, dtype=np.float32)
    # Eq. 1 over the sentences that contain the concept, within its linked chunks
    contains = sp.csr_matrix(sentence_terms[:, concept_terms] > 0, dtype=np.float32)
    in_linked_chunk = links[corpus.sentence_chunk()]
    sentence_concepts = sp.csr_matrix(contains.multiply(in_linked_chunk))
    vectors, sentence_counts = concept_vectors(sentence_concepts, corpus.sentence_vectors)
    edges = concept_edges(links, vectors, cfg.theta_co, cfg.theta_sem)
    adj = adjacency(edges, len(concept_terms), weighted=True)
    rank_adj = adj if cfg.pagerank_weighted else adjacency(edges, len(concept_terms), False)
    # retrieval units: the chunks themselves, or sentence runs within them
    unit_offsets = corpus.unit_offsets()
    if corpus.has_units:
        unit_sentence = segment_matrix(unit_offsets, n_sent)
        unit_links = sp.csr_matrix((unit_sentence @ sentence_concepts) > 0, dtype=np.float32)
        unit_terms = sp.csr_matrix(unit_sentence @ sentence_terms)
        unit_tokens = corpus.unit_tokens
    else:
        unit_links, unit_tokens, unit_terms = links, corpus.tokens, chunk_terms
    unit_vectors = corpus.unit_vectors if cfg.chunk_similarity == "direct" else None
    if cfg.chunk_similarity == "mean" and len(corpus):
        unit_vectors = segment_means(unit_offsets, corpus.sentence_vectors)
    ann, ann_row_unit = _vector_search_index(cfg, corpus.sentence_vectors, unit_vectors,
                                             unit_offsets, ann)
    names = corpus.terms
    links_csc = links.tocsc()
    unit_csc = unit_links.tocsc()
    concepts = tuple(names[t] for t in concept_terms.tolist())
    return DerivedGraph(
        concepts=concepts,
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
        unit_chunk=corpus.sentence_chunk()[unit_offsets[:-1]],
        unit_links_csc=unit_csc,
        unit_links_csr=unit_links,
        unit_linked_concepts=np.flatnonzero(np.diff(unit_csc.indptr) > 0),
        unit_idf=inverse_document_frequency(unit_links),
        unit_bm25=BM25Scorer.from_counts(unit_terms),
        unit_vectors=unit_vectors,
        concept_position={c: i for i, c in enumerate(concepts)},
        concept_chunk_counts=np.diff(links_csc.indptr),
        ann=ann,
        ann_row_unit=ann_row_unit,
    )


def uses_ann(config: ConceptGraphConfig, rows: int) -> bool:
    """Whether ``config.vector_index`` asks for the approximate index over ``rows`` vectors.

    ``"auto"`` without the ``ann`` extra installed stays exact (``stats()`` warns).
    """
    if config.vector_index == "auto":
        from ..search.ann import ann_available

        return rows >= ANN_MIN_ROWS and ann_available()
    return config.vector_index == "hnsw"


def _vector_search_index(
    config: ConceptGraphConfig, sentence_vectors: np.ndarray,
    unit_vectors: np.ndarray | None, unit_offsets: np.ndarray, built: VectorIndex | None,
) -> tuple[VectorIndex | None, np.ndarray | None]:
    """The approximate index over what unit similarity is made of, and each row's unit.

    Units with their own vectors are indexed directly; otherwise a unit's
    similarity is its best sentence's, and the sentences are indexed.
    """
    rows = sentence_vectors if unit_vectors is None else unit_vectors
    if not len(rows) or not uses_ann(config, len(rows)):
        return None, None
    from ..search.ann import HnswVectorIndex

    row_unit = (None if unit_vectors is not None
                else np.repeat(np.arange(len(unit_offsets) - 1), np.diff(unit_offsets)))
    if built is not None and len(built) == len(rows):
        return built, row_unit
    return HnswVectorIndex.build(rows), row_unit
