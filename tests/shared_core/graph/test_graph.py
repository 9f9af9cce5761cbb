"""The concept graph: Eq. 1 vectors, co-occurrence, threshold filtering, Dice, PageRank, BFS."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.compiled import COMPILED_ENV
from shared_core.graph import (
    ConceptEdges,
    adjacency,
    bfs_hops,
    bfs_reached,
    concept_edges,
    concept_vectors,
    cooccurrence,
    pagerank,
    power_iteration,
)
from shared_core.graph import edges as edges_module
from shared_core.graph.edges import (
    certificate_slack,
    chunk_counts,
    concept_sums,
    cooccurrence_change,
    edges_of,
    pair_cosines,
    pair_counts,
    recertified,
    rechecked,
    strong_cooccurrence,
    strong_pairs,
    strong_pairs_of,
    vectors_of_sums,
)
from shared_core.graph.pagerank import pagerank_residual, symmetric_pagerank

A, B, C, D, E = range(5)
# chunk x concept links (6 chunks, 5 concepts)
#   c0: A B C    c1: A B C    c2: A B D    c3: A C D    c4: D E    c5: E
LINKS = sp.csr_matrix(np.array([
    [1, 1, 1, 0, 0],
    [1, 1, 1, 0, 0],
    [1, 1, 0, 1, 0],
    [1, 0, 1, 1, 0],
    [0, 0, 0, 1, 1],
    [0, 0, 0, 0, 1],
], dtype=np.float32))
# |T|: A 4, B 3, C 3, D 3, E 2
# Co:  AB 3 (c0 c1 c2), AC 3 (c0 c1 c3), AD 2 (c2 c3), BC 2 (c0 c1), BD 1 (c2),
#      CD 1 (c3), DE 1 (c4); AE, BE, CE 0
CO = {(A, B): 3, (A, C): 3, (A, D): 2, (B, C): 2, (B, D): 1, (C, D): 1, (D, E): 1}
# Dice 2·Co/(|T_i|+|T_j|)
DICE = {(A, B): 6 / 7, (A, C): 6 / 7, (A, D): 4 / 7, (B, C): 4 / 6, (B, D): 2 / 6,
        (C, D): 2 / 6, (D, E): 2 / 5}
# Unit vectors at angles A 0°, B 60°, C 90°, D 30°, E 45°, so cosines are known:
# AB cos60 = .5, AC cos90 = 0, AD cos30 = .866, BC cos30 = .866, BD cos30 = .866,
# CD cos60 = .5, DE cos15 = .966
ANGLES = np.radians([0.0, 60.0, 90.0, 30.0, 45.0])
VECTORS = np.stack([np.cos(ANGLES), np.sin(ANGLES)], axis=1).astype(np.float32)


def test_cooccurrence_counts() -> None:
    co = cooccurrence(LINKS).toarray()
    expected = np.zeros((5, 5))
    for (i, j), c in CO.items():
        expected[i, j] = expected[j, i] = c
    np.testing.assert_array_equal(co, expected)  # symmetric, zero diagonal


def test_cooccurrence_treats_link_weights_as_presence() -> None:
    weighted = LINKS.multiply(3.0).tocsr()  # a link of weight 3 is still one chunk
    np.testing.assert_array_equal(cooccurrence(weighted).toarray(), cooccurrence(LINKS).toarray())


def _pairs(theta_co: int, theta_sem: float) -> set[tuple[int, int]]:
    edges = concept_edges(LINKS, VECTORS, theta_co, theta_sem)
    return set(zip(edges.source.tolist(), edges.target.tolist(), strict=True))


@pytest.mark.parametrize(
    ("theta_co", "theta_sem", "expected"),
    [
        (1, -1.0, {(A, B), (A, C), (A, D), (B, C), (B, D), (C, D), (D, E)}),  # all Co >= 1
        (2, -1.0, {(A, B), (A, C), (A, D), (B, C)}),                          # Co >= 2
        (3, -1.0, {(A, B), (A, C)}),                                          # Co >= 3
        (4, -1.0, set()),                                                     # max Co is 3
        (1, 0.49, {(A, B), (A, D), (B, C), (B, D), (C, D), (D, E)}),          # AC cos 0 out
        (1, 0.6, {(A, D), (B, C), (B, D), (D, E)}),                           # cos .866/.966
        (2, 0.6, {(A, D), (B, C)}),                                           # both filters
        (3, 0.6, set()),                                                      # AB .5, AC 0
        (1, 0.9, {(D, E)}),                                                   # only cos15
        (1, 0.97, set()),                                                     # .966 < .97
    ],
)
def test_edges_survive_exactly_the_thresholds(theta_co: int, theta_sem: float,
                                              expected: set[tuple[int, int]]) -> None:
    assert _pairs(theta_co, theta_sem) == expected


def test_edge_arrays_weights_and_order() -> None:
    edges = concept_edges(LINKS, VECTORS, 1, -1.0)
    pairs = list(zip(edges.source.tolist(), edges.target.tolist(), strict=True))
    assert pairs == sorted(CO)  # one row per pair, source < target, lexicographic order
    assert len(edges) == 7
    assert edges.cooccurrence.tolist() == [CO[p] for p in pairs]
    np.testing.assert_allclose(edges.dice, [DICE[p] for p in pairs], rtol=1e-12)
    cos = {(A, B): 0.5, (A, C): 0.0, (A, D): math.sqrt(3) / 2, (B, C): math.sqrt(3) / 2,
           (B, D): math.sqrt(3) / 2, (C, D): 0.5, (D, E): math.cos(math.radians(15))}
    np.testing.assert_allclose(pair_cosines(VECTORS, edges.source, edges.target),
                               [cos[p] for p in pairs], atol=1e-6)


@pytest.mark.parametrize("ends_bytes", [1 << 27, 0])
@pytest.mark.parametrize("block", [1, 3, 256])
def test_pair_cosines_are_the_same_bits_from_any_layout_and_block(
        ends_bytes: int, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows held in several runs (gathered once into their distinct ends, or, past
    ``PAIR_ENDS_BYTES``, read run by run) and in one array give the same float32
    cosines, bit for bit, whatever the block: a refresh and a derivation must agree."""
    from shared_core.state.rows import VectorRows

    rng = np.random.default_rng(7)
    rows = rng.standard_normal((40, 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    order = rng.permutation(40)  # rows out of order across three runs
    runs = [rows[order[:10]], rows[order[10:25]], rows[order[25:]]]
    held = VectorRows(runs, np.argsort(order))
    np.testing.assert_array_equal(np.asarray(held), rows)
    src, dst = rng.integers(0, 40, 300), rng.integers(0, 40, 300)
    src[:5] = dst[:5] = 39  # a concept paired with itself reads one row twice
    expected = np.array([np.float32(np.einsum("i,i->", rows[a], rows[b]))
                         for a, b in zip(src.tolist(), dst.tolist(), strict=True)])
    np.testing.assert_allclose(expected[:5], 1.0, atol=1e-6)
    reference = pair_cosines(rows, src, dst)  # the default block, one array
    np.testing.assert_allclose(reference, expected, atol=1e-6)
    monkeypatch.setattr(edges_module, "PAIR_BLOCK", block)
    monkeypatch.setattr(edges_module, "PAIR_ENDS_BYTES", ends_bytes)
    np.testing.assert_array_equal(pair_cosines(rows, src, dst), reference)
    np.testing.assert_array_equal(pair_cosines(held, src, dst), reference)
    assert pair_cosines(held, src[:0], dst[:0]).shape == (0,)


def test_strong_pairs_keep_every_pair_passing_theta_co_with_its_decision() -> None:
    """Co >= 2: AB, AC, AD, BC; theta_sem .6 cuts AB (.5) and AC (0), keeps AD, BC (.866)."""
    pairs = strong_pairs(LINKS, VECTORS, 2, 0.6)
    assert list(zip(pairs.source.tolist(), pairs.target.tolist(), strict=True)) == [
        (A, B), (A, C), (A, D), (B, C)]
    assert pairs.count.tolist() == [3, 3, 2, 2]
    assert pairs.edge.tolist() == [False, False, True, True]
    np.testing.assert_allclose(pairs.margin, [0.5 - 0.6, 0.0 - 0.6, math.sqrt(3) / 2 - 0.6,
                                              math.sqrt(3) / 2 - 0.6], atol=1e-6)
    edges = edges_of(pairs, chunk_counts(LINKS))
    assert list(zip(edges.source.tolist(), edges.target.tolist(), strict=True)) == [
        (A, D), (B, C)]
    np.testing.assert_allclose(edges.dice, [DICE[(A, D)], DICE[(B, C)]], rtol=1e-12)


@pytest.mark.parametrize("block", [1, 2, 5, 1 << 24])
def test_strong_pairs_in_blocks_of_any_cost_are_the_whole_matrix_pairs(block: int) -> None:
    """A block budget of 1 product makes every concept a block of its own; the pairs,
    counts and order stay those of the hand counts (Co >= 2: AB 3, AC 3, AD 2, BC 2)."""
    source, target, count = strong_cooccurrence(LINKS, 2, block)
    assert list(zip(source.tolist(), target.tolist(), count.tolist(), strict=True)) == [
        (A, B, 3), (A, C, 3), (A, D, 2), (B, C, 2)]
    pairs = strong_pairs(LINKS, VECTORS, 2, 0.6, block)
    assert pairs.edge.tolist() == [False, False, True, True]


@given(st.integers(0, 2**32 - 1), st.integers(1, 400), st.integers(1, 3))
@settings(max_examples=40, deadline=None)
def test_strong_cooccurrence_equals_the_dense_count(seed: int, block: int, theta: int) -> None:
    rng = np.random.default_rng(seed)
    dense = rng.random((25, 18)) < 0.3
    links = sp.csr_matrix(dense.astype(np.float32))
    co = dense.astype(np.int64).T @ dense.astype(np.int64)
    want_src, want_dst = np.nonzero(np.triu(co, k=1) >= theta)  # row-major: (source, target) order
    source, target, count = strong_cooccurrence(links, theta, block)
    np.testing.assert_array_equal(source, want_src)
    np.testing.assert_array_equal(target, want_dst)
    np.testing.assert_array_equal(count, co[want_src, want_dst])


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_pair_counts_count_only_the_pairs_asked_for(
        compiled: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand counts above, one pair at a time, either order, zero for AE, BE, CE: by
    the compiled loop where numba is installed, and by numpy."""
    monkeypatch.setenv(COMPILED_ENV, compiled)
    asked = [(A, B), (C, A), (A, D), (B, C), (D, B), (C, D), (D, E), (A, E), (E, B), (C, E)]
    src, dst = np.array(asked).T
    expected = [CO.get((min(p), max(p)), 0) for p in asked]
    assert pair_counts(LINKS.tocsc(), src, dst).tolist() == expected
    assert pair_counts(LINKS.tocsc(), src[:0], dst[:0]).tolist() == []


@pytest.mark.parametrize("bits", [1, 3, 52])
def test_pair_counts_in_any_mask_width_equal_the_full_count(
        bits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(COMPILED_ENV, "0")  # numpy's masks, not the compiled intersections
    monkeypatch.setattr(edges_module, "MASK_BITS", bits)
    rng = np.random.default_rng(3)
    dense = rng.random((40, 30)) < 0.3
    dense[:, 7] = False  # a concept in no chunk
    links = sp.csr_matrix(dense.astype(np.float32))
    src, dst = np.triu_indices(30, k=1)
    co = cooccurrence(links).toarray()
    np.testing.assert_array_equal(pair_counts(links.tocsc(), src, dst), co[src, dst])
    np.testing.assert_array_equal(pair_counts(links.tocsc(), dst, src), co[src, dst])


def test_a_count_change_worked_by_hand() -> None:
    """Three changed chunks over concepts 0..4, Co_new - Co_old for a < b:
    chunk 0 kept {0, 1}, gained 2, lost 3:  +02 +12 -03 -13 (01 unchanged, costs nothing)
    chunk 1 added {2, 4}:                   +24
    chunk 2 deleted {0, 1}:                 -01
    """
    kept = sp.csr_matrix(np.array([[1, 1, 0, 0, 0], [0] * 5, [0] * 5], dtype=np.int32))
    added = sp.csr_matrix(np.array([[0, 0, 1, 0, 0], [0, 0, 1, 0, 1], [0] * 5],
                                   dtype=np.int32))
    removed = sp.csr_matrix(np.array([[0, 0, 0, 1, 0], [0] * 5, [1, 1, 0, 0, 0]],
                                     dtype=np.int32))
    change = cooccurrence_change(kept, added, removed)
    got = list(zip(change.row.tolist(), change.col.tolist(), change.data.tolist(), strict=True))
    assert got == [(0, 1, -1), (0, 2, 1), (0, 3, -1), (1, 2, 1), (1, 3, -1), (2, 4, 1)]


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_the_drift_certificate_worked_by_hand(compiled: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """theta_sem = cos 45°. A at 0°, B at 10°, C at 48°: AB an edge with margin
    cos 10° - cos 45° = .2777, AC not, margin cos 48° - cos 45° = -.0380. A turns to 5°:
    it moves |v' - v| = 2 sin 2.5° = .0872. AB keeps its decision without a cosine
    (.2777 - .0872 = .1905 left); AC's margin is used up, so its cosine is recomputed:
    cos 43° = .7314 passes, and AC becomes an edge."""
    monkeypatch.setenv(COMPILED_ENV, compiled)  # the compiled recheck, then numpy's
    theta = math.cos(math.radians(45))
    before = _at_angles([0.0, 10.0, 48.0])
    pairs = strong_pairs_of(np.array([A, A]), np.array([B, C]), np.array([3, 3]), before, theta)
    assert pairs.edge.tolist() == [True, False]
    after = _at_angles([5.0, 10.0, 48.0])
    moved = 2 * math.sin(math.radians(2.5))
    drift = np.array([np.linalg.norm(after[0].astype(np.float64) - before[0]), 0.0, 0.0])
    assert drift[0] == pytest.approx(moved, abs=1e-6)
    holds, shrunk = recertified(pairs.margin, drift[[A, A]] + drift[[B, C]],
                                certificate_slack(2))
    assert holds.tolist() == [True, False]
    refreshed, recomputed = rechecked(pairs, after, drift, theta)
    assert recomputed.tolist() == [1]  # AC only
    assert refreshed.edge.tolist() == [True, True]
    cos = {p: math.cos(math.radians(d)) for p, d in [("AB", 10), ("AC", 48), ("AC'", 43)]}
    assert refreshed.margin[0] == shrunk[0]
    assert refreshed.margin[0] == pytest.approx(cos["AB"] - theta - moved, abs=1e-6)
    assert refreshed.margin[1] == pytest.approx(cos["AC'"] - theta, abs=1e-6)
    # the decisions are the ones a fresh computation takes
    fresh = strong_pairs_of(pairs.source, pairs.target, pairs.count, after, theta)
    assert fresh.edge.tolist() == refreshed.edge.tolist()


def test_a_certificate_holds_only_beyond_the_slack() -> None:
    """|margin| - drift must exceed the slack; a kept margin shrinks toward zero, sign kept."""
    margin = np.array([0.3, -0.25, 0.01, -0.002, 0.0], dtype=np.float32)
    drift = np.array([0.1, 0.05, 0.02, 0.0, 0.0])
    holds, shrunk = recertified(margin, drift, 1e-3)
    assert holds.tolist() == [True, True, False, True, False]
    np.testing.assert_allclose(shrunk[:2], [0.2, -0.2], atol=1e-7)
    room = np.abs(margin.astype(np.float64)) - drift
    assert np.all(np.abs(shrunk[holds]) <= room[holds])  # rounded toward zero, never up
    assert shrunk[2] == 0.0  # used up
    assert certificate_slack(384) == pytest.approx(384 * 8 * 2.0**-24)


def _at_angles(degrees: list[float]) -> np.ndarray:
    angles = np.radians(degrees)
    return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def test_no_edges_on_empty_links() -> None:
    edges = concept_edges(sp.csr_matrix((3, 4), dtype=np.float32), np.eye(4, dtype=np.float32),
                          1, 0.0)
    assert len(edges) == 0
    assert adjacency(edges, 4).nnz == 0


def test_adjacency_symmetric_dice_or_binary() -> None:
    edges = concept_edges(LINKS, VECTORS, 2, -1.0)  # AB, AC, AD, BC
    w = adjacency(edges, 5, weighted=True).toarray()
    expected = np.zeros((5, 5))
    for p in [(A, B), (A, C), (A, D), (B, C)]:
        expected[p] = expected[p[::-1]] = DICE[p]
    np.testing.assert_allclose(w, expected)
    np.testing.assert_array_equal(adjacency(edges, 5, weighted=False).toarray(), expected > 0)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("weighted", [True, False])
def test_adjacency_is_built_as_a_sorted_coo_build_gives_it(seed: int, weighted: bool) -> None:
    """The triangle-plus-transpose sum gives the very arrays of a COO build (then sorted)."""
    rng = np.random.default_rng(seed)
    links = sp.csr_matrix((rng.random((40, 30)) < 0.2).astype(np.float32))
    edges = concept_edges(links, np.eye(30, dtype=np.float32) + 0.1, 1, 0.0)
    assert len(edges) > 20
    built = adjacency(edges, 31, weighted)  # a last concept without edges
    weights = edges.dice if weighted else np.ones(len(edges))
    reference = sp.csr_matrix((np.concatenate([weights, weights]),
                               (np.concatenate([edges.source, edges.target]),
                                np.concatenate([edges.target, edges.source]))), shape=(31, 31))
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(built, name), getattr(reference, name), name)
    unsorted = ConceptEdges(edges.source[::-1], edges.target[::-1], edges.cooccurrence[::-1],
                            edges.dice[::-1])
    assert (adjacency(unsorted, 31, weighted) != built).nnz == 0


def test_concept_vectors_are_normalised_means_of_exactly_their_sentences() -> None:
    # sentences x concepts (raw counts; a count of 3 must weigh like 1):
    #   s0: A(x3)   s1: A, B   s2: B   s3: -   ; concept C appears in no sentence
    incidence = sp.csr_matrix(np.array([[3, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0]]))
    emb = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], dtype=np.float32)
    emb[3] /= np.linalg.norm(emb[3])
    vectors, counts = concept_vectors(incidence, emb)
    mean_a = (emb[0] + emb[1]) / 2  # (.5, .5, 0)
    mean_b = (emb[1] + emb[2]) / 2  # (0, .5, .5)
    np.testing.assert_allclose(vectors[0], mean_a / np.linalg.norm(mean_a), rtol=1e-6)
    np.testing.assert_allclose(vectors[1], mean_b / np.linalg.norm(mean_b), rtol=1e-6)
    np.testing.assert_array_equal(vectors[2], np.zeros(3))  # no sentence: zero, not a stand-in
    assert counts.tolist() == [2, 2, 0]
    assert vectors.dtype == np.float32


@pytest.mark.parametrize("in_place", [True, False])
def test_concept_vectors_are_the_same_bits_however_rows_are_converted(
        in_place: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sums run per VECTOR_BLOCK, each added to the total; within a block, converting
    ROW_BLOCK rows at a time (or the public product, without the in-place kernel) must
    give exactly the bits of the block converted whole."""
    from shared_core.embeddings import base

    rng = np.random.default_rng(11)
    incidence = sp.csr_matrix((rng.random((300, 12)) < 0.3).astype(np.float32))
    emb = rng.normal(size=(300, 8)).astype(np.float32)
    monkeypatch.setattr(base, "VECTOR_BLOCK", 64)
    columns = sp.csc_matrix(incidence.T, dtype=np.float64)
    expected = np.zeros((12, 8))
    for start in range(0, 300, 64):  # the reference: each block whole, then added
        expected += columns[:, start:start + 64] @ emb[start:start + 64].astype(np.float64)
    monkeypatch.setattr(base, "ROW_BLOCK", 5)
    if not in_place:
        monkeypatch.setattr(base, "_csc_matvecs", None)
    got = base.sparse_times_vectors(incidence.T, emb)
    assert got.tobytes() == expected.tobytes()
    # the fixed-point sums behind concept vectors: one integer product, however converted
    scaled = np.rint(emb.astype(np.float64) * 2.0**32).astype(np.int64)
    reference = sp.csc_matrix(incidence.T, dtype=np.int64) @ scaled
    sums, _ = concept_sums(incidence, emb)
    np.testing.assert_array_equal(sums, reference)


def test_concept_sums_are_exact_fixed_point_sums_worked_by_hand() -> None:
    # s0 = (.5, .25), s1 = (.25, -.5), s2 = (.75, 0): all multiples of 2^-32
    # A is in s0 and s1, B in s1 and s2, C in none
    incidence = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0]]))
    emb = np.array([[0.5, 0.25], [0.25, -0.5], [0.75, 0.0]], dtype=np.float32)
    sums, counts = concept_sums(incidence, emb)
    assert sums.dtype == np.int64 and counts.tolist() == [2, 2, 0]
    assert sums.tolist() == [[3 * 2**30, -(2**30)], [2**32, -(2**31)], [0, 0]]
    vectors = vectors_of_sums(sums)
    a = np.array([0.75, -0.25], dtype=np.float32)
    np.testing.assert_array_equal(vectors[0], a / np.linalg.norm(a))
    np.testing.assert_array_equal(vectors[2], [0.0, 0.0])  # no sentence: zero


