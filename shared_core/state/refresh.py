"""Incremental refresh: the graph after a small add or delete, without deriving it all again.

A full derivation spends most of its time on the concept edges: co-occurrence
counts for every pair of concepts that share chunks, and a cosine for every pair
sharing ``theta_co`` of them. A refresh instead updates the previous graph's
strong pairs (:class:`~shared_core.graph.edges.StrongPairs`): counts change by
what the changed chunks (added, deleted, and kept chunks whose concept links
changed) contribute, and a pair not strong before is counted exactly only when
that change could lift it over ``theta_co``. A strong pair's cosine decision is
kept while its concepts' vectors moved too little to cross ``theta_sem``
(:func:`~shared_core.graph.edges.recertified`), and recomputed otherwise. Only
concepts whose chunk column changed get new vectors, from their sums: the summed
sentence vector of each concept in enough sentences is kept in fixed point
(:func:`~shared_core.graph.edges.concept_sums`,
:func:`~shared_core.state.derived.summed_concepts`), exact integers, so the changed
sentences' rows are added to (and the removed ones taken from) the old sums,
rather than every sentence of every changed concept read again; a changed concept
in a few sentences is summed from those. The unchanged concepts' vectors stay
where they are (:class:`~shared_core.state.rows.VectorRows`). Concept
extraction itself is recomputed whole, because one new chunk moves every idf; it
is a few sparse passes.

The result equals :func:`~shared_core.state.derived.derive_graph` on the new
corpus: the same concepts, links, vectors, strong pairs, decisions and edges bit
for bit, PageRank within its tolerance (only the margins depend on the history).
``tests/shared_core/state/test_refresh.py`` checks this on random sequences of
updates.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
import scipy.sparse as sp

from ..config import ConceptGraphConfig
from ..embeddings.base import fixed_point_product
from ..graph.edges import (
    StrongPairs,
    chunk_counts,
    concept_sums,
    cooccurrence_change,
    pair_counts,
    presence,
    rechecked,
    strong_pairs_of,
    vectors_of_sums,
)
from ..graph.entries import column_entry_counts
from ..search.concepts import ConceptHnsw
from ..search.external import VectorStoreBackend
from ..text.sentences import concatenated_ranges
from .corpus import VECTOR_DTYPE, CorpusState
from .derived import (
    ConceptLinks,
    DerivedGraph,
    VectorSearch,
    assemble_graph,
    built_search,
    concept_search_used,
    derive_graph,
    edge_adjacency,
    link_concepts,
    segment_means,
    spilled_pairs,
    spilled_search,
    summed_concepts,
    unit_vectors_of,
    uses_ann,
    vector_search_index,
)
from .rows import Rows, VectorRows, held_rows, rows_gathered
from .spill import VectorSpill, spilled_arrays

# Past this share of dead rows, a refreshed graph's concept vectors are gathered into one
# array: a query multiplies every row held. At 1 M passages a 1 % add changes 48,465 of
# 65,465 concepts, and the product over both arrays took 4.4-5.4 ms against 1.8 ms for
# one (benchmarks/results/NOTES.md, twenty-first round); at 10 K it changes 7 % of them.
CONCEPT_MAX_DEAD_SHARE = 0.25
# Past this share of dead rows, an approximate index is rebuilt rather than appended to.
MAX_DEAD_ROWS = 0.2
# Past this share of changed chunks, a full derivation is as cheap as a refresh.
MAX_CHANGED_CHUNKS = 0.25


@dataclass(frozen=True, eq=False)
class ChunkMoves:
    """Where each old chunk, sentence and unit sits in the new corpus (-1: deleted)."""

    chunk: np.ndarray
    sentence: np.ndarray
    unit: np.ndarray
    added_chunks: int


def chunk_moves(before: CorpusState, after: CorpusState) -> ChunkMoves:
    """Positions of ``before``'s chunks, sentences and units in ``after`` (same chunk = same id)."""
    position = after.position
    chunk = np.fromiter((position.get(cid, -1) for cid in before.ids), dtype=np.int64,
                        count=len(before))
    added = len(after) - int((chunk >= 0).sum())
    sentence = _moved_runs(before.sentence_offsets, after.sentence_offsets, chunk)
    unit = (_moved_runs(_units_per_chunk(before), _units_per_chunk(after), chunk)
            if before.has_units else chunk)
    return ChunkMoves(chunk, sentence, unit, added)


