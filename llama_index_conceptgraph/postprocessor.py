"""``ConceptGraphPostprocessor``: reorder or prune any retriever's nodes with the concept graph."""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from shared_core.embeddings import check_texts
from shared_core.index import RetrievedChunk
from shared_core.pipeline import provenance_metadata, rank_candidates, whole_index_budget

from ._nodes import ADDED_KEYS
from .retriever import ConceptGraphRetriever


class ConceptGraphPostprocessor(BaseNodePostprocessor):
    """Put the nodes the concept graph reaches for the query first, in its order.

    Nodes are matched to chunks by node id (the ids the concept graph was built
    with). The search is the retriever's own (its query embedding, the query's
    words for the lexical view and exact-match seeds, its ``concept_top_k`` and
    ``hops``) over the whole index, so shared nodes come in the retriever's order.
    With ``unit_tokens`` > 0 the graph returns sentence units (``a#u0``): a node
    stands where its first unit does, with its best unit's score and provenance.
    Reached nodes get the concept score and ``provenance`` metadata; the rest
    follow in their original order, or are dropped with ``drop_unmatched``.

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
        check_texts([query_bundle.query_str], "query")  # even with no nodes to rank
        by_id: dict[str, NodeWithScore] = {}
        for i, item in enumerate(nodes):
            if not isinstance(item, NodeWithScore):
                raise TypeError(f"nodes[{i}] must be a NodeWithScore, got {type(item).__name__}")
            by_id.setdefault(item.node.node_id, item)
        best = self._best_hits(query_bundle.query_str, by_id) if by_id else {}
        out: list[NodeWithScore] = []
        for node_id, hit in best.items():
            node = by_id[node_id].node.model_copy(deep=True)
            added = {k: v for k, v in provenance_metadata(hit).items() if k in ADDED_KEYS}
            node.metadata.update({**added, "chunk_id": node_id})
            for keys in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
                keys.extend(k for k in ADDED_KEYS if k in node.metadata and k not in keys)
            out.append(NodeWithScore(node=node, score=hit.score))
        if not self.drop_unmatched:
            out.extend(item for node_id, item in by_id.items() if node_id not in best)
        return out if self.top_n is None else out[: self.top_n]

    def _best_hits(self, query: str, by_id: dict[str, NodeWithScore]) -> dict[str, RetrievedChunk]:
        """Candidate node id -> its best hit, in the order the concept search first reaches it."""
        result = self._retriever.retrieve_result(
            query, budget=whole_index_budget(self._retriever.index))
        reached, _ = rank_candidates(result, list(by_id))
        return {hit.chunk_id: hit for hit in reached}