def test_fixed_point_rounds_only_values_below_two_to_the_minus_nine() -> None:
    from shared_core.embeddings.base import fixed_point

    values = np.array([[2.0**-9, -(2.0**-9) * 3, 2.0**-40, 0.1, -1.0]], dtype=np.float32)
    converted = fixed_point(values)
    assert converted.dtype == np.int64
    assert converted[0, :2].tolist() == [2**23, -3 * 2**23]
    assert converted[0, 2] == 0  # 2^-40 is under half a step of 2^-32
    # 0.1 as float32 is exactly k * 2^-27 for an integer k: the conversion is exact
    assert converted[0, 3] == int(np.float64(np.float32(0.1)) * 2**32)
    assert converted[0, 4] == -(2**32)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**31), st.integers(min_value=1, max_value=40))
def test_concept_sums_do_not_depend_on_sentence_order_or_split(seed: int, rows: int) -> None:
    """What lets a refresh add the changed sentences to the old sums: any order, any
    split into parts added together, gives the same integers (float sums do not)."""
    rng = np.random.default_rng(seed)
    incidence = sp.csr_matrix((rng.random((rows, 5)) < 0.5).astype(np.float32))
    emb = (rng.normal(size=(rows, 6)) * rng.choice([1.0, 1e-4, 1e-9], size=(rows, 1))
           ).astype(np.float32)
    whole, counts = concept_sums(incidence, emb)
    order = rng.permutation(rows)
    shuffled, shuffled_counts = concept_sums(incidence[order], emb[order])
    np.testing.assert_array_equal(shuffled, whole)
    np.testing.assert_array_equal(shuffled_counts, counts)
    cut = int(rng.integers(0, rows + 1))
    first, _ = concept_sums(incidence[:cut], emb[:cut])
    rest, _ = concept_sums(incidence[cut:], emb[cut:])
    np.testing.assert_array_equal(first + rest, whole)


