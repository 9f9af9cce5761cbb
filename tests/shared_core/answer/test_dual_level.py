"""Dual-level retrieval: each key's candidates from its level's sources, budgeted, traced."""

from __future__ import annotations

import pytest

from shared_core import HashingEmbedder
from shared_core.answer import DualLevelRetriever, Evidence, QueryKeys
from shared_core.answer.dual_level import allocate, fill, relation_text
from shared_core.answer.evidence import context_block, unique
from shared_core.kg import KGRetriever
from tests.shared_core.answer.corpus import TEXTS, build_index, build_kg


def piece(chunk: str, tokens: int, text: str = "t") -> Evidence:
    return Evidence(chunk, text, tokens, 1.0, "concept", "k", "low")


def ids(taken: list[list[Evidence]]) -> list[list[str]]:
    return [[e.chunk_id for e in key] for key in taken]


def test_fill_skips_what_does_not_fit_and_takes_smaller_pieces_after() -> None:
    taken: list[Evidence] = []
    seen: set[tuple[str, str]] = set()
    fill(taken, [piece("1", 10), piece("2", 20), piece("3", 5)], 25, seen)
    assert [e.chunk_id for e in taken] == ["1", "3"]      # 10, (30 > 25), 15
    assert seen == {("1", "t"), ("3", "t")}


def test_every_key_gets_an_equal_share_first() -> None:
    # budget 60, 3 keys: shares of 20; key 1 could use 40 but others come first
    found = [[piece("a", 10), piece("b", 10), piece("c", 10), piece("d", 10)],
             [piece("e", 20)], [piece("f", 15)]]
    assert ids(allocate(found, 60, 40)) == [["a", "b"], ["e"], ["f"]]


def test_what_the_shares_leave_goes_to_the_first_keys_up_to_key_budget() -> None:
    # shares of min(30, 80 // 3) = 26: key 1 takes a, b (20); key 2 e, g (5 + 15; f would
    # make 30); key 3 nothing (45). 40 left: key 1 grows to its cap of 30 (+c); key 2 may
    # grow by 10, which f (25) does not fit; key 3 may take 30, which h (45) does not fit
    found = [[piece("a", 10), piece("b", 10), piece("c", 10), piece("d", 10)],
             [piece("e", 5), piece("f", 25), piece("g", 15)],
             [piece("h", 45)]]
    taken = allocate(found, 80, 30)
    assert ids(taken) == [["a", "b", "c"], ["e", "g"], []]
    assert [sum(e.tokens for e in key) for key in taken] == [30, 20, 0]


def test_a_piece_two_keys_find_counts_once_for_the_first() -> None:
    shared = piece("x", 10)
    taken = allocate([[shared, piece("a", 10)], [shared, piece("b", 10)]], 100, 50)
    assert ids(taken) == [["x", "a"], ["b"]]


def test_no_keys_no_context() -> None:
    assert allocate([], 100, 50) == []


def test_relation_text_names_both_ends() -> None:
    kg = build_kg()
    texts = sorted(relation_text(kg, r) for r in kg.relations)
    assert texts == ["Gustave Eiffel -> Eiffel Tower: designed the tower",
                     "Gustave Eiffel -> Statue of Liberty: built the frame",
                     "Tea -> Assam: is grown in"]


def test_each_level_reads_its_own_sources_alternating() -> None:
    retriever = DualLevelRetriever(build_index(), build_kg(), budget=100, key_budget=60)
    low = retriever.candidates("Eiffel Tower", "low")
    high = retriever.candidates("tea growing", "high")
    assert {e.source for e in low} == {"concept", "kg_entity"}
    assert {e.source for e in high} == {"concept_neighbourhood", "kg_relation"}
    assert low[0].source == "concept" and low[1].source == "kg_entity"
    assert high[0].source == "concept_neighbourhood" and high[1].source == "kg_relation"
    assert {e.level for e in low} == {"low"} and {e.level for e in high} == {"high"}
    # a KG relation is a fact tied to the chunk it was extracted from
    tea = next(e for e in high if e.source == "kg_relation")
    assert (tea.chunk_id, tea.text) == ("d", "Tea -> Assam: is grown in")
    # concept hits carry the stored chunk's own text and token count
    hit = next(e for e in low if e.source == "concept")
    assert hit.text == TEXTS[hit.chunk_id]