def _units_per_chunk(corpus: CorpusState) -> np.ndarray:
    """Unit offsets per chunk boundary: chunk i's units are [out[i], out[i+1])."""
    return np.searchsorted(corpus.unit_starts, corpus.sentence_offsets).astype(np.int64)


def _moved_runs(before_offsets: np.ndarray, after_offsets: np.ndarray,
                chunk: np.ndarray) -> np.ndarray:
    """New positions of items grouped in runs per chunk, each run moving whole."""
    owner = np.repeat(np.arange(len(chunk)), np.diff(before_offsets))
    within = np.arange(len(owner)) - before_offsets[owner]
    target = chunk[owner]
    return np.where(target >= 0, after_offsets[np.maximum(target, 0)] + within, -1)


def refresh_graph(before: CorpusState, graph: DerivedGraph, after: CorpusState,
                  config: ConceptGraphConfig,
                  max_changed: float = MAX_CHANGED_CHUNKS,
                  vector_store: VectorStoreBackend | None = None,
                  spill: VectorSpill | None = None) -> DerivedGraph:
    """``derive_graph(after, config)``, computed from ``graph`` (derived from ``before``).

    ``graph`` must have been derived under the same graph knobs. A full
    derivation runs instead when either side is empty, when more than
    ``max_changed`` of ``after``'s chunks were added or deleted, or when ``graph``
    has no strong pairs: one restored from a save that kept only its edges (made
    before strong pairs were saved) lacks the counts of the pairs below
    theta_sem, so its first refresh derives the graph whole. ``spill``: where a new
    or grown approximate index is mapped from.
    """
    moves = chunk_moves(before, after)
    changed_chunks = moves.added_chunks + int((moves.chunk < 0).sum())
    if (graph.pairs is None or not len(before) or not len(after)
            or changed_chunks > max_changed * len(after)):
        derived = derive_graph(after, config, vector_store=vector_store, spill=spill)
        _make_walk_postings(graph, derived)
        return _with_confirmed_counts(graph, derived, moves)
    # the vector index first, as a derivation does: its copy is the largest allocation
    unit_vectors = _refreshed_unit_vectors(graph, after, config, moves)
    search = (_refreshed_search(graph, after, config, unit_vectors, moves, spill)
              if vector_store is None
              else vector_search_index(config, after, unit_vectors, None, vector_store))
    found = link_concepts(after, config)
    concepts = _concept_changes(graph, after, found, moves)
    vectors, counts, kept, drift = _refreshed_vectors(graph, before, after, found, concepts,
                                                      moves, spill)
    links_csc = found.links.tocsc()
    pairs, _ = refreshed_pairs(graph.pairs, concepts, _link_changes(found.links, concepts),
                               links_csc, graph.concept_chunk_counts, vectors, drift, config,
                               spill)
    adj = edge_adjacency(pairs, chunk_counts(links_csc), spill)
    refreshed = assemble_graph(after, config, found, vectors, counts, adj, pairs, unit_vectors,
                               search, links_csc=links_csc, spill=spill,
                               sums=None if kept is None else kept.rows,
                               summed=None if kept is None else kept.concepts)
    _make_walk_postings(graph, refreshed)
    refreshed = _with_kept_concept_index(graph, refreshed, concepts, drift)
    refreshed = _with_confirmed_counts(graph, refreshed, moves)
    return _with_kept_concept_codes(graph, refreshed, config, concepts, drift)


def _with_confirmed_counts(graph: DerivedGraph, refreshed: DerivedGraph,
                           moves: ChunkMoves) -> DerivedGraph:
    """``refreshed`` with the saved token counts ``graph`` had confirmed still confirmed,
    so an update does not send queries back to recounting (``index._confirm_token_counts``):
    a unit that moved is the same text (same chunk id, same text), and an added one was
    counted here. None where no count is left unconfirmed."""
    if refreshed.unit_tokens_unconfirmed is None:
        return refreshed
    unconfirmed = np.zeros(len(refreshed.unit_tokens), dtype=bool)
    if graph.unit_tokens_unconfirmed is not None:
        kept = moves.unit >= 0
        unconfirmed[moves.unit[kept]] = graph.unit_tokens_unconfirmed[kept]
    return replace(refreshed, unit_tokens_unconfirmed=unconfirmed if unconfirmed.any() else None)


