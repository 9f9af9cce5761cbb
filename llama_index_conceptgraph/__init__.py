"""LlamaIndex integration of conceptgraph: prune chunks before KG extraction, fuse retrieval.

- :class:`CoreChunkSelector` — a transformation that keeps only the G2ConS core chunks,
  so a ``PropertyGraphIndex`` sends fewer chunks to its LLM extractors.
- :class:`ConceptGraphRetriever` — concept-graph retrieval with provenance.
- :class:`ConceptGraphPostprocessor` — reorder/prune another retriever's nodes.
- :class:`FusedConceptKGRetriever` — concept path + KG path in one token budget.
- :class:`ConceptGraphQueryEngine` — HuixiangDou2's answer pipeline (logic form, pre-check,
  dual-level fallback) as a query engine, streaming or not, with sources and trace.
- :class:`LlamaIndexChat` / :func:`chat_model` — any LlamaIndex ``LLM`` as the core's ``ChatModel``.
- :class:`LlamaIndexVectorStore` — any LlamaIndex vector store as the index's vector store:
  it holds the index's own sentence vectors and proposes each query's candidates.
"""

from .answer import ConceptGraphQueryEngine
from .embeddings import CoreEmbedding, default_embed_model, to_core_embedder
from .fused import (
    FusedConceptKGRetriever,
    RelationSourcedSynonymRetriever,
    RelationSourcedVectorContextRetriever,
    relation_sourced_retriever,
    run_outside_event_loop,
)
from .llm import LlamaIndexChat, chat_model
from .postprocessor import ConceptGraphPostprocessor
from .retriever import ConceptGraphRetriever
from .selector import CoreChunkSelector
from .vector_store import LlamaIndexVectorStore

__all__ = [
    "ConceptGraphPostprocessor",
    "ConceptGraphQueryEngine",
    "ConceptGraphRetriever",
    "CoreChunkSelector",
    "CoreEmbedding",
    "FusedConceptKGRetriever",
    "LlamaIndexChat",
    "LlamaIndexVectorStore",
    "RelationSourcedSynonymRetriever",
    "RelationSourcedVectorContextRetriever",
    "chat_model",
    "default_embed_model",
    "relation_sourced_retriever",
    "run_outside_event_loop",
    "to_core_embedder",
]
