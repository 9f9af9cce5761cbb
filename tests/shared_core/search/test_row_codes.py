"""Rows as signed bytes and a scale a row: values worked out by hand, the error bound, and
codes kept per array through the rows an update leaves in place."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from shared_core.search import row_codes
from shared_core.search.row_codes import (
    CODE_MAX,
    RowCodes,
    code_array,
    code_rows,
    coded_rows_at,
    codes_ready,
    make_codes,
)
from shared_core.state.rows import VectorRows, rows_joined


def test_a_row_is_scaled_to_127_at_its_largest_magnitude_and_rounded() -> None:
    # largest 0.5: one step is 0.5 / 127; -0.3 is -76.2 steps (-76), 0.127 is 32.26 (32)
    coded = code_rows(np.array([[0.5, -0.3, 0.0, 0.127]], dtype=np.float32))
    assert coded.codes.tolist() == [[127, -76, 0, 32]]
    assert coded.scales.tolist() == [pytest.approx(0.5 / 127)]
    assert coded.rows(np.array([0]))[0] == pytest.approx(
        [0.5, -76 * 0.5 / 127, 0.0, 32 * 0.5 / 127], rel=1e-6)


def test_each_row_has_its_own_scale_and_a_row_of_zeros_codes_as_zeros() -> None:
    coded = code_rows(np.array([[0.0, 0.0], [0.01, -0.03], [3.0, 1.0]], dtype=np.float32))
    assert coded.codes.tolist() == [[0, 0], [42, -127], [127, 42]]  # 42.33 steps: 42
    assert coded.scales[0] == 1.0
    assert coded.rows(np.array([0])).tolist() == [[0.0, 0.0]]
    assert coded.rows(np.array([2, 1])) == pytest.approx(
        np.array([[3.0, 42 * 3 / 127], [42 * 0.03 / 127, -0.03]]), rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.tuples(st.integers(1, 12), st.integers(1, 9)),
              # values a vector holds: a float32 scale of a row of values below about
              # 1e-36 is subnormal, whose precision no longer bounds the error
              elements=st.floats(-4, 4, width=32).map(lambda x: x if abs(x) > 1e-30 else 0.0)))
def test_every_value_is_off_by_at_most_half_a_step(rows: np.ndarray) -> None:
    coded = code_rows(rows)
    decoded = coded.rows(np.arange(len(rows)))
    assert np.abs(coded.codes.astype(int)).max() <= CODE_MAX
    step = coded.scales[:, None]
    assert np.all(np.abs(decoded - rows) <= step * (0.5 + 1e-4))
    nonzero = np.abs(rows).max(axis=1) > 0
    # every row that is not all zeros uses the whole range at its largest value
    assert np.all(np.abs(coded.codes[nonzero].astype(int)).max(axis=1) == CODE_MAX)


def test_bad_rows_and_bad_codes_are_refused() -> None:
    with pytest.raises(ValueError, match="NaN or an infinite"):
        code_rows(np.array([[0.1, np.nan]], dtype=np.float32))
    with pytest.raises(ValueError, match="2-d"):
        code_rows(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match="int8"):
        RowCodes(np.zeros((2, 2), dtype=np.int16), np.ones(2, dtype=np.float32))
    with pytest.raises(ValueError, match="one float32 scale a row"):
        RowCodes(np.zeros((2, 2), dtype=np.int8), np.ones(3, dtype=np.float32))
    with pytest.raises(TypeError, match="no codes"):
        make_codes([[0.1, 0.2]])


def test_an_array_coded_a_block_at_a_time_codes_as_a_whole(tmp_path: Path) -> None:
    rows = np.random.default_rng(3).normal(size=(10, 5)).astype(np.float32)
    np.save(tmp_path / "rows.npy", rows)
    mapped = np.load(tmp_path / "rows.npy", mmap_mode="r")
    whole, blocks = code_rows(rows), code_array(mapped, block=3)
    assert np.array_equal(blocks.codes, whole.codes)
    assert np.array_equal(blocks.scales, whole.scales)


def test_rows_left_in_place_are_decoded_from_the_codes_of_the_array_each_sits_in() -> None:
    rng = np.random.default_rng(5)
    first = rng.normal(size=(6, 4)).astype(np.float32)
    second = rng.normal(size=(3, 4)).astype(np.float32)
    rows = VectorRows((first, second), np.array([7, 0, 5, 8, 2]))
    asked = np.array([3, 0, 4, 1, 1])  # rows 8, 7, 2, 0, 0 of the concatenation
    joined = code_rows(np.vstack([first, second]))
    assert np.array_equal(coded_rows_at(rows, asked), joined.rows(np.array([8, 7, 2, 0, 0])))
    plain = rng.normal(size=(4, 4)).astype(np.float32)
    assert np.array_equal(coded_rows_at(plain, np.array([2, 2])),
                          code_rows(plain).rows(np.array([2, 2])))


def test_an_update_codes_only_its_new_rows_and_codes_go_with_their_array() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(size=(8, 4)).astype(np.float32)
    assert not codes_ready(base)
    assert make_codes(base) == 8 * 4 + 8 * 4  # the codes, and a float32 scale a row
    held = row_codes._CODES.of(base)
    added = rng.normal(size=(2, 4)).astype(np.float32)
    grown = rows_joined([base, added], None)  # an add: the base's rows stay where they are
    assert isinstance(grown, VectorRows) and not codes_ready(grown)
    assert make_codes(grown) == 10 * 4 + 10 * 4
    assert codes_ready(grown) and row_codes._CODES.of(base) is held  # not coded again
    key = id(added)
    del grown, added
    gc.collect()
    assert key not in row_codes._CODES._codes  # the codes went with their array