def _make_walk_postings(graph: DerivedGraph, refreshed: DerivedGraph) -> None:
    """Make ``refreshed``'s walk postings in the update where ``graph``'s were made: its
    state was walked, so the next query walks too, and would build them first."""
    if graph.walk is not None and graph.walk.has_postings and refreshed.walk is not None:
        refreshed.walk.make_postings()


def _with_kept_concept_index(graph: DerivedGraph, refreshed: DerivedGraph,
                             concepts: ConceptChanges, drift: np.ndarray) -> DerivedGraph:
    """``refreshed`` holding ``graph``'s concept HNSW carried through the update, or one
    built again where too much of it went stale (none where ``graph`` held none)."""
    previous = graph.held_concept_index()
    if previous is None:
        return refreshed
    usable = refreshed.unit_linked_concepts
    index = (previous.refreshed(concepts.new_of_old, drift, usable, refreshed.vectors)
             or ConceptHnsw.build(refreshed.vectors, usable))
    return replace(refreshed, concept_index=index)


def _with_kept_concept_codes(graph: DerivedGraph, refreshed: DerivedGraph,
                             config: ConceptGraphConfig, concepts: ConceptChanges,
                             drift: np.ndarray) -> DerivedGraph:
    """``refreshed`` holding ``graph``'s concept codes carried through the update, the
    changed concepts coded again, where it held codes and ``config`` scans them in the
    new state: its next query does not code every concept again."""
    previous = graph.held_concept_codes()
    if previous is None or concept_search_used(config, refreshed) != "codes":
        return refreshed
    codes = previous.refreshed(refreshed.vectors, concepts.new_of_old, drift,
                               refreshed.unit_linked_concepts)
    return replace(refreshed, coded_concepts=codes)


@dataclass(frozen=True, eq=False)
class ConceptChanges:
    """Concept numbering across an update, and which concepts' chunk columns changed.

    ``old`` is each new concept's old index (-1: new), ``new_of_old`` each old
    concept's new index (-1: gone), ``changed`` the new indices (sorted) whose
    vector, chunk count and edges must be recomputed. ``changed_rows`` are the new
    chunks whose links differ from the old links carried into the new numbering
    (added chunks among them), ``carried`` those chunks' carried links (concepts
    gone dropped), one row each; ``deleted`` the old links of the deleted chunks.
    Only the changed rows are kept: all the carried links are as large as the
    graph's links (415 MB at a million passages), held through the rest of a refresh.
    """

    old: np.ndarray
    new_of_old: np.ndarray
    changed: np.ndarray
    changed_rows: np.ndarray
    carried: sp.csr_matrix
    deleted: sp.csr_matrix


def _concept_changes(graph: DerivedGraph, after: CorpusState,
                     found: ConceptLinks, moves: ChunkMoves) -> ConceptChanges:
    names = after.terms
    new_names = [names[t] for t in found.concept_terms.tolist()]
    old_position = graph.concept_position
    old = np.fromiter((old_position.get(c, -1) for c in new_names), dtype=np.int64,
                      count=len(new_names))
    new_of_old = np.full(len(graph.concepts), -1, dtype=np.int64)
    new_of_old[old[old >= 0]] = np.flatnonzero(old >= 0)
    # the old links, renumbered into the new chunks and concepts (int32 like the links':
    # one entry per link, 52 M at a million passages)
    links = graph.links.tocoo()
    row = moves.chunk.astype(np.int32)[links.row]
    col = new_of_old.astype(np.int32)[links.col]
    alive = (row >= 0) & (col >= 0)
    carried = sp.csr_matrix((links.data[alive], (row[alive], col[alive])),
                            shape=found.links.shape)
    difference = sp.csr_matrix(found.links - carried)
    difference.eliminate_zeros()
    changed = np.zeros(len(new_names), dtype=bool)
    changed[difference.indices] = True
    gone = (row < 0) & (col >= 0)  # links of deleted chunks
    changed[col[gone]] = True
    changed[old < 0] = True
    deleted_chunks = np.flatnonzero(moves.chunk < 0)
    deleted = sp.csr_matrix(
        (np.ones(int(gone.sum()), dtype=np.int32),
         (np.searchsorted(deleted_chunks, links.row[gone]), col[gone])),
        shape=(len(deleted_chunks), len(new_names)))
    changed_rows = np.flatnonzero(np.diff(difference.indptr) > 0)
    return ConceptChanges(old, new_of_old, np.flatnonzero(changed), changed_rows,
                          sp.csr_matrix(carried[changed_rows]), deleted)


