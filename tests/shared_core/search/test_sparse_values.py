"""Values at a few positions of a long axis: lookups, masks and the dense layout by hand."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.search.sparse_values import SparseValues, distinct_sorted, sorted_index_of

# position 2 -> 0.5, 5 -> -1.0, 9 -> 3.0 on an axis of 12
VALUES = SparseValues(np.array([2, 5, 9]), np.array([0.5, -1.0, 3.0]))


def test_lookups_by_hand() -> None:
    assert VALUES.index_of(np.array([9, 0, 2, 12, 5])).tolist() == [2, -1, 0, -1, 1]
    assert VALUES.at(np.array([9, 0, 2, 12, 5])).tolist() == [3.0, 0.0, 0.5, 0.0, -1.0]
    assert VALUES.at(np.zeros(0, dtype=np.int64)).tolist() == []
    kept = VALUES.where(VALUES.values > 0)
    assert kept.positions.tolist() == [2, 9] and kept.values.tolist() == [0.5, 3.0]
    assert VALUES.dense(12).tolist() == [0, 0, 0.5, 0, 0, -1.0, 0, 0, 0, 3.0, 0, 0]


def test_an_empty_axis_part_finds_nothing() -> None:
    empty = SparseValues(np.zeros(0, dtype=np.int64), np.zeros(0))
    assert empty.index_of(np.array([0, 3])).tolist() == [-1, -1]
    assert empty.at(np.array([0, 3])).tolist() == [0.0, 0.0]
    assert empty.dense(3).tolist() == [0.0, 0.0, 0.0]
    assert sorted_index_of(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).shape == (0,)


@given(st.lists(st.floats(-5, 5), min_size=1, max_size=40), st.integers(0, 2**32 - 1))
@settings(max_examples=100, deadline=None)
def test_the_dense_layout_round_trips_and_lookups_read_it(dense: list[float],
                                                          seed: int) -> None:
    """``of_dense`` keeps the nonzero entries; reading any positions equals indexing the
    dense array; ``where`` keeps exactly the marked entries."""
    array = np.where(np.random.default_rng(seed).random(len(dense)) < 0.5, dense, 0.0)
    values = SparseValues.of_dense(array)
    assert values.positions.tolist() == np.flatnonzero(array).tolist()
    assert np.array_equal(values.dense(len(array)), array)
    asked = np.random.default_rng(seed + 1).integers(0, len(array), size=20)
    assert np.array_equal(values.at(asked), array[asked])
    positive = values.where(values.values > 0)
    assert np.array_equal(positive.dense(len(array)), np.maximum(array, 0.0))


def test_distinct_ids_by_hand() -> None:
    assert distinct_sorted(np.array([7, 2, 7, 0, 2, 2])).tolist() == [0, 2, 7]
    assert distinct_sorted(np.array([4])).tolist() == [4]
    empty = distinct_sorted(np.zeros(0, dtype=np.int32))
    assert empty.shape == (0,) and empty.dtype == np.int32


@given(st.lists(st.integers(-3, 3000), max_size=300),
       st.sampled_from([np.int32, np.int64, np.uint32]))
@settings(max_examples=100, deadline=None)
def test_distinct_ids_are_what_numpy_unique_gives(ids: list[int], dtype: type) -> None:
    """The same values, order and dtype as ``np.unique``, with repeats and either sign."""
    array = np.array([abs(i) for i in ids] if dtype is np.uint32 else ids, dtype=dtype)
    got, expected = distinct_sorted(array), np.unique(array)
    assert got.dtype == expected.dtype and got.tolist() == expected.tolist()
