"""Sentence vectors left in place: the same rows as gathering them, through every take and merge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.state.rows import (
    MAX_ROW_RUNS,
    VectorRows,
    contiguous_rows,
    rows_gathered,
    rows_joined,
    rows_taken,
)
from shared_core.state.spill import VectorSpill
from tests.shared_core.state.test_spill import mapped

DIM = 3


def block(first: int, count: int) -> np.ndarray:
    """``count`` rows whose values say which row they are: row ``r`` is ``[r, r + .25, -r]``."""
    r = np.arange(first, first + count, dtype=np.float32)[:, None]
    return np.hstack([r, r + 0.25, -r]).astype(np.float32)


def saved(tmp_path: Path, rows: np.ndarray) -> np.ndarray:
    """``rows`` as a loaded index holds them: mapped from a file."""
    np.save(tmp_path / "rows.npy", rows)
    return np.load(tmp_path / "rows.npy", mmap_mode="r")


def test_rows_read_back_by_position_slice_and_product() -> None:
    base, added = block(0, 5), block(100, 2)
    rows = rows_taken(rows_joined([base, added], None), np.array([5, 0, 6, 3]), None)
    assert isinstance(rows, VectorRows) and len(rows) == 4 and rows.shape == (4, DIM)
    assert rows.dtype == np.float32 and rows.nbytes == 4 * DIM * 4
    expected = np.stack([added[0], base[0], added[1], base[3]])
    assert np.array_equal(np.asarray(rows), expected)
    assert np.array_equal(rows[1], base[0]) and np.array_equal(rows[-1], base[3])
    assert np.array_equal(rows[1:3], expected[1:3])
    assert np.array_equal(rows[np.array([3, 3, 0])], expected[[3, 3, 0]])
    query = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    assert np.array_equal(rows @ query, expected @ query)  # each run scanned, then gathered
    assert np.array_equal(np.concatenate(list(rows.blocks(3))), expected)
    with pytest.raises(ValueError, match="read-only"):
        rows[0] = 1.0
    with pytest.raises(TypeError, match="by row"):
        rows[0, 1]
    with pytest.raises(IndexError):
        rows[4]


def test_an_add_and_a_delete_leave_the_saved_rows_in_their_file(tmp_path: Path) -> None:
    base = saved(tmp_path, block(0, 6))
    added = block(100, 2)
    # an add: the new rows fall between the saved ones (canonical id order)
    after_add = rows_gathered([base, added], np.array([0, 6, 1, 2, 3, 7, 4, 5]), None)
    assert isinstance(after_add, VectorRows)
    assert after_add.runs[0] is base and after_add.runs[1] is added  # nothing copied
    # a delete of one saved row and one added
    after_delete = rows_taken(after_add, np.array([0, 1, 2, 4, 6, 7]), None)
    assert isinstance(after_delete, VectorRows) and after_delete.runs[0] is base
    assert np.array_equal(np.asarray(after_delete), np.stack(
        [base[0], added[0], base[1], base[3], base[4], base[5]]))
    # deleting the added rows again: the file's rows in order, the array itself
    assert rows_taken(after_add, np.array([0, 2, 3, 4, 6, 7]), None) is base


def test_many_arrays_with_no_majority_are_gathered_into_one(tmp_path: Path) -> None:
    spill = VectorSpill(tmp_path, min_bytes=0)
    batches = [block(10 * i, 3) for i in range(4)]  # a build's batches: 3 rows each
    positions = np.array([11, 0, 5, 9, 2, 1, 4, 3, 10, 6, 8, 7])
    built = rows_gathered(batches, positions, spill)
    assert isinstance(built, np.ndarray) and mapped(built)  # one array, through the spill
    assert np.array_equal(built, np.concatenate(batches)[positions])


def test_past_the_run_limit_all_but_the_largest_array_are_gathered(tmp_path: Path) -> None:
    base = saved(tmp_path, block(0, 20))
    rows = rows_joined([base, block(100, 2)], None)
    for n in range(3):  # three more adds: the added rows become one array, the file stays
        rows = rows_joined([rows, block(200 + 10 * n, 1)], None)
        assert isinstance(rows, VectorRows) and len(rows.runs) == MAX_ROW_RUNS
        assert rows.runs[0] is base and len(rows.runs[1]) == 3 + n
    assert np.array_equal(np.asarray(rows), np.concatenate(
        [block(0, 20), block(100, 2), block(200, 1), block(210, 1), block(220, 1)]))


def test_once_most_rows_held_are_dead_they_are_gathered_into_one(tmp_path: Path) -> None:
    base = saved(tmp_path, block(0, 10))
    rows = rows_joined([base, block(100, 1)], None)
    five = rows_taken(rows, np.array([10, 0, 2, 4, 6]), None)  # 6 of 11 dead: gathered
    assert isinstance(five, np.ndarray) and not mapped(five)
    assert np.array_equal(five, np.stack([block(100, 1)[0], *block(0, 10)[[0, 2, 4, 6]]]))
    six = rows_taken(rows, np.array([10, 0, 2, 4, 6, 8]), None)  # 5 of 11: left in place
    assert isinstance(six, VectorRows) and six.runs[0] is base


def test_a_stricter_dead_share_gathers_sooner(tmp_path: Path) -> None:
    """A refresh's concept vectors (every query scans every row held) are gathered once a
    quarter of the rows held are dead; the default waits for half."""
    base = saved(tmp_path, block(0, 10))
    changed = block(100, 4)
    three = np.array([10, 1, 11, 3, 4, 5, 12, 7, 8, 9])  # rows 0, 2, 6 replaced: 3 of 13 dead
    kept = rows_gathered([base, changed[:3]], three, None, max_dead_share=0.25)
    assert isinstance(kept, VectorRows) and kept.runs[0] is base
    four = np.array([10, 1, 11, 3, 4, 5, 12, 7, 13, 9])  # and row 8: 4 of 14 dead
    gathered = rows_gathered([base, changed], four, None, max_dead_share=0.25)
    assert isinstance(gathered, np.ndarray) and not mapped(gathered)
    whole = np.concatenate([block(0, 10), changed])
    assert np.array_equal(gathered, whole[four])
    assert np.array_equal(np.asarray(kept), whole[three])
    assert isinstance(rows_gathered([base, changed], four, None), VectorRows)


def test_contiguous_rows_are_one_array_through_the_spill(tmp_path: Path) -> None:
    base = block(0, 4)
    assert contiguous_rows(base, None) is base
    rows = rows_gathered([base, block(100, 1)], np.array([4, 3, 2, 1, 0]), None)
    whole = contiguous_rows(rows, VectorSpill(tmp_path, min_bytes=0))
    assert mapped(whole) and np.array_equal(whole, np.concatenate([block(100, 1), base[::-1]]))


def test_rows_refuse_what_is_not_float32_or_int64_rows_of_one_kind() -> None:
    with pytest.raises(ValueError, match="float32 rows of 3"):
        VectorRows([block(0, 2), np.zeros((2, 4), np.float32)], np.array([0, 1]))
    with pytest.raises(ValueError, match="not float64"):
        VectorRows([block(0, 2).astype(np.float64)], np.array([0]))
    with pytest.raises(ValueError, match="int64 rows of 3"):  # sums and vectors never mix
        VectorRows([np.zeros((2, 3), np.int64), block(0, 2)], np.array([0, 2]))
    with pytest.raises(ValueError, match="outside the 2 rows"):
        VectorRows([block(0, 2)], np.array([2]))
    with pytest.raises(ValueError, match="at least one"):
        VectorRows([], np.zeros(0, np.int64))


def test_fixed_point_sums_are_rows_too_kept_in_their_file_and_saved_as_int64(
        tmp_path: Path) -> None:
    """A graph's kept concept sums (int64) through an update: the unchanged rows stay in
    the save's file, the recomputed ones in a small array, read and gathered as int64."""
    old = saved(tmp_path, np.arange(12, dtype=np.int64).reshape(4, 3) * 2**40)
    new = np.full((1, 3), -7, dtype=np.int64)
    sums = rows_gathered([old, new], np.array([0, 4, 2, 3]), None)  # concept 1 recomputed
    assert isinstance(sums, VectorRows) and sums.dtype == np.int64
    assert mapped(sums.runs[0])
    expected = np.stack([old[0], new[0], old[2], old[3]])
    assert np.array_equal(np.asarray(sums), expected) and np.asarray(sums).dtype == np.int64
    assert np.array_equal(sums[np.array([1, 3])], expected[[1, 3]])
    assert np.array_equal(np.concatenate(list(sums.blocks(3))), expected)
    assert sums.nbytes == 4 * 3 * 8
    with pytest.raises(TypeError, match="float32 vectors"):
        sums @ np.ones(3, dtype=np.float32)
    # most rows dead: gathered into one plain int64 array
    gathered = rows_gathered([old, new], np.array([4]), None)
    assert isinstance(gathered, np.ndarray) and gathered.dtype == np.int64
    assert gathered.tolist() == [[-7, -7, -7]]