class _RowsRead:
    """Sentence vectors that record which rows were read (by index or slice)."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows, self.shape, self.read = rows, rows.shape, np.zeros(len(rows), dtype=bool)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: object) -> np.ndarray:
        self.read[np.arange(len(self.rows))[key]] = True  # type: ignore[index]
        return self.rows[key]  # type: ignore[index]


def test_a_few_concepts_sums_read_only_their_sentences(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh sums its changed concepts from their own sentences: the sums of a few
    columns read only the rows those columns hold (two at a time here), and equal the
    same columns of every concept's sums."""
    monkeypatch.setattr(edges_module, "GATHER_BLOCK", 2)
    rng = np.random.default_rng(3)
    incidence = sp.csr_matrix((rng.random((40, 12)) < 0.3).astype(np.float32))
    emb = rng.normal(size=(40, 6)).astype(np.float32)
    whole, counts = concept_sums(incidence, emb)
    few = np.array([7])
    holding = np.flatnonzero(np.diff(incidence[:, few].tocsr().indptr))
    assert 2 < len(holding) < 20  # under half the sentences (the gathered path), in blocks
    recorder = _RowsRead(emb)
    sums, few_counts = concept_sums(incidence[:, few], recorder)  # type: ignore[arg-type]
    np.testing.assert_array_equal(sums, whole[few])
    np.testing.assert_array_equal(few_counts, counts[few])
    np.testing.assert_array_equal(np.flatnonzero(recorder.read), holding)


