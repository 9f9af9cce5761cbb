"""``ConceptGraphPostprocessor``: reorder or prune any retriever's nodes with the concept graph."""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from shared_core.pipeline import provenance_metadata, rerank_by_concepts

from ._nodes import ADDED_KEYS
from .retriever import ConceptGraphRetriever


class ConceptGraphPostprocessor(BaseNodePostprocessor):
    """Put the nodes the concept graph reaches for the query first, in its order.

    Nodes are matched to chunks by node id (the ids the concept graph was built
    with). Reached nodes get the concept score and ``provenance`` metadata; the
    rest follow in their original order, or are dropped with ``drop_unmatched``.

    >>> from llama_index.core.schema import NodeWithScore, TextNode
    >>> from shared_core import HashingEmbedder
    >>> from llama_index_conceptgraph import (
    ...     ConceptGraphPostprocessor, ConceptGraphRetriever, CoreEmbedding)
    >>> nodes = [TextNode(id_="b", text="Charles Babbage designed the engine."),
    ...          TextNode(id_="a", text="Ada Lovelace wrote the first program.")]
    >>> retriever = ConceptGraphRetriever.from_defaults(
    ...     nodes=nodes, embed_model=CoreEmbedding(HashingEmbedder()))
    >>> post = ConceptGraphPostprocessor(retriever=retriever)
    >>> [n.node.node_id for n in post.postprocess_nodes(
    ...     [NodeWithScore(node=n) for n in nodes], query_str="Who wrote the first program?")]
    ['a', 'b']
    """

    top_n: int | None = Field(default=None, ge=1, description="Keep at most this many nodes.")
    drop_unmatched: bool = Field(
        default=False, description="Drop nodes the concept graph does not reach.")
    _retriever: ConceptGraphRetriever = PrivateAttr()

    def __init__(self, retriever: ConceptGraphRetriever, **kwargs: Any) -> None:
        if not isinstance(retriever, ConceptGraphRetriever):
            raise TypeError(
                f"retriever must be a ConceptGraphRetriever, got {type(retriever).__name__}"
            )
        super().__init__(**kwargs)
        self._retriever = retriever

    @classmethod
    def class_name(cls) -> str:
        return "ConceptGraphPostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("ConceptGraphPostprocessor needs the query: pass query_str")
        by_id: dict[str, NodeWithScore] = {}
        for i, item in enumerate(nodes):
            if not isinstance(item, NodeWithScore):
                raise TypeError(f"nodes[{i}] must be a NodeWithScore, got {type(item).__name__}")
            by_id.setdefault(item.node.node_id, item)
        reached, unmatched = rerank_by_concepts(
            self._retriever.index, self._retriever.query_vector(query_bundle.query_str),
            list(by_id))
        out: list[NodeWithScore] = []
        for hit in reached:
            node = by_id[hit.chunk.id].node.model_copy(deep=True)
            node.metadata.update({k: v for k, v in provenance_metadata(hit).items()
                                  if k in ADDED_KEYS})
            for keys in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
                keys.extend(k for k in ADDED_KEYS if k in node.metadata and k not in keys)
            out.append(NodeWithScore(node=node, score=hit.score))
        if not self.drop_unmatched:
            out.extend(by_id[cid] for cid in unmatched)
        return out if self.top_n is None else out[: self.top_n]
