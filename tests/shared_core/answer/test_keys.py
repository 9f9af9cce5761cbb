"""Dual-level keys: the LLM's JSON object, parsed tolerantly, and the graphs' keys without it."""

from __future__ import annotations

import pytest

from shared_core.answer import QueryKeys, extract_keys, graph_keys, parse_keys
from shared_core.answer.keys import KEYS_STAGE, clean_keys
from shared_core.kg import KGRetriever
from shared_core.llm import BadOutput, LLMRunner, RequestFailed, RetryPolicy, run_sync
from tests.shared_core.answer.corpus import build_index, build_kg
from tests.shared_core.llm.scripted import ScriptedChat


@pytest.mark.parametrize("reply", [
    '{"low_level_keywords": ["Eiffel Tower", "Paris"], "high_level_keywords": ["height"]}',
    'Sure! ```json\n{"low_level_keywords": ["Eiffel Tower", "Paris"],\n'
    ' "high_level_keywords": ["height"]}\n```',
    '{"Low-Level Keywords": " Eiffel Tower , Paris", "high level keywords": ["height", 7]}',
    '{"low": ["Eiffel  Tower", "eiffel tower", "Paris"], "high": ["**height**"]}',
])
def test_the_keys_object_is_read_through_markup_and_spellings(reply: str) -> None:
    keys = parse_keys(reply)
    assert keys == QueryKeys(("Eiffel Tower", "Paris"), ("height",), "llm")
    assert len(keys) == 3


def test_keys_are_capped_per_level() -> None:
    keys = parse_keys('{"low": ["a", "b", "c", "d"], "high": ["e", "f", "g"]}', max_keys=2)
    assert (keys.low_level, keys.high_level) == (("a", "b"), ("e", "f"))


@pytest.mark.parametrize("reply, kind", [
    ("Eiffel Tower, Paris", "unparsable"),
    ('{"low": ["a"', "unparsable"),
    ("[1, 2]", "unparsable"),
    ('{"low": [], "high": ["  "]}', "no_keys"),
    ('{"keywords": ["a"]}', "no_keys"),
])
def test_a_reply_without_keys_is_a_bad_output(reply: str, kind: str) -> None:
    with pytest.raises(BadOutput) as caught:
        parse_keys(reply)
    assert caught.value.kind == kind


def test_clean_keys_keeps_strings_once_in_order() -> None:
    assert clean_keys(["  Ada ", "ada", None, "", "Lovelace"], 5) == ("Ada", "Lovelace")
    assert clean_keys("x; y\nz", 5) == ("x", "y", "z")
    assert clean_keys(42, 5) == ()


def test_blank_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="non-blank"):
        QueryKeys((" ",), (), "llm")


def test_one_call_gives_both_lists_and_garbage_is_asked_again() -> None:
    chat = ScriptedChat(["no idea",
                         '{"low_level_keywords": ["Assam"], "high_level_keywords": ["tea"]}'])
    runner = LLMRunner(chat)
    keys = run_sync(extract_keys(runner, "Where is tea grown?"))
    assert keys == QueryKeys(("Assam",), ("tea",), "llm")
    usage = runner.ledger[KEYS_STAGE]
    assert (usage.calls, usage.retries, usage.bad_outputs) == (2, 1, {"unparsable": 1})


def test_keys_that_never_come_fail_after_the_output_attempts() -> None:
    runner = LLMRunner(ScriptedChat(["nothing", "still nothing"]),
                       retry=RetryPolicy(output_attempts=2))
    with pytest.raises(RequestFailed) as caught:
        run_sync(extract_keys(runner, "Where is tea grown?"))
    assert caught.value.kind == "unparsable"


def test_graph_keys_are_the_query_concepts_and_their_neighbours() -> None:
    # chunk d ("Tea is grown in Assam. Assam tea is strong.") is the only one with these
    # concepts: the query reaches grown, assam, tea; their one other neighbour is strong
    index = build_index()
    keys = graph_keys(index, "Where is tea grown?")
    assert keys.source == "graph"
    assert sorted(keys.low_level) == ["assam", "grown", "tea"]
    assert keys.high_level == ("strong",)


def test_graph_keys_put_named_kg_entities_first() -> None:
    index = build_index()
    kg = KGRetriever(build_kg(), index.embedder)
    keys = graph_keys(index, "Who designed the Eiffel Tower?", kg)
    assert keys.low_level[0] == "Eiffel Tower"
    # high-level keys are neighbours, never the query's own concepts
    assert not set(keys.high_level) & set(keys.low_level)
    concepts_a_c = {"330", "metres", "tall", "paris", "stands", "gustave", "frame",
                    "statue", "liberty"}
    assert set(keys.high_level) <= concepts_a_c
