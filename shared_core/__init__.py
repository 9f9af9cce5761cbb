"""conceptgraph's framework-free engine: G2ConS concept graphs without an LLM.

Build a :class:`ConceptGraphIndex` over text chunks, pick the core chunks worth
sending to an LLM knowledge-graph extractor (:meth:`ConceptGraphIndex.select`),
retrieve with provenance (:meth:`ConceptGraphIndex.retrieve`), and fuse that
context with any KG retriever's (:func:`fuse_contexts`).
"""

from .config import ConceptGraphConfig
from .embeddings import (
    CachedEmbedder,
    Embedder,
    EmbeddingCache,
    FunctionEmbedder,
    HashingEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    minilm_embedder,
)
from .fusion import ContextItem, FusedContext, FusedItem, fuse_contexts
from .index import Chunk, ConceptGraphIndex, Provenance, RetrievalResult, RetrievedChunk, content_id
from .selection import CostReport, Selection
from .store import CorruptIndexError
from .text import chunk_by_tokens, count_tokens, split_sentences

__all__ = [
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
    "OpenAIEmbedder",
    "Provenance",
    "RetrievalResult",
    "RetrievedChunk",
    "Selection",
    "SentenceTransformerEmbedder",
    "chunk_by_tokens",
    "content_id",
    "count_tokens",
    "fuse_contexts",
    "minilm_embedder",
    "split_sentences",
]
