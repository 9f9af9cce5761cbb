"""A derived graph read back from disk, checked against the chunks it claims to come from.

Deriving the graph is most of what a load would cost, and most of that is counting
co-occurrences over every pair of concepts that share chunks. A save therefore
keeps every pair passing ``theta_co`` with its count (the strong pairs, which a
later refresh updates instead of recounting) and PageRank; a load derives
everything else again, exactly as a build would, and checks the saved parts
against it: every count must pass ``theta_co`` and fit in both concepts' chunk
counts, every pair's cosine is recomputed from the re-derived concept vectors (so
its edge decision and margin are fresh, never read from disk), and PageRank must
be a fixed point of the resulting edges. Only the counts themselves (and that no
pair is missing) rest on the checksum: recounting them is the cost a saved graph
avoids.

Saves since the scale issue's sixth round also keep which terms are concepts,
the concept vectors and each strong pair's cosine decision and margin: a load
then takes them as read, after the rules that need no re-derivation (sorted
in-range concept terms; finite vectors of unit length, zero where no sentence
backs a concept; margins in range with their decision's sign), instead of
extracting concepts, averaging every sentence vector and taking every pair's
cosine again. Like the counts, their values rest on the checksum. A load with
``verify=True`` derives them all again and refuses a save whose stored values
differ: the check for an index from a source one does not trust.

Saves since the eleventh round also keep the graph's sparse matrices
(:class:`~shared_core.state.derived.GraphMatrices`: concept and sentence links, the
units' links and BM25 weights), which the store maps: a load then neither links chunks
to concepts nor weighs terms again. Their structure is checked by the store; here, that
each concept is in as many sentences as its term (one count over the terms). Their
values rest on the checksum; ``verify=True`` derives them and compares. Saves since
the twelfth round keep the concept adjacency too: a load maps it instead of building it
from the pairs' edges, after two checks that need no building (it holds each edge of
the saved pairs twice, and the saved PageRank is its fixed point). The edge list is not
made at all until something asks for it.

Saves since the seventeenth round keep, where the graph keeps them, the concept vectors'
exact fixed-point sums, which a refresh updates by the changed sentences: a load checks
that they give the saved vectors to the bit, ``verify=True`` sums the sentences again.
Until the twentieth round a graph kept every concept's sum or none; since the
twenty-first it keeps those of the concepts in enough sentences
(:func:`~shared_core.state.derived.summed_concepts`) and the save lists them. Older
saves' sums are every concept's; saves without sums load as before, and the first
refresh sums what it needs from the sentences.

Saves from before strong pairs were kept hold only the edges; they still load,
each edge's cosine checked against ``theta_sem``, but such a graph has no strong
pairs, so its first refresh derives the graph whole.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

import numpy as np
import scipy.sparse as sp

from ..config import ConceptGraphConfig
from ..embeddings.base import UNIT_NORM_TOLERANCE, finite_row_norms
from ..graph.edges import (
    SUM_BLOCK,
    ConceptEdges,
    StrongPairs,
    adjacency,
    certificate_slack,
    chunk_counts,
    concept_sums,
    cosine_decisions,
    sentence_counts,
    strong_pairs_of,
    vectors_of_sums,
)
from ..graph.pagerank import pagerank_residual
from ..search.coded_scan import CodedScan
from ..search.concepts import ConceptHnsw
from ..search.external import VectorStoreBackend
from ..search.walk import WalkGraph
from .corpus import CorpusState
from .derived import (
    ConceptLinks,
    DerivedGraph,
    GraphMatrices,
    VectorSearch,
    assemble_graph,
    edge_adjacency,
    link_concepts,
    rank_adjacency,
    sentence_units,
    summed_concepts,
    unit_vectors_of,
    unit_views,
    vector_search_index,
)
from .rows import Rows, VectorRows
from .spill import VectorSpill

# L1 distance a saved PageRank may move in one more power step, per concept: ten times
# the per-node tolerance PageRank stops at
RANK_RESIDUAL_PER_CONCEPT = 1e-9
# how far past [-1 - theta_sem, 1 - theta_sem] a saved margin may be (float32 rounding)
MARGIN_TOLERANCE = 1e-3
# saved pairs checked this many at a time (their temporaries stay in cache)
PAIR_CHECK_BLOCK = 1 << 18


@dataclass(frozen=True, eq=False)
class SavedGraph:
    """The parts of a derived graph a save keeps: concept pairs, their counts, PageRank.

    ``strong`` says what the pairs are: every pair passing theta_co (True), or only
    the edges (False: saves made before strong pairs were kept, and graphs loaded
    from them and not refreshed since). ``concept_terms``, ``vectors``, ``edge``
    and ``margin`` are what the load would otherwise derive again (None in saves
    made before they were kept; ``edge`` and ``margin`` only with strong pairs).
    """

    source: np.ndarray
    target: np.ndarray
    cooccurrence: np.ndarray
    rank: np.ndarray
    strong: bool = True
    concept_terms: np.ndarray | None = None
    vectors: Rows | None = None  # a refreshed graph's may be rows left in place
    edge: np.ndarray | None = None
    margin: np.ndarray | None = None
    matrices: GraphMatrices | None = None
    sums: np.ndarray | VectorRows | None = None  # fixed-point sums of ``summed`` (None: none)
    summed: np.ndarray | None = None  # sorted; None with sums: every concept (older saves)
    concept_index: ConceptHnsw | None = None  # the concept HNSW, where the save holds one
    concept_codes: CodedScan | None = None  # the concept codes, where the save holds them


def saved_parts(graph: DerivedGraph, walk: bool = False,
                concept_graph: bool = False, codes: bool = False) -> SavedGraph:
    """What a save keeps of ``graph``; ``walk``: with the walk's postings (where queries
    walk the sentences); ``concept_graph``: with the concept HNSW it holds (where the
    config asks for it, ``derived.wants_concept_graph``, even where ``"auto"`` scans
    because it failed its check, so that no load builds it again; not one that a
    reconfigured view's query built, which a load would need faiss for and never read);
    ``codes``: with the concept codes (where the config scans them,
    ``derived.concept_search_used``), made here if no query has made them: coding had
    been 8.5 s of the first query after a load at 1.55 M concepts."""
    matrices = GraphMatrices.of(graph, walk)
    concept_index = graph.held_concept_index() if concept_graph else None
    concept_codes = graph.concept_codes if codes else None
    if graph.pairs is None:
        edges = graph.edges
        return SavedGraph(edges.source, edges.target, edges.cooccurrence, graph.rank,
                          strong=False, concept_terms=graph.concept_terms,
                          vectors=graph.vectors, matrices=matrices, sums=graph.concept_sums,
                          summed=graph.summed_concepts, concept_index=concept_index,
                          concept_codes=concept_codes)
    pairs = graph.pairs
    return SavedGraph(pairs.source, pairs.target, pairs.count, graph.rank,
                      concept_terms=graph.concept_terms, vectors=graph.vectors,
                      edge=pairs.edge, margin=pairs.margin, matrices=matrices,
                      sums=graph.concept_sums, summed=graph.summed_concepts,
                      concept_index=concept_index, concept_codes=concept_codes)


def restore_graph(corpus: CorpusState, config: ConceptGraphConfig, saved: SavedGraph,
                  ann: VectorSearch | None = None, verify: bool = False,
                  vector_store: VectorStoreBackend | None = None,
                  spill: VectorSpill | None = None) -> DerivedGraph:
    """The graph of ``corpus`` with its saved parts; ValueError if they disagree.

    ``verify`` derives the concepts, vectors and cosine decisions again even
    where the save holds them, and refuses stored ones that differ. ``spill``:
    where an approximate index built here (none was saved) is mapped from.
    """
    stored_terms = saved.concept_terms
    if stored_terms is not None:
        n_terms = len(corpus.terms)
        if not (stored_terms.ndim == 1 and np.all((stored_terms >= 0) & (stored_terms < n_terms))
                and np.all(np.diff(stored_terms) > 0)):
            raise ValueError(f"the saved concept terms must be sorted, distinct terms of the "
                             f"{n_terms}")
    matrices = saved.matrices
    if matrices is not None and stored_terms is not None and not verify:
        found = ConceptLinks(None, stored_terms, matrices.concept_links,
                             matrices.sentence_concepts)
    else:
        found = link_concepts(corpus, config, None if verify else stored_terms)
        if matrices is not None:
            _check_same_matrices(matrices, found, corpus)
    if stored_terms is not None and not np.array_equal(found.concept_terms, stored_terms):
        raise ValueError("the saved concept terms are not the concepts the chunks give")
    n = len(found.concept_terms)
    counts = sentence_counts(found.sentence_concepts)
    if found.chunk_terms is None:  # the links were read, not derived from the terms
        _check_sentence_counts(corpus, config, found.concept_terms, counts)
    if matrices is not None and matrices.walk_postings is not None:
        _check_walk_postings(matrices, counts, corpus.unit_offsets(), verify)
    sums, summed = saved.sums, _summed_of(saved, n)
    if saved.vectors is None or verify:
        derived_sums, _ = concept_sums(found.sentence_concepts, corpus.sentence_vectors)
        vectors = vectors_of_sums(derived_sums)
        if saved.vectors is not None and not np.array_equal(saved.vectors, vectors):
            raise ValueError("the saved concept vectors are not the means of their sentences")
        if sums is not None and not np.array_equal(sums, derived_sums[summed]):
            raise ValueError("the saved concept sums are not the sums of their sentences")
        if sums is None:
            summed = summed_concepts(counts)
        sums = None if summed is None else derived_sums[summed]
    else:
        vectors = _checked_vectors(cast(np.ndarray, saved.vectors), counts, corpus.dim)  # read
        if sums is not None:
            assert summed is not None
            _check_sums(sums, vectors, summed)
    src, dst, co = saved.source, saved.target, saved.cooccurrence
    what = "pair" if saved.strong else "edge"
    if not len(src) == len(dst) == len(co):
        raise ValueError(f"the saved {what} arrays differ in length")
    links_csc = _concept_postings(matrices, found, verify)
    linked = chunk_counts(links_csc)
    _check_pairs(src, dst, co, n, linked, max(config.theta_co, 1), what)
    stored_adj = None if matrices is None else matrices.concept_adjacency
    pairs: StrongPairs | None = None
    edge_list: ConceptEdges | None = None
    if saved.strong:
        pairs = _restored_pairs(saved, src, dst, co, vectors, config.theta_sem, verify)
        edge_total = int(np.count_nonzero(pairs.edge))
    else:
        edge, _ = cosine_decisions(vectors, src, dst, config.theta_sem)
        if not np.all(edge):
            raise ValueError("a saved edge is below theta_co or theta_sem")
        edge_list = ConceptEdges(src, dst, co, 2.0 * co / (linked[src] + linked[dst]))
        edge_total = len(edge_list)
    if stored_adj is not None and not verify:
        adj = stored_adj
    elif pairs is not None:
        adj = edge_adjacency(pairs, linked, None)
    else:
        assert edge_list is not None
        adj = adjacency(edge_list, n, weighted=True)
    if stored_adj is not None and (stored_adj.nnz != 2 * edge_total or (
            verify and not _same_sparse(stored_adj, adj))):
        raise ValueError(f"the saved concept adjacency is not that of the saved {what}s")
    rank = saved.rank
    if rank.shape != (n,) or not np.all(rank >= 0) or (
            n and pagerank_residual(rank_adjacency(adj, config.pagerank_weighted), rank,
                                    config.pagerank_damping) > RANK_RESIDUAL_PER_CONCEPT * n):
        raise ValueError("the saved PageRank is not the PageRank of the saved "
                         f"{'pairs' if saved.strong else 'edges'}")
    unit_vectors = unit_vectors_of(corpus, config)
    search = vector_search_index(config, corpus, unit_vectors, ann, vector_store, spill)
    graph = assemble_graph(corpus, config, found, vectors, counts, adj, pairs, unit_vectors,
                           search, rank=rank, links_csc=links_csc,
                           saved=matrices if found.chunk_terms is None else None,
                           edge_list=edge_list, spill=spill, sums=sums, summed=summed)
    if saved.concept_codes is not None:
        saved.concept_codes.check_holds(graph.unit_linked_concepts)
        if verify:
            saved.concept_codes.check_bound(graph.vectors)
        graph = replace(graph, coded_concepts=saved.concept_codes)
    if saved.concept_index is None:
        return graph
    saved.concept_index.check_holds(graph.unit_linked_concepts, corpus.dim)
    return replace(graph, concept_index=saved.concept_index)


def _check_sentence_counts(corpus: CorpusState, config: ConceptGraphConfig,
                           concept_terms: np.ndarray, counts: np.ndarray) -> None:
    """Saved sentence links that fit their concepts' terms: each concept in as many
    sentences as its term (``contains``), or at most as many (``extracted``: only those
    in its linked chunks). One count over the terms, not the derivation it replaces."""
    in_sentences = sentence_counts(corpus.sentence_terms)[concept_terms]
    fits = (np.array_equal(counts, in_sentences) if config.concept_links == "contains"
            else bool(np.all(counts <= in_sentences)))
    if not fits:
        raise ValueError("the saved sentence concepts do not hold the sentences their "
                         "concepts' terms are in")


def _check_walk_postings(matrices: GraphMatrices, counts: np.ndarray,
                         unit_offsets: np.ndarray, verify: bool) -> None:
    """Saved walk postings whose columns hold as many sentences as each concept is in
    (the store checked their structure and ranges); ``verify``: the sentence links'
    transpose, each entry's unit that of its sentence."""
    postings, entry_unit = matrices.walk_postings, matrices.walk_entry_unit
    assert postings is not None and entry_unit is not None, "the store reads both or neither"
    if not np.array_equal(np.diff(postings.indptr), counts):
        raise ValueError("the saved walk postings do not hold each concept's sentences")
    if not verify:
        return
    derived = WalkGraph(matrices.sentence_concepts, sentence_units(unit_offsets))
    units = derived.entry_unit
    assert units is not None, "the walk's nodes are sentences, each in a unit"
    if not (_same_sparse(postings, derived.links_csc) and np.array_equal(entry_unit, units)):
        raise ValueError("the saved walk postings are not those of the sentence concepts")


def _concept_postings(matrices: GraphMatrices | None, found: ConceptLinks,
                      verify: bool) -> sp.csc_matrix:
    """The concept links column-major: the saved copy where there is one whose columns
    hold as many chunks as the links give each concept (``verify``: the links'
    transpose, entry for entry), else transposed here."""
    saved = None if matrices is None else matrices.concept_postings
    if saved is None or verify:
        derived = sp.csc_matrix(found.links)
        if saved is not None and not _same_sparse(saved, derived):
            raise ValueError("the saved concept postings are not the concept links")
        return derived
    # the links' stored entries per column, counted without transposing them
    if not np.array_equal(np.diff(saved.indptr), sentence_counts(found.links)):
        raise ValueError("the saved concept postings do not hold each concept's chunks")
    return saved


def _check_same_matrices(matrices: GraphMatrices, found: ConceptLinks,
                         corpus: CorpusState) -> None:
    """Refuse saved matrices that differ from those derived again (``verify``)."""
    unit_links, _, bm25 = unit_views(corpus, found)
    derived = {"concept_links": found.links, "sentence_concepts": found.sentence_concepts,
               "unit_links": unit_links if corpus.has_units else None,
               "unit_bm25": bm25.weights}
    for name, theirs in derived.items():
        mine = getattr(matrices, name)
        if (mine is None) != (theirs is None) or (mine is not None and not _same_sparse(
                mine, theirs)):
            raise ValueError(f"the saved {name.replace('_', ' ')} are not those the chunks give")


def _same_sparse(one: sp.spmatrix, other: sp.spmatrix) -> bool:
    """The same shape and stored entries, in the same order, bit for bit."""
    return one.shape == other.shape and all(
        np.array_equal(getattr(one, part), getattr(other, part))
        for part in ("indptr", "indices", "data"))


def _check_pairs(src: np.ndarray, dst: np.ndarray, co: np.ndarray, n: int,
                 linked: np.ndarray, least: int, what: str) -> None:
    """Raise unless the saved pairs join two of the ``n`` concepts (source < target),
    sorted and distinct, each count in [``least``, the chunks both concepts link].

    A block at a time in the saved integer types: tens of millions of pairs at a
    million passages, whose int64 copies and temporaries took seconds of a load.
    """
    if len(co) and int(co.min()) < least:
        raise ValueError(f"a saved {what} is below theta_co")
    chunks = linked.astype(np.int64)
    for start in range(0, len(src), PAIR_CHECK_BLOCK):
        stop = start + PAIR_CHECK_BLOCK
        s, d = src[start:stop + 1], dst[start:stop + 1]  # one past: order across blocks
        later, earlier = s[1:], s[:-1]
        if not (np.all((s >= 0) & (s < d) & (d < n))
                and np.all((later > earlier) | ((later == earlier) & (d[1:] > d[:-1])))):
            raise ValueError(f"saved {what}s must join two of the {n} concepts, source < "
                             "target, sorted, each pair once")
        s, d = s[:PAIR_CHECK_BLOCK], d[:PAIR_CHECK_BLOCK]
        if np.any(co[start:stop] > np.minimum(chunks[s], chunks[d])):
            raise ValueError(f"a saved {what}'s count exceeds the chunks its concepts link")


def _checked_vectors(vectors: np.ndarray, counts: np.ndarray, dim: int) -> np.ndarray:
    """Saved concept vectors that obey Eq. 1's form: finite, unit length, zero without
    sentences (read a block at a time, so a mapped file is never copied whole)."""
    if vectors.shape != (len(counts), dim) or vectors.dtype != np.float32:
        raise ValueError(f"the saved concept vectors must be {len(counts)} x {dim} float32, "
                         f"got {vectors.shape} {vectors.dtype}")
    norms = finite_row_norms(vectors)
    if norms is None:
        raise ValueError("the saved concept vectors hold non-finite values")
    unit = np.abs(norms - 1.0) <= UNIT_NORM_TOLERANCE
    if not np.all(np.where(counts == 0, norms == 0, unit)):
        raise ValueError("a saved concept vector is not of unit length, or not zero "
                         "where no sentence contains its concept")
    return vectors


def _summed_of(saved: SavedGraph, concepts: int) -> np.ndarray | None:
    """The concepts whose sums the save holds: its list, checked (sorted, distinct, in
    range, one a row of sums), or every concept in a save from before sums were kept
    for some concepts only (the eighteenth to twentieth rounds). None without sums."""
    if saved.sums is None:
        if saved.summed is not None:
            raise ValueError("the save lists summed concepts but holds no concept sums")
        return None
    if saved.summed is None:
        return np.arange(concepts, dtype=np.int64)
    summed = np.asarray(saved.summed)
    if not (summed.ndim == 1 and len(summed) == len(saved.sums)
            and np.all((summed >= 0) & (summed < concepts)) and np.all(np.diff(summed) > 0)):
        raise ValueError(f"the saved summed concepts must be sorted, distinct concepts of the "
                         f"{concepts}, one for each of the {len(saved.sums)} saved sums")
    return summed


def _check_sums(sums: np.ndarray | VectorRows, vectors: np.ndarray,
                summed: np.ndarray) -> None:
    """Saved fixed-point sums that give the saved vectors of the concepts ``summed``, to
    the bit (a block of concepts at a time: a mapped file is never copied whole). Which
    sentences they sum rests on the checksum, like the vectors; ``verify`` sums the
    sentences again."""
    if sums.shape != (len(summed), vectors.shape[1]) or sums.dtype != np.int64:
        raise ValueError(f"the saved concept sums must be {len(summed)} x "
                         f"{vectors.shape[1]} int64, got {sums.shape} {sums.dtype}")
    for start in range(0, len(sums), SUM_BLOCK):
        block = slice(start, start + SUM_BLOCK)
        if not np.array_equal(vectors_of_sums(sums[block]), vectors[summed[block]]):
            raise ValueError("the saved concept sums do not give the saved concept vectors")


def _restored_pairs(saved: SavedGraph, src: np.ndarray, dst: np.ndarray, co: np.ndarray,
                    vectors: np.ndarray, theta_sem: float, verify: bool) -> StrongPairs:
    """The saved strong pairs with their cosine decisions: stored, or computed afresh
    (no stored ones, or ``verify``: then stored ones must agree with them)."""
    edge, margin = saved.edge, saved.margin
    if edge is None or margin is None:
        return strong_pairs_of(src, dst, co, vectors, theta_sem)
    if edge.shape != src.shape or margin.shape != src.shape:
        raise ValueError("the saved pair decisions differ in length from the pairs")
    # a margin is cos - theta_sem in float64 rounded toward zero, with its decision's
    # sign (a shrunk margin keeps it), except where the decision compared cos with
    # theta_sem rounded to float32: within that rounding the two may disagree
    low, high = -1.0 - theta_sem - MARGIN_TOLERANCE, 1.0 - theta_sem + MARGIN_TOLERANCE
    tie = abs(float(np.float32(theta_sem)) - theta_sem)
    if not (np.all(np.isfinite(margin)) and np.all((margin >= low) & (margin <= high))
            and np.all(np.where(edge, margin >= -tie, margin <= tie))):
        raise ValueError("the saved pair margins must be cosine minus theta_sem, each "
                         "with its decision's sign")
    if not verify:
        return StrongPairs(src.astype(np.int32, copy=False), dst.astype(np.int32, copy=False),
                           co.astype(np.int32, copy=False), np.asarray(edge, dtype=bool),
                           np.asarray(margin, dtype=np.float32))
    pairs = strong_pairs_of(src, dst, co, vectors, theta_sem)
    slack = certificate_slack(vectors.shape[1])
    if not (np.array_equal(edge, pairs.edge) and np.all(
            np.abs(margin.astype(np.float64)) <= np.abs(pairs.margin.astype(np.float64)) + slack)):
        raise ValueError("the saved pair decisions are not those of the concept vectors")
    return pairs
