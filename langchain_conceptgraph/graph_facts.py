"""KG facts from ``LLMGraphTransformer`` graph documents, each tied to its source chunk."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_core.documents import Document

from ._documents import chunk_id


def graph_facts(graph_documents: Iterable[Any], *, source_key: str = "chunk_id") -> list[Document]:
    """One ``Document`` per relationship, ``"subject RELATION object"``, naming its source chunk.

    Index these in any vector store (or another retriever) to get a KG retriever
    for :class:`FusedRetriever`: ``metadata[source_key]`` is the chunk id of the
    graph document's ``source`` (its ``id``, else the hash of its text, the
    same rule the concept graph uses), so a fact found by both paths is a vote
    for the right chunk. Accepts langchain-community ``GraphDocument`` objects
    (``nodes``, ``relationships``, ``source``) without importing that package.
    """
    if isinstance(graph_documents, (str, bytes)):
        raise TypeError("graph_documents must be an iterable of GraphDocument, not a str")
    facts: list[Document] = []
    for i, graph_doc in enumerate(graph_documents):
        relationships = getattr(graph_doc, "relationships", None)
        source = getattr(graph_doc, "source", None)
        if relationships is None:
            raise TypeError(
                f"graph_documents[{i}] is not a GraphDocument, got {type(graph_doc).__name__}"
            )
        if not isinstance(source, Document):
            raise ValueError(
                f"graph_documents[{i}] has no source Document; a fact needs its source chunk "
                "(LLMGraphTransformer sets it)"
            )
        source_id = chunk_id(source)
        for rel in relationships:
            subject, obj = str(rel.source.id), str(rel.target.id)
            facts.append(Document(
                page_content=f"{subject} {rel.type} {obj}",
                metadata={source_key: source_id, "subject": subject, "relation": str(rel.type),
                          "object": obj},
            ))
    return facts
