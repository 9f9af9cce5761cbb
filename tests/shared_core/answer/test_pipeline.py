"""The multi-stage pipeline: every branch, driven by a scripted LLM, traced stage by stage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict

import pytest

from shared_core.answer import AnswerConfig, AnswerPipeline
from shared_core.answer.pipeline import GENERATE_STAGE
from shared_core.llm import LLMRunner, Message, RequestFailed, StageUsage
from tests.shared_core.answer.corpus import build_index, build_kg, kind
from tests.shared_core.llm.scripted import Reply, ScriptedChat, word_deltas

QUESTION = "How much taller is the Eiffel Tower than the Statue of Liberty?"
PLAN = ("1. retrieve: How tall is the Eiffel Tower?\n"
        "2. retrieve: How tall is the Statue of Liberty?\n"
        "3. compute: {step1} - {step2}")
KEYS = '{"low_level_keywords": ["Eiffel Tower", "Statue of Liberty"], ' \
       '"high_level_keywords": ["height"]}'
ANSWER = "The Eiffel Tower is 237 metres taller."


def script(**replies: Reply | Callable[[Sequence[Message]], Reply]) -> ScriptedChat:
    """A chat that replies by prompt kind; defaults give the logic-form route."""
    table: dict[str, Reply | Callable[[Sequence[Message]], Reply]] = {
        "decompose": PLAN, "verify": "SUPPORT both heights are given", "keys": KEYS,
        "answer_logic": ANSWER, "answer_context": ANSWER, "filter": "NONE",
        "step": lambda m: "330 metres" if "Eiffel" in m[-1].content.split("\n")[0]
        else "93 metres",
        **replies}

    def reply(messages: Sequence[Message]) -> Reply:
        entry = table[kind(messages)]
        return entry(messages) if callable(entry) else entry

    return ScriptedChat(reply)


def pipeline(chat: ScriptedChat, **config: object) -> AnswerPipeline:
    return AnswerPipeline(chat, build_index(), build_kg(),
                          config=AnswerConfig(**config))  # type: ignore[arg-type]


def kinds(chat: ScriptedChat) -> list[str]:
    return [kind(c) for c in chat.calls]


def statuses(answer_trace: object) -> list[tuple[str, str]]:
    return [(s.name, s.status) for s in answer_trace.stages]  # type: ignore[attr-defined]


def test_the_logic_form_answers_when_it_runs_and_passes_the_precheck() -> None:
    chat = script()
    stream = pipeline(chat).stream(QUESTION)
    deltas = list(stream)
    answer = stream.result()
    assert deltas == word_deltas(ANSWER) and answer.text == ANSWER
    assert answer.route == "logic_form" and answer.trace.fallback_reason is None
    assert statuses(answer.trace) == [("decompose", "ok"), ("logic_form", "ok"),
                                      ("precheck", "ok"), ("answer", "ok")]
    assert kinds(chat) == ["decompose", "step", "step", "verify", "answer_logic"]
    assert answer.logic is not None and answer.logic.steps[2].result == "237"
    # the answer prompt carries the computed history, and the verifier saw it first
    history = "3. compute: 330 metres - 93 metres -> 237"
    assert history in chat.calls[3][-1].content and history in chat.calls[4][-1].content
    assert answer.evidence == answer.logic.evidence and answer.evidence
    assert answer.trace.complete


def test_every_stage_spends_what_its_calls_cost_and_the_sum_is_the_query() -> None:
    chat = script()
    p = pipeline(chat)
    answer = p.answer(QUESTION)
    stages = {s.name: s.tokens for s in answer.trace.stages}
    assert [stages[n].calls for n in ("decompose", "logic_form", "precheck", "answer")] \
        == [1, 2, 1, 1]
    total = StageUsage()
    for usage in stages.values():
        total.add(usage)
    assert asdict(total) == asdict(answer.trace.tokens())
    # ScriptedChat counts with tiktoken: The| E|iff|el| Tower| is| |237| metres| taller|.
    assert stages["answer"].output_tokens == 11
    # the pipeline's own ledger books the same calls, by LLM stage
    assert p.runner.ledger[GENERATE_STAGE].calls == 1
    assert asdict(p.runner.ledger.total()) == asdict(answer.trace.tokens())


@pytest.mark.parametrize("plan, error_kind", [
    ("I would look up both heights and subtract.", "unparsable"),
    ("1. lookup: the heights", "unknown_operator"),
    ("1. retrieve: a\n2. compute: {step4} - 1", "missing_reference"),
])
def test_a_plan_that_never_parses_falls_back_to_dual_level(plan: str, error_kind: str) -> None:
    chat = script(decompose=plan)
    answer = pipeline(chat).answer(QUESTION)
    assert answer.route == "dual_level" and answer.text == ANSWER
    assert statuses(answer.trace) == [("decompose", "failed"), ("keys", "ok"),
                                      ("dual_level", "ok"), ("answer", "ok")]
    failed = answer.trace.stage("decompose")
    assert failed is not None and failed.error_kind == error_kind
    assert failed.tokens.calls == 2 and failed.tokens.bad_outputs == {error_kind: 2}
    assert answer.trace.fallback_reason.startswith(
        f"the decomposition failed ({error_kind}: ")
    assert f"{error_kind}: {error_kind}:" not in answer.trace.fallback_reason  # said once
    assert kinds(chat) == ["decompose", "decompose", "keys", "answer_context"]


def test_a_step_without_an_answer_falls_back() -> None:
    chat = script(step="UNKNOWN")
    answer = pipeline(chat).answer(QUESTION)
    assert answer.route == "dual_level"
    failed = answer.trace.stage("logic_form")
    assert failed is not None and failed.status == "failed"
    assert failed.error_kind == "missing_answer" and "step 3" in (failed.error or "")
    assert "verify" not in kinds(chat)


def test_a_rejection_by_the_precheck_falls_back() -> None:
    chat = script(verify="REJECT the height of the statue is not in the evidence")
    answer = pipeline(chat).answer(QUESTION)
    assert answer.route == "dual_level"
    record = answer.trace.stage("precheck")
    assert record is not None and record.status == "rejected"
    assert record.output == {"supported": False, "reason":
                             "REJECT the height of the statue is not in the evidence"}
    assert answer.trace.fallback_reason == ("the pre-check rejected the logic form: REJECT "
                                            "the height of the statue is not in the evidence")


def test_an_empty_verification_falls_back() -> None:
    answer = pipeline(script(verify="")).answer(QUESTION)
    record = answer.trace.stage("precheck")
    assert record is not None and (record.status, record.error_kind) == ("failed", "empty")
    assert answer.route == "dual_level" and answer.text == ANSWER


def test_a_client_error_in_a_logic_stage_is_traced_and_falls_back() -> None:
    # a non-transient error (a bad request, say) is not retried by the runner
    answer = pipeline(script(decompose=ValueError("context length exceeded"))).answer(QUESTION)
    record = answer.trace.stage("decompose")
    assert record is not None and (record.status, record.error_kind) == ("failed", "ValueError")
    assert record.error == "context length exceeded"
    assert answer.route == "dual_level"


def test_unusable_keys_fall_back_to_the_graphs_keys() -> None:
    chat = script(decompose="no plan", keys="height, towers")
    answer = pipeline(chat).answer(QUESTION)
    record = answer.trace.stage("keys")
    assert record is not None and (record.status, record.error_kind) == ("fallback",
                                                                         "unparsable")
    assert record.output["source"] == "graph"
    assert record.output["low_level"][:2] == ["Eiffel Tower", "Statue of Liberty"]
    assert answer.dual is not None and answer.dual.keys.source == "graph"
    assert answer.route == "dual_level" and answer.text == ANSWER


def test_dual_level_context_says_which_key_and_level_found_each_piece() -> None:
    chat = script()
    answer = pipeline(chat, logic_form=False, budget=120).answer(QUESTION)
    assert kinds(chat) == ["keys", "answer_context"]
    assert answer.dual is not None
    assert [k.key for k in answer.dual.per_key] == ["Eiffel Tower", "Statue of Liberty",
                                                    "height"]
    assert answer.dual.tokens <= 120
    prompt = chat.calls[1][-1].content
    assert "low-level key 'Eiffel Tower'" in prompt and "high-level key 'height'" in prompt
    provenance = [e.provenance() for e in answer.evidence]
    assert {p["level"] for p in provenance} == {"low", "high"}


def test_switches_skip_their_stages() -> None:
    chat = script()
    answer = pipeline(chat, precheck=False).answer(QUESTION)
    assert answer.route == "logic_form" and "verify" not in kinds(chat)
    chat = script()
    answer = pipeline(chat, logic_form=False, llm_keys=False).answer(QUESTION)
    assert kinds(chat) == ["answer_context"]
    assert statuses(answer.trace) == [("keys", "ok"), ("dual_level", "ok"), ("answer", "ok")]
    assert answer.dual is not None and answer.dual.keys.source == "graph"


def test_a_reader_that_stops_early_is_recorded() -> None:
    stream = pipeline(script()).stream(QUESTION)
    first = [next(stream), next(stream)]
    stream.close()
    assert first == word_deltas(ANSWER)[:2] and stream.text == "".join(first)
    record = stream.trace.stage("answer")
    assert record is not None and record.status == "stopped"
    assert record.output["text"] == "".join(first)


def test_prepare_gives_the_sources_before_the_first_token() -> None:
    chat = script()
    prepared = pipeline(chat).prepare(QUESTION)
    assert prepared.route == "logic_form" and prepared.evidence
    assert "answer_logic" not in kinds(chat) and not prepared.trace.complete
    assert "".join(prepared.stream()) == ANSWER
    assert list(prepared.stream()) == [ANSWER]       # read again: the whole text at once


def test_an_llm_that_cannot_answer_is_an_error_not_an_empty_answer() -> None:
    stream = pipeline(script(answer_logic="", answer_context="")).stream(QUESTION)
    with pytest.raises(RequestFailed) as caught:
        list(stream)
    assert caught.value.kind == "empty"
    record = stream.trace.stage("answer")
    assert record is not None and record.status == "failed"


def test_async_streams_keep_each_querys_trace_apart() -> None:
    chat = script()
    p = pipeline(chat)

    async def both() -> list[tuple[list[str], str | None, int]]:
        async def one(query: str, **_: object) -> tuple[list[str], str | None, int]:
            stream = p.astream(query)
            deltas = [d async for d in stream]
            answer = await stream.result()
            return deltas, answer.route, answer.trace.tokens().calls
        return list(await asyncio.gather(one(QUESTION), one(QUESTION + " Roughly?")))

    results = asyncio.run(both())
    assert [r[0] for r in results] == [word_deltas(ANSWER)] * 2
    assert [r[2] for r in results] == [5, 5]
    assert p.runner.ledger.total().calls == 10


def test_the_trace_reads_as_a_table_and_as_json() -> None:
    answer = pipeline(script(decompose="no plan")).answer(QUESTION)
    lines = answer.trace.table().splitlines()
    assert lines[0].split() == ["stage", "status", "calls", "input", "output", "seconds",
                                "note"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["decompose", "failed", "2"], ["keys", "ok", "1"], ["dual_level", "ok", "0"],
        ["answer", "ok", "1"]]
    data = answer.trace.to_dict()
    assert data["route"] == "dual_level" and data["tokens"]["calls"] == 4
    assert [s["name"] for s in data["stages"]] == ["decompose", "keys", "dual_level", "answer"]


def test_bad_input_is_a_clear_error() -> None:
    p = pipeline(script())
    with pytest.raises(ValueError):
        p.stream("   ")
    with pytest.raises(TypeError, match="AnswerConfig"):
        AnswerPipeline(script(), build_index(), config={"budget": 10})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"AnswerConfig\.budget must be an int >= 1"):
        AnswerConfig(budget=0)
    with pytest.raises(ValueError, match="answer_max_tokens must be an int >= 1 or None"):
        AnswerConfig(answer_max_tokens=0)
    with pytest.raises(TypeError, match=r"AnswerConfig\.precheck must be True or False"):
        AnswerConfig(precheck="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ChatModel"):
        AnswerPipeline(object(), build_index())  # type: ignore[arg-type]


def test_a_runner_is_used_as_given() -> None:
    runner = LLMRunner(script(), concurrency=1)
    p = AnswerPipeline(runner, build_index())
    assert p.runner is runner
    assert p.answer(QUESTION).text == ANSWER


@pytest.mark.parametrize("replies, route", [({}, "logic_form"),
                                            ({"decompose": "no plan"}, "dual_level")])
def test_answer_instructions_go_into_the_answer_prompt_on_either_route(
    replies: dict[str, Reply], route: str
) -> None:
    chat = script(**replies)
    rule = "Reply with the answer alone."
    answer = pipeline(chat, answer_instructions=f"  {rule}\n").answer(QUESTION)
    assert answer.route == route
    system = chat.calls[-1][0].content
    assert system.endswith(f"\n{rule}") and kinds(chat)[-1].startswith("answer_")
    # the other stages' prompts are untouched, and without instructions nothing is added
    assert all(rule not in c[0].content for c in chat.calls[:-1])
    plain = script(**replies)
    pipeline(plain).answer(QUESTION)
    assert plain.calls[-1][0].content == system.removesuffix(f"\n{rule}")
    with pytest.raises(TypeError, match="answer_instructions must be a str"):
        AnswerConfig(answer_instructions=None)  # type: ignore[arg-type]
