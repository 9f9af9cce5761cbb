"""LangChain ``Document`` <-> the core's plain chunk records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from shared_core import content_id


def chunk_id(document: Document) -> str:
    """A document's chunk id: its own ``id``, else the hash of its text (as the core does)."""
    return document.id if document.id else content_id(document.page_content)


def check_documents(documents: object) -> list[Document]:
    """Reject anything but a sequence of ``Document``, naming the first offender."""
    if isinstance(documents, (str, bytes, Document)) or not isinstance(documents, Sequence):
        raise TypeError(f"documents must be a sequence of Document, got {type(documents).__name__}")
    out = list(documents)
    for i, doc in enumerate(out):
        if not isinstance(doc, Document):
            raise TypeError(f"documents[{i}] must be a Document, got {type(doc).__name__}")
    return out


def to_records(
    documents: Sequence[Document],
) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """Texts, ids and metadata of distinct chunks; a repeated document is one chunk.

    The same id with different text is an error: one of the two would be silently lost.
    """
    texts: list[str] = []
    ids: list[str] = []
    metadatas: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for i, doc in enumerate(documents):
        if not doc.page_content.strip():
            raise ValueError(f"documents[{i}] has empty page_content")
        cid = chunk_id(doc)
        if cid in seen:
            if seen[cid] != doc.page_content:
                raise ValueError(f"documents[{i}] reuses id {cid!r} with different text")
            continue
        seen[cid] = doc.page_content
        texts.append(doc.page_content)
        ids.append(cid)
        metadatas.append(dict(doc.metadata))
    return texts, ids, metadatas