OPS = st.lists(st.one_of(
    st.tuples(st.just("take"), st.lists(st.integers(0, 40), max_size=30, unique=True)),
    st.tuples(st.just("add"), st.integers(1, 6)),
), max_size=10)


@settings(max_examples=80, deadline=None)
@given(ops=OPS)
def test_any_sequence_of_takes_and_merges_equals_gathering_the_rows(ops: list) -> None:
    held = block(0, 12)  # what gathering every time gives
    rows: np.ndarray | VectorRows = held
    fresh = 1000
    for kind, value in ops:
        if kind == "take":
            at = np.array(sorted({v % len(held) for v in value}) if len(held) else [],
                          dtype=np.int64)
            held, rows = held[at], rows_taken(rows, at, None)
        else:
            new = block(fresh, value)
            fresh += 100
            held, rows = np.concatenate([held, new]), rows_joined([rows, new], None)
        assert rows.shape == held.shape
        assert np.array_equal(np.asarray(rows), held)
        if isinstance(rows, VectorRows):
            assert len(rows.runs) <= MAX_ROW_RUNS
            assert sum(len(r) for r in rows.runs) <= 2 * len(rows)  # at most half dead
            query = np.array([0.5, -1.0, 2.0], dtype=np.float32)
            assert np.array_equal(rows @ query, held @ query)


def test_rows_are_located_in_the_array_each_sits_in() -> None:
    first = np.zeros((4, 2), dtype=np.float32)
    second = np.ones((3, 2), dtype=np.float32)
    # positions 0-3 are the concatenation's rows 5, 1, 6 and 2: second's 1, first's 1,
    # second's 2, first's 2
    rows = VectorRows((first, second), np.array([5, 1, 6, 2]))
    located = rows.located(np.array([2, 1, 0]))
    assert [(run is first, held.tolist()) for run, held in located] == [(True, [1]),
                                                                        (False, [2, 1])]
    # an array that holds none of the rows asked for is left out
    (run, held), = rows.located(np.array([3]))
    assert run is first and held.tolist() == [2]


def test_rows_are_located_in_the_order_asked() -> None:
    first = np.zeros((4, 2), dtype=np.float32)
    second = np.ones((3, 2), dtype=np.float32)
    rows = VectorRows((first, second), np.array([5, 1, 6, 2]))  # as above
    runs, run_of, at = rows.located_in_order(np.array([2, 1, 0, 3]))
    assert runs[0] is first and runs[1] is second
    assert run_of.tolist() == [1, 0, 1, 0]
    assert at.tolist() == [2, 1, 1, 2]
