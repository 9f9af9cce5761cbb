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
