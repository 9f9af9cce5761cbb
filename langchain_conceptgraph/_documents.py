"""LangChain ``Document`` <-> the core's plain chunk records."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.documents import Document

from shared_core.records import ChunkRecords, check_items, chunk_records, record_id


def chunk_id(document: Document) -> str:
    """A document's chunk id: its own ``id``, else the hash of its text (as the core does)."""
    return record_id(document.id, document.page_content)


def check_documents(documents: object) -> list[Document]:
    """Reject anything but a sequence of ``Document``, naming the first offender."""
    return check_items(documents, Document, "documents", "Document")


def to_records(documents: Sequence[Document]) -> ChunkRecords:
    """The distinct chunks of ``documents`` by the core's rule (:func:`chunk_records`).

    A document passed twice is one chunk; the same id with different text or
    metadata raises ``ValueError`` naming both positions.
    """
    return chunk_records(((doc.id, doc.page_content, doc.metadata) for doc in documents),
                         "documents")