def test_retrieve_keeps_the_budgets_and_says_which_key_found_what() -> None:
    retriever = DualLevelRetriever(build_index(), build_kg(), budget=100, key_budget=60)
    keys = QueryKeys(("Eiffel Tower", "Assam"), ("tea growing",), "llm")
    result = retriever.retrieve(keys)
    assert [(k.key, k.level) for k in result.per_key] == [
        ("Eiffel Tower", "low"), ("Assam", "low"), ("tea growing", "high")]
    assert result.tokens <= 100
    assert all(k.tokens <= 60 for k in result.per_key)
    assert len(unique(result.evidence)) == len(result.evidence)
    for key in result.per_key:
        assert {(e.key, e.level) for e in key.evidence} <= {(key.key, key.level)}
    # the share is 100 // 3 = 33 a key: the first key's best piece (chunk a, 16 tokens)
    # and Assam's (chunk d's own text, 14 tokens) are both in
    assert result.per_key[0].evidence[0].chunk_id == "a"
    assert result.per_key[1].evidence[0].text == TEXTS["d"]
    as_dict = result.to_dict()
    assert as_dict["tokens"] == result.tokens and as_dict["keys"]["source"] == "llm"


def test_without_a_kg_only_the_concept_index_answers() -> None:
    retriever = DualLevelRetriever(build_index(), budget=200)
    result = retriever.retrieve(QueryKeys(("Assam",), ("monuments",), "graph"))
    assert {e.source for e in result.evidence} <= {"concept", "concept_neighbourhood"}
    assert result.per_key[0].evidence[0].chunk_id == "d"


def test_a_step_key_is_tagged_with_its_step_not_a_level() -> None:
    retriever = DualLevelRetriever(build_index(), build_kg())
    found = retriever.for_key("How tall is the Eiffel Tower?", budget=40, step=2)
    assert found and sum(e.tokens for e in found) <= 40
    assert {(e.step, e.level) for e in found} == {(2, None)}
    assert found[0].label().startswith("step 2, ")
    assert found[0].provenance()["step"] == 2
    block = context_block(found[:1])
    assert block.startswith(f"[1] (chunk {found[0].chunk_id}; step 2, ")


def test_bad_arguments_are_clear_errors() -> None:
    index = build_index()
    with pytest.raises(TypeError, match="ConceptGraphIndex"):
        DualLevelRetriever("index")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key_budget must be an int >= 1, got 0"):
        DualLevelRetriever(index, key_budget=0)
    with pytest.raises(ValueError, match="budget must be an int >= 1, got True"):
        DualLevelRetriever(index, budget=True)
    other = KGRetriever(build_kg(), HashingEmbedder(dim=64))
    with pytest.raises(ValueError, match="use one embedder"):
        DualLevelRetriever(index, other)


def test_a_relation_found_by_an_entity_key_names_its_ends_as_entities() -> None:
    # the KG's relation facts carry "source"/"target" entities; provenance's own
    # "source" (which retrieval source found the piece) must not be overwritten
    retriever = DualLevelRetriever(build_index(), build_kg())
    result = retriever.retrieve(QueryKeys(("Eiffel Tower",), (), "llm"))
    designed = [e for e in result.evidence if e.text.endswith("designed the tower")]
    assert len(designed) == 1
    provenance = designed[0].provenance()
    assert provenance["source"] == "kg_entity" and provenance["kind"] == "relation"
    assert (provenance["source_entity"], provenance["target_entity"]) \
        == ("gustave eiffel", "eiffel tower")
