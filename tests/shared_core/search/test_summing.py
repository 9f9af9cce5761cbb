"""Posting entries summed by unit: the compiled loops give numpy's floats, bit for bit."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.compiled import CompiledLoops
from shared_core.search import summing
from shared_core.search.summing import COMPILED_ENV, posting_sums, prepare, summed_by_index
from tests.shared_core.test_store import TEXTS

pytest.importorskip("numba")


def numpy_sums(indices: np.ndarray, mass: np.ndarray, positive: bool,
               monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray]:
    with monkeypatch.context() as patch:
        patch.setenv(COMPILED_ENV, "0")
        assert not summing.compiled()
        return summed_by_index(indices, mass, positive=positive)


def test_sums_worked_by_hand_in_the_order_given() -> None:
    """Index 3 gets 0.1 then 0.3, index 1 gets 0.2, index 0 gets -1: all four distinct
    indices ascending, or those above zero. Index 5 gets 1e16, then 1.0, then -1e16: in
    that order 1e16 + 1.0 rounds back to 1e16, so the sum is 0.0 (the other order would
    give 1.0), and a sum of 0.0 is not above zero."""
    assert summing.compiled()
    indices = np.array([3, 1, 5, 3, 0, 5, 5])
    mass = np.array([0.1, 0.2, 1e16, 0.3, -1.0, 1.0, -1e16])
    units, values = summed_by_index(indices, mass, 6)
    assert units.tolist() == [0, 1, 3, 5]
    assert values.tolist() == [-1.0, 0.2, 0.1 + 0.3, 0.0]
    units, values = summed_by_index(indices, mass, 6, positive=True)
    assert units.tolist() == [1, 3] and values.tolist() == [0.2, 0.1 + 0.3]


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(0, 400), size=st.integers(1, 300),
       wide=st.booleans(), positive=st.booleans())
def test_the_loops_sums_are_numpys(seed: int, count: int, size: int, wide: bool,
                                   positive: bool) -> None:
    """Any entries (repeats, zeros, negatives, either index type, a size past a word of
    the bitmap or not): the same units and the same floats as numpy's sort and bincount."""
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, size, count).astype(np.int64 if wide else np.int32)
    mass = np.round(rng.standard_normal(count), int(rng.integers(0, 4))) * 10.0 ** rng.integers(
        -3, 12, count)
    with pytest.MonkeyPatch.context() as patch:
        expected = numpy_sums(indices, mass, positive, patch)
    units, values = summed_by_index(indices, mass, size, positive=positive)
    assert units.dtype == np.int64 and values.dtype == np.float64
    assert units.tolist() == expected[0].tolist()
    assert values.tobytes() == expected[1].tobytes()
    again = summed_by_index(indices, mass, positive=positive)  # size looked up
    assert again[0].tolist() == units.tolist()


def random_postings(rng: np.random.Generator, units: int, columns: int,
                    dtype: type) -> sp.csc_matrix:
    dense = rng.random((units, columns)) < 0.3
    values = rng.standard_normal((units, columns)) * dense
    return sp.csc_matrix(values.astype(dtype))


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), units=st.integers(1, 150), columns=st.integers(1, 20),
       single=st.booleans(), valued=st.booleans())
def test_posting_sums_are_numpys(seed: int, units: int, columns: int, single: bool,
                                 valued: bool) -> None:
    """Any postings (float32 or float64 entries), columns in any order, weighted or not:
    the positive sums numpy's gather and sort make, to the bit."""
    rng = np.random.default_rng(seed)
    postings = random_postings(rng, units, columns, np.float32 if single else np.float64)
    picked = rng.permutation(columns)[:int(rng.integers(0, columns + 1))]
    value = rng.standard_normal(len(picked)) if valued else None
    units_found, sums = posting_sums(postings, picked, value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COMPILED_ENV, "0")
        expected = posting_sums(postings, picked, value)
    assert units_found.tolist() == expected[0].tolist()
    assert sums.tobytes() == expected[1].tobytes()
    assert np.all(sums > 0) and np.all(np.diff(units_found) > 0)


def test_an_index_out_of_range_is_refused_and_leaves_the_scratch_clear() -> None:
    with pytest.raises(IndexError, match="index 9 out of range for 4"):
        summed_by_index(np.array([1, 2, 9, 2]), np.ones(4), 4)
    # what the refused call had added is gone: the next sums start from zero
    units, values = summed_by_index(np.array([2, 1]), np.array([0.5, 0.25]), 4)
    assert units.tolist() == [1, 2] and values.tolist() == [0.25, 0.5]
    bad = sp.csc_matrix((np.ones(3), np.array([0, 1, 7]), np.array([0, 2, 3])), shape=(8, 2))
    bad._shape = (4, 2)  # an entry past the rows the matrix says it has
    with pytest.raises(IndexError, match="column 1 is out of range for 4 units"):
        posting_sums(bad, np.array([0, 1]))
    units, values = summed_by_index(np.array([0, 1]), np.array([1.0, 2.0]), 4)
    assert units.tolist() == [0, 1] and values.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="3 indices for 2 masses"):
        summed_by_index(np.array([0, 1, 2]), np.ones(2))


