"""LangChain adapters for conceptgraph (G2ConS concept graphs without an LLM).

- :class:`ConceptGraphRetriever` — concept-graph retrieval with provenance.
- :class:`CoreChunkSelector` — keep only the core chunks before
  ``LLMGraphTransformer`` KG extraction, with a cost report.
- :class:`FusedRetriever` — concept path + any KG retriever, λ ensemble.
- :func:`graph_facts` — KG fact documents tied to their source chunks.
- :class:`CoreEmbeddings` / :func:`to_core_embedder` — embeddings in both directions.
- :class:`ConceptGraphAnswerer` — HuixiangDou2's answer pipeline (logic form, pre-check,
  dual-level fallback) as a runnable: ``invoke``/``stream``/``astream``, with sources and trace.
- :class:`LangChainChat` / :func:`chat_model` — any LangChain chat model as the core's
  ``ChatModel``.
- :class:`LangChainVectorStore` — any LangChain ``VectorStore`` (Chroma, ...) as the index's
  vector store: it holds the sentence vectors and proposes each query's candidates.
"""

from .answer import AnswerWithSources, ConceptGraphAnswerer
from .document_transformers import CoreChunkSelector
from .embeddings import CoreEmbeddings, to_core_embedder
from .graph_facts import graph_facts
from .llm import LangChainChat, chat_model
from .retrievers import ConceptGraphRetriever, FusedRetriever
from .vector_store import LangChainVectorStore

__all__ = [
    "AnswerWithSources",
    "ConceptGraphAnswerer",
    "ConceptGraphRetriever",
    "CoreChunkSelector",
    "CoreEmbeddings",
    "FusedRetriever",
    "LangChainChat",
    "LangChainVectorStore",
    "chat_model",
    "graph_facts",
    "to_core_embedder",
]
