"""The update's compiled pair loops give numpy's results: the same margins bit for bit, the
same redo positions, the same co-occurrence counts."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from shared_core.compiled import COMPILED_ENV
from shared_core.graph import edges, loops
from shared_core.graph.edges import certificate_slack, pair_counts, recertified

pytest.importorskip("numba")


def numpy_recheck(source: np.ndarray, target: np.ndarray, drift: np.ndarray,
                  margin: np.ndarray, slack: float) -> tuple[np.ndarray, np.ndarray]:
    """The numpy pass over every pair (``edges.rechecked``'s own), on a copy."""
    margin = margin.copy()
    moved = drift[source] + drift[target]
    touched = np.flatnonzero(moved)
    holds, shrunk = recertified(margin[touched], moved[touched], slack)
    margin[touched] = shrunk
    return touched[~holds], margin


margins = arrays(np.float32, st.integers(0, 60),
                 elements=st.one_of(st.floats(-1.0, 1.0, width=32),
                                    st.sampled_from([0.0, -0.0, 1e-4, -1e-4, 2e-7, 1.0])))


@settings(max_examples=200, deadline=None)
@given(margin=margins, seed=st.integers(0, 2**32 - 1), still=st.floats(0.0, 1.0))
def test_recertify_shrinks_the_margins_numpy_shrinks_bit_for_bit(
        margin: np.ndarray, seed: int, still: float) -> None:
    rng = np.random.default_rng(seed)
    n_concepts = 8
    drift = rng.random(n_concepts) * rng.choice([1e-6, 1e-3, 0.3], n_concepts)
    drift[rng.random(n_concepts) < still] = 0.0  # concepts that did not move
    drift[rng.integers(n_concepts)] = np.inf  # a concept with no old vector
    source = rng.integers(0, n_concepts, len(margin)).astype(np.int32)
    target = rng.integers(0, n_concepts, len(margin)).astype(np.int32)
    slack = certificate_slack(384)
    want_redo, want_margin = numpy_recheck(source, target, drift, margin, slack)
    got_margin = margin.copy()
    got_redo = loops.recertified_in_place(source, target, drift, got_margin, slack)
    assert got_redo is not None
    assert got_redo.tolist() == want_redo.tolist()
    # bit for bit, the sign of a zero included
    assert got_margin.view(np.uint32).tolist() == want_margin.view(np.uint32).tolist()


def test_recertify_worked_by_hand() -> None:
    """Pair 0 unmoved (margin untouched), pair 1 keeps .3 - .1 = .2, pair 2's -.01 is used
    up by .02 (redone, margin -0), pair 3 keeps -.25 + .05 = -.2."""
    drift = np.array([0.0, 0.1, 0.02, 0.05])
    source, target = np.array([0, 1, 2, 3]), np.array([0, 0, 0, 0])
    margin = np.array([0.5, 0.3, -0.01, -0.25], dtype=np.float32)
    redo = loops.recertified_in_place(source, target, drift, margin, 1e-3)
    assert redo is not None and redo.tolist() == [2]
    np.testing.assert_allclose(margin, [0.5, 0.2, 0.0, -0.2], atol=1e-7)
    assert np.signbit(margin[2])  # the sign kept on a used-up margin
    assert abs(float(margin[1])) <= 0.3 - 0.1 and abs(float(margin[3])) <= 0.25 - 0.05


def test_recertify_refuses_what_it_cannot_do() -> None:
    drift = np.zeros(3)
    pair = np.array([0]), np.array([1])
    read_only = np.zeros(1, dtype=np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        loops.recertified_in_place(*pair, drift, read_only, 1e-3)
    with pytest.raises(ValueError, match="float32"):
        loops.recertified_in_place(*pair, drift, np.zeros(1), 1e-3)
    with pytest.raises(IndexError, match="3 drifts"):
        loops.recertified_in_place(np.array([0]), np.array([3]), drift,
                                        np.zeros(1, dtype=np.float32), 1e-3)


@st.composite
def linked_columns(draw: st.DrawFn) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
    """0/1 chunk x concept links with columns of very different lengths (a few concepts in
    most chunks, most in few: both the bisection and the merge run), and pairs of them."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    chunks, concepts = draw(st.integers(1, 300)), draw(st.integers(2, 12))
    density = rng.choice([0.005, 0.05, 0.9], concepts)
    dense = rng.random((chunks, concepts)) < density
    pairs = draw(st.integers(0, 40))
    src = rng.integers(0, concepts, pairs)
    dst = rng.integers(0, concepts, pairs)
    return sp.csc_matrix(dense.astype(np.float32)), src, dst


@settings(max_examples=200, deadline=None)
@given(case=linked_columns())
def test_compiled_counts_are_the_chunks_both_concepts_link(
        case: tuple[sp.csc_matrix, np.ndarray, np.ndarray]) -> None:
    links, src, dst = case
    dense = links.toarray() > 0
    want = (dense[:, src] & dense[:, dst]).sum(axis=0)
    got = loops.pair_counts_compiled(links, src, dst)
    assert got is not None and got.tolist() == want.tolist()


def test_counts_worked_by_hand_in_any_entry_order_and_by_numpy_with_loops_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The marks do not need sorted columns: reversed entries count the same; numpy's masks,
    with the loops turned off, give the same counts."""
    links = sp.csc_matrix(np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1], [1, 0, 1]],
                                   dtype=np.float32))
    src, dst = np.array([0, 0, 1, 2]), np.array([1, 2, 2, 2])
    hand = [2, 2, 2, 3]  # 01: chunks 0, 1; 02: 1, 3; 12: 1, 2; 22: the column itself
    assert pair_counts(links, src, dst).tolist() == hand
    reversed_entries = links.copy()
    for c in range(3):
        s, e = links.indptr[c], links.indptr[c + 1]
        reversed_entries.indices[s:e] = links.indices[s:e][::-1]
    reversed_entries.has_sorted_indices = False
    assert loops.pair_counts_compiled(reversed_entries, src, dst).tolist() == hand
    monkeypatch.setenv(COMPILED_ENV, "0")
    assert loops.pair_counts_compiled(links, src, dst) is None
    assert edges.pair_counts(links, src, dst).tolist() == hand


