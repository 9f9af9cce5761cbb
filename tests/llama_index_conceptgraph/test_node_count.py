"""ConceptGraphRetriever's node count, ``similarity_top_k``, and concept count,
``concept_top_k`` (formerly ``top_k``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_conceptgraph import (
    ConceptGraphPostprocessor,
    ConceptGraphRetriever,
    CoreChunkSelector,
    CoreEmbedding,
)

from .conftest import CORPUS

QUERY = "Who discovered polonium?"


def corpus_nodes() -> list[TextNode]:
    return [TextNode(id_=key, text=text) for key, text, _ in CORPUS]


@pytest.fixture
def uncapped(embed_model: CoreEmbedding) -> ConceptGraphRetriever:
    return ConceptGraphRetriever.from_defaults(nodes=corpus_nodes(), embed_model=embed_model)


def ids(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.node_id for n in nodes]


def test_similarity_top_k_caps_the_nodes_a_query_engine_gets(
    uncapped: ConceptGraphRetriever, embed_model: CoreEmbedding,
) -> None:
    # the 10 chunks are 177 tokens, far under the 12000-token budget: uncapped, a
    # query engine gets every node of the index
    everything = ids(uncapped.retrieve(QUERY))
    assert len(everything) == len(CORPUS) == 10
    assert uncapped.similarity_top_k is None

    capped = ConceptGraphRetriever(uncapped.index, embed_model, similarity_top_k=3)
    assert capped.similarity_top_k == 3
    assert ids(capped.retrieve(QUERY)) == everything[:3]
    assert everything[0] == "curie-polonium"
    response = RetrieverQueryEngine.from_args(capped, llm=MockLLM()).query(QUERY)
    assert ids(response.source_nodes) == everything[:3]
    # the core's full result is bounded by the budget only
    assert len(capped.retrieve_result(QUERY).chunks) == 10


async def test_similarity_top_k_caps_async_retrieval_too(
    uncapped: ConceptGraphRetriever,
) -> None:
    capped = ConceptGraphRetriever(uncapped.index, similarity_top_k=2)
    assert ids(await capped.aretrieve(QUERY)) == ids(uncapped.retrieve(QUERY))[:2]


def test_similarity_top_k_through_from_defaults_and_the_selector(
    embed_model: CoreEmbedding,
) -> None:
    built = ConceptGraphRetriever.from_defaults(nodes=corpus_nodes(), embed_model=embed_model,
                                                similarity_top_k=1)
    assert ids(built.retrieve(QUERY)) == ["curie-polonium"]
    selector = CoreChunkSelector(kappa=1.0, embed_model=embed_model)
    selector(corpus_nodes())
    assert ids(selector.as_retriever(similarity_top_k=1).retrieve(QUERY)) == ["curie-polonium"]


def test_postprocessor_is_not_capped_by_the_retriever_node_count(
    uncapped: ConceptGraphRetriever,
) -> None:
    capped = ConceptGraphRetriever(uncapped.index, similarity_top_k=1)
    nodes = [NodeWithScore(node=n) for n in reversed(corpus_nodes())]
    out = ConceptGraphPostprocessor(retriever=capped).postprocess_nodes(nodes, query_str=QUERY)
    assert ids(out) == ids(uncapped.retrieve(QUERY))


def test_concept_top_k_counts_direct_concepts(uncapped: ConceptGraphRetriever) -> None:
    assert uncapped.concept_top_k == 25  # the index config's top_k
    one = ConceptGraphRetriever(uncapped.index, concept_top_k=1)
    assert one.concept_top_k == 1
    assert len(one.retrieve_result(QUERY).direct_concepts) == 1
    three = ConceptGraphRetriever(uncapped.index, concept_top_k=3)
    assert len(three.retrieve_result(QUERY).direct_concepts) == 3


def test_top_k_still_works_as_a_deprecated_name_of_concept_top_k(
    uncapped: ConceptGraphRetriever,
) -> None:
    with pytest.warns(DeprecationWarning, match="concept_top_k"):
        old = ConceptGraphRetriever(uncapped.index, top_k=2)
    new = ConceptGraphRetriever(uncapped.index, concept_top_k=2)
    assert old.concept_top_k == 2
    assert old.retrieve_result(QUERY).direct_concepts == \
        new.retrieve_result(QUERY).direct_concepts
    with pytest.raises(ValueError, match="concept_top_k only"):
        ConceptGraphRetriever(uncapped.index, top_k=2, concept_top_k=3)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"similarity_top_k": 0}, ValueError, "similarity_top_k must be a positive int"),
    ({"similarity_top_k": -2}, ValueError, "similarity_top_k must be a positive int"),
    ({"similarity_top_k": True}, TypeError, "similarity_top_k .* got bool"),
    ({"similarity_top_k": "3"}, TypeError, "similarity_top_k .* got str"),
    ({"concept_top_k": 0}, ValueError, "concept_top_k must be a positive int"),
    ({"concept_top_k": 2.0}, TypeError, "concept_top_k .* got float"),
])
def test_bad_counts_are_rejected_by_name(
    uncapped: ConceptGraphRetriever, kwargs: dict[str, object], error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        ConceptGraphRetriever(uncapped.index, **kwargs)  # type: ignore[arg-type]


def test_counts_survive_persist_without_deprecation_warnings(
    uncapped: ConceptGraphRetriever, embed_model: CoreEmbedding, tmp_path: Path
) -> None:
    tuned = ConceptGraphRetriever(uncapped.index, embed_model, similarity_top_k=4,
                                  concept_top_k=3)
    tuned.persist(tmp_path / "cg")
    sidecar = json.loads((tmp_path / "cg" / "llama_index_conceptgraph.json").read_text())
    assert (sidecar["top_k"], sidecar["similarity_top_k"]) == (3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "cg", embed_model=embed_model)
    assert (loaded.similarity_top_k, loaded.concept_top_k) == (4, 3)
    assert ids(loaded.retrieve(QUERY)) == ids(tuned.retrieve(QUERY))
    assert len(ids(loaded.retrieve(QUERY))) == 4

    # a sidecar written before similarity_top_k: its top_k is the concept count
    sidecar.pop("similarity_top_k")
    (tmp_path / "cg" / "llama_index_conceptgraph.json").write_text(json.dumps(sidecar))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        older = ConceptGraphRetriever.from_persist_dir(tmp_path / "cg", embed_model=embed_model)
    assert (older.similarity_top_k, older.concept_top_k) == (None, 3)
