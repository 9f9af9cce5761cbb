"""parse_extraction: every tolerance, every drop noted, and BadOutput for nothing usable."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.kg import (
    EntityRecord,
    ParsedExtraction,
    RelationRecord,
    merge_extractions,
    parse_extraction,
    parse_yes_no,
)
from shared_core.llm import BadOutput
from tests.shared_core.kg.support import entity, relation, reply

ALICE = EntityRecord("Alice", "person", "A chemist")
BOB = EntityRecord("Bob", "person", "Her colleague")
KNOWS = RelationRecord("Alice", "Bob", "They work together", 8.0)
CLEAN = reply(entity("Alice", "person", "A chemist"), entity("Bob", "person", "Her colleague"),
              relation("Alice", "Bob", "They work together", 8))


def test_a_well_formed_reply() -> None:
    assert parse_extraction(CLEAN) == ParsedExtraction((ALICE, BOB), (KNOWS,), ())


@pytest.mark.parametrize("text", [
    f"```\n{CLEAN}\n```",                                      # a code fence
    f"```text\n{CLEAN}\n```\n",                                # a fence with a language
    f"\n\n   {CLEAN}   \n\n",                                  # surrounding whitespace
    CLEAN.replace("<|COMPLETE|>", ""),                         # no completion marker
    CLEAN.replace("<|COMPLETE|>", "<|complete|>"),             # marker in lower case
    CLEAN.replace("##\n", "\n"),                               # new lines instead of ##
    CLEAN.replace("##\n", "##"),                               # ## with no new lines
    CLEAN.replace('("', '(').replace('"<|>', '<|>'),           # no quotes round the kind
    CLEAN.replace('"', "'"),                                   # single quotes
    CLEAN.replace("(", "").replace(")", ""),                   # no brackets at all
    CLEAN.replace('("', '(("').replace(")##", "))##"),         # doubled brackets
    CLEAN.replace('"entity"', '"ENTITY"').replace('"relationship"', '"Relationship"'),
    CLEAN.replace("<|>Alice<|>person", '<|>"Alice"<|>person'),  # a quoted name
    CLEAN.replace("<|>person<|>", "<|>Person<|>"),             # type case
    CLEAN.replace('"relationship"', '"relation"'),             # a synonym for the kind
])
def test_tolerated_variations_read_the_same(text: str) -> None:
    assert parse_extraction(text) == ParsedExtraction((ALICE, BOB), (KNOWS,), ())


def test_a_description_may_hold_brackets_and_span_lines() -> None:
    text = reply(entity("Acme", "organization", "A firm (founded 1990)"),
                 entity("Bob", "person", "Runs it,\n  and more"))
    parsed = parse_extraction(text)
    assert [e.description for e in parsed.entities] == ["A firm (founded 1990)",
                                                        "Runs it, and more"]
    assert parsed.problems == ()


def test_a_name_may_end_in_its_own_brackets() -> None:
    parsed = parse_extraction(reply(entity("Queen (band)", "organization", "A band")))
    assert parsed.entities[0].name == "Queen (band)"


def test_a_non_numeric_strength_becomes_one_and_is_noted() -> None:
    parsed = parse_extraction(CLEAN.replace("<|>8)", "<|>high)"))
    assert parsed.relations == (RelationRecord("Alice", "Bob", "They work together", 1.0),)
    assert parsed.problems == ("relationship 'Alice' -> 'Bob' has strength 'high', not a "
                               "number; used 1.0",)


@pytest.mark.parametrize("strength", ["nan", "inf", ""])
def test_a_non_finite_or_empty_strength_becomes_one(strength: str) -> None:
    parsed = parse_extraction(CLEAN.replace("<|>8)", f"<|>{strength})"))
    assert parsed.relations[0].strength == 1.0
    assert len(parsed.problems) == 1


def test_a_missing_strength_and_extra_fields_are_noted() -> None:
    text = reply(entity("Alice", "person", "A chemist"), entity("Bob", "person", "x"),
                 '("relationship"<|>Alice<|>Bob<|>Colleagues)',
                 '("entity"<|>Carol<|>person<|>Chemist<|>from Leeds)')
    parsed = parse_extraction(text)
    assert parsed.relations == (RelationRecord("Alice", "Bob", "Colleagues", 1.0),)
    assert EntityRecord("Carol", "person", "Chemist from Leeds") in parsed.entities
    assert parsed.problems == (
        "relationship 'Alice' -> 'Bob' has no strength; used 1.0",
        "entity 'Carol' has 1 extra field(s); joined into its description")


def test_an_entity_without_type_or_description() -> None:
    parsed = parse_extraction(reply('("entity"<|>Alice<|><|>A chemist)', '("entity"<|>Bob)'))
    assert parsed.entities == (EntityRecord("Alice", "unknown", "A chemist"),
                               EntityRecord("Bob", "unknown", ""))
    assert parsed.problems == ("entity 'Alice' has no type; typed 'unknown'",
                               "entity 'Bob' has no type; typed 'unknown'",
                               "entity 'Bob' has no description")


def test_an_undeclared_endpoint_is_declared_unknown_and_noted() -> None:
    parsed = parse_extraction(reply(entity("Alice", "person", "A chemist"),
                                    relation("Alice", "Carol", "Taught her", 4)))
    assert parsed.entities == (ALICE, EntityRecord("Carol", "unknown", ""))
    assert parsed.relations == (RelationRecord("Alice", "Carol", "Taught her", 4.0),)
    assert parsed.problems == ("relationship endpoint 'Carol' was not declared as an entity; "
                               "added with type 'unknown'",)


def test_a_known_endpoint_needs_no_placeholder() -> None:
    parsed = parse_extraction(reply(relation("alice", "Bob", "x", 2)), require_entities=False,
                              known={"alice", "bob"})
    assert parsed.entities == () and parsed.problems == ()
    assert parsed.undeclared() == ["alice", "Bob"]


def test_a_relation_to_itself_and_nameless_records_are_dropped_and_noted() -> None:
    text = reply(entity("Alice", "person", "A chemist"), entity('""', "person", "nobody"),
                 relation("Alice", "ALICE.", "Is herself", 3), relation("", "Alice", "x", 1))
    parsed = parse_extraction(text)
    assert parsed.entities == (ALICE,) and parsed.relations == ()
    assert parsed.problems == (
        """dropped an entity record with no name: '("entity"<|>""<|>person<|>nobody'""",
        "dropped a relationship from 'Alice' to itself",
        """dropped a relationship with an empty endpoint: '("relationship"<|><|>Alice<|>x<|>1'""")


def test_text_outside_records_is_ignored_and_noted() -> None:
    text = f"Here are the records:\n{CLEAN}\nI hope this helps."
    parsed = parse_extraction(text)
    assert parsed.entities == (ALICE, BOB)
    assert parsed.problems == ("ignored text that is not a record: 'Here are the records:'",
                               "ignored text after <|COMPLETE|>: 'I hope this helps.'")


def test_repeated_records_count_once() -> None:
    parsed = parse_extraction(reply(entity("Alice", "person", "A chemist"),
                                    entity("Alice", "person", "A chemist")))
    assert parsed.entities == (ALICE,) and parsed.problems == ()


def test_a_truncated_reply_loses_its_last_record_noted() -> None:
    full = reply(entity("Alice", "person", "A chemist"), entity("Bob", "person", "Her colleague"))
    cut = full[: full.index("Her col") + len("Her col")]  # inside Bob's description
    parsed = parse_extraction(cut, truncated=True)
    assert parsed.entities == (ALICE,)
    assert parsed.problems == ("dropped the last record, cut off at max_tokens: "
                               """'("entity"<|>Bob<|>person<|>Her col'""",)
    # unflagged, the same text keeps the partial record: nothing says it was cut
    assert parse_extraction(cut).entities[-1] == EntityRecord("Bob", "person", "Her col")


def test_a_truncated_flag_with_the_marker_drops_nothing() -> None:
    assert parse_extraction(CLEAN, truncated=True).entities == (ALICE, BOB)


@pytest.mark.parametrize(("text", "kind"), [
    ("I could not find any entities in this text.", "unparsable"),
    ("entity: Alice, person", "unparsable"),
    ("##\n##", "unparsable"),
    ('("entity"<|><|>person<|>no name)', "unparsable"),
    ("```\n```", "empty"),
    ("   ", "empty"),
    ("<|COMPLETE|>", "no_entities"),
    (reply(relation("Alice", "Bob", "x", 1)), "no_entities"),
])
def test_nothing_usable_is_bad_output(text: str, kind: str) -> None:
    with pytest.raises(BadOutput) as caught:
        parse_extraction(text)
    assert caught.value.kind == kind


def test_a_truncated_reply_with_one_record_is_unparsable() -> None:
    with pytest.raises(BadOutput, match="unparsable"):
        parse_extraction('("entity"<|>Alice<|>per', truncated=True)


def test_a_gleaning_reply_may_hold_no_entity() -> None:
    assert parse_extraction("<|COMPLETE|>", require_entities=False) == ParsedExtraction()
    with pytest.raises(BadOutput, match="unparsable"):
        parse_extraction("Nothing else.", require_entities=False)


def test_merging_rounds_drops_placeholders_a_later_round_declares() -> None:
    first = parse_extraction(reply(entity("Alice", "person", "A chemist"),
                                   relation("Alice", "Carol", "Taught her", 4)))
    second = parse_extraction(reply(entity("carol", "person", "A student"),
                                    entity("Alice", "person", "A chemist"),
                                    relation("Carol", "Dan", "Met", 2)),
                              known={"alice", "carol"})
    merged = merge_extractions([first, second], ["round 2 failed"])
    assert merged.entities == (ALICE, EntityRecord("carol", "person", "A student"),
                               EntityRecord("Dan", "unknown", ""))
    assert merged.relations == (RelationRecord("Alice", "Carol", "Taught her", 4.0),
                                RelationRecord("Carol", "Dan", "Met", 2.0))
    assert merged.undeclared() == []
    assert merged.problems == (
        "relationship endpoint 'Carol' was not declared as an entity; added with type "
        "'unknown'",
        "gleaning round 1: relationship endpoint 'Dan' was not declared as an entity; added "
        "with type 'unknown'",
        "round 2 failed")


@pytest.mark.parametrize(("text", "answer"), [
    ("YES", True), ("no", False), ("**Yes.** I missed two.", True), ("  No, none.", False),
    ("'NO'", False),
])
def test_the_judges_answer(text: str, answer: bool) -> None:
    assert parse_yes_no(text) is answer


@pytest.mark.parametrize("text", ["Maybe", "", "yesterday", '("entity"<|>Alice<|>person)'])
def test_an_answer_that_is_not_yes_or_no(text: str) -> None:
    with pytest.raises(BadOutput) as caught:
        parse_yes_no(text)
    assert caught.value.kind == "not_yes_no"


PIECES = st.sampled_from(['("entity"', '"relationship"', "RELATION", "<|>", "##", "(", ")",
                          '"', "'", "`", "\n", " ", "<|COMPLETE|>", "```", "Alice", "bob.",
                          "3", "nan", "-1e999", "（", "ＡＢ", "\x00", "é"])


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), st.lists(PIECES, max_size=40).map("".join)),
       truncated=st.booleans(), require=st.booleans())
def test_any_text_gives_records_or_bad_output_never_another_error(
        text: str, truncated: bool, require: bool) -> None:
    try:
        parsed = parse_extraction(text, truncated=truncated, require_entities=require)
    except BadOutput as bad:
        assert bad.kind in ("empty", "unparsable", "no_entities")
        return
    assert parsed.undeclared() == []  # a reply's relations always have their entities
    if require:
        assert parsed.entities
