"""Logic form (Algorithm 1): steps parsed strictly, run in order, arithmetic done in Python."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from shared_core.answer import (
    OPERATORS,
    DualLevelRetriever,
    LogicForm,
    LogicFormError,
    LogicFormResult,
    parse_steps,
)
from shared_core.answer.logic_form import DECOMPOSE_STAGE, STEP_STAGE, items_of
from shared_core.llm import BadOutput, LLMRunner, Message, RequestFailed, run_sync
from tests.shared_core.answer.corpus import build_index, build_kg, kind
from tests.shared_core.llm.scripted import ScriptedChat


def test_the_operators_are_the_documented_five() -> None:
    assert sorted(OPERATORS) == ["compare", "compute", "count", "filter", "retrieve"]


def test_steps_are_read_through_markup() -> None:
    steps = parse_steps("Here is the plan:\n"
                        "**Step 1.** retrieve: Which cities host a final?\n"
                        "- 2) FILTER: {step1} | in France\n"
                        "3: count: { step_2 }\n"
                        "That is all.")
    assert [(s.number, s.operator, s.text, s.references) for s in steps] == [
        (1, "retrieve", "Which cities host a final?", ()),
        (2, "filter", "{step1} | in France", (1,)),
        (3, "count", "{ step_2 }", (2,)),
    ]


@pytest.mark.parametrize("text, kind, message", [
    ("I cannot break this down.", "unparsable", "no 'N. operator: text' steps"),
    ("1. lookup: x", "unknown_operator", "step 1 uses 'lookup'"),
    ("1. retrieve: a\n3. retrieve: b", "unparsable", "numbered 1, 2, 3"),
    ("1. retrieve: a\n2. compute: {step2} + 1", "missing_reference", "{step2}"),
    ("1. retrieve: a\n2. compute: {step3} + 1", "missing_reference", "{step3}"),
    ("1. retrieve: a\n2. filter: {step1} in France", "unparsable", "condition"),
    ("1. retrieve: a\n2. retrieve: b\n3. count: {step1} {step2}", "unparsable",
     "exactly one earlier step"),
    ("1. compute: 2 + 2", "unparsable", "needs earlier answers"),
    ("1. retrieve: **", "unparsable", "step 1 is empty"),
    ("\n".join(f"{n}. retrieve: q{n}" for n in range(1, 8)), "unparsable", "7 steps"),
])
def test_bad_plans_are_bad_outputs_with_a_kind(text: str, kind: str, message: str) -> None:
    with pytest.raises(BadOutput, match=message) as caught:
        parse_steps(text)
    assert caught.value.kind == kind


def test_items_of_a_list_answer() -> None:
    assert items_of("Paris, Lyon and Nice.") == ("Paris", "Lyon", "Nice")
    assert items_of("1889; 1923\n1850") == ("1889", "1923", "1850")


def run(plan: str, answers: dict[str, str],
        filter_reply: str = "NONE") -> tuple[LogicFormResult, ScriptedChat, LLMRunner]:
    """Decompose into ``plan``; answer a retrieve step by the first ``answers`` key its
    sub-question contains; a filter step gets ``filter_reply``."""

    def reply(messages: Sequence[Message]) -> str:
        which = kind(messages)
        if which == "decompose":
            return plan
        if which == "filter":
            return filter_reply
        question = messages[-1].content.split("\n")[0]
        return next(a for q, a in answers.items() if q in question)

    chat = ScriptedChat(reply)
    runner = LLMRunner(chat)
    logic = LogicForm(runner, DualLevelRetriever(build_index(), build_kg()), step_budget=60)
    steps = run_sync(logic.decompose("the question"))
    return run_sync(logic.execute(steps)), chat, runner


HEIGHTS = ("1. retrieve: How tall is the Eiffel Tower?\n"
           "2. retrieve: How tall is the Statue of Liberty?\n")


def test_compute_takes_numbers_from_earlier_answers() -> None:
    result, chat, runner = run(HEIGHTS + "3. compute: {step1} - {step2}",
                               {"Eiffel": "330 metres", "Liberty": "93 metres"})
    assert [r.result for r in result.steps] == ["330 metres", "93 metres", "237"]
    assert result.steps[2].value == 237
    assert result.steps[2].query == "330 metres - 93 metres"
    assert result.history().splitlines()[2] == "3. compute: 330 metres - 93 metres -> 237"
    # one decomposition, one call a retrieve step, none for the arithmetic
    assert len(chat.calls) == 3
    assert (runner.ledger[DECOMPOSE_STAGE].calls, runner.ledger[STEP_STAGE].calls) == (1, 2)
    # each retrieve step's evidence is tagged with its step, and gathered in the result
    assert {e.step for e in result.steps[0].evidence} == {1}
    assert {e.chunk_id for e in result.evidence} >= {"a", "b"}
    assert result.steps[2].evidence == ()
    # the step's prompt carries its evidence: the Eiffel Tower's chunk is in step 1's
    assert "The Eiffel Tower is 330 metres tall." in chat.calls[1][-1].content


def test_compare_is_decided_in_python() -> None:
    result, _, _ = run(HEIGHTS + "3. compare: {step2} * 3 > {step1}",
                       {"Eiffel": "330 metres", "Liberty": "93 metres"})
    assert (result.steps[2].result, result.steps[2].value) == ("no", False)   # 279 > 330


def test_compare_of_names_is_equality_of_text() -> None:
    result, _, _ = run("1. retrieve: Who designed the Eiffel Tower?\n"
                       "2. retrieve: Who built the frame of the Statue of Liberty?\n"
                       "3. compare: {step1} == {step2}",
                       {"designed": "Gustave Eiffel", "frame": "gustave  eiffel"})
    assert result.steps[2].result == "yes"


def test_count_and_numeric_filter_need_no_llm() -> None:
    result, chat, _ = run("1. retrieve: When were the towers built?\n"
                          "2. filter: {step1} | > 1,880\n"
                          "3. count: {step2}",
                          {"towers": "1889, 1923 and 1850"})
    assert [r.result for r in result.steps[1:]] == ["1889, 1923", "2"]
    assert result.steps[1].value == ("1889", "1923")
    assert len(chat.calls) == 2          # decomposition and step 1 only


def test_a_judged_filter_keeps_only_items_of_the_list() -> None:
    result, chat, _ = run("1. retrieve: Which landmarks are there?\n"
                          "2. filter: {step1} | stands in Paris",
                          {"landmarks": "Eiffel Tower, Statue of Liberty"},
                          filter_reply="Eiffel Tower, Louvre")
    assert result.steps[1].result == "Eiffel Tower"      # the Louvre was not in the list
    assert kind(chat.calls[2]) == "filter"
    assert "Condition: stands in Paris" in chat.calls[2][-1].content


def test_an_unknown_answer_stops_the_steps_that_need_it() -> None:
    with pytest.raises(LogicFormError) as caught:
        run(HEIGHTS + "3. compute: {step1} - {step2}",
            {"Eiffel": "UNKNOWN", "Liberty": "93 metres"})
    assert (caught.value.kind, caught.value.step) == ("missing_answer", 3)
    assert "step 1 found no answer" in str(caught.value)


def test_arithmetic_on_a_name_is_no_number() -> None:
    with pytest.raises(LogicFormError) as caught:
        run("1. retrieve: Who designed the Eiffel Tower?\n2. compute: {step1} + 1",
            {"designed": "Gustave Eiffel"})
    assert caught.value.kind == "no_number"


def test_a_compare_that_is_not_a_comparison_is_a_bad_expression() -> None:
    with pytest.raises(LogicFormError) as caught:
        run(HEIGHTS + "3. compare: {step1} + {step2}",
            {"Eiffel": "330", "Liberty": "93"})
    assert caught.value.kind == "bad_expression"


def test_an_expression_the_evaluator_refuses_is_a_bad_expression() -> None:
    with pytest.raises(LogicFormError) as caught:
        run(HEIGHTS + "3. compute: {step1} / ({step2} - 93)",
            {"Eiffel": "330", "Liberty": "93"})
    assert (caught.value.kind, caught.value.detail) == ("bad_expression", "division by zero")


def test_a_decomposition_that_never_parses_fails_after_the_retries() -> None:
    chat = ScriptedChat(["no plan", "1. guess: 42"])
    logic = LogicForm(LLMRunner(chat), DualLevelRetriever(build_index()))
    with pytest.raises(RequestFailed) as caught:
        run_sync(logic.decompose("q"))
    assert caught.value.kind == "unknown_operator"        # the last reply's kind
    assert len(chat.calls) == 2


def test_bad_settings_are_clear_errors() -> None:
    retriever = DualLevelRetriever(build_index())
    with pytest.raises(ValueError, match="max_steps must be an int >= 1, got 0"):
        LogicForm(LLMRunner(ScriptedChat([])), retriever, max_steps=0)
