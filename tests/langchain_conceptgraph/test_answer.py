"""ConceptGraphAnswerer: the core pipeline as a runnable, translated and nothing more.

The pipeline's branches are tested in ``tests/shared_core/answer``; here the
runnable must give what the core gives (same text, same route, same context),
as LangChain types, through every runnable entry point, with a LangChain chat
model or a scripted one.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from langchain_conceptgraph import ConceptGraphAnswerer, ConceptGraphRetriever, CoreEmbeddings
from shared_core import HashingEmbedder
from shared_core.answer import AnswerConfig
from shared_core.answer.pipeline import GENERATE_STAGE
from shared_core.llm import LLMRunner
from tests.shared_core.answer.corpus import build_index, build_kg
from tests.shared_core.answer.test_pipeline import ANSWER, PLAN, QUESTION, script
from tests.shared_core.llm.scripted import word_deltas


class CustomEvents(BaseCallbackHandler):
    """Records the custom events a run dispatches."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.events.append({"name": name, **data})


class Runs(BaseCallbackHandler):
    """Records which run started which: (kind, run id, parent run id)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, Any, Any]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any,
                       parent_run_id: Any = None, **kwargs: Any) -> None:
        self.runs.append(("chain", run_id, parent_run_id))

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any,
                            parent_run_id: Any = None, **kwargs: Any) -> None:
        self.runs.append(("llm", run_id, parent_run_id))


LOGIC_STAGES = ["decompose", "logic_form", "precheck", "answer"]


def answerer(chat: Any, **config: Any) -> ConceptGraphAnswerer:
    return ConceptGraphAnswerer.from_llm(chat, build_index(), build_kg(),
                                         config=AnswerConfig(**config))


def test_a_langchain_chat_model_drives_every_stage_of_the_logic_form_route() -> None:
    # the replies in call order: plan, two step answers, the verdict, the answer
    llm = GenericFakeChatModel(messages=iter([PLAN, "330 metres", "93 metres",
                                              "SUPPORT both heights are given", ANSWER]))
    out = answerer(llm).answer_with_sources(QUESTION)
    assert out["answer"] == ANSWER and out["route"] == "logic_form"
    assert out["fallback_reason"] is None
    assert [s["name"] for s in out["trace"]["stages"]] == LOGIC_STAGES
    steps = out["trace"]["stages"][1]["output"]["steps"]
    assert steps[2]["result"] == "237"  # 330 - 93, computed in Python


def test_the_runnable_gives_what_the_core_pipeline_gives() -> None:
    core = answerer(script()).pipeline.answer(QUESTION)
    out = answerer(script()).answer_with_sources(QUESTION)
    assert out["answer"] == core.text == ANSWER
    assert [d.id for d in out["sources"]] == [e.piece_id for e in core.evidence]
    assert [d.page_content for d in out["sources"]] == [e.text for e in core.evidence]
    assert [d.metadata["provenance"] for d in out["sources"]] \
        == [e.provenance() for e in core.evidence]
    assert all(d.metadata["provenance"]["step"] in (1, 2) for d in out["sources"])


def test_invoke_takes_a_str_or_a_dict_and_returns_the_text() -> None:
    runnable = answerer(script())
    assert runnable.invoke(QUESTION) == ANSWER
    assert runnable.invoke({"question": QUESTION, "other": 1}) == ANSWER
    by_query = ConceptGraphAnswerer(pipeline=runnable.pipeline, question_key="query")
    assert by_query.invoke({"query": QUESTION}) == ANSWER


def test_stream_yields_the_llm_deltas_and_reports_the_trace_as_an_event() -> None:
    chat = script()
    runnable = answerer(chat)
    handler = CustomEvents()
    parts = list(runnable.stream(QUESTION, config={"callbacks": [handler]}))
    events = handler.events
    assert parts == word_deltas(ANSWER) and len(parts) > 1
    assert [e["name"] for e in events] == ["conceptgraph_answer"]
    assert events[0]["route"] == "logic_form"
    assert [s["name"] for s in events[0]["trace"]["stages"]] == LOGIC_STAGES
    assert [s["chunk_id"] for s in events[0]["sources"]] \
        == [s.metadata["chunk_id"] for s in runnable.answer_with_sources(QUESTION)["sources"]]


async def test_ainvoke_astream_and_astream_events() -> None:
    runnable = answerer(script())
    assert await runnable.ainvoke(QUESTION) == ANSWER
    parts = [p async for p in runnable.astream({"question": QUESTION})]
    assert parts == word_deltas(ANSWER)
    seen = [e async for e in runnable.astream_events(QUESTION, version="v2")]
    streamed = [e["data"]["chunk"] for e in seen if e["event"] == "on_chain_stream"]
    assert "".join(streamed) == ANSWER
    custom = [e for e in seen if e["event"] == "on_custom_event"]
    assert [e["name"] for e in custom] == ["conceptgraph_answer"]
    assert custom[0]["data"]["trace"]["route"] == "logic_form"
    out = await runnable.aanswer_with_sources(QUESTION)
    assert out["answer"] == ANSWER and out["route"] == "logic_form"


def test_the_fallback_route_answers_from_dual_level_keys() -> None:
    runnable = answerer(script(decompose="I would look it up."))
    out = runnable.answer_with_sources(QUESTION)
    assert out["answer"] == ANSWER and out["route"] == "dual_level"
    assert out["fallback_reason"].startswith("the decomposition failed (unparsable: ")
    assert [(s["name"], s["status"]) for s in out["trace"]["stages"]] \
        == [("decompose", "failed"), ("keys", "ok"), ("dual_level", "ok"), ("answer", "ok")]
    levels = {d.metadata["provenance"]["level"] for d in out["sources"]}
    assert levels <= {"low", "high"} and "low" in levels
    # a KG fact is a source too: its own id, tied to the chunk it came from
    facts = [d for d in out["sources"] if d.metadata["provenance"]["source"].startswith("kg_")]
    assert facts and all(d.id.startswith(f"{d.metadata['chunk_id']}#kg_") for d in facts)


def test_it_drops_into_a_chain_and_batches() -> None:
    runnable = answerer(script())
    chain = RunnablePassthrough.assign(answer=runnable) | RunnableLambda(
        lambda d: f"Q: {d['question']} A: {d['answer']}")
    assert chain.invoke({"question": QUESTION}) == f"Q: {QUESTION} A: {ANSWER}"
    assert runnable.batch([QUESTION, {"question": QUESTION}]) == [ANSWER, ANSWER]
    routed = runnable.with_sources() | RunnableLambda(lambda d: (d["route"], len(d["sources"])))
    route, sources = routed.invoke(QUESTION)
    assert route == "logic_form" and sources == len(runnable.pipeline.answer(QUESTION).evidence)


def test_sources_keep_the_documents_own_metadata() -> None:
    docs = [Document(page_content="Ada Lovelace wrote the first computer program.", id="ada",
                     metadata={"source": "ada.txt"}),
            Document(page_content="Charles Babbage designed the Analytical Engine.",
                     id="babbage", metadata={"source": "babbage.txt"})]
    retriever = ConceptGraphRetriever.from_documents(docs, CoreEmbeddings(HashingEmbedder()))
    llm = GenericFakeChatModel(messages=iter(["Ada Lovelace"]))
    runnable = ConceptGraphAnswerer.from_llm(
        llm, retriever, config=AnswerConfig(logic_form=False, llm_keys=False))
    out = runnable.answer_with_sources("Who wrote the first computer program?")
    assert out["answer"] == "Ada Lovelace"
    first = out["sources"][0]
    assert first.id == "ada" and first.metadata["source"] == "ada.txt"
    assert first.metadata["provenance"]["level"] == "low"


def test_a_runner_passed_in_keeps_its_ledger() -> None:
    runner = LLMRunner(script())
    runnable = ConceptGraphAnswerer.from_llm(runner, build_index(), build_kg())
    runnable.invoke(QUESTION)
    assert runnable.pipeline.runner is runner
    assert runner.ledger[GENERATE_STAGE].calls == 1


def test_bad_input_is_named() -> None:
    runnable = answerer(script())
    with pytest.raises(TypeError, match="as a str or a dict"):
        runnable.invoke(42)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=r"no 'question' key \(it has 'query'\)"):
        runnable.invoke({"query": QUESTION})
    with pytest.raises(ValueError, match="empty or blank"):
        runnable.invoke("   ")
    with pytest.raises(ValueError, match="empty or blank"):
        list(runnable.stream("   "))
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'k'"):
        runnable.invoke(QUESTION, k=3)
    with pytest.raises(TypeError, match="BaseChatModel or a conceptgraph ChatModel"):
        ConceptGraphAnswerer.from_llm("gpt-4o", build_index())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="question_key is empty"):
        ConceptGraphAnswerer(pipeline=runnable.pipeline, question_key="")



def test_a_fused_retriever_is_refused_with_what_to_pass_instead() -> None:
    """The answer pipeline reads our KG, not a fused retriever's framework one: a fused
    retriever is refused with the way to pass the concept graph and our KG."""
    from langchain_conceptgraph import FusedRetriever

    concept = ConceptGraphRetriever(index=build_index())
    fused = FusedRetriever(concept_retriever=concept, kg_retriever=concept)
    with pytest.raises(TypeError, match=r"not a FusedRetriever.*Pass fused.concept_retriever, "
                                        r"and our KG \(extract_kg's graph\) as kg="):
        ConceptGraphAnswerer.from_llm(script(), fused)  # type: ignore[arg-type]
    answered = ConceptGraphAnswerer.from_llm(script(), fused.concept_retriever, build_kg())
    assert answered.pipeline.index is concept.index


@pytest.mark.parametrize("call", ["invoke", "ainvoke", "stream"])
async def test_the_llm_calls_are_child_runs_of_the_answerer(call: str) -> None:
    # the logic-form route: plan, two steps, verdict, answer: five chat-model runs
    llm = GenericFakeChatModel(messages=iter([PLAN, "330 metres", "93 metres",
                                              "SUPPORT both heights are given", ANSWER]))
    runnable, runs = answerer(llm), Runs()
    config = {"callbacks": [runs]}
    if call == "invoke":
        assert runnable.invoke(QUESTION, config=config) == ANSWER  # type: ignore[arg-type]
    elif call == "ainvoke":
        assert await runnable.ainvoke(QUESTION, config=config) == ANSWER  # type: ignore[arg-type]
    else:
        assert "".join(runnable.stream(QUESTION, config=config)) == ANSWER  # type: ignore[arg-type]
    root = [run_id for kind, run_id, parent in runs.runs if kind == "chain" and parent is None]
    llm_parents = [parent for kind, _, parent in runs.runs if kind == "llm"]
    assert len(root) == 1 and llm_parents == [root[0]] * 5
