"""Float32 products of rows with a query that round the same wherever a row sits.

OpenBLAS's float32 matrix-vector product takes rows four at a time and scores the rest
with another kernel, which rounds differently. So a row could score a bit apart as the
last of a few gathered rows and inside a whole scan. Two concepts of one vector could then
tie in one and not in the other (``benchmarks/results/NOTES.md``, forty-fifth round).
"""

from __future__ import annotations

import numpy as np

# rows the float32 product is given at a time: a multiple of the 4 (or 8) rows a BLAS
# kernel takes together
ROW_GROUP = 16


def grouped_product(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``matrix @ q`` (float32), its last ``len % ROW_GROUP`` rows padded to a group, so
    that every row goes through the kernel that takes rows together."""
    whole = len(matrix) - len(matrix) % ROW_GROUP
    if whole == len(matrix):
        return np.asarray(matrix @ q, dtype=np.float32)
    out = np.empty(len(matrix), dtype=np.float32)
    if whole:
        out[:whole] = matrix[:whole] @ q
    tail = np.zeros((ROW_GROUP, matrix.shape[1]), dtype=np.float32)
    tail[:len(matrix) - whole] = matrix[whole:]
    out[whole:] = (tail @ q)[:len(matrix) - whole]
    return out