def test_concept_vectors_of_random_incidence_match_manual_means() -> None:
    rng = np.random.default_rng(7)
    incidence = (rng.random((30, 6)) < 0.3).astype(np.int32)
    emb = rng.normal(size=(30, 8)).astype(np.float32)
    vectors, counts = concept_vectors(sp.csr_matrix(incidence), emb)
    for c in range(6):
        rows = emb[incidence[:, c] == 1]
        assert counts[c] == len(rows)
        if len(rows):
            mean = rows.mean(axis=0)
            np.testing.assert_allclose(vectors[c], mean / np.linalg.norm(mean), atol=1e-5)


# ------------------------------------------------------------------ PageRank
def test_pagerank_of_a_star_by_hand() -> None:
    # center c, three leaves l; d = .85, n = 4:
    #   l = .15/4 + .85·c/3 ;  c = .15/4 + .85·3l  =>  c = 71/148, l = 77/444
    adj = sp.csr_matrix(np.array([[0, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]],
                                 dtype=np.float64))
    for symmetric in (False, True):
        rank = pagerank(adj, symmetric=symmetric)
        np.testing.assert_allclose(rank, [71 / 148, 77 / 444, 77 / 444, 77 / 444], atol=1e-10)
        assert rank.sum() == pytest.approx(1.0)


