"""Test doubles shared by the core tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared_core.embeddings import Embedder

# An index stores embeddings as float16: rounding moves each component of a unit
# vector by at most 2**-11 of itself, so a cosine with a stored row moves by at most
# 2**-11, and a renormalised mean of stored rows by at most 2**-10 per component.
STORED_COSINE_TOL = 2**-11
STORED_VECTOR_TOL = 2**-10


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
