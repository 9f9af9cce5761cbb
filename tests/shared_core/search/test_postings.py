"""Bounded posting reads: whole postings, highest impact first, summed per unit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.search import BM25Scorer
from shared_core.search.candidates import PositiveView
from shared_core.search.postings import (
    bounded_view,
    column_lookup_sums,
    column_peaks,
    highest_impact,
    row_sums,
    summed_by_index,
    summed_view,
)

# 4 units x 3 columns: c0 {u0, u2}, c1 {u1}, c2 {u0, u1, u3}
LINKS = sp.csc_matrix(np.array([[1, 0, 1],
                                [0, 1, 1],
                                [1, 0, 0],
                                [0, 0, 1]], dtype=np.float32))


def as_dict(view: PositiveView) -> dict[int, float]:
    return dict(zip(view.units.tolist(), view.values.tolist(), strict=True))


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


def test_posting_view_of_zero_one_postings_by_hand() -> None:
    columns, weight = np.array([0, 1, 2]), np.array([0.5, 0.4, 0.1])
    # impact order c0 (.5, 2 entries), c1 (.4, 1), c2 (.1, 3): three entries read c0 and c1
    assert as_dict(bounded_view(LINKS, columns, weight, None, 3)) == pytest.approx(
        {0: 0.5, 1: 0.4, 2: 0.5})
    # every posting: the matrix product, u0 .5 + .1, u1 .4 + .1, u2 .5, u3 .1
    assert as_dict(bounded_view(LINKS, columns, weight, None, 6)) == pytest.approx(
        {0: 0.6, 1: 0.5, 2: 0.5, 3: 0.1})
    assert as_dict(bounded_view(LINKS, columns, weight, None, 1)) == {}  # c0 alone is two
    assert as_dict(bounded_view(LINKS, columns[[2]], weight[[2]], None, 6)) == pytest.approx(
        {0: 0.1, 1: 0.1, 3: 0.1})


def test_posting_view_orders_weighted_postings_by_their_peak() -> None:
    weighted = sp.csc_matrix(np.array([[2.0, 0, 1], [0, 3.0, 1], [0.5, 0, 0], [0, 0, 1]]))
    peaks = column_peaks(weighted)
    assert peaks.tolist() == [2.0, 3.0, 1.0]
    # impact c1 3 (1 entry), c0 2 (2), c2 1 (3): three entries read c1 and c0
    view = bounded_view(weighted, np.array([0, 1, 2]), np.ones(3), peaks, 3)
    assert as_dict(view) == {0: 2.0, 1: 3.0, 2: 0.5}


def test_column_peaks_of_an_empty_column_is_zero() -> None:
    matrix = sp.csc_matrix(np.array([[0.0, 0, 4], [1.5, 0, 2]]))
    assert column_peaks(matrix).tolist() == [1.5, 0.0, 4.0]


@given(st.integers(0, 2**32 - 1), st.integers(1, 400))
@settings(max_examples=60, deadline=None)
def test_a_bounded_view_reads_at_most_its_limit_and_is_the_product_when_unbound(
        seed: int, max_postings: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = sp.csc_matrix(np.where(rng.random((50, 12)) < 0.3, rng.random((50, 12)), 0.0))
    columns = np.flatnonzero(rng.random(12) < 0.6)
    weight = rng.random(len(columns))
    view = bounded_view(matrix, columns, weight, column_peaks(matrix), max_postings)
    dense = matrix[:, columns] @ weight
    assert (view.values > 0).all() and (np.diff(view.units) > 0).all()
    # what was read is a sum over whole postings: never more than the full product
    assert (view.values <= dense[view.units] * (1 + 1e-12)).all()
    read = highest_impact(weight * column_peaks(matrix)[columns],
                          np.diff(matrix.indptr)[columns], max_postings)
    assert np.diff(matrix.indptr)[columns[read]].sum() <= max_postings
    np.testing.assert_allclose(view.scores_of(np.arange(50)), matrix[:, columns[read]]
                               @ weight[read], rtol=1e-12)
    if max_postings >= matrix.nnz:
        np.testing.assert_allclose(view.scores_of(np.arange(50)), dense, rtol=1e-12)


def test_summed_view_by_sort_or_by_array_is_the_same() -> None:
    units, mass = np.array([3, 1, 3, 0, 1]), np.array([0.5, 1.0, 0.25, 0.0, 4.0])
    by_sort, by_array = summed_view(units, mass, None), summed_view(units, mass, 4)
    assert by_sort.units.tolist() == by_array.units.tolist() == [1, 3]  # unit 0: no mass
    assert by_sort.values.tolist() == by_array.values.tolist() == [5.0, 0.75]


def test_exact_sums_off_rows_and_off_sorted_columns_by_hand() -> None:
    weighted = sp.csc_matrix(np.array([[2.0, 0, 1], [0, 3.0, 1], [0.5, 0, 0], [0, 0, 1]]))
    value = np.array([1.0, 10.0, 100.0])
    # u3: 100, u0: 2 + 100, u2: .5 (rows in any order, repeats allowed)
    assert row_sums(weighted.tocsr(), np.array([3, 0, 2, 0]), value).tolist() == [
        100.0, 102.0, 0.5, 102.0]
    # columns 0 and 2 of units 1, 0, 3: 1, 2 + 1, 1
    assert column_lookup_sums(weighted, np.array([0, 2]), np.array([1, 0, 3])).tolist() == [
        1.0, 3.0, 1.0]
    assert column_lookup_sums(weighted, np.array([], dtype=int), np.array([0])).tolist() == [0.0]


def test_the_bm25_view_scores_exactly_and_finds_from_its_best_terms_first() -> None:
    counts = sp.csr_matrix(np.array([[1, 1, 1, 0, 0], [0, 0, 0, 1, 2], [0, 0, 1, 0, 1]]))
    scorer = BM25Scorer.from_counts(counts)
    full = scorer.scores([4, 2])
    view = scorer.view([4, 2, 2], max_postings=100)
    assert view.found.units.tolist() == [0, 1, 2]
    np.testing.assert_allclose(view.found.values, full, rtol=1e-12)
    np.testing.assert_allclose(view.scores_of(np.arange(3)), full, rtol=1e-12)
    # "program" (2) and "engine" (4) hold two entries each; engine's best weight (d1,
    # twice in three words) passes program's best (d2, once in two): two entries read
    # engine alone, which finds d1 and d2 -- yet d2's score counts program too
    assert scorer.term_peaks[4] > scorer.term_peaks[2]
    bounded = scorer.view([4, 2], max_postings=2)
    assert bounded.found.units.tolist() == [1, 2]
    np.testing.assert_allclose(bounded.found.values, scorer.scores([4])[[1, 2]], rtol=1e-12)
    np.testing.assert_allclose(bounded.scores_of(np.array([2, 0])), full[[2, 0]], rtol=1e-12)
    # the top: found units by exact score (d0 was never found)
    order = [int(u) for u in np.argsort(-full[[1, 2]], kind="stable")]
    assert bounded.top(5).tolist() == [[1, 2][i] for i in order]
