"""langchain-tests' standard retriever suite, run offline against ConceptGraphRetriever."""

from __future__ import annotations

from functools import cache
from typing import Any

from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_conceptgraph import ConceptGraphRetriever
from shared_core import ConceptGraphIndex

from .conftest import corpus_documents, hashing_embeddings


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