def test_threads_sum_apart() -> None:
    """Each thread has its own scratch: two threads summing at once get their own sums."""
    rng = np.random.default_rng(5)
    work = [(rng.integers(0, 5000, 20000), rng.random(20000)) for _ in range(2)]
    expected = [summed_by_index(i, m, 5000) for i, m in work]
    failures: list[str] = []

    def run(which: int) -> None:
        for _ in range(30):
            units, values = summed_by_index(*work[which], 5000)
            if not (np.array_equal(units, expected[which][0])
                    and np.array_equal(values, expected[which][1])):
                failures.append(f"thread {which}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_prepare_compiles_the_loops_for_the_postings_a_query_reads() -> None:
    rng = np.random.default_rng(2)
    postings = random_postings(rng, 40, 6, np.float32)
    postings.indices = postings.indices.astype(np.int64)  # a kind of array not seen before
    postings.indptr = postings.indptr.astype(np.int64)
    prepare(postings)
    loop = summing._LOOPS.made()["postings"]
    made = len(loop.signatures)
    posting_sums(postings, np.array([4, 1]), np.array([0.5, 2.0]))
    posting_sums(postings, np.array([0, 3]))
    assert len(loop.signatures) == made  # nothing left to compile for a query


def test_the_switch_turns_the_loops_off_and_stats_say_which_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    index = ConceptGraphIndex.from_texts(TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))],
                                         embedder=HashingEmbedder(64))
    assert summing.compiled() and summing.missing() is None
    assert index.stats()["posting_sums"] == "numba"
    monkeypatch.setenv(COMPILED_ENV, "0")
    assert not summing.compiled()
    assert index.stats()["posting_sums"] == "numpy"


def test_without_numba_numpy_sums_and_a_large_index_warns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shared_core import index as index_module

    monkeypatch.setitem(sys.modules, "numba", None)  # ``import numba`` raises ImportError
    monkeypatch.setattr(summing, "_LOOPS", CompiledLoops(summing._make_loops))
    assert not summing.compiled()
    assert summing.missing() == "numba is not installed: pip install 'conceptgraph[fast]'"
    units, values = summed_by_index(np.array([2, 0, 2]), np.array([1.0, 0.5, 0.25]), 3)
    assert units.tolist() == [0, 2] and values.tolist() == [0.5, 1.25]
    monkeypatch.setattr(index_module, "ANN_MIN_ROWS", 1)
    index = ConceptGraphIndex.from_texts(TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))],
                                         embedder=HashingEmbedder(64))
    stats = index.stats()
    assert stats["posting_sums"] == "numpy"
    assert any("posting sums and an update's graph passes run in numpy: numba is not "
               "installed: pip install 'conceptgraph[fast]'" in w
               for w in stats["warnings"])


def test_an_index_answers_the_same_with_and_without_the_loops(
        monkeypatch: pytest.MonkeyPatch) -> None:
    index = ConceptGraphIndex.from_texts(
        TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))], embedder=HashingEmbedder(64),
        config=ConceptGraphConfig(walk_hops=2, vector_index="hnsw", candidates=3,
                                  walk_postings=2))
    queries = ["Who wrote the first compiler?", "analytical engine", "Babbage Lovelace"]
    compiled = [[(c.id, c.score) for c in index.retrieve(q).chunks] for q in queries]
    monkeypatch.setenv(COMPILED_ENV, "0")
    assert [[(c.id, c.score) for c in index.retrieve(q).chunks] for q in queries] == compiled


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), hops=st.integers(1, 3), max_postings=st.integers(1, 60))
def test_a_walk_view_is_the_same_with_and_without_the_loops(seed: int, hops: int,
                                                            max_postings: int) -> None:
    """The walk's steps and its found units sum through the loops: the same view, to the
    bit, as numpy's."""
    from shared_core.search.candidates import RescoredView
    from shared_core.search.walk import WalkGraph

    rng = np.random.default_rng(seed)
    links = sp.csr_matrix((rng.random((40, 15)) < 0.2).astype(np.float32))
    seeds = np.where(rng.random(15) < 0.3, rng.random(15), 0.0)
    node_unit = np.sort(rng.integers(0, 12, size=40))

    def view() -> tuple[bytes, bytes, bytes]:
        walked = WalkGraph(links, node_unit).unit_view(seeds, 12, hops=hops,
                                                       max_postings=max_postings)
        found = walked.found if isinstance(walked, RescoredView) else walked
        return (found.units.tobytes(), found.values.tobytes(),
                walked.scores_of(np.arange(12)).tobytes())

    compiled = view()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COMPILED_ENV, "0")
        assert view() == compiled


def test_run_sums_by_hand_and_out_of_range() -> None:
    """Rows 0..3 of a compressed matrix hold columns [1, 2], [0], [], [2, 2]; with values
    0.5, 0.25, 0.125 per column, the runs of rows 0-1, 2-3 and 1-3 sum to 0.25 + 0.125
    + 0.5, 0.125 + 0.125 and 0.5 + 0.25: each row's entries in order, from 0.0."""
    from shared_core.search.summing import run_sums

    indptr = np.array([0, 2, 3, 3, 5])
    indices = np.array([1, 2, 0, 2, 2], dtype=np.int32)
    value = np.array([0.5, 0.25, 0.125])
    sums = run_sums(indptr, indices, np.array([0, 2, 1, 3]), np.array([2, 4, 4, 3]), value)
    assert sums is not None
    assert sums.tolist() == [0.25 + 0.125 + 0.5, 0.125 + 0.125, 0.5 + 0.125 + 0.125, 0.0]
    with pytest.raises(IndexError, match="out of range for 2 values"):
        run_sums(indptr, indices, np.array([0]), np.array([1]), value[:2])
    with pytest.raises(IndexError, match="row runs out of range"):
        run_sums(indptr, indices, np.array([3]), np.array([5]), value)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COMPILED_ENV, "0")
        assert run_sums(indptr, indices, np.array([0]), np.array([1]), value) is None
