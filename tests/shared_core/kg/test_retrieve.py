"""The KG path: entities by exact name and similarity, their facts tied to their chunks."""

from __future__ import annotations

import numpy as np
import pytest

from shared_core import ConceptGraphIndex, HashingEmbedder
from shared_core.kg import FusedKGRetriever, KGRetriever, KnowledgeGraph, parse_extraction


def graph() -> KnowledgeGraph:
    kg = KnowledgeGraph()
    kg.add("a", parse_extraction(
        '("entity"<|>Ada Lovelace<|>person<|>wrote the first program)##'
        '("entity"<|>Charles Babbage<|>person<|>her collaborator)##'
        '("relationship"<|>Ada Lovelace<|>Charles Babbage<|>worked with<|>7)'))
    kg.add("b", parse_extraction(
        '("entity"<|>Charles Babbage<|>person<|>designed the Analytical Engine)##'
        '("entity"<|>Analytical Engine<|>work<|>a mechanical computer)##'
        '("relationship"<|>Charles Babbage<|>Analytical Engine<|>designed<|>9)'))
    return kg


def test_an_exact_name_in_the_query_ranks_first_whatever_the_similarity() -> None:
    retriever = KGRetriever(graph(), HashingEmbedder(), top_entities=2)
    assert [retriever.graph.entities[r].name for r in
            retriever.exact_matches("what did charles babbage design?")] == ["Charles Babbage"]
    hits = retriever.entities("What did Charles Babbage design?")
    assert hits[0].entity.name == "Charles Babbage" and hits[0].exact
    assert hits[0].score > 1.0 >= hits[1].score  # the exact bonus lifts it past any cosine
    assert len(hits) == 2


def test_facts_are_the_entitys_descriptions_then_its_relations_strongest_first() -> None:
    retriever = KGRetriever(graph(), HashingEmbedder(), top_entities=1)
    facts = retriever.facts("Charles Babbage")
    assert [(f.text, f.source_chunk_id) for f in facts] == [
        ("Charles Babbage (person): her collaborator", "a"),
        ("Charles Babbage (person): designed the Analytical Engine", "b"),
        ("Charles Babbage -> Analytical Engine: designed", "b"),  # strength 9
        ("Ada Lovelace -> Charles Babbage: worked with", "a"),    # strength 7
    ]


def test_an_empty_graph_retrieves_nothing_and_bad_arguments_are_clear() -> None:
    assert KGRetriever(KnowledgeGraph(), HashingEmbedder()).facts("anything") == []
    with pytest.raises(TypeError, match="KnowledgeGraph"):
        KGRetriever({}, HashingEmbedder())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_entities"):
        KGRetriever(graph(), HashingEmbedder(), top_entities=0)
    with pytest.raises(ValueError, match="query_vector has shape"):
        KGRetriever(graph(), HashingEmbedder(dim=8)).entities(
            "x", query_vector=np.array([1.0, 0.0]))


def test_fused_retrieval_votes_for_the_chunk_both_paths_found() -> None:
    index = ConceptGraphIndex.from_texts(
        ["Ada Lovelace wrote the first program.",
         "Charles Babbage designed the Analytical Engine.",
         "Tea is grown in Assam."], ids=["a", "b", "c"], embedder=HashingEmbedder())
    fused = FusedKGRetriever(index, graph(), budget=100, lam=0.5).fuse(
        "Who designed the Analytical Engine?")
    first = fused.items[0]
    assert (first.item.chunk_id, first.path) == ("b", "both")
    assert fused.tokens <= 100
    with pytest.raises(ValueError, match="use one embedder"):
        FusedKGRetriever(index, KGRetriever(graph(), HashingEmbedder(dim=8)))