def test_pagerank_orders_a_path_center_first() -> None:
    # path 0-1-2-3-4: the ends have one neighbour, so rank 2 >= 1 = 3 >= 0 = 4 and ends lowest
    n = 5
    adj = sp.csr_matrix((np.ones(8), ([0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3])),
                        shape=(n, n))
    rank = pagerank(adj)
    assert rank[0] == pytest.approx(rank[4]) and rank[1] == pytest.approx(rank[3])
    assert rank[0] < rank[2] and rank[0] < rank[1]


def test_pagerank_isolated_nodes_share_uniform_mass() -> None:
    # no edges at all: every node is dangling -> uniform 1/n
    np.testing.assert_allclose(pagerank(sp.csr_matrix((4, 4))), [0.25] * 4)
    assert pagerank(sp.csr_matrix((0, 0))).shape == (0,)
    np.testing.assert_allclose(pagerank(sp.csr_matrix((1, 1))), [1.0])


def _nx_rank(adj: np.ndarray, weighted: bool, directed: bool, damping: float) -> np.ndarray:
    g = nx.DiGraph() if directed else nx.Graph()
    g.add_nodes_from(range(len(adj)))
    for i, j in zip(*np.nonzero(adj), strict=True):
        g.add_edge(int(i), int(j), weight=float(adj[i, j]))
    ranks = nx.pagerank(g, alpha=damping, weight="weight" if weighted else None,
                        tol=1e-14, max_iter=10_000)
    return np.array([ranks[i] for i in range(len(adj))])


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("damping", [0.85, 0.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pagerank_matches_networkx_undirected(weighted: bool, damping: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 12
    upper = np.triu((rng.random((n, n)) < 0.25) * rng.uniform(0.1, 1.0, (n, n)), k=1)
    upper[:, [3, 7]] = 0  # nodes 3 and 7 isolated (dangling)
    upper[[3, 7], :] = 0
    dense = upper + upper.T
    weights = dense if weighted else (dense > 0).astype(float)
    expected = _nx_rank(dense, weighted, False, damping)
    for symmetric in (False, True):  # one product with A itself: the same fixed point
        ours = pagerank(sp.csr_matrix(weights), damping, tol=1e-14, max_iter=10_000,
                        symmetric=symmetric)
        np.testing.assert_allclose(ours, expected, atol=1e-8)


def test_pagerank_matches_networkx_directed_with_dangling_node() -> None:
    # 0->1 (2.0), 1->2 (1.0), 2->0 (0.5), 2->3 (1.5), 3 has no out-links; 4 isolated
    dense = np.zeros((5, 5))
    dense[0, 1], dense[1, 2], dense[2, 0], dense[2, 3] = 2.0, 1.0, 0.5, 1.5
    ours = pagerank(sp.csr_matrix(dense), tol=1e-14, max_iter=10_000)
    np.testing.assert_allclose(ours, _nx_rank(dense, True, True, 0.85), atol=1e-8)


def _random_undirected(seed: int, n: int, density: float, isolated: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    upper = np.triu((rng.random((n, n)) < density) * rng.uniform(0.05, 2.0, (n, n)), k=1)
    upper[:, :isolated] = 0  # the first ``isolated`` nodes have no edge (dangling)
    upper[:isolated, :] = 0
    return sp.csr_matrix(upper + upper.T)


def _power_steps(adj: sp.csr_matrix, tol: float, damping: float = 0.85,
                 max_iter: int = 1000) -> tuple[np.ndarray, int]:
    """Power iteration on ``adj``'s transition matrix: the rank and its steps."""
    n = adj.shape[0]
    weight = np.asarray(adj.sum(axis=1)).ravel()
    inverse = np.divide(1.0, weight, out=np.zeros(n), where=weight > 0)
    transition = sp.csr_matrix(sp.diags(inverse) @ adj).T.tocsr()
    return power_iteration(transition, weight == 0, None, damping, tol, max_iter)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60),
       density=st.floats(0.0, 0.6), isolated=st.integers(0, 5),
       damping=st.floats(0.05, 0.95), tol=st.sampled_from([1e-6, 1e-10, 1e-13]))
def test_conjugate_gradients_stop_where_power_iteration_would(
        seed: int, n: int, density: float, isolated: int, damping: float, tol: float) -> None:
    """CG stops where power iteration does: once one power step would move its rank
    less than n·tol (L1), so it lies within n·tol/(1-d) of the fixed point. Both then
    scale the rank to sum to 1, which moves it by at most that again, and adds at most
    the same to the step (a tight power iteration is the reference)."""
    adj = _random_undirected(seed, n, density, min(isolated, n))
    rank, _ = symmetric_pagerank(adj, damping, n * tol, 10_000)
    assert rank.sum() == pytest.approx(1.0) and np.all(rank > 0)
    assert pagerank_residual(adj, rank, damping) < 2.01 * n * tol + 1e-14
    reference, _ = _power_steps(adj, 1e-15, damping, 100_000)
    assert np.abs(rank - reference).sum() <= 2 * n * tol / (1 - damping) + 1e-12


def test_conjugate_gradients_take_fewer_products_than_power_iteration() -> None:
    """At d = 0.85 CG's error bound contracts by 0.56 a product, power iteration's by
    0.85. On a 300-node path, which mixes slowly, power iteration runs close to its
    bound (log(3e-8)/log(0.85) = 107 steps from uniform) and CG needs under a third
    of its products; on a random graph, which mixes fast, still fewer. A warm start
    from the fixed point itself stops at once."""
    n = 300
    i = np.arange(n - 1)
    path = sp.csr_matrix((np.ones(2 * (n - 1)), (np.r_[i, i + 1], np.r_[i + 1, i])),
                         shape=(n, n))
    for adj, factor in ((path, 3), (_random_undirected(11, n, 0.03, 4), 1)):
        power, power_steps = _power_steps(adj, n * 1e-10)
        rank, cg_steps = symmetric_pagerank(adj, 0.85, n * 1e-10, 1000)
        assert cg_steps * factor < power_steps
        tight, _ = symmetric_pagerank(adj, 0.85, n * 1e-14, 1000)
        for found in (rank, power):  # both within the stop's bound of the fixed point
            assert np.abs(found - tight).sum() <= n * 1e-10 / 0.15
        warm, warm_steps = symmetric_pagerank(adj, 0.85, n * 1e-10, 1000, start=tight)
        assert warm_steps == 0
        np.testing.assert_allclose(warm, tight, atol=1e-15)


def test_pagerank_refuses_a_negative_weight() -> None:
    adj = sp.csr_matrix(np.array([[0, -1.0], [-1.0, 0]]))
    with pytest.raises(ValueError, match="non-negative edge weights"):
        pagerank(adj, symmetric=True)


def test_pagerank_residual_of_a_star_by_hand_and_of_the_fixed_point() -> None:
    """Star 0-1, 0-2 from uniform 1/3: the centre gets .85·(1/3 + 1/3) + .05, each leaf
    .85·(1/3)/2 + .05, so the step moves .85/3 at the centre and .85/6 at each leaf."""
    star = sp.csr_matrix(np.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]], dtype=np.float64))
    assert pagerank_residual(star, np.full(3, 1 / 3)) == pytest.approx(0.85 * 2 / 3, abs=1e-12)
    dense = np.zeros((5, 5))  # directed, with a dangling node (3) and an isolated one (4)
    dense[0, 1], dense[1, 2], dense[2, 0], dense[2, 3] = 2.0, 1.0, 0.5, 1.5
    exact = _nx_rank(dense, True, True, 0.85)
    assert pagerank_residual(sp.csr_matrix(dense), exact) < 1e-9
    moved = exact + np.array([0.01, -0.01, 0, 0, 0])
    assert pagerank_residual(sp.csr_matrix(dense), moved) > 0.01


