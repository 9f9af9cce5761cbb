"""Exact scans of vectors: a row's float32 score does not depend on where it sits."""

from __future__ import annotations

import numpy as np
import pytest

from shared_core.search import products
from shared_core.search.vector_index import row_scores, scan_scores


def test_a_row_scores_the_same_wherever_it_sits_in_a_scan() -> None:
    """One vector at several positions of a matrix (the last among them), and in gathered
    scans of 1 to 40 rows at every position: every product is the same float32. Without
    the padding, this machine's OpenBLAS scores the last ``n mod 4`` rows of a product
    with another kernel, and the row last of 5 came out a bit apart."""
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((1003, 384)).astype(np.float32)
    matrix[[100, 500, 1001, 1002]] = matrix[7]
    q = rng.standard_normal(384).astype(np.float32)
    whole = scan_scores(matrix, q)
    assert whole[[100, 500, 1001, 1002]].tolist() == [whole[7]] * 4
    for n in range(1, 41):
        for at in range(n):
            gathered = rng.standard_normal((n, 384)).astype(np.float32)
            gathered[at] = matrix[7]
            assert scan_scores(gathered, q)[at] == whole[7], (n, at)
    rows = np.array([3, 7, 100, 1002, 5])
    assert row_scores(matrix, rows, q).tolist() == whole[rows].tolist()


def test_the_padding_leaves_the_products_as_numpy_computes_them_to_rounding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    matrix = rng.standard_normal((37, 16)).astype(np.float32)
    q = rng.standard_normal(16).astype(np.float32)
    assert scan_scores(matrix, q) == pytest.approx(matrix.astype(np.float64) @ q, abs=1e-5)
    assert scan_scores(matrix[:0], q).shape == (0,)
    monkeypatch.setattr(products, "ROW_GROUP", 1)  # no padding: numpy's own product
    assert scan_scores(matrix, q).tolist() == (matrix @ q).tolist()
