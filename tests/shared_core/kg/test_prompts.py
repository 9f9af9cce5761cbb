"""The prompts: their size is what a call really sends, and their own example parses."""

from __future__ import annotations

import hashlib
import re

import pytest

from shared_core.kg import (
    BASE_CONTINUE_PROMPT,
    COMPLETION_MARKER,
    CONTINUE_PROMPT,
    DEFAULT_ENTITY_TYPES,
    JUDGE_PROMPT,
    extraction_messages,
    parse_extraction,
    prompt_hash,
    prompt_tokens,
    system_prompt,
)
from shared_core.kg.prompts import check_entity_types
from shared_core.llm import Message
from shared_core.llm.usage import counted_input_tokens, message_tokens
from shared_core.text import count_tokens


@pytest.mark.parametrize("text", ["Ada Lovelace wrote the first program.", "短い文。\n\n  x"])
def test_prompt_tokens_plus_the_chunk_is_the_calls_input(text: str) -> None:
    messages = extraction_messages(text)
    assert [m.role for m in messages] == ["system", "user"]
    assert messages[1].content == text  # verbatim: nothing around it to tokenise with it
    assert counted_input_tokens(messages) == prompt_tokens() + count_tokens(text)


def test_one_more_message_costs_its_tokens_plus_the_overhead() -> None:
    messages = extraction_messages("Some text.")
    longer = [*messages, Message("user", "Anything else?")]
    assert counted_input_tokens(longer) - counted_input_tokens(messages) == \
        message_tokens("Anything else?")


def test_the_prompt_lists_the_types_and_the_format() -> None:
    prompt = system_prompt(("Gene", "protein "))
    assert "Only entities of these types: gene, protein." in prompt
    assert '("entity"<|>NAME<|>TYPE<|>DESCRIPTION)' in prompt
    assert '("relationship"<|>SOURCE<|>TARGET<|>DESCRIPTION<|>STRENGTH)' in prompt
    assert COMPLETION_MARKER in prompt
    assert "person, organization, location, event, work, date, concept" in system_prompt()
    assert prompt_tokens(("gene",)) < prompt_tokens()


def test_the_worked_example_in_the_prompt_parses_cleanly() -> None:
    example = system_prompt().split("Output:\n", 1)[1]
    parsed = parse_extraction(example)
    assert parsed.problems == ()
    assert [e.name for e in parsed.entities] == [
        "Alexander Fleming", "St Mary's Hospital", "London", "penicillin", "1928"]
    assert {e.type for e in parsed.entities} <= set(DEFAULT_ENTITY_TYPES)
    assert [(r.source, r.target, r.strength) for r in parsed.relations] == [
        ("Alexander Fleming", "St Mary's Hospital", 8.0),
        ("St Mary's Hospital", "London", 6.0),
        ("Alexander Fleming", "penicillin", 9.0),
        ("Alexander Fleming", "1928", 5.0)]


def test_the_hash_follows_the_prompt() -> None:
    assert re.fullmatch(r"[0-9a-f]{16}", prompt_hash())
    assert prompt_hash() == prompt_hash(list(DEFAULT_ENTITY_TYPES))
    assert prompt_hash() == prompt_hash([t.upper() for t in DEFAULT_ENTITY_TYPES])
    assert prompt_hash(("person",)) != prompt_hash()


def test_the_hash_of_trial_or_no_gleaning_is_the_one_stores_had_before_base_mode() -> None:
    before = hashlib.sha256(b"".join(p.encode() + b"\x00" for p in (
        system_prompt(), JUDGE_PROMPT, CONTINUE_PROMPT))).hexdigest()[:16]
    assert prompt_hash() == prompt_hash(gleaning_mode=None) == before
    assert prompt_hash(gleaning_mode="trial") == before
    assert prompt_hash(gleaning_mode="base") != before  # base sends another prompt
    with pytest.raises(ValueError, match="gleaning_mode must be one of 'trial', 'base'"):
        prompt_hash(gleaning_mode="greedy")  # type: ignore[arg-type]


def test_the_base_continue_prompt_allows_finding_nothing() -> None:
    assert "may be missing" in BASE_CONTINUE_PROMPT
    assert parse_extraction(COMPLETION_MARKER, require_entities=False).entities == ()


@pytest.mark.parametrize(("types", "error", "match"), [
    ("person", TypeError, "not one str"),
    ((), ValueError, "at least one"),
    (("person", " "), ValueError, "non-empty"),
    (("person", "Person"), ValueError, "twice"),
    (("a<|>b",), ValueError, "record syntax"),
    (("a, b",), ValueError, "record syntax"),
    ((1,), TypeError, "must be str"),
])
def test_bad_entity_types_are_refused(types: object, error: type[Exception],
                                      match: str) -> None:
    with pytest.raises(error, match=match):
        check_entity_types(types)  # type: ignore[arg-type]