def test_pagerank_default_tolerance_is_within_1e8_of_networkx() -> None:
    edges = concept_edges(LINKS, VECTORS, 1, -1.0)
    adj = adjacency(edges, 5)
    np.testing.assert_allclose(pagerank(adj), _nx_rank(adj.toarray(), True, False, 0.85),
                               atol=1e-8)


def test_a_warm_start_reaches_the_same_rank_in_fewer_iterations() -> None:
    """A graph grown by one node starts from the old rank: same fixed point, fewer steps."""
    rng = np.random.default_rng(5)
    n = 40
    upper = np.triu((rng.random((n, n)) < 0.15) * rng.uniform(0.1, 1.0, (n, n)), k=1)
    adj = sp.csr_matrix(upper + upper.T)
    old = pagerank(sp.csr_matrix(adj[:-1, :-1]))
    start = np.append(old, 1.0 / n)
    out_weight = np.asarray(adj.sum(axis=1)).ravel()
    inverse = np.divide(1.0, out_weight, out=np.zeros(n), where=out_weight > 0)
    transition = sp.csr_matrix(sp.diags(inverse) @ adj).T.tocsr()
    cold, cold_steps = power_iteration(transition, out_weight == 0, None, 0.85, n * 1e-10, 200)
    warm, warm_steps = power_iteration(transition, out_weight == 0, None, 0.85, n * 1e-10, 200,
                                       start)
    assert warm_steps < cold_steps
    np.testing.assert_allclose(warm, cold, atol=1e-9)
    np.testing.assert_allclose(pagerank(adj, start=start), cold, atol=1e-9)
    with pytest.raises(ValueError, match="one entry per node"):
        pagerank(adj, start=np.ones(n - 1))
    with pytest.raises(ValueError, match="non-negative"):
        pagerank(adj, start=-np.ones(n))


