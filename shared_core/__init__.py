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
    QueryEmbedder,
    SentenceTransformerEmbedder,
    minilm_embedder,
)
from .fusion import ContextItem, FusedContext, FusedItem, KGFact, fuse_contexts, kg_context_items
from .index import Chunk, ConceptGraphIndex, Provenance, RetrievalResult, RetrievedChunk, content_id
from .search.external import VectorStoreBackend
from .search.milvus import MilvusVectorStore
from .search.qdrant import QdrantStore
from .select import CostReport, Selection, knn_chunk_graph, knn_pagerank_scores
from .state.spill import VectorSpill
from .store import CorruptIndexError
from .text import Units, chunk_by_tokens, count_tokens, split_into_units, split_sentences

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
