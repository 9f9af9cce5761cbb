"""Vectors spilled to mapped files: the same index as on the heap, and nothing left behind."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.faults import FailOnCall
from shared_core.embeddings import EMBED_BATCH, HashingEmbedder
from shared_core.index import ConceptGraphIndex
from shared_core.state.rows import VectorRows
from shared_core.state.spill import VectorSpill, gather_rows, held_as_mapped, spilled_arrays
from shared_core.state.texts import ChunkTexts, texts_spilled
from tests.shared_core.test_index_state import CONFIGS, DIM, POOL, assert_same_index, ids_for


def mapped(array: np.ndarray | VectorRows) -> bool:
    """Whether ``array`` views a memory-mapped file (directly or through its bases); rows
    left in place (``VectorRows``): whether every array they sit in does."""
    if isinstance(array, VectorRows):
        return all(mapped(run) for run in array.runs)
    # an array a compiled loop made has numba's memory record as its base, not an array
    while isinstance(array, np.ndarray):
        if isinstance(array, np.memmap):
            return True
        array = array.base  # type: ignore[assignment]
    return False


# ------------------------------------------------------------------ the parts
def test_small_arrays_stay_on_the_heap_and_large_ones_are_mapped(tmp_path: Path) -> None:
    spill = VectorSpill(tmp_path, min_bytes=64)
    parts = [np.arange(8, dtype=np.float32).reshape(2, 4), np.full((3, 4), -1, np.float32)]
    small = gather_rows(parts, np.array([4, 0, 1]), 4, spill)  # 48 bytes
    large = gather_rows(parts, np.array([4, 0, 1, 2]), 4, spill)  # 64: at the threshold
    assert not mapped(small) and mapped(large) and not large.flags.writeable
    assert large.tolist() == [[-1] * 4, [0, 1, 2, 3], [4, 5, 6, 7], [-1] * 4]
    assert small.tolist() == large[:3].tolist()
    assert os.listdir(tmp_path) == []  # unlinked at once: no name left in the folder


def test_a_row_log_moves_to_a_file_once_its_batches_pass_the_threshold(tmp_path: Path) -> None:
    log = VectorSpill(tmp_path, min_bytes=100).log()
    batches = [np.full((2, 4), k, dtype=np.float32) for k in range(4)]  # 32 bytes each
    for batch in batches:
        log.append(batch)
    views = log.views()
    # 32 + 32 + 32 = 96 < 100 stay held; the fourth brings 128: all four are written
    assert [v.tolist() for v in views] == [b.tolist() for b in batches]
    assert all(mapped(v) for v in views) and not any(v.flags.writeable for v in views)
    assert os.listdir(tmp_path) == []


def test_a_row_log_under_the_threshold_hands_back_the_arrays_themselves(tmp_path: Path) -> None:
    log = VectorSpill(tmp_path, min_bytes=1000).log()
    batch = np.ones((2, 4), dtype=np.float32)
    log.append(batch)
    assert log.views()[0] is batch


def test_spilled_arrays_share_one_file_each_aligned_and_read_only(tmp_path: Path) -> None:
    arrays = [np.arange(5, dtype=np.int32), np.array([True, False, True]),
              np.linspace(0, 1, 7), np.zeros(0, dtype=np.float32)]  # 20 + 3 + 56 + 0 bytes
    out = spilled_arrays(arrays, VectorSpill(tmp_path, min_bytes=79))  # at the threshold
    for array, view in zip(arrays, out, strict=True):
        assert view.dtype == array.dtype and view.tolist() == array.tolist()
        assert mapped(view) and not view.flags.writeable
    # each starts at a multiple of 64 bytes of one mapping: 0, 64, 128
    base = out[0].ctypes.data
    assert [v.ctypes.data - base for v in out[:3]] == [0, 64, 128] and base % 64 == 0
    kept = spilled_arrays(arrays, VectorSpill(tmp_path, min_bytes=80))  # one byte short
    assert all(k is a for k, a in zip(kept, arrays, strict=True))
    assert all(k is a for k, a in zip(spilled_arrays(arrays, None), arrays, strict=True))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kind", [sp.csr_matrix, sp.csc_matrix])
def test_a_sparse_matrix_is_held_as_mapped_once_its_arrays_pass_the_threshold(
        kind: type, tmp_path: Path) -> None:
    dense = np.array([[1, 0, 2], [0, 3, 0]], dtype=np.float32)
    matrix = kind(dense)
    matrix.indices = matrix.indices.astype(np.int32)
    matrix.indptr = matrix.indptr.astype(np.int32)
    # 3 float32 values, 3 int32 indices and 3 (CSR: 2 rows + 1) or 4 (CSC) int32 pointers
    nbytes = 12 + 12 + 4 * (matrix.shape[kind is sp.csc_matrix] + 1)
    held = held_as_mapped(matrix, VectorSpill(tmp_path, min_bytes=nbytes))  # at the threshold
    assert type(held) is kind and held.shape == (2, 3)
    assert held.toarray().tolist() == dense.tolist() and held.has_canonical_format
    assert [mapped(a) for a in (held.data, held.indices, held.indptr)] == [True] * 3
    assert [a.dtype for a in (held.data, held.indices, held.indptr)] == [
        np.float32, np.int32, np.int32]  # scipy's constructor would have remade them
    assert held_as_mapped(held, VectorSpill(tmp_path, min_bytes=0)) is held  # mapped already
    assert held_as_mapped(matrix, VectorSpill(tmp_path, min_bytes=nbytes + 1)) is matrix
    assert held_as_mapped(matrix, None) is matrix
    assert os.listdir(tmp_path) == []


def test_a_matrix_with_unsorted_indices_is_not_called_canonical_once_mapped(
        tmp_path: Path) -> None:
    matrix = sp.csr_matrix((np.array([2.0, 1.0]), np.array([2, 0], np.int32),
                            np.array([0, 2], np.int32)), shape=(1, 3))
    held = held_as_mapped(matrix, VectorSpill(tmp_path, min_bytes=0))
    assert mapped(held.data) and held.indices.tolist() == [2, 0]
    assert not held.has_canonical_format and held.toarray().tolist() == [[1.0, 0.0, 2.0]]


def test_texts_are_spilled_as_utf8_byte_ranges_once_large_enough(tmp_path: Path) -> None:
    texts = ("naïve tea", "", "über")  # 9 + 0 + 4 characters; 10 + 0 + 5 bytes
    spilled = texts_spilled(texts, VectorSpill(tmp_path, min_bytes=13))
    assert isinstance(spilled, ChunkTexts) and spilled == texts and list(spilled) == list(texts)
    assert spilled.ends().tolist() == [10, 10, 15] and spilled.heap_bytes == 0
    assert spilled.encoded(2) == "über".encode()
    assert texts_spilled(texts, VectorSpill(tmp_path, min_bytes=14)) is texts
    assert texts_spilled(texts, None) is texts
    assert texts_spilled(spilled, VectorSpill(tmp_path, min_bytes=0)) is spilled
    assert os.listdir(tmp_path) == []


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 7), min_size=1, max_size=6), data=st.data())
def test_gather_rows_equals_indexing_the_concatenation(sizes: list[int],
                                                       data: st.DataObject) -> None:
    rng = np.random.default_rng(sum(sizes))
    parts = [rng.standard_normal((n, 3)).astype(np.float32) for n in sizes]
    whole = np.concatenate(parts)
    index = np.asarray(data.draw(st.lists(st.integers(0, max(len(whole) - 1, 0)),
                                          max_size=20 if len(whole) else 0)), dtype=np.int64)
    for spill in (None, VectorSpill(min_bytes=0)):
        got = gather_rows(parts, index, 3, spill)
        assert got.shape == (len(index), 3)
        assert np.array_equal(got, whole[index])


@pytest.mark.parametrize("spill", [None, VectorSpill(min_bytes=0)])
def test_gather_rows_across_blocks(spill: VectorSpill | None,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # a block of 4: the 10 rows take three blocks, mixing parts within each; a spilled
    # output is written through a 4-row buffer
    monkeypatch.setattr("shared_core.state.spill.GATHER_BLOCK", 4)
    parts = [np.arange(12, dtype=np.float32).reshape(6, 2), np.full((4, 2), -1, np.float32)]
    index = np.array([9, 0, 5, 6, 1, 1, 8, 2, 7, 3])
    whole = np.concatenate(parts)
    got = gather_rows(parts, index, 2, spill)
    assert mapped(got) == (spill is not None)
    assert np.array_equal(got, whole[index])


@pytest.mark.parametrize("bad, message", [
    (dict(min_bytes=-1), "min_bytes"), (dict(min_bytes=True), "min_bytes"),
    (dict(folder=3), "must be a path"), (dict(folder="/nonexistent/spill"), "not a directory"),
])
def test_bad_spills_are_refused(bad: dict, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        VectorSpill(**bad)


def test_the_index_refuses_what_is_not_a_spill() -> None:
    with pytest.raises(TypeError, match="vector_spill must be a VectorSpill"):
        ConceptGraphIndex(HashingEmbedder(DIM), vector_spill="/tmp")  # type: ignore[arg-type]


# ------------------------------------------------------------------ an index over spilled rows
def assert_graph_arrays_mapped(index: ConceptGraphIndex, expected: bool) -> None:
    """The concept pairs and adjacency: mapped from a spill file, or on the heap. The
    edge list is not held at all until asked for."""
    graph = index.state.graph
    assert graph.pairs is not None and graph.edge_count > 0
    assert graph.edge_list is None and "edges" not in vars(graph)
    arrays = [graph.pairs.source, graph.pairs.count, graph.pairs.edge, graph.pairs.margin,
              graph.adjacency.data, graph.adjacency.indices, graph.adjacency.indptr]
    assert [mapped(a) for a in arrays] == [expected] * len(arrays)


def assert_unit_views_mapped(index: ConceptGraphIndex, expected: bool) -> None:
    """The concept links both ways, the units' own, their BM25 weights and the walk's
    sentence links: mapped from a spill file, as a loaded index maps them, or on the heap."""
    graph = index.state.graph
    matrices = [graph.links, graph.links_csc, graph.unit_links_csr, graph.unit_links_csc,
                graph.unit_bm25.weights, graph.walk.links_csr]
    assert [mapped(m.data) and mapped(m.indices) and mapped(m.indptr)
            for m in matrices] == [expected] * len(matrices)


def assert_term_counts_mapped(index: ConceptGraphIndex, expected: bool) -> None:
    """The sentence-term counts: mapped from a spill file, or on the heap."""
    terms = index.state.corpus.sentence_terms
    assert [mapped(a) for a in (terms.data, terms.indices, terms.indptr)] == [expected] * 3


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_spilled_index_is_the_heap_index_through_adds_and_deletes(name: str,
                                                                    tmp_path: Path) -> None:
    cfg = CONFIGS[name]
    spill = VectorSpill(tmp_path, min_bytes=0)
    # ids out of order and three chunks a batch: the merge gathers rows across batches
    first = POOL[::-1][:7]
    spilled = ConceptGraphIndex.from_texts(first, ids=ids_for(first), embedder=HashingEmbedder(DIM),
                                           config=cfg, batch_size=3, vector_spill=spill)
    heap = ConceptGraphIndex.from_texts(first, ids=ids_for(first), embedder=HashingEmbedder(DIM),
                                        config=cfg, batch_size=3, vector_spill=None)
    corpus = spilled.state.corpus
    assert mapped(corpus.sentence_vectors)
    assert corpus.unit_vectors is None or mapped(corpus.unit_vectors)
    assert not mapped(heap.state.corpus.sentence_vectors)
    assert_term_counts_mapped(spilled, True)
    assert_term_counts_mapped(heap, False)
    assert_graph_arrays_mapped(spilled, True)
    assert_graph_arrays_mapped(heap, False)
    assert_unit_views_mapped(spilled, True)
    assert_unit_views_mapped(heap, False)
    assert isinstance(corpus.texts, ChunkTexts) and corpus.texts.heap_bytes == 0
    assert isinstance(heap.state.corpus.texts, tuple) and corpus.texts == heap.state.corpus.texts
    assert np.array_equal(corpus.sentence_vectors, heap.state.corpus.sentence_vectors)
    assert_same_index(spilled, heap)
    # the rest interleaves with what is there; then a delete
    for index in (spilled, heap):
        index.add(POOL[::-1][7:], ids=ids_for(POOL[::-1][7:]))
        index.delete(ids_for(POOL[1:3]))
    assert mapped(spilled.state.corpus.sentence_vectors)
    assert_term_counts_mapped(spilled, True)  # the delete's take spilled its own
    assert_graph_arrays_mapped(spilled, True)  # a refresh spills what it makes too
    assert_unit_views_mapped(spilled, True)
    assert_same_index(spilled, heap)
    spilled.save(str(tmp_path / "saved"))
    assert sorted(os.listdir(tmp_path)) == ["saved"]  # the spill left no files behind
    assert_same_index(ConceptGraphIndex.load(str(tmp_path / "saved"), HashingEmbedder(DIM)), heap)


def test_a_failed_spilled_add_publishes_nothing(tmp_path: Path) -> None:
    embedder = FailOnCall(dim=DIM)
    spill = VectorSpill(tmp_path, min_bytes=0)
    index = ConceptGraphIndex.from_texts(POOL[:5], ids=ids_for(POOL[:5]),
                                         embedder=embedder.embedder(), vector_spill=spill)
    state = index.state
    many = " ".join(f"Filler sentence number {i} about rivers." for i in range(EMBED_BATCH + 10))
    embedder.calls, embedder.fail_on = 0, 3  # the third call: a later batch's
    with pytest.raises(TimeoutError):
        index.add([many, *POOL[5:]], ids=["big", *ids_for(POOL[5:])], batch_size=1)
    assert index.state is state and "big" not in index
    assert os.listdir(tmp_path) == []


def test_a_refresh_merges_pairs_into_spill_files_by_their_size_together(tmp_path: Path) -> None:
    """Old pairs (0,1) (0,3) (2,3) and a fresh (1,2) merge in key order; 4 pairs of 17
    bytes are 68 together, so a 60-byte threshold spills every merged array (each alone
    is under it) and a 69-byte one spills none."""
    from shared_core.graph.edges import StrongPairs
    from shared_core.state.refresh import _merged

    def old() -> list[np.ndarray]:
        return [np.array([0, 0, 2], np.int32), np.array([1, 3, 3], np.int32),
                np.array([5, 6, 7], np.int32), np.array([True, False, True]),
                np.array([0.1, -0.2, 0.3], np.float32)]

    fresh = StrongPairs(np.array([1], np.int32), np.array([2], np.int32),
                        np.array([4], np.int32), np.array([False]),
                        np.array([-0.4], np.float32))
    slots = np.array([2])  # after (0,1) and (0,3), before (2,3): position 2 of 4
    for min_bytes, spilled in ((60, True), (69, False)):
        parts = old()
        merged = _merged(parts, slots, fresh, VectorSpill(tmp_path, min_bytes=min_bytes))
        assert parts == []  # every old array was let go
        assert merged.source.tolist() == [0, 0, 1, 2]
        assert merged.target.tolist() == [1, 3, 2, 3]
        assert merged.count.tolist() == [5, 6, 4, 7]
        assert merged.edge.tolist() == [True, False, False, True]
        assert merged.margin.tolist() == pytest.approx([0.1, -0.2, -0.4, 0.3])
        assert [mapped(getattr(merged, f)) for f in ("source", "target", "count", "edge",
                                                     "margin")] == [spilled] * 5
    assert os.listdir(tmp_path) == []


def test_a_refresh_spills_the_concept_vectors_and_sums_by_their_size_together(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a derivation does: with every concept's sum kept (rule 0), n concepts take
    n x DIM x (4 + 8) bytes of vectors and sums. A threshold one byte under that spills
    both (each alone is under it); one byte over keeps both on the heap. Every dead row
    gathers the vectors into one array (dead share 0), which is then what spills."""
    from shared_core.state import derived as derived_module
    from shared_core.state import refresh as refresh_module

    monkeypatch.setattr(derived_module, "SUMS_MIN_SENTENCES", 0)
    monkeypatch.setattr(refresh_module, "CONCEPT_MAX_DEAD_SHARE", 0.0)
    texts, ids = POOL, [f"c{i:02d}" for i in range(len(POOL))]
    after = ConceptGraphIndex.from_texts(texts[:-1], ids=ids[:-1], embedder=HashingEmbedder(DIM),
                                         vector_spill=None)
    held = len(after.state.graph.concepts) * DIM * (4 + 8)
    for min_bytes, spilled in ((held - 1, True), (held + 1, False)):
        index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=HashingEmbedder(DIM),
                                             vector_spill=VectorSpill(tmp_path, min_bytes))
        index.delete([ids[-1]])
        graph = index.state.graph
        assert isinstance(graph.vectors, np.ndarray) and graph.concept_sums is not None
        assert mapped(graph.vectors) == spilled and mapped(graph.concept_sums) == spilled
        np.testing.assert_array_equal(graph.vectors, after.state.graph.vectors)
        np.testing.assert_array_equal(graph.concept_sums, after.state.graph.concept_sums)
