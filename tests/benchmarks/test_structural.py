"""Structural runs hold each answer-pipeline prompt to its own grammar, and leave the answer free.

Checked on the wire, against the stub server: which requests carried which grammar.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.answers import LLMSettings
from benchmarks.structural import KEYS, PLAN, SHORT_ANSWER, VERDICT
from shared_core.answer import AnswerPipeline
from tests.shared_core.answer.corpus import build_index, build_kg
from tests.shared_core.answer.test_pipeline import ANSWER, QUESTION
from tests.shared_core.answer.test_pipeline import PLAN as SCRIPTED_PLAN
from tests.shared_core.openai_stub import StubOpenAI


def reply(body: dict[str, object]) -> str:
    grammar = body.get("grammar")
    return {PLAN: SCRIPTED_PLAN, SHORT_ANSWER: "330 metres", VERDICT: "REJECT not enough",
            KEYS: '{"low_level_keywords": ["Eiffel Tower"], "high_level_keywords": ["Height"]}',
            None: ANSWER}[grammar]  # type: ignore[index]


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_each_pipeline_prompt_carries_its_grammar_and_the_answer_none(tmp_path: Path) -> None:
    with StubOpenAI(chat=reply) as stub:
        settings = LLMSettings("stub", base_url=stub.url, structural=True, concurrency=1,
                               cache_dir=str(tmp_path))
        answer = AnswerPipeline(settings.runner("answer_pipeline"), build_index(),
                                build_kg()).answer(QUESTION)
        grammars = [body.get("grammar") for body in stub.chat_bodies()]
    # plan, two steps, the verdict (a rejection), the keys, then the free answer
    assert grammars == [PLAN, SHORT_ANSWER, SHORT_ANSWER, VERDICT, KEYS, None]
    assert answer.text == ANSWER and answer.route == "dual_level"


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_without_structural_no_request_carries_a_grammar(tmp_path: Path) -> None:
    with StubOpenAI(chat=lambda body: ANSWER) as stub:
        settings = LLMSettings("stub", base_url=stub.url, concurrency=1,
                               cache_dir=str(tmp_path))
        AnswerPipeline(settings.runner("answer_pipeline"), build_index(),
                       build_kg()).answer(QUESTION)
        assert all("grammar" not in body for body in stub.chat_bodies())
