"""Bounded posting reads: whole postings, highest impact first, summed per unit."""

from __future__ import annotations

import numpy as np

from shared_core.search.postings import highest_impact, summed_by_index, summed_view


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
