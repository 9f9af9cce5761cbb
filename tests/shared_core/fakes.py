"""Test doubles shared by the core tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared_core.embeddings import Embedder

# An index stores embeddings as float32 and sums them in float64 a block at a time:
# cosines and mean vectors agree with a float32 computation to float32 rounding.
STORED_COSINE_TOL = 1e-5
STORED_VECTOR_TOL = 1e-6


class RecordingEmbedder:
    """Wraps an embedder and records every batch sent to it (to prove nothing is re-embedded)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.calls: list[list[str]] = []

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.asarray(self.inner.embed(texts))

    @property
    def texts(self) -> list[str]:
        """Every text embedded so far, in order."""
        return [t for batch in self.calls for t in batch]
