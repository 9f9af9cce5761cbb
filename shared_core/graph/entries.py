"""Reading a few rows (CSR) or columns (CSC) of a sparse matrix without slicing it."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def entry_counts(matrix: sp.csr_matrix | sp.csc_matrix, picked: np.ndarray) -> np.ndarray:
    """How many entries each of the ``picked`` rows (CSR) or columns (CSC) holds, int64:
    what reading them would cost, known before reading."""
    picked = np.asarray(picked, dtype=np.int64)
    # only the picked entries are cast: the whole indptr may be millions long
    return matrix.indptr[picked + 1].astype(np.int64) - matrix.indptr[picked].astype(np.int64)


def entry_positions(matrix: sp.csr_matrix | sp.csc_matrix,
                    picked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where in ``indices``/``data`` every entry of the ``picked`` rows (CSR) or
    columns (CSC) sits, and which of ``picked`` each comes from, in that order."""
    picked = np.asarray(picked, dtype=np.int64)
    lengths = entry_counts(matrix, picked)
    first = matrix.indptr[picked].astype(np.int64)
    owner = np.repeat(np.arange(len(picked)), lengths)
    starts = np.repeat(first - (np.cumsum(lengths) - lengths), lengths)
    return starts + np.arange(len(owner)), owner


def compressed_entries(matrix: sp.csr_matrix | sp.csc_matrix,
                       picked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The minor index of every entry of the ``picked`` rows (CSR) or columns (CSC),
    and which of ``picked`` each comes from (0..len(picked)-1), in that order.

    One gather over ``indices``: no sliced matrix is built, so the cost is the
    entries read, which is what a query's postings or a pair count may spend.
    """
    positions, owner = entry_positions(matrix, picked)
    return matrix.indices[positions], owner


def kept_indptr(indptr: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The ``indptr`` of a compressed matrix that keeps only the entries ``keep`` marks
    (int64): each row's or column's kept entries counted by one running sum."""
    kept_before = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept_before[1:])
    return kept_before[indptr]


def column_subset(matrix: sp.csr_matrix, columns: np.ndarray, *,
                  positive: bool = False) -> sp.csr_matrix:
    """``matrix[:, columns]`` for sorted distinct ``columns`` (canonical CSR in, canonical
    CSR out); ``positive``: only entries above zero, each as 1.0 (``matrix[:, columns] > 0``).

    One pass over the entries through a column lookup table. scipy's column
    indexing sorts a copy of every entry first; at a million passages that was
    most of the time a load spent finding which chunks link which concepts.
    """
    columns = np.asarray(columns, dtype=np.int64)
    if not matrix.has_sorted_indices:  # e.g. a sparse product's rows
        matrix = matrix.sorted_indices()
    small = max(matrix.nnz, len(columns)) < np.iinfo(np.int32).max
    index = np.int32 if small else np.int64
    position = np.full(matrix.shape[1], -1, dtype=index)
    position[columns] = np.arange(len(columns), dtype=index)
    new_column = position[matrix.indices]
    keep = new_column >= 0
    if positive:
        keep &= matrix.data > 0
    indptr = kept_indptr(matrix.indptr, keep).astype(index)
    data = (np.ones(int(indptr[-1]), dtype=np.float32) if positive
            else matrix.data[keep])
    return sp.csr_matrix((data, new_column[keep], indptr),
                         shape=(matrix.shape[0], len(columns)))


def column_entry_counts(matrix: sp.spmatrix, counted: str = "nonzero") -> np.ndarray:
    """How many entries of each column are nonzero (``"nonzero"``) or above zero
    (``"positive"``), int64: a document frequency without a 0/1 copy of the matrix.

    A CSC matrix's stored entries per column are ``diff(indptr)``; only stored
    entries that do not count (zeros, or negatives) are subtracted.
    """
    columns = sp.csc_matrix(matrix)
    if not columns.has_canonical_format:  # duplicates summed on a copy, never in place
        columns = columns.copy()
        columns.sum_duplicates()
    counts = np.diff(columns.indptr).astype(np.int64)
    skipped = columns.data == 0 if counted == "nonzero" else ~(columns.data > 0)
    if skipped.any():
        owner = np.repeat(np.arange(columns.shape[1]), np.diff(columns.indptr))
        counts -= np.bincount(owner[skipped], minlength=columns.shape[1])
    return counts
