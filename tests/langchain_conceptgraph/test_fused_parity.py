"""The same KG facts fuse into the same context in LangChain and in LlamaIndex."""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)

import langchain_conceptgraph as lc
import llama_index_conceptgraph as li
from shared_core import ConceptGraphConfig, count_tokens

from .conftest import CORPUS, corpus_documents, hashing_embeddings
from .fakes import StaticKG

QUERY = "Who designed the Analytical Engine?"
# (fact, source chunk, score): two facts from "curie", which the concept path does not reach
FACTS = [
    ("Ada Lovelace RELATED_TO Analytical Engine", "ada", 0.9),
    ("Marie Curie WON Nobel Prize in Physics", "curie", 0.4),
    ("Tim Berners-Lee RELATED_TO CERN", "web", 0.5),
    ("Marie Curie WON Nobel Prize in Chemistry", "curie", 0.7),
]
Row = tuple[str, str, dict[str, Any]]


class FixedKG(BaseRetriever):
    """A LlamaIndex KG retriever returning the facts, each SOURCEd from its chunk."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(text=text, relationships={
                    NodeRelationship.SOURCE: RelatedNodeInfo(node_id=source)}), score=score)
                for text, source, score in FACTS]


def langchain_rows(docs: list[Document]) -> list[Row]:
    return [(str(d.id), d.page_content, d.metadata) for d in docs]


def llama_index_rows(nodes: list[NodeWithScore]) -> list[Row]:
    return [(n.node.node_id, n.node.get_content(metadata_mode=MetadataMode.NONE),
             n.node.metadata) for n in nodes]


async def test_same_kg_results_give_the_same_fused_context_in_both_frameworks() -> None:
    # one concept graph under both adapters, so only the KG conversion can differ
    concept = lc.ConceptGraphRetriever.from_documents(
        corpus_documents(), hashing_embeddings(), config=ConceptGraphConfig(ranking="paper"))
    lc_fused = lc.FusedRetriever(
        concept_retriever=concept, lam=0.5, budget=60,
        kg_retriever=StaticKG(facts=[Document(page_content=t, metadata={"chunk_id": c,
                                                                        "score": s})
                                     for t, c, s in FACTS]))
    li_fused = li.FusedConceptKGRetriever(li.ConceptGraphRetriever(concept.index), FixedKG(),
                                          lam=0.5, budget=60)

    ours = langchain_rows(lc_fused.invoke(QUERY))
    assert ours == llama_index_rows(li_fused.retrieve(QUERY))
    assert langchain_rows(await lc_fused.ainvoke(QUERY)) == llama_index_rows(
        await li_fused.aretrieve(QUERY))

    # by hand: the concept path within 60 tokens is babbage 11, ada 15, mark 14, turing 11.
    # ada is voted (15); 45 remain, 22 per path. Concept: babbage 11, mark 25 no, turing 22.
    # KG, one item per chunk: ada, curie (both facts, 19 tokens, best score 0.7), web;
    # curie 19 fits, web 28 does not.
    merged = f"{FACTS[1][0]}\n{FACTS[3][0]}"
    assert count_tokens(merged) == 19
    assert [(cid, text, meta["fusion"]["path"]) for cid, text, meta in ours] == [
        ("ada", CORPUS["ada"], "both"), ("babbage", CORPUS["babbage"], "concept"),
        ("turing", CORPUS["turing"], "concept"), ("curie", merged, "kg")]
    assert ours[3][2] == {"chunk_id": "curie", "score": 0.7,
                          "fusion": {"path": "kg", "concept_rank": None, "kg_rank": 1}}