def test_counts_refuse_a_column_out_of_range() -> None:
    links = sp.csc_matrix(np.eye(3, dtype=np.float32))
    with pytest.raises(IndexError, match="3 columns"):
        loops.pair_counts_compiled(links, np.array([0]), np.array([3]))
    with pytest.raises(ValueError, match="2 sources for 1 targets"):
        loops.pair_counts_compiled(links, np.array([0, 1]), np.array([2]))
    broken = links.copy()
    broken.indices[1] = 3  # an entry past the last row
    with pytest.raises(IndexError, match="3 rows"):
        loops.pair_counts_compiled(broken, np.array([0]), np.array([1]))


@st.composite
def sorted_pairs(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    """Pairs sorted by (source, target), source < target, some of them edges, with
    their counts, and each concept's chunk count."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 30))
    every = np.stack(np.triu_indices(n, k=1), axis=1)
    chosen = every[rng.random(len(every)) < draw(st.floats(0.0, 1.0))]
    count = rng.integers(1, 9, len(chosen)).astype(np.int32)
    edge = rng.random(len(chosen)) < 0.6
    chunk_count = rng.integers(9, 40, n).astype(np.float64)
    return (chosen[:, 0].astype(np.int32), chosen[:, 1].astype(np.int32), count, edge,
            chunk_count)


@settings(max_examples=200, deadline=None)
@given(case=sorted_pairs())
def test_dice_adjacency_is_numpys_matrix_bit_for_bit(case: tuple[np.ndarray, ...]) -> None:
    source, target, count, edge, chunk_count = case
    pairs = edges.StrongPairs(source, target, count, edge,
                              np.zeros(len(source), dtype=np.float32))
    want = edges.adjacency(edges.edges_of(pairs, chunk_count), len(chunk_count))
    got = loops.dice_adjacency_compiled(source, target, count, edge, chunk_count)
    assert got is not None and got.has_canonical_format
    assert got.indptr.tolist() == want.indptr.tolist()
    assert got.indices.tolist() == want.indices.tolist()
    assert got.data.view(np.uint64).tolist() == want.data.view(np.uint64).tolist()
    assert got.indices.dtype == want.indices.dtype


def test_dice_adjacency_worked_by_hand_and_unsorted_pairs_left_to_numpy() -> None:
    """Concepts in 2, 4, 6 chunks. Pairs 01 (count 2, an edge), 02 (count 3, not an
    edge), 12 (count 5, an edge): Dice 2·2/(2+4) = 2/3 and 2·5/(4+6) = 1."""
    source, target = np.array([0, 0, 1], dtype=np.int32), np.array([1, 2, 2], dtype=np.int32)
    count, edge = np.array([2, 3, 5], dtype=np.int32), np.array([True, False, True])
    got = loops.dice_adjacency_compiled(source, target, count, edge, np.array([2.0, 4.0, 6.0]))
    assert got is not None
    np.testing.assert_allclose(got.toarray(), [[0, 2 / 3, 0], [2 / 3, 0, 1], [0, 1, 0]])
    assert loops.dice_adjacency_compiled(source[::-1].copy(), target[::-1].copy(), count,
                                         edge, np.ones(3)) is None  # not sorted
    with pytest.raises(IndexError, match="3 concepts"):
        loops.dice_adjacency_compiled(source, target + 1, count, edge, np.ones(3))
