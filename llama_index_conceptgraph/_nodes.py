"""Translation between LlamaIndex nodes and the core's plain chunk records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, TextNode

from shared_core.fusion import ContextItem

# metadata the adapter adds: useful to callers, noise in an LLM prompt or an embedding
ADDED_KEYS = ["chunk_id", "score", "provenance", "fusion"]


def nodes_to_records(
    nodes: object, what: str = "nodes"
) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(texts, ids, metadatas) of ``nodes``; the node id is the chunk id."""
    if isinstance(nodes, (str, bytes, BaseNode)) or not isinstance(nodes, Sequence):
        raise TypeError(f"{what} must be a sequence of llama_index nodes, "
                        f"got {type(nodes).__name__}")
    texts: list[str] = []
    ids: list[str] = []
    metadatas: list[dict[str, Any]] = []
    for i, node in enumerate(nodes):
        if not isinstance(node, BaseNode):
            raise TypeError(f"{what}[{i}] must be a llama_index BaseNode, "
                            f"got {type(node).__name__}")
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        if not text.strip():
            raise ValueError(f"{what}[{i}] (id {node.node_id!r}) has no text to index")
        texts.append(text)
        ids.append(node.node_id)
        metadatas.append(dict(node.metadata))
    return texts, ids, metadatas


def item_to_node(item: ContextItem, metadata: Mapping[str, Any] | None = None) -> NodeWithScore:
    """A fusion or concept-path item as a ``NodeWithScore`` whose id is its chunk id."""
    meta = dict(item.metadata if metadata is None else metadata)
    node = TextNode(
        id_=item.chunk_id,
        text=item.text,
        metadata=meta,
        excluded_llm_metadata_keys=[k for k in ADDED_KEYS if k in meta],
        excluded_embed_metadata_keys=[k for k in ADDED_KEYS if k in meta],
    )
    return NodeWithScore(node=node, score=item.score)
