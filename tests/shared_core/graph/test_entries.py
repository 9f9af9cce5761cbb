"""Reading rows and columns of sparse matrices without slicing them, against scipy's slicing."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.graph.entries import (
    column_entry_counts,
    column_subset,
    compressed_entries,
    entry_counts,
)


def _csr(dense: list[list[float]]) -> sp.csr_matrix:
    return sp.csr_matrix(np.array(dense, dtype=np.float64))


def test_column_subset_by_hand() -> None:
    matrix = _csr([[0, 2, 0, 5],
                   [1, 0, 3, 0],
                   [0, 0, 0, 4]])
    kept = column_subset(matrix, np.array([1, 3]))
    # columns 1 and 3 become 0 and 1; row 1 holds neither
    assert kept.shape == (3, 2)
    assert kept.indptr.tolist() == [0, 2, 2, 3]
    assert kept.indices.tolist() == [0, 1, 1]
    assert kept.data.tolist() == [2.0, 5.0, 4.0]
    present = column_subset(matrix, np.array([0, 2, 3]), positive=True)
    assert present.toarray().tolist() == [[0, 0, 1], [1, 1, 0], [0, 0, 1]]
    assert present.dtype == np.float32


def test_column_subset_keeps_only_positive_entries_when_asked() -> None:
    # [[-1, 2], [0, 0]] with the zero at (1, 0) stored explicitly
    matrix = sp.csr_matrix((np.array([-1.0, 2.0, 0.0]), np.array([0, 1, 0]),
                            np.array([0, 2, 3])), shape=(2, 2))
    assert matrix.nnz == 3
    present = column_subset(matrix, np.array([0, 1]), positive=True)
    assert present.toarray().tolist() == [[0, 1], [0, 0]]
    assert present.nnz == 1
    # without positive, every stored entry is kept, the stored zero included (as scipy does)
    assert column_subset(matrix, np.array([0, 1])).nnz == 3


def test_column_subset_sorts_a_products_unsorted_rows() -> None:
    matrix = sp.csr_matrix((np.array([3.0, 1.0]), np.array([2, 0]), np.array([0, 2])),
                           shape=(1, 3))
    matrix.has_sorted_indices = False
    kept = column_subset(matrix, np.array([0, 2]))
    assert kept.indices.tolist() == [0, 1]
    assert kept.data.tolist() == [1.0, 3.0]


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 12), st.integers(1, 12), st.data())
def test_column_subset_equals_scipy_column_indexing(rows: int, cols: int,
                                                    data: st.DataObject) -> None:
    values = data.draw(st.lists(st.integers(-2, 3), min_size=rows * cols,
                                max_size=rows * cols))
    matrix = sp.csr_matrix(np.array(values, dtype=np.float64).reshape(rows, cols))
    columns = np.array(sorted(data.draw(st.sets(st.integers(0, cols - 1)))), dtype=np.int64)
    expected = matrix[:, columns]
    got = column_subset(matrix, columns)
    assert got.shape == expected.shape
    assert np.array_equal(got.toarray(), expected.toarray())
    assert all(np.all(np.diff(got.indices[got.indptr[r]:got.indptr[r + 1]]) > 0)
               for r in range(rows)), "each row's columns in increasing order"
    expected_present = sp.csr_matrix(expected > 0, dtype=np.float32)
    present = column_subset(matrix, columns, positive=True)
    assert present.nnz == expected_present.nnz
    assert np.array_equal(present.toarray(), expected_present.toarray())


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10), st.integers(1, 10), st.data())
def test_entries_of_picked_rows_equal_slicing(rows: int, cols: int,
                                              data: st.DataObject) -> None:
    values = data.draw(st.lists(st.integers(0, 2), min_size=rows * cols, max_size=rows * cols))
    matrix = sp.csr_matrix(np.array(values, dtype=np.float64).reshape(rows, cols))
    picked = np.array(data.draw(st.lists(st.integers(0, rows - 1), max_size=6)), dtype=np.int64)
    minor, owner = compressed_entries(matrix, picked)
    assert entry_counts(matrix, picked).tolist() == [matrix[r].nnz for r in picked]
    expected_minor = [c for r in picked for c in matrix[r].indices.tolist()]
    expected_owner = [i for i, r in enumerate(picked) for _ in range(matrix[r].nnz)]
    assert minor.tolist() == expected_minor
    assert owner.tolist() == expected_owner


def test_column_entry_counts_by_hand() -> None:
    # column 0 stores -1, 0 (explicitly) and 2; column 1 stores 3 twice in one row (duplicates
    # that sum to 6: one entry); column 2 stores nothing
    matrix = sp.csc_matrix((np.array([-1.0, 0.0, 2.0, 3.0, 3.0]), np.array([0, 1, 2, 1, 1]),
                            np.array([0, 3, 5, 5])), shape=(3, 3))
    assert column_entry_counts(matrix).tolist() == [2, 1, 0]
    assert column_entry_counts(matrix, "positive").tolist() == [1, 1, 0]
    assert matrix.nnz == 5, "the caller's matrix keeps its duplicates"


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 9), st.integers(1, 9), st.data())
def test_column_entry_counts_equal_scipy_comparisons(rows: int, cols: int,
                                                     data: st.DataObject) -> None:
    values = data.draw(st.lists(st.integers(-2, 2), min_size=rows * cols, max_size=rows * cols))
    dense = np.array(values, dtype=np.float64).reshape(rows, cols)
    matrix = sp.csr_matrix(dense)
    if rows and cols:
        matrix.data[:1] = 0.0  # a stored zero
    for form in (matrix, matrix.tocsc()):
        assert column_entry_counts(form).tolist() == (form.toarray() != 0).sum(axis=0).tolist()
        assert column_entry_counts(form, "positive").tolist() == \
            (form.toarray() > 0).sum(axis=0).tolist()
