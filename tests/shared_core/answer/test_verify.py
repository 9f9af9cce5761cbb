"""The pre-check verifier (Algorithm 3): a verdict on the arguments, read from the first word."""

from __future__ import annotations

import pytest

from shared_core.answer import Verdict, parse_verdict, precheck
from shared_core.answer.verify import VERIFY_STAGE
from shared_core.llm import BadOutput, LLMRunner, RequestFailed, run_sync
from tests.shared_core.llm.scripted import ScriptedChat


@pytest.mark.parametrize("reply, supported", [
    ("SUPPORT: both heights are given.", True),
    ("**Supported** - the evidence names the designer.", True),
    ("Yes.", True),
    ("REJECT - the height of B is missing.", False),
    ("`no`, nothing about the year", False),
    ("Insufficient: the list is incomplete", False),
])
def test_the_first_word_decides(reply: str, supported: bool) -> None:
    verdict = parse_verdict(reply)
    assert verdict.supported is supported
    assert verdict.reason == reply


@pytest.mark.parametrize("reply", ["", "   ", "The evidence mentions Paris.", "42"])
def test_anything_else_is_not_a_verdict(reply: str) -> None:
    with pytest.raises(BadOutput) as caught:
        parse_verdict(reply)
    assert caught.value.kind == "not_a_verdict"


def test_no_context_is_rejected_without_asking() -> None:
    chat = ScriptedChat([])
    assert run_sync(precheck(LLMRunner(chat), "q", "  \n")) == Verdict(
        False, "no context was gathered")
    assert chat.calls == []


def test_the_judge_sees_the_question_and_the_evidence_only() -> None:
    chat = ScriptedChat(["SUPPORT it is all there"])
    runner = LLMRunner(chat)
    verdict = run_sync(precheck(runner, "How tall is A?", "1. retrieve: A -> 3 m"))
    assert verdict.supported
    assert chat.calls[0][-1].content == ("Question: How tall is A?\n\n"
                                         "Evidence:\n1. retrieve: A -> 3 m")
    assert chat.settings == [(48, 0.0)]
    assert runner.ledger[VERIFY_STAGE].calls == 1


def test_an_empty_verdict_twice_is_a_failure() -> None:
    runner = LLMRunner(ScriptedChat(["", "hmm"]))
    with pytest.raises(RequestFailed) as caught:
        run_sync(precheck(runner, "q", "context"))
    assert caught.value.kind == "not_a_verdict"
    assert runner.ledger[VERIFY_STAGE].bad_outputs == {"empty": 1, "not_a_verdict": 1}
