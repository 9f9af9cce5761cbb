"""ConceptGraphPostprocessor ranks as the retriever does: with units, and with the query's words.

The embedder is a stand-in for a small model that blurs names: a text's vector says
only which topics it mentions (sea, mountain, neither), so every similarity below is
a cosine between such vectors and can be worked out by hand.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_conceptgraph import (
    ConceptGraphPostprocessor,
    ConceptGraphRetriever,
    CoreEmbedding,
)
from shared_core import ConceptGraphConfig
from tests.shared_core.fakes import STORED_COSINE_TOL

from .conftest import CORPUS

SEA = {"ocean", "swims", "water"}
MOUNTAIN = {"mountain", "climbs"}


class TopicEmbedder:
    """(sea?, mountain?, neither) normalised: names and other words count for nothing."""

    model_id = "test-topics"
    dim = 3

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 3), dtype=np.float32)
        for row, text in enumerate(texts):
            words = set(re.findall(r"\w+", text.lower()))
            out[row] = [bool(words & SEA), bool(words & MOUNTAIN), 0.0]
            if not out[row].any():
                out[row, 2] = 1.0
        normed: np.ndarray = out / np.linalg.norm(out, axis=1, keepdims=True)
        return normed


def candidates(nodes: list[TextNode]) -> list[NodeWithScore]:
    return [NodeWithScore(node=node, score=0.5) for node in nodes]


def test_postprocessor_maps_sentence_units_back_to_their_nodes() -> None:
    nodes = [TextNode(id_="hills", text="Quixel climbs the mountain. Quixel rests on the summit."),
             TextNode(id_="reef", text="Yendor swims in the ocean near the mountain."),
             TextNode(id_="coast", text="Zorblat climbs the mountain. Zorblat swims in the ocean.")]
    retriever = ConceptGraphRetriever.from_defaults(
        nodes=nodes, embed_model=CoreEmbedding(TopicEmbedder()),
        config=ConceptGraphConfig(unit_tokens=8, ranking="paper"))
    # each sentence is its own unit. The query "water" is the sea vector (1, 0, 0); "ocean"
    # (and "swims") is in coast's 2nd sentence (1, 0, 0) and in reef (1, 1, 0)/√2, so its
    # vector is their mean, at cos 22.5° to the query: it is the first direct concept.
    # Its units by similarity: coast#u1 (1.0), reef#u0 (cos 45°); then zorblat brings
    # coast#u0, mountain hills#u0 and quixel hills#u1, all at 0.
    result = retriever.retrieve_result("water")
    assert [hit.id for hit in result.chunks] == [
        "coast#u1", "reef#u0", "coast#u0", "hills#u0", "hills#u1"]

    post = ConceptGraphPostprocessor(retriever=retriever)
    out = post.postprocess_nodes(candidates(nodes), query_str="water")
    # a node stands where its first unit does and scores as its best unit:
    # coast's best is u1 (1.0), not u0 (0.0)
    assert [n.node.node_id for n in out] == ["coast", "reef", "hills"]
    assert [n.score for n in out] == pytest.approx([1.0, 1 / math.sqrt(2), 0.0],
                                                  abs=STORED_COSINE_TOL)
    top = out[0].node.metadata
    assert top["chunk_id"] == "coast"  # the node's id, not the unit's
    assert top["score"] == pytest.approx(1.0)
    assert top["provenance"]["stage"] == "direct"
    assert top["provenance"]["concept_similarity"] == pytest.approx(
        math.cos(math.pi / 8), abs=STORED_COSINE_TOL)
    assert out[0].node.get_content() == nodes[2].get_content()  # the whole node, not a unit

    pruned = ConceptGraphPostprocessor(retriever=retriever, drop_unmatched=True, top_n=2)
    assert [n.node.node_id for n in pruned.postprocess_nodes(candidates(nodes),
                                                            query_str="water")] == \
        ["coast", "reef"]


def test_postprocessor_uses_the_query_words_as_the_retriever_does() -> None:
    nodes = [TextNode(id_="a", text="Zorblat swims in the ocean."),
             TextNode(id_="b", text="Quixel climbs the mountain.")]
    retriever = ConceptGraphRetriever.from_defaults(
        nodes=nodes, embed_model=CoreEmbedding(TopicEmbedder()),
        config=ConceptGraphConfig(ranking="paper", exact_match_seeds=True, top_k=1, hops=0))
    query = "Does Quixel live near water?"
    # by vector the query is all sea (it names "water"), so without its words the one
    # direct concept would be a sea concept of a; with them, "quixel" is an exact match
    # and seeds the search: only b, which contains it, is reached
    assert retriever.retrieve_result(query).direct_concepts == ("quixel",)
    assert [n.node.node_id for n in retriever.retrieve(query)] == ["b"]

    out = ConceptGraphPostprocessor(retriever=retriever).postprocess_nodes(
        candidates(nodes), query_str=query)
    assert [n.node.node_id for n in out] == ["b", "a"]
    assert out[0].node.metadata["provenance"]["concept"] == "quixel"
    assert out[1].score == 0.5  # not reached: left as it came


@pytest.mark.parametrize("query", ["Who discovered polonium?", "Where did Fermi build a reactor?",
                                   "Marie Curie Nobel Prize", "nuclear fission in Berlin"])
def test_postprocessor_orders_shared_nodes_as_the_retriever_does(
    embed_model: CoreEmbedding, query: str
) -> None:
    nodes = [TextNode(id_=key, text=text) for key, text, _ in CORPUS]
    retriever = ConceptGraphRetriever.from_defaults(nodes=nodes, embed_model=embed_model)
    expected = [n.node.node_id for n in retriever.retrieve(query)]
    out = ConceptGraphPostprocessor(retriever=retriever).postprocess_nodes(
        candidates(list(reversed(nodes))), query_str=query)
    assert [n.node.node_id for n in out] == expected


def test_postprocessor_rejects_an_empty_query_even_with_no_nodes(
    embed_model: CoreEmbedding,
) -> None:
    retriever = ConceptGraphRetriever.from_defaults(
        nodes=[TextNode(id_="a", text="Zorblat swims in the ocean.")], embed_model=embed_model)
    post = ConceptGraphPostprocessor(retriever=retriever)
    assert post.postprocess_nodes([], query_str="ocean") == []
    with pytest.raises(ValueError, match=r"query.*empty"):
        post.postprocess_nodes([], query_str="  ")
