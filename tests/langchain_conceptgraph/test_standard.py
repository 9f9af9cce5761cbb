"""langchain-tests' standard retriever suite, run offline against both retrievers."""

from __future__ import annotations

from functools import cache
from typing import Any

from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_conceptgraph import ConceptGraphRetriever, FusedRetriever
from shared_core import ConceptGraphIndex

from .conftest import corpus_documents, hashing_embeddings
from .fakes import StaticKG


@cache
def _index() -> ConceptGraphIndex:
    return ConceptGraphRetriever.from_documents(corpus_documents(), hashing_embeddings()).index


class TestConceptGraphRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[ConceptGraphRetriever]:
        return ConceptGraphRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": _index(), "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "Who designed the Analytical Engine?"


class TestFusedRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[FusedRetriever]:
        return FusedRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        facts = [Document(page_content="Charles Babbage DESIGNED Analytical Engine",
                          metadata={"chunk_id": "babbage"}),
                 Document(page_content="Tim Berners-Lee INVENTED World Wide Web",
                          metadata={"chunk_id": "web"})]
        return {"concept_retriever": ConceptGraphRetriever(index=_index()),
                "kg_retriever": StaticKG(facts=facts), "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "Who designed the Analytical Engine?"
