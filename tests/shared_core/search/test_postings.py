"""Bounded posting reads: whole postings, highest impact first, summed per unit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from shared_core.search import postings as postings_module
from shared_core.search.postings import (
    highest_impact,
    posting_entries,
    summed_by_index,
    summed_view,
)


def test_highest_impact_reads_whole_postings_best_first_and_quits_at_the_limit() -> None:
    per_entry, lengths = np.array([0.5, 0.25, 0.5, 0.1]), np.array([3, 1, 2, 5])
    # order 0, 2 (tie at .5: lower first), 1, 3; running lengths 3, 5, 6, 11
    assert highest_impact(per_entry, lengths, 5).tolist() == [0, 2]
    assert highest_impact(per_entry, lengths, 6).tolist() == [0, 1, 2]
    assert highest_impact(per_entry, lengths, 11).tolist() == [0, 1, 2, 3]
    # the best posting alone is too long: nothing is read (quit, not skip)
    assert highest_impact(per_entry, lengths, 2).tolist() == []


def test_summed_by_index_adds_repeats_in_their_given_order() -> None:
    found, sums = summed_by_index(np.array([3, 1, 3, 0, 1]), np.array([0.5, 1.0, 0.25, 2.0, 4.0]))
    assert found.tolist() == [0, 1, 3] and sums.tolist() == [2.0, 5.0, 0.75]


def test_summed_view_by_sort_or_by_array_is_the_same() -> None:
    units, mass = np.array([3, 1, 3, 0, 1]), np.array([0.5, 1.0, 0.25, 0.0, 4.0])
    by_sort, by_array = summed_view(units, mass, None), summed_view(units, mass, 4)
    assert by_sort.units.tolist() == by_array.units.tolist() == [1, 3]  # unit 0: no mass
    assert by_sort.values.tolist() == by_array.values.tolist() == [5.0, 0.75]


def test_posting_entries_read_as_slices_or_by_positions_are_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # units x columns: column 0 holds units 0, 2; column 1 unit 1; column 2 units 0, 1, 3
    postings = sp.csc_matrix(np.array([[1.0, 0.0, 2.0],
                                       [0.0, 3.0, 4.0],
                                       [5.0, 0.0, 0.0],
                                       [0.0, 0.0, 6.0]], dtype=np.float32))
    columns, value = np.array([2, 0]), np.array([0.5, 0.1])
    by_slices = posting_entries(postings, columns, value)
    # in the order given: column 2's entries times .5, then column 0's times .1
    assert by_slices[0].tolist() == [0, 1, 3, 0, 2]
    # float32 entries times float64 values: the products in float64 (1 x .1 is .1 exactly
    # as a float64 product, not float32's .100000001)
    assert by_slices[1].dtype == np.float64
    assert by_slices[1].tolist() == [1.0, 2.0, 3.0, 0.1, 0.5]
    monkeypatch.setattr(postings_module, "FEW_POSTINGS", 0)  # many postings: by positions
    by_positions = posting_entries(postings, columns, value)
    for got, expected in zip(by_positions, by_slices, strict=True):
        assert got.dtype == expected.dtype and got.tolist() == expected.tolist()
    assert posting_entries(postings, np.array([1]))[1].tolist() == [3.0]
    assert [a.tolist() for a in posting_entries(postings, np.zeros(0, np.int64))] == [[], []]
