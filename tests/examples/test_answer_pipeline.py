"""examples/answer_pipeline.py against a stub OpenAI server: streams, routes, traces, KG.

The stub replies by the prompt's system message. The first question's evidence
passes the pre-check and is answered by its logic form; the second's is
rejected and answered through dual-level retrieval, so one run shows both routes.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from shared_core.answer.prompts import (
    ANSWER_CONTEXT_SYSTEM,
    ANSWER_LOGIC_SYSTEM,
    DECOMPOSE_SYSTEM,
    KEYS_SYSTEM,
    STEP_SYSTEM,
    VERIFY_SYSTEM,
)
from tests.shared_core.kg.support import entity, relation, reply
from tests.shared_core.openai_stub import StubOpenAI

EXAMPLE = Path(__file__).parents[2] / "examples" / "answer_pipeline.py"
FIRST = "Who introduced the notation?"
SECOND = "How many students attend?"
EXTRACTION = reply(entity("John Kukuzelis", "person", "a composer"),
                   entity("Byzantine notation", "system", "a musical notation"),
                   relation("John Kukuzelis", "Byzantine notation", "introduced", 8))


PROMPTS = {DECOMPOSE_SYSTEM: "decompose", STEP_SYSTEM: "step", VERIFY_SYSTEM: "verify",
           KEYS_SYSTEM: "keys", ANSWER_LOGIC_SYSTEM: "answer", ANSWER_CONTEXT_SYSTEM: "answer"}


def prompt_kind(body: dict[str, Any]) -> str:
    """Which stage a request is, by its system message; anything else is KG extraction."""
    system = body["messages"][0]["content"]
    return next((kind for start, kind in PROMPTS.items() if system.startswith(start[:40])),
                "extract")


def stub_chat(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    kind = prompt_kind(body)
    if kind == "answer":
        system = body["messages"][0]["content"]
        return ("John Kukuzelis introduced it." if system == ANSWER_LOGIC_SYSTEM
                else "The context does not say.")
    return {
        "decompose": "1. retrieve: Who introduced the notation?",
        "step": "John Kukuzelis",
        "verify": ("SUPPORT the step names him" if f"Question: {FIRST}" in user
                   else "REJECT nothing gives a number"),
        "keys": '{"low_level_keywords": ["students"], "high_level_keywords": ["education"]}',
        "extract": EXTRACTION,
    }[kind]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("answer_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_the_example_streams_both_routes_with_evidence_and_traces(
    capsys: pytest.CaptureFixture[str]
) -> None:
    with StubOpenAI(chat=stub_chat) as stub:
        status = load().main(["--base-url", stub.url, "--model", "stub", "--api-key", "EMPTY",
                              "--embedder", "hashing", "--kg-chunks", "2",
                              "--question", FIRST, "--question", SECOND])
        bodies = stub.chat_bodies()
    out = capsys.readouterr().out
    assert status == 0
    assert "LLM: stub at http://127.0.0.1" in out
    # one extraction call per core chunk asked for; both name the same two entities
    assert [prompt_kind(b) for b in bodies].count("extract") == 2
    assert "2 entities" in out
    first, second = out.split(f"\nQ: {FIRST}\n")[1].split(f"\nQ: {SECOND}\n")
    assert first.startswith("A: John Kukuzelis introduced it.\n")
    assert "route: logic_form" in first and "fallback:" not in first
    assert "1. retrieve: Who introduced the notation? -> John Kukuzelis" in first
    assert second.startswith("A: The context does not say.\n")
    assert "route: dual_level" in second
    assert ("fallback: the pre-check rejected the logic form: "
            "REJECT nothing gives a number") in second
    # the evidence says who found each piece; the trace lists every stage that ran
    assert re.search(r"\[\S+\] step 1, concept: ", first)
    assert re.search(r"\[\S+\] (low|high)-level key '(students|education)', ", second)
    stages = [re.findall(r"^(decompose|logic_form|precheck|keys|dual_level|answer)\s+(\w+)",
                         part, re.MULTILINE) for part in (first, second)]
    assert stages[0] == [("decompose", "ok"), ("logic_form", "ok"), ("precheck", "ok"),
                         ("answer", "ok")]
    assert stages[1] == [("decompose", "ok"), ("logic_form", "ok"), ("precheck", "rejected"),
                         ("keys", "ok"), ("dual_level", "ok"), ("answer", "ok")]
    assert "all LLM calls, by stage:" in out and "answer_generate" in out
    # every answer was asked for as a stream
    answers = [b for b in bodies if prompt_kind(b) == "answer"]
    assert len(answers) == 2 and all(b.get("stream") is True for b in answers)


def test_without_a_model_it_says_how_to_give_one_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    assert load().main(["--embedder", "hashing"]) == 2
    err = capsys.readouterr().err
    assert "needs an LLM: pass --model" in err and "OPENAI_MODEL" in err


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_a_model_that_cannot_extract_leaves_the_answers_without_a_kg(
    capsys: pytest.CaptureFixture[str]
) -> None:
    def no_records(body: dict[str, Any]) -> str:
        return "I am not sure what you mean." if prompt_kind(body) == "extract" \
            else stub_chat(body)

    with StubOpenAI(chat=no_records) as stub:
        status = load().main(["--base-url", stub.url, "--model", "stub", "--api-key", "EMPTY",
                              "--embedder", "hashing", "--kg-chunks", "2", "--question", FIRST])
    captured = capsys.readouterr()
    assert status == 0
    assert "KG extraction stopped: all 2 chunks of batch 1/1 failed" in captured.err
    assert "-> answering without a KG" in captured.err
    assert "A: John Kukuzelis introduced it." in captured.out
    assert "kg_entity" not in captured.out and "kg_relation" not in captured.out
