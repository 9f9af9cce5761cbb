"""Incremental updates (insert, delete, delete by source document) and the relevance floor."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from llama_index_conceptgraph import ConceptGraphRetriever, CoreChunkSelector, CoreEmbedding
from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder

from .conftest import CORPUS, CountingEmbedding

QUERY = "Who discovered polonium?"


def sourced(key: str, text: str, document: str) -> TextNode:
    """A chunk of ``document``, as a splitter makes it: SOURCE points at the document."""
    return TextNode(id_=key, text=text, metadata={"key": key},
                    relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=document)})


# three chunks of one document about the Curies, one each of two other documents
CURIE_DOC = [sourced(key, text, "doc-curie") for key, text, _ in CORPUS[:3]]
OTHERS = [sourced("einstein", CORPUS[3][1], "doc-einstein"),
          sourced("bohr", CORPUS[4][1], "doc-bohr")]
NODES = CURIE_DOC + OTHERS


def ids(retriever: ConceptGraphRetriever, query: str = QUERY) -> list[str]:
    return [n.node.node_id for n in retriever.retrieve(query)]


def test_insert_then_delete_gives_the_retriever_that_never_held_them(
    embed_model: CoreEmbedding,
) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=OTHERS, embed_model=embed_model)
    retriever.insert_nodes(CURIE_DOC)
    assert ids(retriever)[0] == "curie-polonium"
    retriever.delete_nodes(["curie-polonium", "never-inserted"])  # unknown ids: skipped
    fresh = ConceptGraphRetriever.from_defaults(nodes=NODES[1:], embed_model=embed_model)
    assert retriever.index.chunk_ids == fresh.index.chunk_ids == ["bohr", "einstein", "pierre",
                                                                  "warsaw"]
    assert [(n.node.node_id, n.score) for n in retriever.retrieve(QUERY)] == \
        [(n.node.node_id, n.score) for n in fresh.retrieve(QUERY)]


def test_reinserting_a_node_embeds_nothing_and_a_changed_text_is_refused() -> None:
    embed = CountingEmbedding()
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed)
    embedded = len(embed.texts)
    retriever.insert_nodes(NODES[:2])
    assert len(embed.texts) == embedded
    with pytest.raises(ValueError, match="'pierre' already holds different text"):
        retriever.insert_nodes([TextNode(id_="pierre", text="Pierre Curie studied crystals.")])
    assert retriever.index.get("pierre").text == CORPUS[1][1]


def test_delete_ref_doc_removes_every_chunk_of_that_document(
    embed_model: CoreEmbedding, caplog: pytest.LogCaptureFixture
) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model)
    # a retrieved node keeps its document as its SOURCE, not as an extra metadata key
    top = retriever.retrieve(QUERY)[0].node
    assert (top.node_id, top.ref_doc_id) == ("curie-polonium", "doc-curie")
    assert top.metadata == {"key": "curie-polonium", "chunk_id": "curie-polonium",
                            "score": top.metadata["score"],
                            "provenance": top.metadata["provenance"]}
    retriever.delete_ref_doc("doc-curie")
    assert retriever.index.chunk_ids == ["bohr", "einstein"]
    with caplog.at_level(logging.WARNING, logger="conceptgraph"):
        retriever.delete_ref_doc("doc-curie")  # nothing left of it: said, not raised
    assert "ref_doc_id doc-curie not found, nothing deleted." in caplog.text
    assert retriever.index.chunk_ids == ["bohr", "einstein"]
    with pytest.raises(TypeError, match="ref_doc_id must be a str"):
        retriever.delete_ref_doc(["doc-bohr"])  # type: ignore[arg-type]


async def test_async_updates(embed_model: CoreEmbedding) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=OTHERS, embed_model=embed_model)
    await retriever.ainsert_nodes(CURIE_DOC)
    assert len(retriever.index) == 5
    await retriever.adelete_nodes(["bohr"])
    await retriever.adelete_ref_doc("doc-curie")
    assert retriever.index.chunk_ids == ["einstein"]


def test_delete_nodes_refuses_a_single_id_or_none(embed_model: CoreEmbedding) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model)
    with pytest.raises(TypeError, match="node_ids must be an iterable of str, not str"):
        retriever.delete_nodes("bohr")  # a str is a sequence of str: refused all the same
    with pytest.raises(ValueError, match="node_ids is None"):
        retriever.delete_nodes(None)  # type: ignore[arg-type]
    assert len(retriever.index) == 5


def test_a_node_passed_twice_is_one_chunk(embed_model: CoreEmbedding) -> None:
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES + NODES[:1],
                                                    embed_model=embed_model)
    assert len(retriever.index) == 5
    clash = TextNode(id_="bohr", text="Niels Bohr played football.")
    with pytest.raises(ValueError, match=r"nodes\[4\] and nodes\[5\] share id 'bohr' but "
                                         "differ in text"):
        ConceptGraphRetriever.from_defaults(nodes=[*NODES, clash], embed_model=embed_model)


def test_min_score_floors_retrieval_and_persists(embed_model: CoreEmbedding,
                                                 tmp_path: Path) -> None:
    index = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model).index
    plain = ConceptGraphRetriever(index, embed_model)
    floored = ConceptGraphRetriever(index, embed_model, min_score=0.3)
    assert plain.min_score is None and floored.min_score == 0.3
    # the floor drops exactly the nodes the core drops at that floor, keeping the order
    expected = [c.id for c in index.retrieve(QUERY, min_score=0.3).chunks]
    assert ids(floored) == expected == [i for i in ids(plain) if i in expected]
    assert len(expected) < len(ids(plain))
    assert ids(floored, "zebra saxophone quartet") == []
    floored.persist(tmp_path / "cg")
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "cg", embed_model=embed_model)
    assert loaded.min_score == 0.3 and ids(loaded) == expected
    with pytest.raises(ValueError, match="min_score"):
        ConceptGraphRetriever(index, min_score=1.5)


def test_selector_insert_and_delete_shape_later_selections(embed_model: CoreEmbedding) -> None:
    config = ConceptGraphConfig(select_by="chunks", theta_co=1)
    selector = CoreChunkSelector(kappa=0.5, embed_model=embed_model, config=config)
    selector.insert_nodes(OTHERS)  # in the graph, not selected: no selection yet
    assert len(selector.index) == 2
    with pytest.raises(RuntimeError, match="has not run yet"):
        _ = selector.selection
    kept = selector(CURIE_DOC)
    assert len(kept) == 2 and selector.report.chunks_total == 3  # ceil(0.5 * 3) of the batch
    selector.delete_ref_doc("doc-curie")
    selector.delete_nodes(["bohr", "never-inserted"])
    assert selector.index.chunk_ids == ["einstein"]
    # the graph is now the one that only ever held "einstein": the same selection follows
    again = selector(CURIE_DOC)
    reference = CoreChunkSelector(kappa=0.5, embed_model=embed_model, config=config)
    reference.insert_nodes(OTHERS[:1])
    assert [n.node_id for n in again] == [n.node_id for n in reference(CURIE_DOC)]


@pytest.mark.parametrize("method", ["concept", "knn"])
def test_selector_method_is_the_cores(embed_model: CoreEmbedding, method: str) -> None:
    config = ConceptGraphConfig(select_by="chunks", theta_co=1)
    nodes = [TextNode(id_=key, text=text) for key, text, _ in CORPUS]
    selector = CoreChunkSelector(kappa=0.3, method=method,  # type: ignore[arg-type]
                                 embed_model=embed_model, config=config)
    kept = [n.node_id for n in selector(nodes)]
    core = ConceptGraphIndex.from_texts([n.text for n in nodes], ids=[n.node_id for n in nodes],
                                        embedder=embed_model.embedder, config=config)
    expected = core.select(0.3, method=method).kept_ids  # type: ignore[arg-type]
    assert len(kept) == 3 and set(kept) == set(expected)  # ceil(0.3 * 10)
    assert selector.method == method


def test_selector_rejects_an_unknown_method() -> None:
    with pytest.raises(ValueError, match="method must be one of concept, coverage, knn, random"):
        CoreChunkSelector(method="pagerank", embed_model=CoreEmbedding(HashingEmbedder()))  # type: ignore[arg-type]