def _link_changes(links: sp.csr_matrix, concepts: ConceptChanges
                  ) -> tuple[sp.csr_matrix, sp.csr_matrix, sp.csr_matrix]:
    """The changed chunks' links split into kept, added and removed, one row per chunk.

    Rows: the new chunks whose links changed, then the deleted chunks (only removed
    links). The input of :func:`~shared_core.graph.edges.cooccurrence_change`.
    """
    new = presence(links[concepts.changed_rows])
    old = presence(concepts.carried)
    kept = presence(new.multiply(old))
    added = presence(new - kept)
    removed = presence(old - kept)
    gone = presence(concepts.deleted)
    blank = sp.csr_matrix(gone.shape, dtype=np.int32)
    return (sp.csr_matrix(sp.vstack([kept, blank])), sp.csr_matrix(sp.vstack([added, blank])),
            sp.csr_matrix(sp.vstack([removed, gone])))


@dataclass(frozen=True, eq=False)
class KeptSums:
    """The fixed-point sums a graph keeps (rows) and the concepts they belong to (sorted)."""

    rows: np.ndarray | VectorRows
    concepts: np.ndarray


def _refreshed_vectors(graph: DerivedGraph, before: CorpusState, after: CorpusState,
                       found: ConceptLinks, concepts: ConceptChanges, moves: ChunkMoves,
                       spill: VectorSpill | None
                       ) -> tuple[Rows, np.ndarray, KeptSums | None, np.ndarray]:
    """Concept vectors, sentence counts and kept fixed-point sums after the update (None
    where none is kept: :func:`~shared_core.state.derived.summed_concepts`), and drift.

    A concept whose sum was kept gets the old sum plus the changed sentences' rows
    (:func:`_sum_change`): only the changed sentences are read, not every sentence
    of every changed concept (at 10 K passages, a 1 % add changes concepts in 99 % of
    the sentences). A changed concept without a kept sum, and an unchanged one that
    must now keep its sum, is summed from its own sentences. Sums are exact either
    way, so the changed concepts' vectors are a derivation's to the bit. ``drift`` is
    how far each concept's vector moved, |v_new - v_old| in float64: 0 for unchanged
    concepts, infinite for new ones (no old vector).
    """
    n, dim = len(concepts.old), after.dim
    new = concepts.old < 0
    was = np.maximum(concepts.old, 0)  # a new concept (always changed) gets its own row below
    counts = (np.asarray(graph.sentence_counts[was]) if len(graph.concepts)
              else np.zeros(n, dtype=np.int64))
    counts[new] = 0
    old_row = np.full(n, -1, dtype=np.int64)  # each concept's row of the old sums
    old_sums = (graph.concept_sums if graph.concept_sums is not None
                else np.zeros((0, dim), dtype=np.int64))
    if graph.concept_sums is not None and graph.summed_concepts is not None:
        row_of_old = np.full(len(graph.concepts), -1, dtype=np.int64)
        row_of_old[graph.summed_concepts] = np.arange(len(graph.summed_concepts))
        old_row = np.where(new, -1, row_of_old[was])
        touched, sum_change, count_change = _sum_change(graph, before, after, found,
                                                        concepts, moves)
        counts[touched] += count_change
        changed = np.union1d(concepts.changed, touched)
        # known before the change: a kept sum, or a new concept's (0: all its sentences
        # are in changed chunks, so the change holds its whole sum)
        based = (old_row >= 0) | new
    else:
        touched = np.zeros(0, dtype=np.int64)
        sum_change = np.zeros((0, dim), dtype=np.int64)
        changed = concepts.changed
        counts[changed] = column_entry_counts(found.sentence_concepts[:, changed])
        based = np.zeros(n, dtype=bool)
    summed = summed_concepts(counts)
    needed = np.zeros(n, dtype=bool)
    needed[changed] = True
    if summed is not None:
        needed[summed[~based[summed]]] = True  # kept now, and not before
    fresh = np.flatnonzero(needed)  # the sums computed here, sorted
    fresh_sums = np.zeros((len(fresh), dim), dtype=np.int64)
    from_rows = ~based[fresh]
    fresh_sums[from_rows], _ = concept_sums(found.sentence_concepts[:, fresh[from_rows]],
                                            after.sentence_vectors)
    carried = fresh[~from_rows & (old_row[fresh] >= 0)]
    fresh_sums[np.searchsorted(fresh, carried)] = old_sums[old_row[carried]]
    moved_sums = touched[based[touched]]
    fresh_sums[np.searchsorted(fresh, moved_sums)] += sum_change[based[touched]]
    changed_vectors = vectors_of_sums(fresh_sums[np.searchsorted(fresh, changed)])
    drift = np.zeros(n, dtype=np.float64)
    drift[changed] = np.inf  # a new concept has no old vector
    old_changed = changed[concepts.old[changed] >= 0]
    if len(old_changed):
        drift[old_changed] = np.linalg.norm(
            changed_vectors[np.searchsorted(changed, old_changed)].astype(np.float64)
            - graph.vectors[was[old_changed]].astype(np.float64), axis=1)
    # what is written below is spilled where a derivation spills it: by the size of the
    # vectors (float32) and the kept sums (int64) together
    held = n * dim * 4 + (0 if summed is None else len(summed) * dim * 8)
    together = replace(spill, min_bytes=0) if spill is not None and spill.spills(held) else None
    # the unchanged concepts' rows stay where they are (a state's rows are never written
    # again: the old vectors may be a mapped save), the changed ones' in a small array;
    # every query scans all the rows held, so once a quarter are dead they are gathered
    vectors = _replaced_rows(graph.vectors, was, changed, changed_vectors, together)
    if summed is None:
        return vectors, counts, None, drift
    # the kept sums likewise: unchanged ones where they were (at 10 K passages three
    # quarters of 8.7 K rows of 3 KB), the computed ones in a small array
    computed = needed[summed]
    sums = held_rows(_replaced_rows(old_sums, old_row[summed], computed,
                                    fresh_sums[np.searchsorted(fresh, summed[computed])],
                                    together))
    return vectors, counts, KeptSums(sums, summed), drift


