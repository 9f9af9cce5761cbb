"""What an index derives from its stored chunks: concepts, the concept graph, PageRank, units.

All of it is sparse algebra on a :class:`~shared_core.state.corpus.CorpusState` (TF-IDF
concepts, Eq. 1 concept vectors, filtered edges, PageRank, the retrieval units'
links, idf and BM25 weights), recomputed when the chunks change in well under the
time the new sentences took to embed. A ``DerivedGraph`` is immutable like the
state it comes from, so readers can hold one while a writer builds the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property, partial
from typing import Literal

import numpy as np
import scipy.sparse as sp

from ..config import ConceptGraphConfig
from ..embeddings.base import sparse_times_vectors, unit_norm_rows
from ..graph.concepts import extract_concepts
from ..graph.edges import (
    ConceptEdges,
    StrongPairs,
    adjacency,
    chunk_counts,
    concept_sums,
    edges_of,
    strong_pairs,
    vectors_of_sums,
)
from ..graph.entries import column_subset
from ..graph.loops import dice_adjacency_compiled
from ..graph.pagerank import pagerank
from ..search.bm25 import BM25Scorer
from ..search.candidates import GatheredUnits
from ..search.coded_scan import CodedScan
from ..search.concepts import ConceptHnsw
from ..search.external import EngineVectorIndex, StoredRows, VectorStoreBackend
from ..search.fused import inverse_document_frequency
from ..search.vector_index import VectorIndex
from ..search.walk import WalkGraph
from ..text.sentences import segment_matrix
from .corpus import CorpusState
from .rows import Rows, VectorRows, contiguous_rows
from .spill import VectorSpill, held_as_mapped, spilled_arrays

# vector_index="auto": below this many vectors, an exact scan. Measured on an idle
# machine (benchmarks/RESULTS.md, scale issue, fifth round): query p50 exact / HNSW
# 17.3 / 26.6 ms at 44 K sentence rows, 30.3 / 30.8 at 89 K, 43.9 / 37.8 at 133 K
ANN_MIN_ROWS = 100_000
# concept_search="auto": below this many concept vectors, the scan (benchmarks/RESULTS.md,
# scale issue, thirty-eighth round)
CONCEPT_ANN_MIN = 100_000
# concept_search="auto": from this many concept vectors (and where the graph is not
# searched) the scan of their byte codes (search.coded_scan). Over the scale corpus's
# concepts the codes took 1.8-2.1 ms against 1.6-2.3 at 16,384, 6.1-6.7 against 8.7-10.5
# at 65,381; at 8,192 the float32 scan fits in the cache: 0.33-0.38 ms against 0.95-1.38
# (benchmarks/results/NOTES.md, forty-fourth round)
CONCEPT_CODES_MIN = 16_384
# summed_concepts: a graph keeps the fixed-point sum of each concept in at least this many
# sentences, so that a refresh adds the changed sentences to it rather than reading every
# sentence of the concept again. A sum is 8 bytes a dimension, as much as two float32
# sentence rows: a concept in fewer sentences is summed again, when it changes, from
# those. At 10 K passages (benchmarks/results/NOTES.md, scale issue, twenty-first round)
# the 8,593 concepts in 8 or more sentences hold 83 % of the sentence-concept links
# and their sums take 26 MB; the concepts a 1 % add changed outside them had 2,772 links.
SUMS_MIN_SENTENCES = 8


@dataclass(frozen=True, eq=False)
class DerivedGraph:
    """The concept graph and the retrieval units' views of it, for one corpus state.

    ``pairs`` holds every concept pair passing theta_co (``edges`` are those whose
    cosine passed too), so that a refresh updates counts instead of recounting;
    None for a graph loaded from a save that kept only the edges. The edge list
    is derived from the pairs when first asked for, not held (the adjacency holds
    the graph); ``edge_list`` is kept only where there are no pairs.

    Two fields are caches that change after publication; a race between readers
    only repeats their work. ``unit_tokens_unconfirmed`` marks the units whose
    token counts were read from a save and not yet recounted from their texts
    (None when every count was counted here); retrieval clears a unit's mark the
    first time it returns it. ``gathered_units`` keeps the rows of the unit sets
    every query scores (the rank sample), ``coded_units`` their rows decoded from
    codes (``rescore_from="codes"``).
    """

    concepts: tuple[str, ...]
    concept_terms: np.ndarray
    links: sp.csr_matrix
    links_csc: sp.csc_matrix
    # a derivation's one array; a refresh leaves the unchanged concepts' rows where they
    # are (state.rows.VectorRows), as a corpus's sentence vectors
    vectors: Rows
    sentence_counts: np.ndarray
    pairs: StrongPairs | None
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
    walk: WalkGraph | None = None
    ann: VectorIndex | None = None
    ann_rows: np.ndarray | None = None
    ann_row_unit: np.ndarray | None = None
    unit_tokens_unconfirmed: np.ndarray | None = None
    gathered_units: GatheredUnits = field(default_factory=GatheredUnits, repr=False)
    coded_units: GatheredUnits = field(default_factory=GatheredUnits, repr=False)
    edge_list: ConceptEdges | None = None
    # the fixed-point summed sentence vectors (graph.edges.concept_sums) of the concepts
    # ``summed_concepts`` (sorted; :func:`summed_concepts`), one row each, which a refresh
    # updates by the changed sentences alone; None where no concept's sum is kept (or in a
    # graph loaded from a save made before they were: its first refresh sums what it needs)
    concept_sums: np.ndarray | VectorRows | None = None
    summed_concepts: np.ndarray | None = None
    # HNSW over the concept vectors (:func:`uses_concept_graph`), as a derivation that
    # searches it builds it, an update keeps it, or a save holds it; None: built by the first
    # query that asks for it (:attr:`concept_hnsw`)
    concept_index: ConceptHnsw | None = None
    # the concept vectors' byte codes (``concept_search="codes"``) an update carried from
    # the state before (``CodedScan.refreshed``) or a save held; None: coded by the first
    # query that scans them (:attr:`concept_codes`)
    coded_concepts: CodedScan | None = None

    @cached_property
    def edges(self) -> ConceptEdges:
        """The edges, Dice-weighted, sorted by (source, target): ``edge_list``, or the
        pairs whose cosine passed (computed once, on first use: 350 MB at a million
        passages that retrieval never reads)."""
        if self.edge_list is not None:
            return self.edge_list
        assert self.pairs is not None, "a graph holds its pairs or its edges"
        return edges_of(self.pairs, self.concept_chunk_counts.astype(np.float64))

    @cached_property
    def concept_hnsw(self) -> ConceptHnsw:
        """HNSW over the vectors of the concepts that link a unit, for
        ``concept_search="hnsw"``: ``concept_index``, or built by the first query that
        asks for it and kept with this state (``search.concepts``)."""
        if self.concept_index is not None:
            return self.concept_index
        return ConceptHnsw.build(self.vectors, self.unit_linked_concepts)

    def held_concept_index(self) -> ConceptHnsw | None:
        """The concept HNSW this graph holds or a query has built, else None."""
        held = self.__dict__.get("concept_hnsw", self.concept_index)
        return held if isinstance(held, ConceptHnsw) else None

    @cached_property
    def concept_codes(self) -> CodedScan:
        """Byte codes of the vectors of the concepts that link a unit, for
        ``concept_search="codes"``: ``coded_concepts``, or coded by the first query that
        scans them and kept with this state (a race between readers only codes them
        twice). A save holds them: coding is one pass over the vectors, 0.3 s for 65 K
        concepts but 8.5 s for 1.55 M."""
        if self.coded_concepts is not None:
            return self.coded_concepts
        return CodedScan.build(self.vectors, self.unit_linked_concepts)

    def held_concept_codes(self) -> CodedScan | None:
        """The byte codes this graph holds or a query has made, else None."""
        held = self.__dict__.get("concept_codes", self.coded_concepts)
        return held if isinstance(held, CodedScan) else None

    @cached_property
    def mean_unit_tokens(self) -> float | None:
        """The retrieval units' mean token count (None without units): every query reads
        it to choose the walk, and at a million units a mean is a millisecond."""
        return float(self.unit_tokens.mean()) if len(self.unit_tokens) else None

    @property
    def edge_count(self) -> int:
        """How many edges: each is twice in the symmetric adjacency, never on its diagonal."""
        return self.adjacency.nnz // 2


def segment_means(offsets: np.ndarray, sentence_vectors: Rows,
                  only: np.ndarray | None = None) -> np.ndarray:
    """Unit-norm mean of each segment's sentence vectors (chunks or units), float32.

    ``only`` restricts it to some segments (a refresh's new units); each row is
    the same either way. The sum runs in float64
    (:func:`~shared_core.embeddings.base.sparse_times_vectors`); the index's
    stored results depend on exactly this rounding.
    """
    segments = segment_matrix(offsets, len(sentence_vectors))
    if only is not None:
        segments = segments[only]
    means = sparse_times_vectors(segments, sentence_vectors)
    return unit_norm_rows(np.asarray(means, dtype=np.float32))


def chunk_term_counts(corpus: CorpusState) -> sp.csr_matrix:
    """(chunks x terms) counts: each chunk's sentences summed, columns sorted in each row
    (a product's are not; BM25 and the concept links read them faster sorted)."""
    n_sent = len(corpus.sentence_spans)
    counts = sp.csr_matrix(segment_matrix(corpus.sentence_offsets, n_sent)
                           @ corpus.sentence_terms)
    counts.sort_indices()
    return counts


@dataclass(frozen=True, eq=False)
class ConceptLinks:
    """Which terms are concepts and which chunks and sentences they link (the first stage).

    ``chunk_terms`` is None for links read from a save (their BM25 weights were saved).
    """

    chunk_terms: sp.csr_matrix | None
    concept_terms: np.ndarray
    links: sp.csr_matrix
    sentence_concepts: sp.csr_matrix


def link_concepts(corpus: CorpusState, config: ConceptGraphConfig,
                  concept_terms: np.ndarray | None = None) -> ConceptLinks:
    """TF-IDF concepts of ``corpus`` and their chunk and sentence links.

    Always computed whole: one new chunk moves every idf, so any chunk's top
    keywords may change. It is a few sparse passes, cheap next to the edges.
    ``concept_terms``, which terms are concepts (a saved, checksummed list),
    spares the extraction where links do not need it (``concept_links="contains"``).
    """
    sentence_terms = corpus.sentence_terms
    chunk_terms = chunk_term_counts(corpus)
    extracted = None
    if concept_terms is None or config.concept_links == "extracted":
        extracted = extract_concepts(chunk_terms, config.concepts_per_chunk)
        concept_terms = np.flatnonzero(np.diff(extracted.tocsc().indptr) > 0)
    if extracted is not None and config.concept_links == "extracted":
        links = column_subset(sp.csr_matrix(extracted), concept_terms).astype(np.float32)
    else:
        links = column_subset(chunk_terms, concept_terms, positive=True)
    # Eq. 1 over the sentences that contain the concept, within its linked chunks
    contains = column_subset(sentence_terms, concept_terms, positive=True)
    if config.concept_links == "contains":
        # a chunk's counts are its sentences' summed: it links every concept they contain
        return ConceptLinks(chunk_terms, concept_terms, links, contains)
    in_linked_chunk = links[corpus.sentence_chunk()]
    return ConceptLinks(chunk_terms, concept_terms, links,
                        sp.csr_matrix(contains.multiply(in_linked_chunk)))


def derive_graph(corpus: CorpusState, config: ConceptGraphConfig,
                 ann: VectorSearch | None = None,
                 vector_store: VectorStoreBackend | None = None,
                 spill: VectorSpill | None = None) -> DerivedGraph:
    """Concepts, graph and unit views of ``corpus`` under ``config``'s graph knobs.

    ``ann`` is an approximate vector index built earlier over the same vectors
    (one saved with the index); it is used when it indexes as many vectors.
    ``vector_store``: an outside engine that holds the vectors and finds candidates
    instead (it must hold this corpus's rows; see ``search.external``). ``spill``:
    where a newly built approximate index is mapped from (:func:`spilled_search`).
    """
    # the vector index first, while the heap holds only the chunks: its build is the
    # largest allocation, and once spilled only its graph links stay on the heap
    unit_vectors = unit_vectors_of(corpus, config)
    search = vector_search_index(config, corpus, unit_vectors, ann, vector_store, spill)
    found = link_concepts(corpus, config)
    all_sums, sentence_counts = concept_sums(found.sentence_concepts, corpus.sentence_vectors)
    vectors, summed = vectors_of_sums(all_sums), summed_concepts(sentence_counts)
    sums = None
    if summed is not None:  # every concept's: the array itself, not a copy
        kept = all_sums if len(summed) == len(all_sums) else all_sums[summed]
        vectors, sums = spilled_arrays([vectors, kept], spill)
    del all_sums
    pairs = spilled_pairs(strong_pairs(found.links, vectors, config.theta_co, config.theta_sem),
                           spill)
    links_csc = found.links.tocsc()
    adj = edge_adjacency(pairs, chunk_counts(links_csc), spill)
    return assemble_graph(corpus, config, found, vectors, sentence_counts, adj, pairs,
                          unit_vectors, search, links_csc=links_csc, spill=spill, sums=sums,
                          summed=summed)


def summed_concepts(sentence_counts: np.ndarray) -> np.ndarray | None:
    """The concepts whose fixed-point sums a graph keeps for the next refresh (sorted),
    or None for none: those in at least ``SUMS_MIN_SENTENCES`` sentences.

    Both a derivation and a refresh keep exactly these, so an updated graph holds the
    same sums as one derived from its chunks.
    """
    summed = np.flatnonzero(np.asarray(sentence_counts) >= SUMS_MIN_SENTENCES)
    return summed if len(summed) else None


def edge_adjacency(pairs: StrongPairs, chunk_count: np.ndarray,
                   spill: VectorSpill | None) -> sp.csr_matrix:
    """The Dice-weighted symmetric adjacency of the pairs' edges (``chunk_count``: each
    concept's chunks, :func:`~shared_core.graph.edges.chunk_counts`), in a spill file
    when large. With numba it is written from the pairs in one loop; numpy makes the
    edge list first and lets it go. The same matrix either way."""
    made = dice_adjacency_compiled(pairs.source, pairs.target, pairs.count, pairs.edge,
                                   chunk_count)
    if made is None:
        made = adjacency(edges_of(pairs, chunk_count), len(chunk_count), weighted=True)
    return held_as_mapped(made, spill)


def rank_adjacency(adj: sp.csr_matrix, weighted: bool) -> sp.csr_matrix:
    """The matrix PageRank walks: the Dice-weighted adjacency, or its entries as ones
    (``pagerank_weighted=False``; every Dice weight is positive, so no entry is lost)."""
    if weighted:
        return adj
    return sp.csr_matrix((np.ones(adj.nnz), adj.indices, adj.indptr), shape=adj.shape,
                         copy=False)


def spilled_pairs(pairs: StrongPairs, spill: VectorSpill | None) -> StrongPairs:
    """``pairs`` with its arrays in one spill file, when together they are large enough
    to spill: a gigabyte at a million passages, then in the page cache as a loaded
    index's are."""
    return StrongPairs(*spilled_arrays([getattr(pairs, f.name) for f in fields(pairs)], spill))


def unit_vectors_of(corpus: CorpusState, config: ConceptGraphConfig) -> np.ndarray | None:
    """The vectors units are compared by: stored (``direct``), sentence means, or none (max)."""
    if config.chunk_similarity == "direct":
        return corpus.unit_vectors
    if config.chunk_similarity == "mean" and len(corpus):
        return segment_means(corpus.unit_offsets(), corpus.sentence_vectors)
    return None


@dataclass(frozen=True, eq=False)
class VectorSearch:
    """An approximate index and each of its rows' unit (-1: a row whose chunk is gone).

    ``rows`` maps each indexed row to the vector it holds: a sentence, or a unit
    when units have vectors of their own. A refresh appends new rows and marks
    deleted ones instead of rebuilding (faiss's HNSW cannot remove a row).
    """

    index: VectorIndex
    rows: np.ndarray


@dataclass(frozen=True, eq=False)
class GraphMatrices:
    """The sparse matrices a graph derives from its chunks' term counts, as a save keeps
    them so that a load maps them instead of deriving them again.

    ``unit_links`` is None when the retrieval units are the chunks (they are the
    concept links then). ``walk_postings`` and ``walk_entry_unit`` are the walk's
    concept -> sentence postings and each entry's unit (:class:`WalkGraph`), kept
    where queries walk the sentences: a first query had built them.
    """

    concept_links: sp.csr_matrix
    sentence_concepts: sp.csr_matrix
    unit_links: sp.csr_matrix | None
    unit_bm25: sp.csc_matrix
    # the edges' Dice-weighted adjacency (None in saves before the twelfth round)
    concept_adjacency: sp.csr_matrix | None = None
    # the walk's postings (None in saves before the sixteenth round, or without a walk)
    walk_postings: sp.csc_matrix | None = None
    walk_entry_unit: np.ndarray | None = None
    # the concept links column-major (None in saves before the eighteenth round)
    concept_postings: sp.csc_matrix | None = None

    @classmethod
    def of(cls, graph: DerivedGraph, walk: bool = False) -> GraphMatrices | None:
        """Those of ``graph`` (None if it has no walk graph to take the sentences' from);
        ``walk``: with the walk's postings, built here if no query has built them."""
        if graph.walk is None:
            return None
        own_units = graph.unit_links_csr is not graph.links
        return cls(graph.links, graph.walk.links_csr,
                   graph.unit_links_csr if own_units else None, graph.unit_bm25.weights,
                   graph.adjacency, graph.walk.links_csc if walk else None,
                   graph.walk.entry_unit if walk else None, graph.links_csc)


def unit_views(corpus: CorpusState, found: ConceptLinks, saved: GraphMatrices | None = None,
               ) -> tuple[sp.csr_matrix, np.ndarray, BM25Scorer]:
    """The retrieval units' concept links, token counts and BM25 weights: the chunks'
    own, or those of sentence runs within them; ``saved``: read from a save."""
    unit_tokens = corpus.unit_tokens if corpus.has_units else corpus.tokens
    if saved is not None:
        unit_links = found.links if saved.unit_links is None else saved.unit_links
        return unit_links, unit_tokens, BM25Scorer(saved.unit_bm25)
    if not corpus.has_units:
        if found.chunk_terms is None:
            raise ValueError("links read from a save need their saved BM25 weights")
        return found.links, unit_tokens, BM25Scorer.from_counts(found.chunk_terms)
    unit_sentence = segment_matrix(corpus.unit_offsets(), len(corpus.sentence_spans))
    unit_links = sp.csr_matrix((unit_sentence @ found.sentence_concepts) > 0, dtype=np.float32)
    unit_links.sort_indices()  # a product's rows are not; a save keeps them sorted
    unit_terms = sp.csr_matrix(unit_sentence @ corpus.sentence_terms)
    return unit_links, unit_tokens, BM25Scorer.from_counts(unit_terms)


def assemble_graph(corpus: CorpusState, config: ConceptGraphConfig, found: ConceptLinks,
                   vectors: Rows, sentence_counts: np.ndarray, adj: sp.csr_matrix,
                   pairs: StrongPairs | None, unit_vectors: np.ndarray | None,
                   search: VectorSearch | None, rank: np.ndarray | None = None,
                   links_csc: sp.csc_matrix | None = None,
                   saved: GraphMatrices | None = None,
                   edge_list: ConceptEdges | None = None,
                   spill: VectorSpill | None = None,
                   sums: np.ndarray | VectorRows | None = None,
                   summed: np.ndarray | None = None) -> DerivedGraph:
    """The graph from its concepts, vectors and the edges' Dice-weighted adjacency:
    PageRank (unless given, e.g. a checked saved one), unit views. ``links_csc``:
    ``found.links`` column-major, when the caller has it already; ``saved``: the
    units' links and BM25 weights read from a save; ``edge_list``: the edges of a
    graph without ``pairs`` (see :class:`DerivedGraph`); ``spill``: where the walk
    keeps what its first query builds (:class:`~shared_core.search.walk.WalkGraph`);
    ``sums``: the fixed-point sums the vectors of the concepts ``summed`` are made from
    (None: none kept)."""
    if (sums is None) != (summed is None):
        raise ValueError("kept concept sums and the concepts they belong to go together")
    cfg = config
    links, concept_terms = found.links, found.concept_terms
    rank_adj = rank_adjacency(adj, cfg.pagerank_weighted)
    unit_offsets = corpus.unit_offsets()
    unit_links, unit_tokens, unit_bm25 = unit_views(corpus, found, saved)
    names = corpus.terms
    if links_csc is None:
        links_csc = links.tocsc()
    unit_csc = links_csc if unit_links is links else unit_links.tocsc()
    sentence_concepts = found.sentence_concepts
    if saved is None:  # made here, on the heap: held as a loaded index maps its saved ones
        same_links = unit_links is links
        links, links_csc = held_as_mapped(links, spill), held_as_mapped(links_csc, spill)
        unit_links = links if same_links else held_as_mapped(unit_links, spill)
        unit_csc = links_csc if same_links else held_as_mapped(unit_csc, spill)
        unit_bm25 = BM25Scorer(held_as_mapped(unit_bm25.weights, spill))
        sentence_concepts = held_as_mapped(sentence_concepts, spill)
    concepts = tuple(names[t] for t in concept_terms.tolist())
    unit_chunk = corpus.sentence_chunk()[unit_offsets[:-1]]
    return DerivedGraph(
        concepts=concepts,
        concept_terms=concept_terms,
        links=links,
        links_csc=links_csc,
        vectors=vectors,
        sentence_counts=sentence_counts,
        pairs=pairs,
        adjacency=adj,
        rank=(pagerank(rank_adj, cfg.pagerank_damping, symmetric=True) if rank is None
              else rank),
        unit_offsets=unit_offsets,
        unit_tokens=unit_tokens,
        unit_chunk=unit_chunk,
        unit_links_csc=unit_csc,
        unit_links_csr=unit_links,
        unit_linked_concepts=np.flatnonzero(np.diff(unit_csc.indptr) > 0),
        unit_idf=inverse_document_frequency(unit_csc),
        unit_bm25=unit_bm25,
        unit_vectors=unit_vectors,
        concept_position={c: i for i, c in enumerate(concepts)},
        concept_chunk_counts=np.diff(links_csc.indptr),
        walk=WalkGraph(sentence_concepts, sentence_units(unit_offsets),
                       given_csc=None if saved is None else saved.walk_postings,
                       given_entry_unit=None if saved is None else saved.walk_entry_unit,
                       keep_arrays=None if spill is None else partial(spilled_arrays,
                                                                      spill=spill)),
        ann=None if search is None else search.index,
        ann_rows=None if search is None else search.rows,
        ann_row_unit=None if search is None else _row_units(
            search.rows, None if unit_vectors is not None else unit_offsets),
        unit_tokens_unconfirmed=np.ones(len(unit_tokens), dtype=bool)
        if corpus.tokens_read else None,
        edge_list=edge_list if pairs is None else None,
        concept_sums=sums,
        summed_concepts=summed,
    )


def wants_concept_graph(config: ConceptGraphConfig, graph: DerivedGraph) -> bool:
    """Whether the config asks to find ``graph``'s direct concepts through its concept
    HNSW: ``concept_search="hnsw"``, or ``"auto"`` for the fused ranking from
    ``CONCEPT_ANN_MIN`` concept vectors."""
    if config.concept_search == "auto":
        return config.ranking == "fused" and len(graph.vectors) >= CONCEPT_ANN_MIN
    return config.concept_search == "hnsw"


def uses_concept_graph(config: ConceptGraphConfig, graph: DerivedGraph) -> bool:
    """Whether the fused ranking searches the concept HNSW: where it is wanted, except
    that ``"auto"`` scans without the ``ann`` extra installed, or where the graph it
    holds failed its check when built (``stats()`` warns of both)."""
    if config.concept_search == "auto" and wants_concept_graph(config, graph):
        from ..search.ann import ann_available

        return ann_available() and failed_self_recall(graph) is None
    return wants_concept_graph(config, graph)


def concept_search_used(config: ConceptGraphConfig, graph: DerivedGraph
                        ) -> Literal["hnsw", "codes", "exact"]:
    """How the fused ranking finds ``graph``'s direct concepts under ``config``: the
    concept HNSW (:func:`uses_concept_graph`), the scan of their byte codes
    (``concept_search="codes"``, or ``"auto"`` from ``CONCEPT_CODES_MIN`` concept vectors
    where the graph is not searched, with the ``ann`` extra), or the float32 scan."""
    if uses_concept_graph(config, graph):
        return "hnsw"
    if config.concept_search == "auto" and config.ranking == "fused":
        from ..search.ann import ann_available

        if len(graph.vectors) >= CONCEPT_CODES_MIN and ann_available():
            return "codes"
    return "codes" if config.concept_search == "codes" else "exact"


def failed_self_recall(graph: DerivedGraph) -> float | None:
    """The share the concept HNSW ``graph`` holds found, when built, of the scan's
    concepts for its own concepts as queries (``ConceptHnsw.measured_self_recall``),
    where it is under ``search.concepts.MIN_SELF_RECALL``, as on random-like vectors;
    None where it passed (or no graph is held). A failed graph is kept, so that no load
    builds it again, and ``"auto"`` scans."""
    from ..search import concepts

    held = graph.held_concept_index()
    recall = None if held is None else held.self_recall
    return recall if recall is not None and recall < concepts.MIN_SELF_RECALL else None


def with_concept_search(graph: DerivedGraph, config: ConceptGraphConfig) -> DerivedGraph:
    """``graph`` holding its concept HNSW, built here if the config searches one
    (:func:`uses_concept_graph`) and it holds none: a state's queries then never wait."""
    if not uses_concept_graph(config, graph) or graph.held_concept_index() is not None:
        return graph
    return replace(graph, concept_index=ConceptHnsw.build(graph.vectors,
                                                          graph.unit_linked_concepts))


def sentence_units(unit_offsets: np.ndarray) -> np.ndarray:
    """Each sentence's retrieval unit (the walk's ``node_unit``), from the units' offsets."""
    return np.repeat(np.arange(len(unit_offsets) - 1), np.diff(unit_offsets))


def with_vector_search(graph: DerivedGraph, corpus: CorpusState, config: ConceptGraphConfig,
                       spill: VectorSpill | None = None) -> DerivedGraph:
    """``graph`` with the vector index ``config.vector_index`` asks for, the rest shared:
    nothing else in a graph depends on how unit candidates are found, and deriving it
    again had cost a 1 M index a second graph beside its own."""
    search = vector_search_index(config, corpus, graph.unit_vectors, None, None, spill)
    return replace(
        graph, ann=None if search is None else search.index,
        ann_rows=None if search is None else search.rows,
        ann_row_unit=None if search is None else _row_units(
            search.rows, None if graph.unit_vectors is not None else graph.unit_offsets),
        gathered_units=GatheredUnits(), coded_units=GatheredUnits())


def _row_units(rows: np.ndarray, unit_offsets: np.ndarray | None) -> np.ndarray | None:
    """Each indexed row's unit (-1 for a dead row); None when rows are the units, in order."""
    if unit_offsets is None:
        if len(rows) and np.array_equal(rows, np.arange(len(rows))):
            return None
        return rows
    sentence_unit = np.repeat(np.arange(len(unit_offsets) - 1), np.diff(unit_offsets))
    return np.where(rows >= 0, sentence_unit[np.maximum(rows, 0)], -1)


def uses_ann(config: ConceptGraphConfig, rows: int) -> bool:
    """Whether ``config.vector_index`` asks for the approximate index over ``rows`` vectors.

    ``"auto"`` without the ``ann`` extra installed stays exact (``stats()`` warns).
    """
    if config.vector_index == "auto":
        from ..search.ann import ann_available

        return rows >= ANN_MIN_ROWS and ann_available()
    return config.vector_index == "hnsw"


def vector_search_index(config: ConceptGraphConfig, corpus: CorpusState,
                         unit_vectors: np.ndarray | None,
                         built: VectorSearch | None,
                         vector_store: VectorStoreBackend | None = None,
                         spill: VectorSpill | None = None) -> VectorSearch | None:
    """The approximate index over what unit similarity is made of, or None for exact.

    Units with their own vectors are indexed directly; otherwise a unit's
    similarity is its best sentence's, and the sentences are indexed. ``built``
    (a saved index over the same rows) is used when it holds as many rows. An
    outside ``vector_store`` is used whatever the size: the user chose it. A new
    index goes through ``spill`` (:func:`spilled_search`).
    """
    rows = corpus.sentence_vectors if unit_vectors is None else unit_vectors
    if vector_store is not None:
        return VectorSearch(EngineVectorIndex(vector_store, StoredRows.of(corpus, unit_vectors)),
                            np.arange(len(rows)))
    if not len(rows) or not uses_ann(config, len(rows)):
        return None
    if built is not None and int((built.rows >= 0).sum()) == len(rows):
        return built
    return built_search(rows, spill)


def built_search(rows: Rows, spill: VectorSpill | None) -> VectorSearch:
    """A new HNSW index over every row of ``rows``, in order (through ``spill``)."""
    from ..search.ann import HnswSegments

    built = HnswSegments.build(contiguous_rows(rows, spill))  # faiss reads one array
    return spilled_search(VectorSearch(built, np.arange(len(rows))), spill)


def spilled_search(search: VectorSearch, spill: VectorSpill | None) -> VectorSearch:
    """``search`` with each HNSW segment whose codes are large enough to spill, and that
    maps no file yet, mapped from a spill file, as a loaded index maps its saved files:
    the heap then holds only their graph links (at a million passages, 1.7 GB less)."""
    from ..search.ann import HnswSegments

    index = search.index
    if spill is None or not isinstance(index, HnswSegments):
        return search
    segments = list(index.segments)
    for position, segment in enumerate(segments):
        if segment.source is None and spill.spills(segment.code_bytes()):
            with spill.temporary_file() as file:
                segments[position] = segment.mapped_through(file)
    if segments == list(index.segments):
        return search
    return VectorSearch(HnswSegments(tuple(segments)), search.rows)
