"""KnowledgeGraph: merging by normalised name, deterministic conflicts, chunk provenance,
and a JSON round trip that refuses corrupt data with a message naming the field."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any

import pytest

from shared_core import KGFact
from shared_core.kg import (
    EntityRecord,
    KnowledgeGraph,
    Mention,
    ParsedExtraction,
    Relation,
    RelationRecord,
)


def extraction(*entities: tuple[str, str, str],
               relations: tuple[tuple[str, str, str, float], ...] = ()) -> ParsedExtraction:
    return ParsedExtraction(tuple(EntityRecord(*e) for e in entities),
                            tuple(RelationRecord(*r) for r in relations))


def sample() -> KnowledgeGraph:
    kg = KnowledgeGraph()
    kg.add("c1", extraction(("Ada Lovelace", "person", "Mathematician"),
                            ("Analytical Engine", "work", "Babbage's machine"),
                            relations=(("Ada Lovelace", "Analytical Engine", "Programmed it",
                                        9),)))
    kg.add("c2", extraction(('"ada  lovelace."', "person", "Wrote notes"),
                            ("Charles Babbage", "person", "Inventor"),
                            relations=(("Charles Babbage", "Ada Lovelace", "Worked with", 7),)))
    kg.add("c3", extraction(("ＡＤＡ ＬＯＶＥＬＡＣＥ", "organization", "")))
    return kg


def test_entities_merge_by_normalised_name_and_keep_every_chunk() -> None:
    kg = sample()
    assert [e.key for e in kg.entities] == ["ada lovelace", "analytical engine",
                                            "charles babbage"]
    ada = kg.entity("Ada LOVELACE")
    assert ada is not None
    assert ada.source_chunk_ids == ("c1", "c2", "c3")
    assert ada.descriptions == ("Mathematician", "Wrote notes")   # the empty one is not one
    assert ada.type == "person"                                     # 2 votes to 1
    assert [m.name for m in ada.mentions] == ["Ada Lovelace", '"ada  lovelace."',
                                              "ＡＤＡ ＬＯＶＥＬＡＣＥ"]
    assert ada.name == "Ada Lovelace"  # one vote each (quotes off); the first in sort order
    assert kg.chunk_ids == ("c1", "c2", "c3")
    assert len(kg) == 3 and kg.entity("Grace Hopper") is None


def test_relations_hold_keys_and_their_chunk() -> None:
    kg = sample()
    assert kg.relations == (
        Relation("ada lovelace", "analytical engine", "Programmed it", 9.0, "c1"),
        Relation("charles babbage", "ada lovelace", "Worked with", 7.0, "c2"))
    assert [r.source_chunk_id for r in kg.relations_of("ada lovelace")] == ["c1", "c2"]
    assert kg.relations_of("Charles Babbage") == (kg.relations[1],)
    assert kg.relations_of("nobody") == ()


def test_type_conflicts_resolve_by_votes_then_by_name() -> None:
    kg = KnowledgeGraph()
    kg.add("c1", extraction(("Mercury", "location", "")))
    kg.add("c2", extraction(("Mercury", "concept", "")))
    assert kg.entity("Mercury").type == "concept"  # type: ignore[union-attr]  # tie: by name
    kg.add("c3", extraction(("Mercury", "location", "")))
    assert kg.entity("Mercury").type == "location"  # type: ignore[union-attr]  # 2 to 1
    kg.add("c4", extraction(("mercury", "unknown", "")))
    kg.add("c5", extraction(("mercury", "unknown", "")))
    kg.add("c6", extraction(("MERCURY", "unknown", "")))
    mercury = kg.entity("Mercury")
    assert mercury is not None
    assert mercury.type == "location"   # unknown never outvotes a real type
    assert [m.name for m in mercury.mentions] == ["Mercury"] * 3 + ["mercury"] * 2 + ["MERCURY"]
    assert mercury.name == "Mercury"    # the most used spelling


def test_the_graph_is_the_same_whatever_the_order_of_votes() -> None:
    one, two = KnowledgeGraph(), KnowledgeGraph()
    for chunk, etype in [("a", "person"), ("b", "organization")]:
        one.add(chunk, extraction(("Acme", etype, "")))
    for chunk, etype in [("b", "organization"), ("a", "person")]:
        two.add(chunk, extraction(("Acme", etype, "")))
    assert one.entity("acme").type == two.entity("acme").type == "organization"  # type: ignore[union-attr]


def test_unknown_alone_is_the_type() -> None:
    kg = KnowledgeGraph()
    kg.add("c1", extraction(("X", "unknown", "")))
    assert kg.entity("x").type == "unknown"  # type: ignore[union-attr]


def test_exact_repeats_are_kept_once() -> None:
    kg = sample()
    before = kg.to_dict()
    kg.add("c1", extraction(("Ada Lovelace", "person", "Mathematician"),
                            ("Analytical Engine", "work", "Babbage's machine"),
                            relations=(("Ada Lovelace", "Analytical Engine", "Programmed it",
                                        9),)))
    assert kg.to_dict() == before


def test_a_relation_needs_its_entities_in_the_same_chunk() -> None:
    kg = KnowledgeGraph()
    bad = ParsedExtraction((EntityRecord("Ada", "person"),),
                           (RelationRecord("Ada", "Babbage", "", 1.0),))
    with pytest.raises(ValueError, match="'Babbage' is not among the chunk's entities"):
        kg.add("c1", bad)
    with pytest.raises(ValueError, match="chunk_id must not be empty"):
        kg.add(" ", extraction(("Ada", "person", "")))


def test_facts_carry_their_source_chunk() -> None:
    facts = sample().facts()
    assert facts[0] == KGFact("Ada Lovelace (person): Mathematician", "c1", 0.0,
                              {"kind": "entity", "entity": "ada lovelace"})
    assert KGFact("Charles Babbage -> Ada Lovelace: Worked with", "c2", 7.0,
                  {"kind": "relation", "source": "charles babbage",
                   "target": "ada lovelace"}) in facts
    assert len(facts) == 4 + 2  # four descriptions, two relations
    assert {f.source_chunk_id for f in facts} == {"c1", "c2"}


def test_json_round_trip() -> None:
    kg = sample()
    data = json.loads(json.dumps(kg.to_dict()))
    again = KnowledgeGraph.from_dict(data)
    assert again == kg
    assert again.to_dict() == kg.to_dict()
    assert again.entity("ada lovelace") == kg.entity("ada lovelace")
    assert KnowledgeGraph.from_dict(KnowledgeGraph().to_dict()) == KnowledgeGraph()


def set_path(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        target: Any = data
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return edit


def delete(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        target: Any = data
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]
    return edit


def duplicate_entity(data: dict[str, Any]) -> None:
    data["entities"].append(copy.deepcopy(data["entities"][0]))


def duplicate_relation(data: dict[str, Any]) -> None:
    data["relations"].append(copy.deepcopy(data["relations"][0]))


@pytest.mark.parametrize(("edit", "message"), [
    (set_path(("format",), "other"), "format is 'other'"),
    (set_path(("version",), 2), "newer than this conceptgraph reads"),
    (set_path(("version",), "1"), "version must be an int"),
    (delete(("relations",)), "knowledge graph: missing relations"),
    (set_path(("extra",), 1), "knowledge graph: unexpected extra"),
    (set_path(("entities",), {}), "entities must be a list"),
    (set_path(("entities", 0, "mentions"), []), "entities\\[0\\]: entity 'ada lovelace' has no "
                                                "mentions"),
    (set_path(("entities", 0, "mentions", 1, "name"), "Grace Hopper"),
     "entities\\[0\\]: mention 'Grace Hopper' normalises to 'grace hopper', not to its "
     "entity's key 'ada lovelace'"),
    (set_path(("entities", 0, "mentions", 0, "chunk_id"), ""),
     "entities\\[0\\].mentions\\[0\\]: a mention's chunk_id must not be empty"),
    (set_path(("entities", 0, "mentions", 0, "type"), None),
     "entities\\[0\\].mentions\\[0\\]: a mention's type must be a string"),
    (delete(("entities", 1, "mentions", 0, "description")),
     "entities\\[1\\].mentions\\[0\\]: missing description"),
    (duplicate_entity, "entities\\[3\\]: key 'ada lovelace' appears twice"),
    (set_path(("relations", 0, "strength"), math.nan), "relations\\[0\\]: a relation's "
                                                       "strength must be a finite number"),
    (set_path(("relations", 0, "strength"), True), "strength must be a finite number"),
    (set_path(("relations", 0, "target"), "ada lovelace"), "joins an entity to itself"),
    (set_path(("relations", 0, "target"), "grace hopper"),
     "relations\\[0\\]: entity 'grace hopper' has no mention from chunk 'c1'"),
    (set_path(("relations", 1, "chunk_id"), "c3"),
     "relations\\[1\\]: entity 'charles babbage' has no mention from chunk 'c3'"),
    (duplicate_relation, "relations\\[2\\]: the relation appears twice"),
])
def test_corrupt_data_is_refused_naming_the_field(
        edit: Callable[[dict[str, Any]], None], message: str) -> None:
    data = sample().to_dict()
    edit(data)
    with pytest.raises(ValueError, match=message):
        KnowledgeGraph.from_dict(data)


@pytest.mark.parametrize("data", [None, [], "graph"])
def test_data_that_is_not_an_object(data: object) -> None:
    with pytest.raises(ValueError, match="knowledge graph must be an object"):
        KnowledgeGraph.from_dict(data)


def test_a_mention_and_a_relation_check_themselves() -> None:
    with pytest.raises(ValueError, match="name must not be empty"):
        Mention("c1", "", "person")
    with pytest.raises(ValueError, match="source_chunk_id must not be empty"):
        Relation("a", "b", "", 1.0, "")
