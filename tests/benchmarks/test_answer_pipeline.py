"""The harness's answer-pipeline figures against a real HTTP server (the stub on 127.0.0.1).

The stub answers by prompt kind and by the question each prompt starts with, so
every figure is worked out by hand for the tiny dev set's three questions:

- plain answers: always "Lyon", right for q1 only: EM 1/3, F1 1/3;
- the pipeline: q1's one-step plan passes the pre-check and answers "Lyon"
  (logic form); q2's plan is rejected by the pre-check and dual level answers
  "Vienna" (an accepted alias); q3's plan never parses (asked twice) and dual
  level's answer comes back empty (asked twice): a failed answer, scored as
  wrong, its route still counted. EM 2/3, F1 2/3; routes 1/3 logic form, 2/3
  dual level; LLM calls: decompose 4, step 2, pre-check 2, keys 2, answer 4.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.answer_pipeline import ANSWER_FORM
from benchmarks.answers import LLMSettings
from benchmarks.report import write_report
from benchmarks.run import RunConfig, run
from shared_core.answer.prompts import (
    ANSWER_CONTEXT_SYSTEM,
    ANSWER_LOGIC_SYSTEM,
    DECOMPOSE_SYSTEM,
    KEYS_SYSTEM,
    STEP_SYSTEM,
    VERIFY_SYSTEM,
)
from tests.benchmarks.dev_sets import write_dev_set
from tests.benchmarks.test_protocols import PASSAGES, QUESTIONS
from tests.shared_core.openai_stub import StubOpenAI

loopback = pytest.mark.allow_hosts(["127.0.0.1"])
KINDS = {DECOMPOSE_SYSTEM: "decompose", STEP_SYSTEM: "step", VERIFY_SYSTEM: "verify",
         KEYS_SYSTEM: "keys", ANSWER_LOGIC_SYSTEM: "answer", ANSWER_CONTEXT_SYSTEM: "answer"}
# (the plan, the step's answer, the verdict, the final answer) by question
SCRIPT = {
    "Alice": ("1. retrieve: Where was Alice Moreau born?", "Lyon", "SUPPORT it says", "Lyon"),
    "Bruno": ("1. retrieve: Which opera did Bruno Keller compose?", "Glasswing",
              "REJECT the premiere is missing", "Vienna"),
    "Carla": ("I cannot plan this.", "", "", ""),
}


def kind_of(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    return next((k for start, k in KINDS.items() if system.startswith(start[:40])), "plain")


def reply(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    kind = kind_of(body)
    if kind == "plain":
        return "Lyon"
    if kind == "keys":
        return '{"low_level_keywords": ["opera"], "high_level_keywords": ["art"]}'
    question = user.split("\n", 1)[0]  # every pipeline prompt starts "Question: ..."
    plan, step, verdict, answer = next(v for k, v in SCRIPT.items() if k in question)
    return {"decompose": plan, "step": step, "verify": verdict, "answer": answer}[kind]


def config(data: Path, tmp: Path, llm: LLMSettings | None) -> RunConfig:
    return RunConfig(data=str(data), protocol="passage", methods=["bm25", "g2cons"],
                     budget=200, out=str(tmp / "run.json"), embedder="hashing",
                     coverage=False, cache_path=str(tmp / "emb.sqlite"), llm=llm)


@loopback
def test_the_pipeline_is_scored_next_to_plain_answers_on_the_same_questions(
    tmp_path: Path
) -> None:
    data = write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)
    with StubOpenAI(chat=reply) as stub:
        llm = LLMSettings("stub-chat", base_url=stub.url, questions=3, concurrency=1,
                          cache_dir=str(tmp_path / "llm"))
        result = run(config(data, tmp_path, llm))
        bodies = stub.chat_bodies()
    assert result["failed"] == {}
    methods = result["methods"]
    assert "answer_pipeline" not in methods["bm25"]  # not on our concept index
    plain, piped = methods["g2cons"]["answers"], methods["g2cons"]["answer_pipeline"]
    assert plain["em"] == pytest.approx(1 / 3) and plain["f1"] == pytest.approx(1 / 3)
    assert piped["questions"] == 3 and piped["failed_answers"] == 1
    assert [(f["question"], f["kind"]) for f in piped["failures"]] == [(2, "empty")]
    assert piped["em"] == pytest.approx(2 / 3) and piped["f1"] == pytest.approx(2 / 3)
    assert piped["routes"] == {"logic_form": pytest.approx(1 / 3),
                               "dual_level": pytest.approx(2 / 3)}
    assert piped["left_logic_form_at"] == {"precheck:rejected": 1, "decompose:unparsable": 1}
    assert piped["keys_from_graph"] == 0
    calls = {stage: usage["calls"] for stage, usage in piped["usage"].items()}
    assert calls == {"answer_decompose": 4, "answer_step": 2, "answer_precheck": 2,
                     "answer_keys": 2, "answer_generate": 4}
    assert all(piped["usage"][s]["input_tokens"] > 0 for s in calls)
    assert piped["context_tokens_mean"] > 0
    # the answer form reached both answer prompts; the stub saw every call counted above
    answers = [b for b in bodies if kind_of(b) == "answer"]
    assert len(answers) == 4 and all(ANSWER_FORM in b["messages"][0]["content"]
                                     for b in answers)
    assert sum(1 for b in bodies if kind_of(b) != "plain") == sum(calls.values())

    results = tmp_path / "results"
    results.mkdir()
    (results / "run.json").write_text((tmp_path / "run.json").read_text())
    write_report(results, tmp_path / "RESULTS.md")
    text = (tmp_path / "RESULTS.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `run.json` | g2cons | 3 |"))
    assert "| 33.3 / 33.3 | 66.7 / 66.7 |" in row and "| 33 / 67 |" in row
    assert "decompose:unparsable 1" in row and "precheck:rejected 1" in row
    assert row.endswith("| 1 |")


def test_without_an_llm_the_pipeline_is_not_measured(tmp_path: Path) -> None:
    data = write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)
    result = run(config(data, tmp_path, None))
    assert "answer_pipeline" not in result["methods"]["g2cons"]
    results = tmp_path / "results"
    results.mkdir()
    (results / "run.json").write_text((tmp_path / "run.json").read_text())
    write_report(results, tmp_path / "RESULTS.md")
    text = (tmp_path / "RESULTS.md").read_text()
    section = text.split("### Answer pipeline (HuixiangDou2) against plain retrieval + answer")[1]
    assert section.lstrip().startswith("Not measured: no run answered through HuixiangDou2's")
