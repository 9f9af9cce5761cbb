"""FusedRetriever: the λ ensemble's order and shares, concurrency, a KG from LLMGraphTransformer."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ValidationError

from langchain_conceptgraph import (
    ConceptGraphRetriever,
    CoreChunkSelector,
    CoreEmbeddings,
    FusedRetriever,
    graph_facts,
)
from shared_core import ConceptGraphConfig, HashingEmbedder, content_id, count_tokens

from .conftest import CORPUS
from .fakes import FakeGraphExtractor, RetrieverRunRecorder, StaticKG

with warnings.catch_warnings():  # langchain-experimental announces its own sunset on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_community.graphs.graph_document import GraphDocument, Node, Relationship
    from langchain_experimental.graph_transformers import LLMGraphTransformer

QUERY = "Who designed the Analytical Engine?"
FACTS = [  # (text, source chunk): 9, 9 and 8 tokens
    ("Ada Lovelace RELATED_TO Analytical Engine", "ada"),
    ("Tim Berners-Lee RELATED_TO CERN", "web"),
    ("Marie Curie RELATED_TO Nobel Prize", "curie"),
]


def static_kg() -> StaticKG:
    return StaticKG(facts=[Document(page_content=t, metadata={"chunk_id": c, "score": 0.5})
                           for t, c in FACTS])


@pytest.fixture
def concept(documents: list[Document], embeddings: CoreEmbeddings) -> ConceptGraphRetriever:
    # the paper's ranking fixes the concept path's order for QUERY, which the
    # expectations below build on
    retriever = ConceptGraphRetriever.from_documents(
        documents, embeddings, config=ConceptGraphConfig(ranking="paper"))
    assert [d.id for d in retriever.invoke(QUERY)][:5] == [
        "babbage", "ada", "mark", "turing", "hopper"]
    assert [count_tokens(CORPUS[c]) for c in ("babbage", "ada", "mark", "turing", "hopper")] == [
        11, 15, 14, 11, 13]
    assert [count_tokens(t) for t, _ in FACTS] == [9, 9, 8]
    return retriever


def summary(docs: list[Document]) -> list[tuple[str | None, str]]:
    return [(d.id, d.metadata["fusion"]["path"]) for d in docs]


def test_voted_chunks_first_then_each_path_within_its_share(
    concept: ConceptGraphRetriever,
) -> None:
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=0.5,
                           budget=60)
    docs = fused.invoke(QUERY)
    # concept path within 60 tokens: babbage 11, ada 15, mark 14, turing 11 (51); hopper overflows.
    # ada is also the source of the first fact: voted, placed first (15 tokens, its chunk text).
    # 45 tokens remain: concept share int(0.5*45)=22 -> babbage 11, mark (25) skipped, turing 22;
    # KG share 22 -> web fact 9, curie fact 17.
    assert summary(docs) == [("ada", "both"), ("babbage", "concept"), ("turing", "concept"),
                             ("web", "kg"), ("curie", "kg")]
    assert docs[0].page_content == CORPUS["ada"]
    assert docs[0].metadata["fusion"] == {"path": "both", "concept_rank": 1, "kg_rank": 0}
    assert docs[0].metadata["provenance"]["stage"] == "direct"
    assert docs[3].page_content == FACTS[1][0]
    assert docs[3].metadata["fusion"] == {"path": "kg", "concept_rank": None, "kg_rank": 1}
    assert docs[3].metadata["score"] == 0.5
    tokens = [count_tokens(d.page_content) for d in docs]
    assert tokens == [15, 11, 11, 9, 8] and sum(tokens) == 54 <= 60


def test_lam_one_gives_the_remaining_budget_to_the_kg_path(
    concept: ConceptGraphRetriever,
) -> None:
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=1.0,
                           budget=60)
    assert summary(fused.invoke(QUERY)) == [("ada", "both"), ("web", "kg"), ("curie", "kg")]


def test_lam_zero_and_defaults_from_the_config(concept: ConceptGraphRetriever) -> None:
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=0.0,
                           budget=60)
    # remaining 45 all to the concept path: babbage 11, mark 25, turing 36; hopper is cut off
    assert summary(fused.invoke(QUERY)) == [("ada", "both"), ("babbage", "concept"),
                                            ("mark", "concept"), ("turing", "concept")]
    default = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg())
    assert default._settings() == (12000, 0.6)
    budgeted = FusedRetriever(concept_retriever=concept.model_copy(update={"budget": 60}),
                              kg_retriever=static_kg(), lam=0.5)
    assert summary(budgeted.invoke(QUERY)) == summary(
        FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=0.5,
                       budget=60).invoke(QUERY))


async def test_async_matches_sync(concept: ConceptGraphRetriever) -> None:
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=0.5,
                           budget=60)
    assert await fused.ainvoke(QUERY) == fused.invoke(QUERY)


class MeetingEmbeddings(Embeddings):
    """Hashing embeddings that, once armed, wait at a barrier while embedding the query."""

    def __init__(self) -> None:
        self.inner = CoreEmbeddings(HashingEmbedder())
        self.barrier: threading.Barrier | None = None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.barrier is not None and texts == [QUERY]:
            self.barrier.wait()
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


class MeetingKG(StaticKG):
    barrier: threading.Barrier

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        self.barrier.wait()
        return list(self.facts)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_both_paths_run_concurrently(documents: list[Document], mode: str) -> None:
    # each path blocks until the other has started: run one after the other, the barrier breaks
    embeddings = MeetingEmbeddings()
    concept = ConceptGraphRetriever.from_documents(documents, embeddings)
    barrier = threading.Barrier(2, timeout=5)
    embeddings.barrier = barrier
    kg = MeetingKG(facts=static_kg().facts, barrier=barrier)
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=kg, lam=0.5, budget=60)
    docs = fused.invoke(QUERY) if mode == "sync" else await fused.ainvoke(QUERY)
    assert summary(docs)[0] == ("ada", "both")
    assert not barrier.broken


def test_kg_from_llm_graph_transformer_votes_for_the_right_chunks(
    documents: list[Document], embeddings: CoreEmbeddings
) -> None:
    selector = CoreChunkSelector(embeddings, kappa=1.0)
    core = selector.transform_documents(documents)
    graph_docs = LLMGraphTransformer(llm=FakeGraphExtractor()).convert_to_graph_documents(core)
    facts = graph_facts(graph_docs)
    # one fact per later proper name in a chunk: Harvard Mark I / Harvard University, ...
    by_chunk = {f.metadata["chunk_id"]: f.page_content for f in facts}
    assert by_chunk["hopper"] == "Grace Hopper RELATED_TO Harvard Mark I"
    kg = InMemoryVectorStore.from_documents(facts, embeddings).as_retriever(
        search_kwargs={"k": 2})
    fused = FusedRetriever(concept_retriever=selector.as_retriever(), kg_retriever=kg,
                           budget=200)
    docs = fused.invoke("Grace Hopper and the Harvard Mark I")
    voted = [d.id for d in docs if d.metadata["fusion"]["path"] == "both"]
    assert "hopper" in voted
    hopper = next(d for d in docs if d.id == "hopper")
    assert hopper.page_content == CORPUS["hopper"]  # the chunk's text carries the voted fact


def test_graph_facts_name_their_source_chunk() -> None:
    source = Document(page_content="Grace Hopper built a compiler.")
    rel = Relationship(source=Node(id="Grace Hopper", type="Person"),
                       target=Node(id="Compiler", type="Thing"), type="BUILT")
    facts = graph_facts([GraphDocument(nodes=[], relationships=[rel], source=source)])
    assert [(f.page_content, f.metadata) for f in facts] == [(
        "Grace Hopper BUILT Compiler",
        {"chunk_id": content_id(source.page_content), "subject": "Grace Hopper",
         "relation": "BUILT", "object": "Compiler"},
    )]
    with pytest.raises(TypeError, match="not a GraphDocument"):
        graph_facts([source])
    with pytest.raises(TypeError, match="not a str"):
        graph_facts("facts")


def test_kg_documents_without_a_source_are_kg_only_context(
    concept: ConceptGraphRetriever,
) -> None:
    kg = StaticKG(facts=[Document(page_content="Babbage ADMIRED Lovelace"),  # no chunk id
                         Document(page_content="  "),  # blank: carries nothing
                         Document(page_content="Charles Babbage LIVED_IN London", id="babbage")])
    docs = FusedRetriever(concept_retriever=concept, kg_retriever=kg, lam=0.5,
                          budget=60).invoke(QUERY)
    paths = summary(docs)
    assert paths[0] == ("babbage", "both")  # the document id names the chunk
    assert [d.page_content for d in docs if d.metadata["fusion"]["path"] == "kg"] == [
        "Babbage ADMIRED Lovelace"]


def test_bad_settings_are_rejected(concept: ConceptGraphRetriever) -> None:
    with pytest.raises(ValidationError, match="lam must be a number in"):
        FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=1.5)
    with pytest.raises(ValidationError, match="budget must be an int"):
        FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), budget=0)
    with pytest.raises(ValidationError):
        FusedRetriever(concept_retriever=static_kg(), kg_retriever=static_kg())


def test_facts_from_one_chunk_are_merged_not_dropped(concept: ConceptGraphRetriever) -> None:
    physics, chemistry = ("Marie Curie WON Nobel Prize in Physics",
                          "Marie Curie WON Nobel Prize in Chemistry")
    kg = StaticKG(facts=[
        Document(page_content=FACTS[0][0], metadata={"chunk_id": "ada"}),
        Document(page_content=physics, metadata={"chunk_id": "curie", "score": 0.4}),
        Document(page_content=FACTS[1][0], metadata={"chunk_id": "web"}),
        Document(page_content=chemistry, metadata={"chunk_id": "curie", "score": 0.7}),
    ])
    merged = f"{physics}\n{chemistry}"
    assert [count_tokens(t) for t in (physics, chemistry, merged)] == [9, 9, 19]
    docs = FusedRetriever(concept_retriever=concept, kg_retriever=kg, lam=0.5,
                          budget=60).invoke(QUERY)
    # voted ada 15; 45 remain. Concept share 22: babbage 11, turing 22. KG items, one per
    # chunk: ada, curie (both facts, 19 tokens, rank 1), web. KG share 22: curie 19; web 28 no.
    assert summary(docs) == [("ada", "both"), ("babbage", "concept"), ("turing", "concept"),
                             ("curie", "kg")]
    assert docs[3].page_content == merged
    assert docs[3].metadata["score"] == 0.7  # the best of the chunk's facts
    assert docs[3].metadata["fusion"] == {"path": "kg", "concept_rank": None, "kg_rank": 1}


def test_k_caps_the_fused_documents(concept: ConceptGraphRetriever) -> None:
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=0.5,
                           budget=60)
    everything = summary(fused.invoke(QUERY))
    assert everything == [("ada", "both"), ("babbage", "concept"), ("turing", "concept"),
                          ("web", "kg"), ("curie", "kg")]
    assert summary(fused.invoke(QUERY, k=2)) == everything[:2]
    capped = fused.model_copy(update={"k": 3})
    assert summary(capped.invoke(QUERY)) == everything[:3]
    assert summary(capped.invoke(QUERY, k=1)) == everything[:1]  # the call's k wins
    assert summary(capped.invoke(QUERY, k=10)) == everything  # k caps, never adds


async def test_k_per_call_async(concept: ConceptGraphRetriever) -> None:
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=0.5,
                           budget=60, k=4)
    assert summary(await fused.ainvoke(QUERY)) == summary(fused.invoke(QUERY))
    assert summary(await fused.ainvoke(QUERY, k=2)) == [("ada", "both"),
                                                         ("babbage", "concept")]


async def call(retriever: BaseRetriever, mode: str, query: str = QUERY,
               **kwargs: Any) -> list[Document]:
    if mode == "sync":
        return retriever.invoke(query, **kwargs)
    return await retriever.ainvoke(query, **kwargs)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_unknown_or_bad_call_arguments_raise(concept: ConceptGraphRetriever,
                                                   mode: str) -> None:
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), budget=60)
    with pytest.raises(TypeError, match=r"^FusedRetriever.invoke\(\) got unexpected keyword "
                                        r"argument\(s\) 'bogus'; it accepts k$"):
        await call(fused, mode, bogus=3)
    with pytest.raises(TypeError, match=r"^ConceptGraphRetriever.invoke\(\) got unexpected "
                                        r"keyword argument\(s\) 'bogus', 'kk'; it accepts k "
                                        r"and budget$"):
        await call(concept, mode, bogus=3, kk=1)
    with pytest.raises(ValueError, match="k must be an int >= 1 or None, got 0"):
        await call(fused, mode, k=0)
    with pytest.raises(TypeError, match=r"^the query must be a str, got int$"):
        await call(fused, mode, 7)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="k must be an int >= 1 or None, got 0"):
        FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), k=0)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("query", ["", "  \n"])
async def test_a_blank_query_is_named_as_such(concept: ConceptGraphRetriever, query: str,
                                              mode: str) -> None:
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg())
    for retriever in (fused, concept):
        with pytest.raises(ValueError, match=r"^the query is empty or blank: invoke the "
                                             r"retriever with the question to retrieve "
                                             r"documents for$"):
            await call(retriever, mode, query)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_callbacks_see_the_concept_retrievers_own_run(
    concept: ConceptGraphRetriever, mode: str
) -> None:
    recorder = RetrieverRunRecorder()
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=static_kg(), lam=0.5,
                           budget=60)
    config = {"callbacks": [recorder]}
    docs = fused.invoke(QUERY, config) if mode == "sync" else await fused.ainvoke(QUERY, config)
    assert summary(docs)[0] == ("ada", "both")
    runs = {name: (run_id, parent) for name, run_id, parent in recorder.starts}
    assert len(recorder.starts) == 3  # the paths run concurrently: their order varies
    assert set(runs) == {"FusedRetriever", "ConceptGraphRetriever", "StaticKG"}
    fused_run, no_parent = runs["FusedRetriever"]
    assert no_parent is None
    assert runs["ConceptGraphRetriever"][1] == fused_run  # a child of the fused run
    assert runs["StaticKG"][1] == fused_run
    assert sorted(map(str, recorder.ends)) == sorted(str(r) for r, _ in runs.values())
