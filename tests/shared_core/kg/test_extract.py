"""extract_kg and aextract_kg: gleaning in both modes, failures, the stop on a dead batch,
the ledger to the token, and the estimate beside what was spent."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from shared_core.kg import (
    BASE_CONTINUE_PROMPT,
    CONTINUE_PROMPT,
    JUDGE_PROMPT,
    EntityRecord,
    ExtractionConfig,
    ExtractionStopped,
    KGStore,
    aextract_kg,
    estimate_extraction,
    extract_kg,
    extraction_messages,
    extraction_usage,
    prompt_tokens,
)
from shared_core.llm import (
    Completion,
    EstimateCheck,
    LLMError,
    Message,
    ModelPrice,
    TokenLedger,
)
from shared_core.llm.usage import TOKENS_PER_MESSAGE, counted_input_tokens, message_tokens
from shared_core.text import count_tokens
from tests.shared_core.kg.support import (
    asked_chunks,
    by_chunk,
    chunk_number,
    chunk_text,
    chunks,
    entity,
    relation,
    reply,
    reply_for_chunk,
    runner,
)
from tests.shared_core.llm.scripted import ScriptedChat

FIRST = reply(entity("Alice", "person", "A chemist"), entity("Bob", "person", "Her colleague"),
              relation("Alice", "Bob", "They work together", 8))
MORE = reply(entity("Carol", "person", "Their student"),
             relation("Carol", "Alice", "Studies with", 6))
EVEN_MORE = reply(entity("Dave", "person", "Carol's brother"),
                  relation("Dave", "Carol", "Siblings", 9))
TEXT = "Alice and Bob work together; Carol studies with Alice; Dave is Carol's brother."
BASE = ExtractionConfig(max_gleanings=3, gleaning_mode="base")


def test_the_ledger_holds_the_tokens_of_every_call(tmp_path: Path) -> None:
    model = ScriptedChat(by_chunk)
    result = extract_kg(chunks(3), runner(model), KGStore(tmp_path))
    usage = result.run_ledger["extract"]
    assert usage.calls == 3 and usage.calls_counted_locally == 3
    assert usage.input_tokens == sum(counted_input_tokens(extraction_messages(chunk_text(i)))
                                     for i in (1, 2, 3))
    assert usage.input_tokens == 3 * prompt_tokens() + sum(count_tokens(chunk_text(i))
                                                           for i in (1, 2, 3))
    assert usage.output_tokens == sum(count_tokens(reply_for_chunk(i)) for i in (1, 2, 3))
    assert (usage.retries, usage.failures, usage.bad_outputs) == (0, 0, {})
    assert "glean" not in result.run_ledger
    assert result.ledger.to_dict() == result.run_ledger.to_dict()
    assert result.ledger.to_dict() == TokenLedger.load(tmp_path / "ledger.json").to_dict()
    assert [m for call in model.calls for m in call] == [
        m for i in (1, 2, 3) for m in extraction_messages(chunk_text(i))]
    assert model.settings == [(4096, 0.0)] * 3


def test_the_run_ledger_is_only_this_runs_spend_on_a_shared_runner(tmp_path: Path) -> None:
    shared = runner(ScriptedChat(by_chunk))
    first = extract_kg(chunks(2), shared, KGStore(tmp_path / "a"))
    second = extract_kg(chunks(2), shared, KGStore(tmp_path / "b"))
    assert second.run_ledger.to_dict() == first.run_ledger.to_dict()
    assert shared.ledger["extract"].calls == 4


def test_trial_gleaning_asks_yes_or_no_then_for_the_missing_records(tmp_path: Path) -> None:
    model = ScriptedChat([FIRST, "YES", MORE, "NO"])
    result = extract_kg([("c1", "Alice and Bob work together; Carol studies with Alice.")],
                        runner(model), KGStore(tmp_path),
                        config=ExtractionConfig(max_gleanings=3, gleaning_mode="trial"))
    first = extraction_messages("Alice and Bob work together; Carol studies with Alice.")
    judge = [*first, Message("assistant", FIRST), Message("user", JUDGE_PROMPT)]
    more = [*judge, Message("assistant", "YES"), Message("user", CONTINUE_PROMPT)]
    again = [*more, Message("assistant", MORE), Message("user", JUDGE_PROMPT)]
    assert model.calls == [tuple(first), tuple(judge), tuple(more), tuple(again)]
    assert model.settings == [(4096, 0.0), (16, 0.0), (4096, 0.0), (16, 0.0)]

    assert [e.name for e in result.graph.entities] == ["Alice", "Bob", "Carol"]
    assert [(r.source, r.target) for r in result.graph.relations] == [
        ("alice", "bob"), ("carol", "alice")]
    assert result.problems == {}  # Carol -> Alice needs no placeholder: Alice is known
    extract, glean = result.run_ledger["extract"], result.run_ledger["glean"]
    assert (extract.calls, glean.calls) == (1, 3)
    assert extract.input_tokens == counted_input_tokens(first)
    assert extract.output_tokens == count_tokens(FIRST)
    assert glean.input_tokens == sum(counted_input_tokens(m) for m in (judge, more, again))
    assert glean.output_tokens == count_tokens("YES") + count_tokens(MORE) + count_tokens("NO")
    assert extraction_usage(result.run_ledger).calls == 4


def test_base_gleaning_asks_for_more_first_then_stops_on_no(tmp_path: Path) -> None:
    model = ScriptedChat([FIRST, MORE, "NO"])
    result = extract_kg([("c1", TEXT)], runner(model), KGStore(tmp_path), config=BASE)
    first = extraction_messages(TEXT)
    more = [*first, Message("assistant", FIRST), Message("user", BASE_CONTINUE_PROMPT)]
    judge = [*more, Message("assistant", MORE), Message("user", JUDGE_PROMPT)]
    assert model.calls == [tuple(first), tuple(more), tuple(judge)]  # and no fourth call
    assert model.settings == [(4096, 0.0), (4096, 0.0), (16, 0.0)]

    assert [e.name for e in result.graph.entities] == ["Alice", "Bob", "Carol"]
    assert [(r.source, r.target) for r in result.graph.relations] == [
        ("alice", "bob"), ("carol", "alice")]
    assert result.problems == {}
    extract, glean = result.run_ledger["extract"], result.run_ledger["glean"]
    assert (extract.calls, glean.calls) == (1, 2)
    assert extract.input_tokens == counted_input_tokens(first)
    assert extract.output_tokens == count_tokens(FIRST)
    assert glean.input_tokens == counted_input_tokens(more) + counted_input_tokens(judge)
    assert glean.output_tokens == count_tokens(MORE) + count_tokens("NO")
    assert result.ledger.to_dict() == TokenLedger.load(tmp_path / "ledger.json").to_dict()


def test_base_gleaning_runs_to_max_gleanings_without_a_last_question(tmp_path: Path) -> None:
    model = ScriptedChat([FIRST, MORE, "YES", EVEN_MORE])
    result = extract_kg([("c1", TEXT)], runner(model), KGStore(tmp_path),
                        config=ExtractionConfig(max_gleanings=2))  # base is the default
    first = extraction_messages(TEXT)
    more = [*first, Message("assistant", FIRST), Message("user", BASE_CONTINUE_PROMPT)]
    judge = [*more, Message("assistant", MORE), Message("user", JUDGE_PROMPT)]
    again = [*judge, Message("assistant", "YES"), Message("user", BASE_CONTINUE_PROMPT)]
    assert model.calls == [tuple(first), tuple(more), tuple(judge), tuple(again)]
    assert model.settings == [(4096, 0.0), (4096, 0.0), (16, 0.0), (4096, 0.0)]
    assert [e.name for e in result.graph.entities] == ["Alice", "Bob", "Carol", "Dave"]
    glean = result.run_ledger["glean"]
    assert glean.calls == 3
    assert glean.input_tokens == sum(counted_input_tokens(m) for m in (more, judge, again))
    assert glean.output_tokens == count_tokens(MORE) + 1 + count_tokens(EVEN_MORE)


def test_base_gleaning_accepts_a_round_that_finds_nothing(tmp_path: Path) -> None:
    model = ScriptedChat([FIRST, "<|COMPLETE|>", "NO"])
    result = extract_kg([("c1", TEXT)], runner(model), KGStore(tmp_path), config=BASE)
    assert len(model.calls) == 3 and len(result.graph) == 2 and result.problems == {}
    assert result.run_ledger["glean"].bad_outputs == {}


def test_a_failed_base_question_keeps_the_records_of_its_round(tmp_path: Path) -> None:
    model = ScriptedChat([FIRST, MORE, "Perhaps", "Hard to say"])
    result = extract_kg([("c1", TEXT)], runner(model), KGStore(tmp_path), config=BASE)
    assert [e.name for e in result.graph.entities] == ["Alice", "Bob", "Carol"]
    assert result.problems["c1"] == ("gleaning round 1 failed (not_yes_no: expected YES or "
                                     "NO, got 'Hard to say' (after 2 replies)); kept the "
                                     "records before it",)


def test_a_failed_base_request_keeps_the_first_records(tmp_path: Path) -> None:
    model = ScriptedChat([FIRST, "I found nothing else", "Still nothing"])
    result = extract_kg([("c1", TEXT)], runner(model), KGStore(tmp_path), config=BASE)
    assert len(model.calls) == 3 and len(result.graph) == 2  # no question after a failure
    assert result.problems["c1"][0].startswith("gleaning round 1 failed (unparsable")
    glean = result.run_ledger["glean"]
    assert (glean.calls, glean.failures, glean.bad_outputs) == (2, 1, {"unparsable": 2})


def test_without_gleaning_the_mode_changes_nothing(tmp_path: Path) -> None:
    calls = []
    for mode in ("trial", "base"):
        model = ScriptedChat([FIRST])
        extract_kg([("c1", TEXT)], runner(model), tmp_path / mode,
                   config=ExtractionConfig(gleaning_mode=mode))  # type: ignore[arg-type]
        calls.append(model.calls)
    assert calls[0] == calls[1] and len(calls[0]) == 1
    assert (tmp_path / "trial" / "manifest.json").read_bytes() == \
        (tmp_path / "base" / "manifest.json").read_bytes()


def test_trial_gleaning_stops_after_max_gleanings_rounds(tmp_path: Path) -> None:
    model = ScriptedChat([FIRST, "Yes.", MORE])
    result = extract_kg([("c1", "text")], runner(model), KGStore(tmp_path),
                        config=ExtractionConfig(max_gleanings=1, gleaning_mode="trial"))
    assert len(model.calls) == 3 and len(result.graph) == 3
    assert model.calls[2][-1] == Message("user", CONTINUE_PROMPT)


def test_trial_gleaning_on_a_first_no_makes_one_more_call(tmp_path: Path) -> None:
    model = ScriptedChat([FIRST, "NO"])
    result = extract_kg([("c1", "text")], runner(model), KGStore(tmp_path),
                        config=ExtractionConfig(max_gleanings=3, gleaning_mode="trial"))
    assert [call[-1].content for call in model.calls] == ["text", JUDGE_PROMPT]
    assert len(result.graph) == 2 and result.run_ledger["glean"].calls == 1


def test_a_failed_gleaning_round_keeps_the_first_records(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = ScriptedChat([FIRST, "Perhaps", "I am not sure"])
    with caplog.at_level(logging.WARNING, logger="shared_core.kg.extract"):
        result = extract_kg([("c1", "text")], runner(model), KGStore(tmp_path),
                            config=ExtractionConfig(max_gleanings=2, gleaning_mode="trial"))
    assert result.done == ("c1",) and len(result.graph) == 2
    assert result.problems["c1"] == ("gleaning round 1 failed (not_yes_no: expected YES or "
                                     "NO, got 'I am not sure' (after 2 replies)); kept the "
                                     "records before it",)
    glean = result.run_ledger["glean"]
    assert (glean.calls, glean.retries, glean.failures, glean.bad_outputs) == (
        2, 1, 1, {"not_yes_no": 2})
    assert "gleaning round 1 failed" in caplog.text


def test_a_failed_chunk_is_listed_logged_and_retried_next_run(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def flaky(messages: Sequence[Message]) -> str:
        return "no records today" if chunk_number(messages[1].content) == 2 else \
            by_chunk(messages)

    with caplog.at_level(logging.WARNING, logger="shared_core.kg.extract"):
        result = extract_kg(chunks(3), runner(ScriptedChat(flaky)), KGStore(tmp_path))
    assert result.done == ("c1", "c3")
    assert [(f.chunk_id, f.kind) for f in result.failed] == [("c2", "unparsable")]
    assert "chunk 'c2' failed after retries (unparsable)" in caplog.text
    assert "1 failed" in result.summary() and "unparsable 1" in result.summary()
    usage = result.run_ledger["extract"]
    assert (usage.calls, usage.retries, usage.failures, usage.bad_outputs) == (
        4, 1, 1, {"unparsable": 2})
    assert result.graph.entity("Person2") is None

    model = ScriptedChat(by_chunk)
    retried = extract_kg(chunks(3), runner(model), KGStore(tmp_path))
    assert asked_chunks(model) == [2] and retried.failed == ()
    assert retried.ledger["extract"].calls == 5  # both runs' spend


def test_a_batch_where_every_chunk_fails_stops_the_run_keeping_what_was_done(
        tmp_path: Path) -> None:
    def dead_after_two(messages: Sequence[Message]) -> str | Completion:
        number = chunk_number(messages[1].content)
        if number == 3:
            return "Sorry, I cannot help with that."
        if number == 4:
            return Completion("", 10, 0, finish_reason="stop")
        return by_chunk(messages)

    model = ScriptedChat(dead_after_two)
    with pytest.raises(ExtractionStopped) as stopped:
        extract_kg(chunks(6), runner(model), KGStore(tmp_path),
                   config=ExtractionConfig(batch_size=2))
    assert isinstance(stopped.value, LLMError)
    assert stopped.value.kinds == {"unparsable": 1, "empty": 1}
    message = str(stopped.value)
    assert "all 2 chunks of batch 2/3 failed (empty 1, unparsable 1)" in message
    assert "do not follow the record format" in message and "run again to resume" in message
    assert asked_chunks(model) == [1, 2, 3, 3, 4, 4]  # batch 3 never started
    store = KGStore(tmp_path)
    assert [r.chunk_id for r in store.records()] == ["c1", "c2"]
    assert store.load_ledger()["extract"].bad_outputs == {"unparsable": 2, "empty": 2}

    model = ScriptedChat(by_chunk)
    result = extract_kg(chunks(6), runner(model), store, config=ExtractionConfig(batch_size=2))
    assert asked_chunks(model) == [3, 4, 5, 6]
    assert result.skipped_as_already_done == ("c1", "c2")


def test_a_dead_server_stops_with_a_server_hint(tmp_path: Path) -> None:
    model = ScriptedChat(lambda messages: ConnectionError("refused"))
    with pytest.raises(ExtractionStopped, match=r"connection 2.*the server failed"):
        extract_kg(chunks(2), runner(model), tmp_path)
    assert not (tmp_path / "chunks.jsonl").exists()
    assert KGStore(tmp_path).load_ledger()["extract"].failures == 2


def test_a_truncated_reply_loses_its_last_record_and_says_so(tmp_path: Path) -> None:
    cut = FIRST[: FIRST.index("They work")]
    model = ScriptedChat([Completion(cut, 100, 20, usage_from="server", finish_reason="length")])
    result = extract_kg([("c1", "text")], runner(model), KGStore(tmp_path),
                        config=ExtractionConfig(max_tokens=20))
    assert [e.name for e in result.graph.entities] == ["Alice", "Bob"]
    assert result.graph.relations == ()
    assert result.problems["c1"][0].startswith("dropped the last record, cut off at max_tokens")
    assert KGStore(tmp_path).get("c1").extraction.problems == result.problems["c1"]  # type: ignore[union-attr]
    assert (result.run_ledger["extract"].input_tokens,
            result.run_ledger["extract"].output_tokens) == (100, 20)


@pytest.mark.parametrize(("bad", "error", "match"), [
    ([("", "text")], ValueError, "chunks\\[0\\]: the chunk id must be a non-empty str"),
    ([("c1", "  ")], ValueError, "chunks\\[0\\] \\('c1'\\): the text must be a non-empty str"),
    ([("c1", "a"), ("c2", "b"), ("c1", "c")], ValueError, "1 chunk id\\(s\\) repeated \\('c1'\\)"),
    (["just text"], TypeError, "chunks\\[0\\] must be a \\(chunk_id, text\\) pair"),
    ("text", TypeError, "not one string"),
    ([("c1", None)], ValueError, "the text must be a non-empty str"),
])
def test_bad_chunks_are_refused_before_any_call(tmp_path: Path, bad: object,
                                                error: type[Exception], match: str) -> None:
    model = ScriptedChat([])
    with pytest.raises(error, match=match):
        extract_kg(bad, runner(model), KGStore(tmp_path))  # type: ignore[arg-type]
    assert model.calls == [] and not tmp_path.joinpath("manifest.json").exists()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="runner must be an LLMRunner"):
        extract_kg([], ScriptedChat([]), tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="store must be a KGStore"):
        extract_kg([], runner(ScriptedChat([])), 3)  # type: ignore[arg-type]
    for field, value in [("max_gleanings", -1), ("batch_size", 0), ("max_tokens", 0),
                         ("judge_max_tokens", True), ("max_gleanings", 1.0),
                         ("gleaning_mode", "greedy"), ("gleaning_mode", None),
                         ("gleaning_mode", "BASE")]:
        with pytest.raises(ValueError, match=field):
            ExtractionConfig(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"gleaning_mode must be 'trial' or 'base'.*'greedy'"):
        ExtractionConfig(gleaning_mode="greedy")  # type: ignore[arg-type]


def test_no_chunks_no_calls(tmp_path: Path) -> None:
    result = extract_kg([], runner(ScriptedChat([])), tmp_path)
    assert len(result.graph) == 0 and result.done == () and result.failed == ()


def test_concurrency_does_not_change_the_graph(tmp_path: Path) -> None:
    one = extract_kg(chunks(8), runner(ScriptedChat(by_chunk)), tmp_path / "a")
    many = extract_kg(chunks(8), runner(ScriptedChat(by_chunk), concurrency=8), tmp_path / "b",
                      config=ExtractionConfig(batch_size=3))
    assert one.graph == many.graph and one.done == many.done


# ------------------------------------------------------------------ estimates
def test_the_estimate_without_gleaning_is_the_spend_to_the_token(tmp_path: Path) -> None:
    texts = chunks(4)
    estimate = estimate_extraction(texts, "scripted", output_ratio=0.0)
    result = extract_kg(texts, runner(ScriptedChat(by_chunk)), tmp_path)
    check = EstimateCheck(estimate, extraction_usage(result.run_ledger))
    assert estimate.stage == "extract" and estimate.calls == 4
    assert check.input_ratio == 1.0
    assert estimate.input_tokens == 4 * prompt_tokens() + sum(count_tokens(t) for _, t in texts)
    by_counts = estimate_extraction([count_tokens(t) for _, t in texts], "scripted",
                                    output_ratio=0.0)
    by_texts = estimate_extraction([t for _, t in texts], "scripted", output_ratio=0.0)
    assert by_counts == by_texts == estimate


def test_the_trial_gleaning_estimate_is_exact_for_a_model_that_always_says_yes(
        tmp_path: Path) -> None:
    text = "Alice and Bob work together."
    first_input = prompt_tokens() + count_tokens(text)
    ratio = count_tokens(FIRST) / first_input  # the reply the estimate assumes, exactly
    config = ExtractionConfig(max_gleanings=2, gleaning_mode="trial")
    estimate = estimate_extraction([text], "scripted", config=config, output_ratio=ratio)
    # every continuation reply as long as the first (the estimate's assumption): the same one
    model = ScriptedChat([FIRST, "YES", FIRST, "YES", FIRST])
    result = extract_kg([("c1", text)], runner(model), tmp_path, config=config)
    spent = extraction_usage(result.run_ledger)
    assert estimate.stage == "extract+glean"
    assert estimate.calls == spent.calls == 5
    assert estimate.input_tokens == spent.input_tokens
    assert estimate.output_tokens == spent.output_tokens == 3 * count_tokens(FIRST) + 2


def test_the_base_gleaning_estimate_is_exact_for_a_model_that_always_says_yes(
        tmp_path: Path) -> None:
    text = "Alice and Bob work together."
    ratio = count_tokens(FIRST) / (prompt_tokens() + count_tokens(text))
    config = ExtractionConfig(max_gleanings=3, gleaning_mode="base")
    estimate = estimate_extraction([text], "scripted", config=config, output_ratio=ratio)
    # three continue calls, a question between each two: 1 + 3 + 2 calls
    model = ScriptedChat([FIRST, FIRST, "YES", FIRST, "YES", FIRST])
    result = extract_kg([("c1", text)], runner(model), tmp_path, config=config)
    spent = extraction_usage(result.run_ledger)
    assert estimate.stage == "extract+glean"
    assert estimate.calls == spent.calls == 6
    assert estimate.input_tokens == spent.input_tokens
    assert estimate.output_tokens == spent.output_tokens == 4 * count_tokens(FIRST) + 2


def test_the_gleaning_estimates_by_hand() -> None:
    """With no output (ratio 0), only the prompts and the chat overhead grow the history.

    F = prompt + chunk; each reply adds an empty assistant message (TOKENS_PER_MESSAGE = 3).
    J, C, B, Y: message tokens of the judge prompt, the trial and base continue prompts, "YES".
    trial, 2 rounds: F | F+3+J | F+3+J+Y+C | F+6+2J+Y+C | F+6+2J+2Y+2C
        = 5F + 18 + 6J + 4Y + 4C input, 2 judge answers of 1 token out, 5 calls;
    base, 2 rounds:  F | F+3+B | F+6+B+J | F+6+2B+J+Y
        = 4F + 15 + 4B + 2J + Y input, 1 judge answer out, 4 calls;
    1 round: trial F | F+3+J | F+3+J+Y+C = 3F + 6 + 2J + Y + C, base F | F+3+B = 2F + 3 + B.
    """
    assert TOKENS_PER_MESSAGE == 3
    f = prompt_tokens() + 100
    j, c, b, y = (message_tokens(p) for p in (JUDGE_PROMPT, CONTINUE_PROMPT,
                                               BASE_CONTINUE_PROMPT, "YES"))
    assert (j, c, b, y) == (37, 41, 69, 4)  # the prompts' sizes today, for the record

    def estimate(mode: str, rounds: int) -> tuple[int, int, int]:
        config = ExtractionConfig(max_gleanings=rounds, gleaning_mode=mode)  # type: ignore[arg-type]
        e = estimate_extraction([100], "m", config=config, output_ratio=0.0)
        return e.calls, e.input_tokens, e.output_tokens

    assert estimate("trial", 2) == (5, 5 * f + 18 + 6 * j + 4 * y + 4 * c, 2)
    assert estimate("base", 2) == (4, 4 * f + 15 + 4 * b + 2 * j + y, 1)
    assert estimate("trial", 1) == (3, 3 * f + 6 + 2 * j + y + c, 1)
    assert estimate("base", 1) == (2, 2 * f + 3 + b, 0)
    assert estimate("base", 0) == estimate("trial", 0) == (1, f, 0)
    # ten chunks, M rounds: trial 1 + 2M calls each, base 2M
    for rounds in (1, 2, 5):
        for mode, per_chunk in (("trial", 1 + 2 * rounds), ("base", 2 * rounds)):
            config = ExtractionConfig(max_gleanings=rounds, gleaning_mode=mode)  # type: ignore[arg-type]
            assert estimate_extraction([50] * 10, "m", config=config).calls == 10 * per_chunk


def test_the_estimate_prices_known_models_and_checks_its_input() -> None:
    estimate = estimate_extraction([1000, 200], "gpt-4o-mini", output_ratio=0.5)
    assert estimate.input_tokens == 2 * prompt_tokens() + 1200
    assert estimate.output_tokens == round(estimate.input_tokens * 0.5)
    assert estimate.usd == pytest.approx((estimate.input_tokens * 0.15
                                          + estimate.output_tokens * 0.60) / 1e6)
    mine = estimate_extraction([1000], "local", prices={"local": ModelPrice(0, 0)})
    assert mine.usd == 0.0
    assert estimate_extraction([1000], "unknown-model").usd is None
    with pytest.raises(ValueError, match="output_ratio"):
        estimate_extraction([1], "m", output_ratio=-1)
    with pytest.raises(ValueError, match=">= 0"):
        estimate_extraction([-5], "m")
    with pytest.raises(TypeError, match="chunks\\[0\\]"):
        estimate_extraction([3.5], "m")  # type: ignore[list-item]


def test_entity_types_reach_the_prompt_and_the_record(tmp_path: Path) -> None:
    model = ScriptedChat([reply(entity("BRCA1", "gene", "A tumour suppressor"))])
    config = ExtractionConfig(entity_types=("Gene", "protein"))
    result = extract_kg([("c1", "BRCA1 is a gene.")], runner(model), tmp_path, config=config)
    assert "Only entities of these types: gene, protein." in model.calls[0][0].content
    assert KGStore(tmp_path).get("c1").extraction.entities == (  # type: ignore[union-attr]
        EntityRecord("BRCA1", "gene", "A tumour suppressor"),)
    assert KGStore(tmp_path).manifest.settings["entity_types"] == ["gene", "protein"]  # type: ignore[union-attr]
    assert len(result.graph) == 1


# ------------------------------------------------------------------ aextract_kg
def _loops_of(model_calls: list[asyncio.AbstractEventLoop | None]) -> ScriptedChat:
    """A scripted model that notes which event loop each call ran on (None: a thread
    with no loop, where a sync caller's calls run the model's sync method)."""
    def answer(messages: Sequence[Message]) -> str:
        try:
            model_calls.append(asyncio.get_running_loop())
        except RuntimeError:
            model_calls.append(None)
        return by_chunk(messages)
    return ScriptedChat(answer)


async def test_aextract_kg_awaited_in_a_running_loop_matches_extract_kg(tmp_path: Path) -> None:
    mine = asyncio.get_running_loop()
    config = ExtractionConfig(batch_size=2)
    async_loops: list[asyncio.AbstractEventLoop | None] = []
    result = await aextract_kg(chunks(5), runner(_loops_of(async_loops), concurrency=3),
                               tmp_path / "async", config=config)
    assert async_loops == [mine] * 5  # the calls ran on the caller's loop, not beside it

    sync_loops: list[asyncio.AbstractEventLoop | None] = []
    expected = extract_kg(chunks(5), runner(_loops_of(sync_loops), concurrency=3),
                          tmp_path / "sync", config=config)
    assert sync_loops == [None] * 5  # the model's sync method, in run_sync's threads

    assert result.graph == expected.graph and len(result.graph) == 11
    assert (result.done, result.skipped_as_already_done, result.failed) == (
        expected.done, expected.skipped_as_already_done, expected.failed)
    assert result.ledger.to_dict() == expected.ledger.to_dict()
    assert result.run_ledger.to_dict() == expected.run_ledger.to_dict()
    for name in ("manifest.json", "ledger.json"):
        assert (tmp_path / "async" / name).read_bytes() == (tmp_path / "sync" / name).read_bytes()
    assert sorted((tmp_path / "async" / "chunks.jsonl").read_bytes().splitlines()) == \
        sorted((tmp_path / "sync" / "chunks.jsonl").read_bytes().splitlines())

    again = ScriptedChat([])
    resumed = await aextract_kg(chunks(5), runner(again), KGStore(tmp_path / "async"))
    assert again.calls == [] and len(resumed.skipped_as_already_done) == 5
    assert resumed.graph == expected.graph
    KGStore(tmp_path / "async", lock=True).close()  # the runs let the lock go


async def test_aextract_kg_refuses_bad_arguments_like_extract_kg(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="runner must be an LLMRunner"):
        await aextract_kg([], ScriptedChat([]), tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeated"):
        await aextract_kg([("c", "a"), ("c", "b")], runner(ScriptedChat([])), tmp_path)
    assert not tmp_path.joinpath("writer.lock").exists()  # bad input touches nothing
