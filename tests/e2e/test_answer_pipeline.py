"""The answer pipeline against a real llama.cpp server: stages, streaming, traces.

Structure only: SmolLM2-135M writes plans and verdicts that may or may not
parse, so either route may win; whichever it is, the trace must say so
consistently, the answer must stream in several parts that join to the text,
and every token the server reported must be booked to exactly one stage. One
test holds the plan, step and verdict prompts to their formats with llama.cpp
grammars, so the logic-form route itself runs against the server.
"""

from __future__ import annotations

from dataclasses import asdict

from llama_index.core.base.response.schema import AsyncStreamingResponse

from benchmarks.structural import GrammarByPrompt
from llama_index_conceptgraph import ConceptGraphQueryEngine
from shared_core.answer import (
    AnswerConfig,
    AnswerPipeline,
    AnswerTrace,
    first_number,
    format_value,
)
from shared_core.answer.prompts import DECOMPOSE_SYSTEM, STEP_SYSTEM, VERIFY_SYSTEM
from shared_core.llm import LLMRunner, OpenAIChat, StageUsage
from tests.shared_core.answer.corpus import build_index, build_kg

from .llama_server import MODEL_NAME, LlamaServer

QUESTION = "How much taller is the Eiffel Tower than the Statue of Liberty?"
# small budgets: the server reads about 150 prompt tokens a second on 2 cores
CONFIG = AnswerConfig(budget=300, key_budget=100, step_budget=100, max_steps=3, max_keys=3,
                      keys_max_tokens=64, decompose_max_tokens=96, step_max_tokens=16,
                      verify_max_tokens=24, answer_max_tokens=32)
LOGIC_STAGES = ["decompose", "logic_form", "precheck"]


def pipeline(server: LlamaServer) -> AnswerPipeline:
    runner = LLMRunner(OpenAIChat(MODEL_NAME, base_url=server.url, timeout=120))
    return AnswerPipeline(runner, build_index(), build_kg(), config=CONFIG)


def check_trace(trace: AnswerTrace, text: str) -> None:
    """The stages ran in a valid order, the route matches them, and tokens add up."""
    names = trace.names
    assert trace.complete and names[-1] == "answer" and trace.stages[-1].status == "ok"
    assert trace.stages[-1].output["text"] == text
    assert names[0] == "decompose"
    if trace.route == "logic_form":
        assert names == [*LOGIC_STAGES, "answer"] and trace.fallback_reason is None
        assert all(s.status == "ok" for s in trace.stages)
    else:
        assert trace.route == "dual_level" and trace.fallback_reason
        assert names[-3:] == ["keys", "dual_level", "answer"]
        assert names[:-3] == LOGIC_STAGES[:len(names) - 3]
        assert trace.stages[len(names) - 4].status in ("failed", "rejected")
    total = StageUsage()
    for stage in trace.stages:
        total.add(stage.tokens)
        if stage.name in ("decompose", "precheck", "keys", "answer"):
            assert stage.tokens.calls >= 1 and stage.tokens.input_tokens > 0
    assert asdict(total) == asdict(trace.tokens())
    # llama-cpp-python's server reports usage on plain replies but sends no usage chunk
    # when streaming (checked by hand on 0.3.36), so only the answer is counted here
    for stage in trace.stages:
        assert stage.tokens.calls_counted_locally == (
            stage.tokens.calls if stage.name == "answer" else 0)


def test_the_answer_streams_in_parts_and_the_trace_is_complete(
    llama_server: LlamaServer
) -> None:
    p = pipeline(llama_server)
    stream = p.stream(QUESTION)
    parts = list(stream)
    answer = stream.result()
    assert len(parts) > 1 and "".join(parts) == answer.text and answer.text.strip()
    check_trace(answer.trace, answer.text)
    assert answer.evidence  # the tiny corpus always gives the route some context
    assert asdict(p.runner.ledger.total()) == asdict(answer.trace.tokens())


async def test_the_llama_index_engine_streams_async_with_sources_first(
    llama_server: LlamaServer
) -> None:
    engine = ConceptGraphQueryEngine(pipeline(llama_server), streaming=True)
    response = await engine.aquery(QUESTION)
    assert isinstance(response, AsyncStreamingResponse) and response.metadata is not None
    trace = response.metadata["trace"]
    assert response.source_nodes and not trace.complete  # sources before the first token
    parts = [part async for part in response.async_response_gen()]
    assert len(parts) > 1
    check_trace(trace, "".join(parts))


# GBNF grammars for llama.cpp's sampler: the plan's shape is fixed (the model picks which
# landmark each lookup names), a step's answer is a height, the verdict is SUPPORT
PLAN = r'''
root ::= "1. " lookup "\n2. " lookup "\n3. compute: {step1} - {step2}"
lookup ::= "retrieve: How tall is the " thing "?"
thing ::= "Eiffel Tower" | "Statue of Liberty"
'''
HEIGHT = r'root ::= [1-9] [0-9] [0-9]? " metres"'
VERDICT = r'root ::= "SUPPORT " [a-z]{2,10} (" " [a-z]{2,10}){0,4}'
GRAMMARS = {DECOMPOSE_SYSTEM: PLAN, STEP_SYSTEM: HEIGHT, VERIFY_SYSTEM: VERDICT}


def test_the_logic_form_route_runs_on_the_server_and_python_does_the_arithmetic(
    llama_server: LlamaServer
) -> None:
    config = AnswerConfig(budget=300, key_budget=100, step_budget=100, max_steps=3,
                          decompose_max_tokens=64, step_max_tokens=8, verify_max_tokens=16,
                          answer_max_tokens=32)
    # every call a real request; only the sampler is held to the format a 135M model
    # cannot follow on its own
    chat = GrammarByPrompt(MODEL_NAME, llama_server.url, GRAMMARS)
    p = AnswerPipeline(LLMRunner(chat), build_index(), build_kg(), config=config)
    stream = p.stream(QUESTION)
    parts = list(stream)
    answer = stream.result()
    assert answer.route == "logic_form"
    assert [(s.name, s.status) for s in answer.trace.stages] == [
        ("decompose", "ok"), ("logic_form", "ok"), ("precheck", "ok"), ("answer", "ok")]
    assert answer.logic is not None
    first, second, difference = answer.logic.steps
    a, b = first_number(first.result), first_number(second.result)
    assert a is not None and b is not None  # the heights the model read off
    assert difference.step.operator == "compute" and difference.result == format_value(a - b)
    assert len(parts) > 1 and "".join(parts) == answer.text
    check_trace(answer.trace, answer.text)