# ------------------------------------------------------------------ BFS
PATH = sp.csr_matrix((np.ones(8), ([0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3])),
                     shape=(6, 6))  # path 0-1-2-3-4, node 5 isolated
STAR = sp.csr_matrix((np.ones(6), ([0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0])), shape=(4, 4))


@pytest.mark.parametrize(
    ("adj", "seeds", "max_hops", "expected"),
    [
        (PATH, [0], 2, [0, 1, 2, -1, -1, -1]),
        (PATH, [0], 10, [0, 1, 2, 3, 4, -1]),       # the isolated node is never reached
        (PATH, [0, 4], 1, [0, 1, -1, 1, 0, -1]),    # distance to the nearest seed
        (PATH, [2], 0, [-1, -1, 0, -1, -1, -1]),    # zero hops: seeds only
        (PATH, [5], 3, [-1, -1, -1, -1, -1, 0]),
        (STAR, [0], 2, [0, 1, 1, 1]),
        (STAR, [1], 1, [1, 0, -1, -1]),
        (STAR, [1], 2, [1, 0, 2, 2]),               # leaf -> center -> other leaves
    ],
)
def test_bfs_hops(adj: sp.csr_matrix, seeds: list[int], max_hops: int,
                  expected: list[int]) -> None:
    assert bfs_hops(adj, np.array(seeds, dtype=np.int64), max_hops).tolist() == expected


