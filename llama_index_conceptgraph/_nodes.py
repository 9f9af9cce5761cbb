"""Translation between LlamaIndex nodes and the core's plain chunk records."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    RelatedNodeInfo,
    TextNode,
)

from shared_core.fusion import ContextItem
from shared_core.records import ChunkRecords, check_items, chunk_records

logger = logging.getLogger("conceptgraph")

# metadata the adapter adds: useful to callers, noise in an LLM prompt or an embedding
ADDED_KEYS = ["chunk_id", "score", "provenance", "fusion"]
# where a chunk's source document (its node's ``ref_doc_id``) is kept in the concept graph,
# the key LlamaIndex's own vector stores use; it becomes the SOURCE relationship again
REF_DOC_KEY = "ref_doc_id"


def nodes_to_records(nodes: object, what: str = "nodes") -> ChunkRecords:
    """The distinct chunks of ``nodes`` by the core's rule (:func:`chunk_records`).

    The node id is the chunk id; a node passed twice is one chunk; the same id
    with different text or metadata raises ``ValueError`` naming both positions.
    A node's ``ref_doc_id`` is recorded in the chunk metadata, so that
    ``delete_ref_doc`` can find the chunks of one document.
    """
    checked = check_items(nodes, BaseNode, what, "llama_index BaseNode")
    return chunk_records(((node.node_id, node.get_content(metadata_mode=MetadataMode.NONE),
                           _stored_metadata(node)) for node in checked), what)


def _stored_metadata(node: BaseNode) -> dict[str, Any]:
    metadata = dict(node.metadata)
    if node.ref_doc_id:
        metadata[REF_DOC_KEY] = node.ref_doc_id
    return metadata


def check_ref_doc_id(ref_doc_id: object) -> str:
    if not isinstance(ref_doc_id, str):
        raise TypeError(f"ref_doc_id must be a str, got {type(ref_doc_id).__name__}")
    if not ref_doc_id:
        raise ValueError("ref_doc_id is empty: pass the id of the document to delete")
    return ref_doc_id


def report_ref_doc_deleted(ref_doc_id: str, deleted: list[str]) -> None:
    """Warn when nothing was deleted, as LlamaIndex indexes do for an unknown document."""
    if not deleted:
        logger.warning("ref_doc_id %s not found, nothing deleted.", ref_doc_id)


class RetrievedNode(TextNode):
    """A ``TextNode`` whose hash ignores what retrieval added (score, provenance ...).

    A node's hash is its identity to LlamaIndex: ``QueryFusionRetriever`` fuses by
    it, so the same chunk from this and from a vector retriever must hash alike
    to count as one node with two votes. It serialises as a plain ``TextNode``.
    """

    @property
    def hash(self) -> str:
        content = {k: v for k, v in self.metadata.items() if k not in ADDED_KEYS}
        return TextNode(text=self.text, metadata=content).hash


def item_to_node(item: ContextItem, metadata: Mapping[str, Any] | None = None) -> NodeWithScore:
    """A fusion or concept-path item as a ``NodeWithScore`` whose id is its chunk id.

    The recorded source document becomes the node's SOURCE again (``node.ref_doc_id``).
    """
    meta = dict(item.metadata if metadata is None else metadata)
    ref_doc_id = meta.pop(REF_DOC_KEY, None)
    relationships = ({NodeRelationship.SOURCE: RelatedNodeInfo(node_id=ref_doc_id)}
                     if isinstance(ref_doc_id, str) and ref_doc_id else {})
    fields: dict[str, Any] = {
        "id_": item.chunk_id,
        "text": item.text,
        "metadata": meta,
        "relationships": relationships,
        "excluded_llm_metadata_keys": [k for k in ADDED_KEYS if k in meta],
        "excluded_embed_metadata_keys": [k for k in ADDED_KEYS if k in meta],
    }
    return NodeWithScore(node=RetrievedNode(**fields), score=item.score)
