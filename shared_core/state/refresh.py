"""Incremental refresh: the graph after a small add or delete, without deriving it all again.

A full derivation spends most of its time on the concept edges: co-occurrence
counts and a cosine for every pair of concepts that share chunks. After an
update only the concepts whose chunk column changed (new concepts, and those
linked by an added or deleted chunk) can have a new vector, new counts or new
edges; every other edge is carried over, renumbered. PageRank restarts from the
previous vector. Concept extraction itself is recomputed whole, because one new
chunk moves every idf; it is a few sparse passes.

The result equals :func:`~shared_core.state.derived.derive_graph` on the new
corpus: the same concepts, links, vectors and edges bit for bit, PageRank within
its tolerance. ``tests/shared_core/state/test_refresh.py`` checks this on random
updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..config import ConceptGraphConfig
from ..graph.edges import concept_vectors, edges_touching, joined_edges, kept_edges
from .corpus import VECTOR_DTYPE, CorpusState
from .derived import (
    ConceptLinks,
    DerivedGraph,
    VectorSearch,
    assemble_graph,
    derive_graph,
    link_concepts,
    segment_means,
    unit_vectors_of,
    uses_ann,
)

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
                  max_changed: float = MAX_CHANGED_CHUNKS) -> DerivedGraph:
    """``derive_graph(after, config)``, computed from ``graph`` (derived from ``before``).

    ``graph`` must have been derived under the same graph knobs. A full
    derivation runs instead when either side is empty or more than
    ``max_changed`` of ``after``'s chunks were added or deleted.
    """
    moves = chunk_moves(before, after)
    changed_chunks = moves.added_chunks + int((moves.chunk < 0).sum())
    if not len(before) or not len(after) or changed_chunks > max_changed * len(after):
        return derive_graph(after, config)
    found = link_concepts(after, config)
    concepts = _concept_changes(graph, after, found, moves)
    vectors = np.zeros((len(found.concept_terms), after.dim), dtype=np.float32)
    counts = np.zeros(len(found.concept_terms), dtype=np.int64)
    same = concepts.old >= 0
    same[concepts.changed] = False
    vectors[same] = graph.vectors[concepts.old[same]]
    counts[same] = graph.sentence_counts[concepts.old[same]]
    changed_vectors, changed_counts = concept_vectors(
        found.sentence_concepts[:, concepts.changed], after.sentence_vectors)
    vectors[concepts.changed] = changed_vectors
    counts[concepts.changed] = changed_counts
    old_changed = np.ones(len(graph.concepts), dtype=bool)
    old_changed[concepts.old[same]] = False
    edges = joined_edges([
        kept_edges(graph.edges, concepts.new_of_old, old_changed),
        edges_touching(found.links.tocsc(), vectors, config.theta_co, config.theta_sem,
                       concepts.changed),
    ])
    unit_vectors = _refreshed_unit_vectors(graph, after, config, moves)
    search = _refreshed_search(graph, after, config, unit_vectors, moves)
    return assemble_graph(after, config, found, vectors, counts, edges, unit_vectors, search)


@dataclass(frozen=True, eq=False)
class ConceptChanges:
    """Concept numbering across an update, and which concepts' chunk columns changed.

    ``old`` is each new concept's old index (-1: new), ``new_of_old`` each old
    concept's new index (-1: gone), ``changed`` the new indices (sorted) whose
    vector, chunk count and edges must be recomputed.
    """

    old: np.ndarray
    new_of_old: np.ndarray
    changed: np.ndarray


def _concept_changes(graph: DerivedGraph, after: CorpusState,
                     found: ConceptLinks, moves: ChunkMoves) -> ConceptChanges:
    names = after.terms
    new_names = [names[t] for t in found.concept_terms.tolist()]
    old_position = graph.concept_position
    old = np.fromiter((old_position.get(c, -1) for c in new_names), dtype=np.int64,
                      count=len(new_names))
    new_of_old = np.full(len(graph.concepts), -1, dtype=np.int64)
    new_of_old[old[old >= 0]] = np.flatnonzero(old >= 0)
    # the old links, renumbered into the new chunks and concepts
    links = graph.links.tocoo()
    row, col = moves.chunk[links.row], new_of_old[links.col]
    alive = (row >= 0) & (col >= 0)
    carried = sp.csr_matrix((links.data[alive], (row[alive], col[alive])),
                            shape=found.links.shape)
    difference = sp.csr_matrix(found.links - carried)
    difference.eliminate_zeros()
    changed = np.zeros(len(new_names), dtype=bool)
    changed[difference.indices] = True
    changed[col[(row < 0) & (col >= 0)]] = True  # linked by a deleted chunk
    changed[old < 0] = True
    return ConceptChanges(old, new_of_old, np.flatnonzero(changed))


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
                      unit_vectors: np.ndarray | None, moves: ChunkMoves) -> VectorSearch | None:
    """The approximate index with deleted rows marked dead and new rows appended.

    Rebuilt when it did not exist, when the indexed vectors changed kind, or
    when more than ``MAX_DEAD_ROWS`` of its rows would be dead.
    """
    vectors = after.sentence_vectors if unit_vectors is None else unit_vectors
    if not len(vectors) or not uses_ann(config, len(vectors)):
        return None
    from ..search.ann import HnswVectorIndex

    moved = moves.sentence if unit_vectors is None else moves.unit
    index, old_rows = graph.ann, graph.ann_rows
    if not isinstance(index, HnswVectorIndex) or old_rows is None or old_rows.max(
            initial=-1) >= len(moved):
        return VectorSearch(HnswVectorIndex.build(vectors), np.arange(len(vectors)))
    rows = np.where(old_rows >= 0, moved[np.maximum(old_rows, 0)], -1)
    present = np.zeros(len(vectors), dtype=bool)
    present[rows[rows >= 0]] = True
    missing = np.flatnonzero(~present)
    dead = int((rows < 0).sum())
    if dead > MAX_DEAD_ROWS * (len(rows) + len(missing)):
        return VectorSearch(HnswVectorIndex.build(vectors), np.arange(len(vectors)))
    grown = index.with_rows(vectors[missing]) if len(missing) else index
    return VectorSearch(grown, np.concatenate([rows, missing]))