def test_bfs_with_no_seeds_reaches_nothing() -> None:
    assert bfs_hops(PATH, np.zeros(0, dtype=np.int64), 3).tolist() == [-1] * 6


def _reference_bfs(adj: sp.csr_matrix, seeds: list[int], max_hops: int) -> list[int]:
    """Textbook BFS along each row's stored entries, one node at a time."""
    hops = [-1] * adj.shape[0]
    frontier = sorted(set(seeds))
    for s in frontier:
        hops[s] = 0
    for hop in range(1, max_hops + 1):
        new = sorted({int(j) for i in frontier
                      for j in adj.indices[adj.indptr[i]:adj.indptr[i + 1]] if hops[j] < 0})
        for j in new:
            hops[j] = hop
        frontier = new
    return hops


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 30), st.floats(0.02, 0.6), st.booleans(), st.integers(0, 4),
       st.integers(0, 2**31 - 1))
def test_bfs_hops_equals_a_textbook_bfs(n: int, density: float, symmetric: bool,
                                        max_hops: int, seed: int) -> None:
    """Both ways of taking a hop (gathering a small frontier's rows, one product for a
    large one) agree with a plain BFS, on directed graphs too."""
    rng = np.random.default_rng(seed)
    dense = np.triu(rng.random((n, n)) < density, 1)
    dense = dense | dense.T if symmetric else dense | np.tril(rng.random((n, n)) < density, -1)
    adj = sp.csr_matrix(dense.astype(np.float64))
    seeds = sorted(rng.choice(n, size=int(rng.integers(1, 4)), replace=True).tolist())
    expected = _reference_bfs(adj, seeds, max_hops)
    assert bfs_hops(adj, np.array(seeds, dtype=np.int64), max_hops).tolist() == expected
    # the reached concepts alone, ascending, with their hops: nothing else is held
    concepts, hops = bfs_reached(adj, np.array(seeds, dtype=np.int64), max_hops)
    assert concepts.tolist() == [c for c, h in enumerate(expected) if h >= 0]
    assert hops.tolist() == [h for h in expected if h >= 0]


def test_bfs_reached_holds_only_what_it_reached() -> None:
    # STAR from leaf 1: the center at hop 1, the other leaves at 2; seeds repeated
    concepts, hops = bfs_reached(STAR, np.array([1, 1]), 2)
    assert concepts.tolist() == [0, 1, 2, 3] and hops.tolist() == [1, 0, 2, 2]
    concepts, hops = bfs_reached(PATH, np.array([4, 0]), 1)
    assert concepts.tolist() == [0, 1, 3, 4] and hops.tolist() == [0, 1, 1, 0]
    concepts, hops = bfs_reached(PATH, np.zeros(0, dtype=np.int64), 3)
    assert concepts.tolist() == [] and hops.tolist() == []