def _replaced_rows(old: Rows, old_position: np.ndarray, replaced: np.ndarray,
                   replacement: np.ndarray, spill: VectorSpill | None) -> Rows:
    """Row ``i`` is ``old[old_position[i]]``, except the rows ``replaced`` (positions or
    a mask), which are ``replacement``'s in order: the old rows left where they are."""
    position = np.array(old_position, dtype=np.int64)
    position[replaced] = len(old) + np.arange(len(replacement))
    return rows_gathered([old, replacement], position, spill, CONCEPT_MAX_DEAD_SHARE)


def _sum_change(graph: DerivedGraph, before: CorpusState, after: CorpusState,
                found: ConceptLinks, concepts: ConceptChanges, moves: ChunkMoves
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The concepts whose sentences changed, and what changed of their sums and counts.

    A sentence's concept links change only where its chunk's did (``changed_rows``,
    added chunks among them) or its chunk was deleted. A kept chunk holds the same
    sentences as before (a chunk moves whole: :func:`chunk_moves`), so its sentences'
    old links (renumbered) are taken from their new ones row by row and only the links
    that differ count, plus or minus the sentence's vector in fixed point; an added
    chunk's links all add theirs, a deleted chunk's all take theirs away. Re-extraction
    changes a few links of many chunks: at 10 K passages a 1 % add re-reads the
    sentences of 2,000 chunks, whose links name 10,000 concepts, of which 3,000 changed.
    """
    old_links = graph.walk.links_csr if graph.walk is not None else None
    assert old_links is not None, "a graph with sums keeps its sentence links"
    n = len(concepts.old)
    changed_chunks = concepts.changed_rows
    old_chunk = np.full(len(after), -1, dtype=np.int64)
    kept = np.flatnonzero(moves.chunk >= 0)
    old_chunk[moves.chunk[kept]] = kept
    was = old_chunk[changed_chunks]
    carried_rows = _sentence_rows(after, changed_chunks[was >= 0])
    carried_before = _sentence_rows(before, was[was >= 0])  # ascending: chunks keep their order
    assert np.array_equal(moves.sentence[carried_before], carried_rows), "a kept chunk moves whole"
    added_rows = _sentence_rows(after, changed_chunks[was < 0])
    deleted_rows = _sentence_rows(before, np.flatnonzero(moves.chunk < 0))
    net = sp.csr_matrix(presence(found.sentence_concepts[carried_rows], dtype=np.int64)
                        - _renumbered_links(presence(old_links[carried_before], dtype=np.int64),
                                            concepts.new_of_old, n))
    net.eliminate_zeros()
    added = presence(found.sentence_concepts[added_rows], dtype=np.int64)
    removed = _renumbered_links(presence(old_links[deleted_rows], dtype=np.int64),
                                concepts.new_of_old, n)
    touched = np.union1d(np.union1d(net.indices, added.indices), removed.indices)
    net, added, removed = net[:, touched], added[:, touched], removed[:, touched]
    sum_change = fixed_point_product(net.T, after.sentence_vectors[carried_rows])
    sum_change += fixed_point_product(added.T, after.sentence_vectors[added_rows])
    sum_change -= fixed_point_product(removed.T, before.sentence_vectors[deleted_rows])
    count_change = (np.asarray(net.sum(axis=0), dtype=np.int64).ravel()
                    + column_entry_counts(added) - column_entry_counts(removed))
    return touched, sum_change, count_change


def _sentence_rows(corpus: CorpusState, chunks: np.ndarray) -> np.ndarray:
    """The sentence rows of ``chunks`` (ascending chunk positions), in order."""
    offsets = corpus.sentence_offsets
    return concatenated_ranges(offsets[chunks], offsets[chunks + 1])


def _renumbered_links(links: sp.csr_matrix, new_of_old: np.ndarray, n: int) -> sp.csr_matrix:
    """``links`` (old concept columns) in the new numbering, gone concepts' links dropped."""
    entries = links.tocoo()
    column = new_of_old[entries.col]
    alive = column >= 0
    return sp.csr_matrix((entries.data[alive], (entries.row[alive], column[alive])),
                         shape=(links.shape[0], n))


@dataclass(frozen=True)
class PairWork:
    """What refreshing the strong pairs computed (``benchmarks.refresh_share`` reports it)."""

    carried: int  # old strong pairs whose concepts both remain
    counts_changed: int  # of them, those whose count the changed chunks moved
    recounted: int  # pairs not strong before, counted exactly from their columns
    new: int  # pairs strong now and not before
    cosines: int  # exact cosines computed: carried pairs not certified, and new pairs


def refreshed_pairs(pairs: StrongPairs, concepts: ConceptChanges,
                    changes: tuple[sp.csr_matrix, sp.csr_matrix, sp.csr_matrix],
                    links_csc: sp.csc_matrix, old_chunk_counts: np.ndarray,
                    vectors: Rows, drift: np.ndarray,
                    config: ConceptGraphConfig,
                    spill: VectorSpill | None = None) -> tuple[StrongPairs, PairWork]:
    """The strong pairs after an update, from the old ones and the changed chunks' links.

    Old pairs are renumbered (concepts keep their term order, so they stay sorted)
    and their counts moved by the change; pairs the change created or lifted are
    counted exactly and get exact cosines; old pairs' decisions are rechecked by
    drift (:func:`~shared_core.graph.edges.rechecked`). The result's arrays go to
    ``spill`` when large (:func:`~shared_core.state.derived.spilled_pairs`).
    """
    n = len(vectors)
    carried = _renumbered(pairs, concepts.new_of_old, n)
    change = cooccurrence_change(*changes)
    change_keys = change.row.astype(np.int64) * n + change.col
    # looked up a block of pairs at a time: every pair's key at once is 460 MB at a
    # million passages, held through the largest allocations of a refresh
    at = np.minimum(carried.key_positions(change_keys, n), max(len(carried) - 1, 0))
    known = (carried.keys_at(at, n) == change_keys if len(carried)
             else np.zeros(len(change_keys), dtype=bool))
    carried.count[at[known]] += change.data[known].astype(np.int32)  # keys are unique
    del at
    still = carried.count >= config.theta_co
    if not still.all():  # a field at a time, each old array let go once its copy is made
        parts = [getattr(carried, f.name) for f in fields(StrongPairs)]
        del carried
        carried = StrongPairs(*(parts.pop(0)[still] for _ in range(len(parts))))
    # the renumbering or the filter above copied the decisions unless every old pair stayed
    # (then they are the old graph's, often mapped read-only; with no pairs, views of them)
    owned = (carried.edge.flags.writeable and carried.margin.flags.writeable
             and not (np.may_share_memory(carried.edge, pairs.edge)
                      or np.may_share_memory(carried.margin, pairs.margin)))
    carried, recomputed = rechecked(carried, vectors, drift, config.theta_sem, in_place=owned)
    src, dst, count, recounted = _newly_strong(change.row[~known], change.col[~known],
                                               change.data[~known], concepts.old, links_csc,
                                               old_chunk_counts, config.theta_co)
    fresh = strong_pairs_of(src, dst, count, vectors, config.theta_sem)
    work = PairWork(len(still), int(known.sum()), recounted, len(fresh),
                    len(recomputed) + len(fresh))
    if not len(fresh):
        return spilled_pairs(carried, spill), work
    slots = carried.key_positions(fresh.keys(n), n) + np.arange(len(fresh))
    # the merge lets go of each old array once its merged one is made (and spilled):
    # at a million passages the pairs are a gigabyte
    parts = [getattr(carried, f.name) for f in fields(StrongPairs)]
    del carried
    return _merged(parts, slots, fresh, spill), work


def _renumbered(pairs: StrongPairs, new_of_old: np.ndarray, n: int) -> StrongPairs:
    """The old pairs whose concepts both remain, in the new numbering.

    Concepts keep their (term) order, so the pairs stay sorted; they are re-sorted
    only if that ever fails. The counts are a fresh array (the update adds to them).
    """
    table = new_of_old.astype(np.int32)
    source, target = table[pairs.source], table[pairs.target]
    alive = (source >= 0) & (target >= 0)
    if alive.all():
        carried = StrongPairs(source, target, pairs.count.copy(), pairs.edge, pairs.margin)
    else:
        carried = StrongPairs(source[alive], target[alive], pairs.count[alive],
                              pairs.edge[alive], pairs.margin[alive])
    if not carried.ascending(n):
        carried = carried.taken(np.argsort(carried.keys(n), kind="stable"))
    return carried


def _newly_strong(src: np.ndarray, dst: np.ndarray, change: np.ndarray, old: np.ndarray,
                  links_csc: sp.csc_matrix, old_chunk_counts: np.ndarray,
                  theta_co: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Pairs that were not strong whose count changed: those that now pass theta_co
    (pairs, counts, and how many were counted exactly).

    A pair with a new concept has its whole count in the change (the new column is
    non-zero only in changed chunks). A pair of old concepts had an unknown count
    below theta_co (and at most either chunk count): it is counted exactly only
    when the change and its chunk counts leave theta_co in reach (with nothing
    below theta_co but 0, the change is the count).
    """
    rising = change > 0
    src, dst, change = src[rising], dst[rising], change[rising].astype(np.int64)
    old_src, old_dst = old[src], old[dst]
    both_old = (old_src >= 0) & (old_dst >= 0)
    was_at_most = np.minimum(theta_co - 1, np.minimum(old_chunk_counts[np.maximum(old_src, 0)],
                                                      old_chunk_counts[np.maximum(old_dst, 0)]))
    count = np.where(both_old & (was_at_most > 0), 0, change)
    linked = np.diff(links_csc.indptr)
    reach = (both_old & (was_at_most > 0) & (was_at_most + change >= theta_co)
             & (np.minimum(linked[src], linked[dst]) >= theta_co))
    count[reach] = pair_counts(links_csc, src[reach], dst[reach])
    strong = count >= theta_co
    return src[strong], dst[strong], count[strong], int(reach.sum())


def _merged(parts: list[np.ndarray], slots: np.ndarray, fresh: StrongPairs,
            spill: VectorSpill | None) -> StrongPairs:
    """``fresh`` (sorted, disjoint from the old pairs) inserted at ``slots`` among the old
    pairs' arrays ``parts`` (in :class:`StrongPairs` field order), which it empties:
    each old array is dropped once its merged one is made and put in ``spill``."""
    kept = np.ones(len(parts[0]) + len(fresh), dtype=bool)
    kept[slots] = False
    # spilled or not as the pairs are together (spilled_pairs), one array at a time
    together = len(kept) * sum(part.itemsize for part in parts)
    each = (replace(spill, min_bytes=0) if spill is not None and spill.spills(together)
            else None)
    merged = []
    for name in (f.name for f in fields(StrongPairs)):
        old, new = parts.pop(0), getattr(fresh, name)
        out = np.empty(len(kept), dtype=old.dtype)
        out[kept], out[slots] = old, new
        del old
        merged.append(spilled_arrays([out], each)[0])
        del out
    return StrongPairs(*merged)


def _refreshed_unit_vectors(graph: DerivedGraph, after: CorpusState,
                            config: ConceptGraphConfig, moves: ChunkMoves) -> np.ndarray | None:
    """Unit vectors as a derivation gives them, sentence means kept for unmoved units."""
    if config.chunk_similarity != "mean":
        return unit_vectors_of(after, config)
    assert graph.unit_vectors is not None
    offsets = after.unit_offsets()
    out = np.empty((len(offsets) - 1, after.dim), dtype=VECTOR_DTYPE)
    kept = moves.unit >= 0
    fresh = np.ones(len(out), dtype=bool)
    fresh[moves.unit[kept]] = False
    out[moves.unit[kept]] = graph.unit_vectors[kept]
    new_units = np.flatnonzero(fresh)
    out[new_units] = segment_means(offsets, after.sentence_vectors, only=new_units)
    return out


def _refreshed_search(graph: DerivedGraph, after: CorpusState, config: ConceptGraphConfig,
                      unit_vectors: np.ndarray | None, moves: ChunkMoves,
                      spill: VectorSpill | None = None) -> VectorSearch | None:
    """The approximate index with deleted rows marked dead and new rows in a later segment.

    Where the new rows go is :func:`~shared_core.search.ann.segment_plan`'s call;
    the index is rebuilt when it did not exist, when the indexed vectors changed
    kind, when more than ``MAX_DEAD_ROWS`` of its rows would be dead, or when the
    plan says so.
    """
    vectors = after.sentence_vectors if unit_vectors is None else unit_vectors
    if not len(vectors) or not uses_ann(config, len(vectors)):
        return None
    from ..search.ann import HnswSegments, segment_plan

    moved = moves.sentence if unit_vectors is None else moves.unit
    index, old_rows = graph.ann, graph.ann_rows
    if not isinstance(index, HnswSegments) or old_rows is None or old_rows.max(
            initial=-1) >= len(moved):
        return built_search(vectors, spill)
    rows = np.where(old_rows >= 0, moved[np.maximum(old_rows, 0)], -1)
    present = np.zeros(len(vectors), dtype=bool)
    present[rows[rows >= 0]] = True
    missing = np.flatnonzero(~present)
    dead = int((rows < 0).sum())
    if dead > MAX_DEAD_ROWS * (len(rows) + len(missing)):
        return built_search(vectors, spill)
    if not len(missing):
        return VectorSearch(index, rows)
    plan = segment_plan(index.sizes(), len(missing))
    if plan == "rebuild":
        return built_search(vectors, spill)
    if plan == "merge":  # the later segments' live rows and the new ones, in one segment
        first = len(index.segments[0])
        later = rows[first:]
        merged = np.concatenate([later[later >= 0], missing])
        grown = index.with_segment(1, vectors[merged])
        rows = np.concatenate([rows[:first], merged])
    else:
        grown = (index.grown(vectors[missing]) if plan == "grow"
                 else index.with_segment(len(index.segments), vectors[missing]))
        rows = np.concatenate([rows, missing])
    return spilled_search(VectorSearch(grown, rows), spill)
