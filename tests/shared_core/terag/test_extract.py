"""TERAG's LLM extraction: batching, the plain-text parser, normalisation, failures, JSON.

The LLM is ScriptedChat (tests/shared_core/llm/scripted.py): it books tokens with
tiktoken, so ledger figures are worked out from the prompts and replies with the
same counting functions.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from shared_core.llm import (
    BadOutput,
    Completion,
    LLMRunner,
    Message,
    RetryPolicy,
    TokenLedger,
)
from shared_core.llm.usage import counted_input_tokens
from shared_core.terag import (
    BatchParser,
    Concept,
    ExtractionFailure,
    TeragExtraction,
    TeragExtractionError,
    extract,
    extraction_messages,
    normalise_name,
    parse_batch_reply,
    parse_query_entities,
    token_table,
)
from shared_core.text import count_tokens
from tests.shared_core.llm.scripted import RecordedSleep, ScriptedChat
from tests.shared_core.terag.fakes import batch_texts, well_formed

TEXTS = [f"Passage number {i} is about topic {i}." for i in range(7)]
IDS = [f"p{i}" for i in range(7)]
ANSWERS = {t: (f"Topic {i}, Shared Place", f"Theme {i}") for i, t in enumerate(TEXTS)}


def runner_for(script: object, *, output_attempts: int = 2, attempts: int = 4) -> LLMRunner:
    return LLMRunner(ScriptedChat(script), ledger=TokenLedger(),  # type: ignore[arg-type]
                     retry=RetryPolicy(attempts=attempts, output_attempts=output_attempts,
                                       jitter=False),
                     concurrency=1, sleep=RecordedSleep())


def e(name: str) -> Concept:
    return Concept("entity", name)


def c(name: str) -> Concept:
    return Concept("concept", name)


# ------------------------------------------------------------------------- batching
@pytest.mark.parametrize(("per_call", "calls"), [(3, 3), (5, 2), (7, 1), (1, 7), (10, 1)])
def test_n_passages_make_ceil_n_over_k_calls_each_text_in_its_own_call(per_call: int,
                                                                        calls: int) -> None:
    runner = runner_for(well_formed(ANSWERS))
    out = extract(runner, IDS, TEXTS, passages_per_call=per_call)
    chat = runner.model
    assert isinstance(chat, ScriptedChat)
    assert len(chat.calls) == calls == runner.ledger["ner_concepts"].calls
    # consecutive passages, in order, each in exactly one call
    assert [batch_texts(m) for m in chat.calls] == [
        TEXTS[s:s + per_call] for s in range(0, len(TEXTS), per_call)]
    assert out.passage_ids == tuple(IDS)
    assert out.concepts[3] == (e("topic 3"), e("shared place"), c("theme 3"))
    assert out.failures == ()
    assert out.n_concepts == 7 + 1 + 7  # "shared place" is one node for all passages


def test_separate_mode_asks_each_kind_with_its_own_prompt() -> None:
    runner = runner_for(well_formed(ANSWERS))
    out = extract(runner, IDS, TEXTS, passages_per_call=3, mode="separate")
    assert (runner.ledger["ner"].calls, runner.ledger["concepts"].calls) == (3, 3)
    assert "ner_concepts" not in runner.ledger
    assert out.concepts[0] == (e("topic 0"), e("shared place"), c("theme 0"))
    chat = runner.model
    assert isinstance(chat, ScriptedChat)
    ner_prompt = chat.calls[0][-1].content
    assert "ENTITIES are" in ner_prompt and "CONCEPTS" not in ner_prompt


def test_ledger_tokens_are_the_tiktoken_counts_of_prompts_and_replies() -> None:
    replies = ["Passage 1:\nENTITIES: Topic 0\nCONCEPTS: Theme\n\n"
               "Passage 2:\nENTITIES: Topic 1\nCONCEPTS: Theme",
               "Passage 1:\nENTITIES: Topic 2\nCONCEPTS:"]
    runner = runner_for(replies)
    extract(runner, IDS[:3], TEXTS[:3], passages_per_call=2)
    prompts = [extraction_messages(TEXTS[:2]), extraction_messages(TEXTS[2:3])]
    expected_in = sum(counted_input_tokens(m) for m in prompts)
    expected_out = sum(count_tokens(r) for r in replies)
    usage = runner.ledger["ner_concepts"]
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (2, expected_in,
                                                                      expected_out)
    table = token_table(runner.ledger)
    assert [(r.stage, r.input_tokens, r.output_tokens, r.total_tokens) for r in table.rows] == [
        ("ner_concepts", expected_in, expected_out, expected_in + expected_out)]
    assert table.total.total_tokens == expected_in + expected_out
    assert str(table).splitlines()[0].split() == ["stage", "input", "output", "total"]
    assert f"{expected_in:,}" in str(table).splitlines()[-1]


def test_max_tokens_scales_with_the_batch() -> None:
    runner = runner_for(well_formed(ANSWERS))
    extract(runner, IDS[:5], TEXTS[:5], passages_per_call=3, max_tokens_per_passage=50)
    chat = runner.model
    assert isinstance(chat, ScriptedChat)
    assert [s[0] for s in chat.settings] == [150, 100]


def test_bad_arguments() -> None:
    runner = runner_for(well_formed(ANSWERS))
    with pytest.raises(ValueError, match="passages_per_call"):
        extract(runner, IDS, TEXTS, passages_per_call=0)
    with pytest.raises(ValueError, match="mode"):
        extract(runner, IDS, TEXTS, mode="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distinct"):
        extract(runner, ["a", "a"], TEXTS[:2])
    with pytest.raises(ValueError, match="lengths differ"):
        extract(runner, IDS[:2], TEXTS[:3])
    with pytest.raises(ValueError, match="empty or whitespace"):
        extract(runner, ["a"], ["  "])


# --------------------------------------------------------------------------- parser
def test_parser_well_formed_and_markdown_variants() -> None:
    reply = ("Here are the results:\n"
             "**Passage 1:**\n"
             "ENTITIES: Marie Curie, Paris, 1903\n"
             "CONCEPTS: Scientist Biography\n\n"
             "=== Passage 2 ===\n"
             "**ENTITIES:** \"Danube\"; Vienna\n"
             "CONCEPTS:\n"
             "- European River\n"
             "- Geography\n"
             "I hope this helps!")
    assert parse_batch_reply(reply, 2) == {
        0: (e("marie curie"), e("paris"), e("1903"), c("scientist biography")),
        1: (e("danube"), e("vienna"), c("european river"), c("geography")),
    }


def test_parser_single_passage_may_omit_its_header_and_none_is_empty() -> None:
    assert parse_batch_reply("ENTITIES: None\nCONCEPTS: Geography", 1) == {
        0: (c("geography"),)}
    assert parse_batch_reply("Passage 1: ENTITIES: Paris\nCONCEPTS: n/a", 1) == {
        0: (e("paris"),)}


def test_parser_keeps_only_complete_blocks() -> None:
    # passage 2 has no CONCEPTS line: incomplete in joint mode, complete for NER alone
    reply = "Passage 1:\nENTITIES: A1\nCONCEPTS: B1\nPassage 2:\nENTITIES: A2"
    assert list(parse_batch_reply(reply, 2)) == [0]
    assert parse_batch_reply(reply, 2, ("entity",)) == {0: (e("a1"),), 1: (e("a2"),)}


@pytest.mark.parametrize(("reply", "kind"), [
    ("I'm sorry, I cannot help with that.", "unparsable"),
    ("Passage 1:\nPassage 2:", "unparsable"),
    ("Passage 3:\nENTITIES: X\nCONCEPTS: Y", "unknown_passage"),
    ("Passage 1:\nENTITIES: X\nCONCEPTS: Y\nPassage 1:\nENTITIES: X\nCONCEPTS: Y",
     "duplicate_passage"),
])
def test_parser_rejects_garbage_and_wrong_numbers(reply: str, kind: str) -> None:
    with pytest.raises(BadOutput) as caught:
        parse_batch_reply(reply, 2)
    assert caught.value.kind == kind


def completion(text: str, finish: str = "stop") -> Completion:
    return Completion(text, 10, 5, finish_reason=finish)


def test_batch_parser_missing_passage_and_truncation() -> None:
    parse = BatchParser(3, ("entity", "concept"))
    with pytest.raises(BadOutput) as caught:
        parse(completion("Passage 1:\nENTITIES: A\nCONCEPTS: B\n\n"
                         "Passage 3:\nENTITIES: C\nCONCEPTS: D"))
    assert caught.value.kind == "missing_passage" and "[2]" in caught.value.detail
    assert sorted(parse.found) == [0, 2]
    # a cut reply: its last block may be cut mid-list, so only passage 1's is kept
    cut = BatchParser(2, ("entity", "concept"))
    with pytest.raises(BadOutput) as caught:
        cut(completion("Passage 1:\nENTITIES: A\nCONCEPTS: B\nPassage 2:\nENTITIES: Mar",
                       finish="length"))
    assert caught.value.kind == "truncated"
    assert cut.found == {0: (e("a"), c("b"))}
    with pytest.raises(BadOutput, match="empty"):
        cut(completion("  "))


def test_query_ner_parser() -> None:
    assert parse_query_entities(completion("ENTITIES: Ada Lovelace, Lord Byron")) == (
        "ada lovelace", "lord byron")
    assert parse_query_entities(completion(" Ada Lovelace, ada lovelace ")) == (
        "ada lovelace",)  # the bare list after the prompt's "ENTITIES:"
    assert parse_query_entities(completion("ENTITIES: none")) == ()
    with pytest.raises(BadOutput, match="unparsable"):
        parse_query_entities(completion("Sure!\nThe question mentions Ada."))
    with pytest.raises(BadOutput, match="truncated"):
        parse_query_entities(completion("ENTITIES: Ada Lov", finish="length"))


# -------------------------------------------------------------- normalisation, dedupe
@pytest.mark.parametrize(("raw", "name"), [
    ("  Marie   Curie ", "marie curie"),
    ("“Nobel Prize”.", "nobel prize"),
    ("**Paris**", "paris"),
    ("1. Black Sea", "black sea"),
    ("• Vienna", "vienna"),
    ("ＡＢＣ Corp", "abc corp"),  # NFKC folds full-width letters
    ("U.S.", "u.s"),
    (".NET", ".net"),
    ("Straße", "strasse"),  # case-folded
    ("1903", "1903"),
    ("N/A", None), ("none", None), ("---", None), ("", None), ("x" * 101, None),
])
def test_normalise_name(raw: str, name: str | None) -> None:
    assert normalise_name(raw) == name


def test_dedupe_by_type_and_name() -> None:
    # the same name twice per kind is one concept; as entity and as concept, two (Eq. 2)
    reply = "ENTITIES: Paris, paris, PARIS , Seine\nCONCEPTS: Paris, Geography, geography."
    assert parse_batch_reply(reply, 1) == {0: (e("paris"), e("seine"), c("paris"),
                                               c("geography"))}


# ------------------------------------------------------------ failures and retries
def test_a_passage_missing_once_is_asked_again_and_merged() -> None:
    replies = ["Passage 1:\nENTITIES: A\nCONCEPTS: B",
               "Passage 2:\nENTITIES: C\nCONCEPTS: D"]  # the retry gives the missing one
    runner = runner_for(replies)
    out = extract(runner, IDS[:2], TEXTS[:2])
    assert out.concepts == ((e("a"), c("b")), (e("c"), c("d")))
    usage = runner.ledger["ner_concepts"]
    assert (usage.calls, usage.retries, usage.bad_outputs) == (2, 1, {"missing_passage": 1})


def test_what_is_still_missing_is_recorded_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    replies = ["Passage 1:\nENTITIES: A\nCONCEPTS: B"] * 2 + ["Passage 1:\nENTITIES: E\n"
                                                              "CONCEPTS: F"]
    runner = runner_for(replies)
    with caplog.at_level(logging.WARNING, logger="shared_core.terag.extract"):
        out = extract(runner, IDS[:3], TEXTS[:3], passages_per_call=2)
    assert out.concepts == ((e("a"), c("b")), (), (e("e"), c("f")))
    assert out.failures == (ExtractionFailure("p1", "ner_concepts", "missing_passage"),)
    assert out.failure_counts() == {"missing_passage": 1}
    assert runner.ledger["ner_concepts"].failures == 1
    assert "1 (passage, stage) pair(s)" in caplog.text and "missing_passage 1" in caplog.text


def test_a_transport_failure_fails_its_whole_batch_only() -> None:
    good = "Passage 1:\nENTITIES: A\nCONCEPTS: B\nPassage 2:\nENTITIES: C\nCONCEPTS: D"
    runner = runner_for([good, TimeoutError(), TimeoutError()], attempts=2)
    out = extract(runner, IDS[:4], TEXTS[:4], passages_per_call=2)
    assert out.concepts[:2] == ((e("a"), c("b")), (e("c"), c("d")))
    assert out.concepts[2:] == ((), ())
    assert out.failures == (ExtractionFailure("p2", "ner_concepts", "timeout"),
                            ExtractionFailure("p3", "ner_concepts", "timeout"))


def test_a_run_with_no_concept_at_all_stops_with_its_partial_result() -> None:
    nothing = "Passage 1:\nENTITIES: none\nCONCEPTS:\nPassage 2:\nENTITIES:\nCONCEPTS: n/a"
    with pytest.raises(TeragExtractionError, match="no concept at all") as caught:
        extract(runner_for([nothing]), IDS[:2], TEXTS[:2])
    assert caught.value.partial.concepts == ((), ())
    assert caught.value.partial.failures == ()
    with pytest.raises(TeragExtractionError, match="unparsable") as caught:
        extract(runner_for(["garbage"] * 2), IDS[:2], TEXTS[:2])
    assert caught.value.partial.failure_counts() == {"unparsable": 2}


def test_resume_asks_only_for_what_is_missing() -> None:
    first = extract(runner_for(["Passage 1:\nENTITIES: A\nCONCEPTS: B"] * 2), IDS[:2],
                    TEXTS[:2])
    assert [f.passage_id for f in first.failures] == ["p1"]
    runner = runner_for(["Passage 1:\nENTITIES: C\nCONCEPTS: D"])
    second = extract(runner, IDS[:2], TEXTS[:2], resume=first)
    chat = runner.model
    assert isinstance(chat, ScriptedChat)
    assert [batch_texts(m) for m in chat.calls] == [[TEXTS[1]]]
    assert second.concepts == ((e("a"), c("b")), (e("c"), c("d")))
    assert second.failures == ()


# ---------------------------------------------------------------------------- JSON
def sample() -> TeragExtraction:
    return TeragExtraction(("p0", "p1"), ((e("paris"), c("paris")), ()),
                           (ExtractionFailure("p1", "ner_concepts", "truncated"),))


def test_json_round_trip(tmp_path: Path) -> None:
    x = sample()
    assert TeragExtraction.from_dict(json.loads(json.dumps(x.to_dict()))) == x
    x.save(tmp_path / "x.json")
    assert TeragExtraction.load(tmp_path / "x.json") == x
    assert not (tmp_path / "x.json.tmp").exists()


def corrupt(path: str, value: object) -> dict[str, object]:
    data = sample().to_dict()
    target: dict[str, object] | list[object] = data
    *parts, last = path.split(".")
    for p in parts:
        target = target[int(p)] if isinstance(target, list) else target[p]  # type: ignore[assignment]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return data


@pytest.mark.parametrize(("data", "message"), [
    ([], "JSON object"),
    (corrupt("format", "other"), "not a terag-extraction"),
    (corrupt("version", 2), "not a terag-extraction"),
    (corrupt("passages", {}), "passages must be a list"),
    (corrupt("passages.0", {"id": "p0"}), r"passages\[0\] must be an object"),
    (corrupt("passages.0.concepts.0", ["person", "paris"]), r"passages\[0\].concepts\[0\]"),
    (corrupt("passages.0.concepts.0", ["entity"]), r"passages\[0\].concepts\[0\]"),
    (corrupt("passages.0.concepts.0", ["entity", "Paris"]), "not normalised"),
    (corrupt("passages.0.concepts.1", ["entity", "paris"]), "twice"),
    (corrupt("passages.1.id", "p0"), "appears twice"),
    (corrupt("passages.1.id", ""), "non-empty str"),
    (corrupt("failures.0.passage_id", "p9"), "names no passage"),
    (corrupt("failures.0.stage", "glean"), "unknown stage"),
    (corrupt("failures.0", {"passage_id": "p1"}), r"failures\[0\]"),
])
def test_corrupt_data_is_refused_naming_the_field(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TeragExtraction.from_dict(data)


def test_prompt_structure() -> None:
    messages = extraction_messages(["First text.", "Second text."])
    assert [m.role for m in messages] == ["system", "user"]
    user = messages[1].content
    # definitions, a worked example (input and output), the instruction, the batch
    assert user.index("ENTITIES are") < user.index("Example input:") < user.index(
        "Example output:") < user.index("Now answer for the 2 passage(s)")
    assert user.endswith("=== Passage 1 ===\nFirst text.\n\n=== Passage 2 ===\nSecond text.")
    assert isinstance(messages[0], Message)
    # the example output parses with our own parser: the format we ask for is the one we read
    example = user.split("Example output:\n")[1].split("\n\nNow answer")[0]
    assert len(parse_batch_reply(example, 2)) == 2
