"""``shared_core.__all__`` is pinned: an accidental export or removal fails here."""

from __future__ import annotations

import importlib

import pytest

import shared_core

EXPECTED = [
    "CachedEmbedder",
    "Chunk",
    "ConceptGraphConfig",
    "ConceptGraphIndex",
    "ContextItem",
    "CorruptIndexError",
    "CostReport",
    "Embedder",
    "EmbeddingCache",
    "FunctionEmbedder",
    "FusedContext",
    "FusedItem",
    "HashingEmbedder",
    "KGFact",
    "MilvusVectorStore",
    "OpenAIEmbedder",
    "Provenance",
    "QdrantStore",
    "QueryEmbedder",
    "RetrievalResult",
    "RetrievedChunk",
    "Selection",
    "SentenceTransformerEmbedder",
    "Units",
    "VectorSpill",
    "VectorStoreBackend",
    "chunk_by_tokens",
    "content_id",
    "count_tokens",
    "fuse_contexts",
    "kg_context_items",
    "knn_chunk_graph",
    "knn_pagerank_scores",
    "minilm_embedder",
    "split_into_units",
    "split_sentences",
]


def test_all_is_exactly_the_pinned_list() -> None:
    assert shared_core.__all__ == EXPECTED


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from shared_core import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(EXPECTED)


@pytest.mark.parametrize("name", EXPECTED)
def test_public_name_is_importable_and_documented(name: str) -> None:
    obj = getattr(importlib.import_module("shared_core"), name)
    doc = obj.__doc__  # the object's own: a class without one does not inherit it here
    assert isinstance(doc, str) and doc.strip(), f"{name} has no docstring"
    # a dataclass without a docstring gets its signature as one: that says nothing
    assert not doc.startswith(f"{name}("), f"{name} has only the generated dataclass docstring"
