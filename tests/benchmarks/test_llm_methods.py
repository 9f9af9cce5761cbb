"""The harness's LLM columns against a real HTTP server (the stub on 127.0.0.1).

The stub answers each prompt kind by rule, so every count below is worked out
from the tiny dev set: 4 passages (p5 is blank and skipped), 3 questions.
- our KG (``g2cons_kg``): one extraction call per core chunk, none on a rerun;
- TERAG (``terag_llm``): 4 passages at 5 per call is 1 extraction call, then one
  query-NER call per question plus the harness's budget re-check (4);
- answers: the stub always says "Lyon", right for q1 only: EM 1/3.
Without an LLM the same methods are reported as not measured, never as zeros.
(The answer pipeline is off here; ``test_answer_pipeline.py`` measures it.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks.answers import NOT_MEASURED, LLMSettings
from benchmarks.report import write_report
from benchmarks.run import RunConfig, run
from tests.benchmarks.dev_sets import write_dev_set
from tests.benchmarks.test_protocols import PASSAGES, QUESTIONS
from tests.shared_core.openai_stub import StubOpenAI

loopback = pytest.mark.allow_hosts(["127.0.0.1"])
NAMES = ("Alice Moreau", "Bruno Keller", "Glasswing", "Carla Rossi", "Lyon", "Siena")


def kind_of(body: dict[str, Any]) -> str:
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "=== Passage" in user:
        return "terag_extract"
    if "named entities in a question" in system:
        return "terag_query"
    if user.startswith("Answer the question using only the context"):
        return "answer"
    return "kg"


def reply(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    kind = kind_of(body)
    if kind == "answer":
        return "Lyon"
    if kind == "terag_query":
        question = user.rsplit("Question:", 1)[1]
        return "ENTITIES: " + ", ".join(n for n in NAMES if n in question)
    if kind == "terag_extract":
        blocks = re.split(r"=== Passage \d+ ===\n", user.rsplit("Example output:", 1)[1])[1:]
        return "\n\n".join(f"Passage {i}:\nENTITIES: "
                           + ", ".join(n for n in NAMES if n in text)
                           + "\nCONCEPTS: art" for i, text in enumerate(blocks, 1))
    chunk = user.rsplit("Text:", 1)[-1]
    records = [f'("entity"<|>{n}<|>person<|>named in the text)' for n in NAMES if n in chunk]
    return "##".join(records or ['("entity"<|>Nobody<|>person<|>a placeholder)']) \
        + "<|COMPLETE|>"


def config(data: Path, tmp: Path, llm: LLMSettings | None, out: str) -> RunConfig:
    return RunConfig(data=str(data), protocol="passage",
                     methods=["bm25", "g2cons_kg:kappa=0.5", "terag_llm"], budget=200,
                     out=str(tmp / out), embedder="hashing", coverage=False,
                     cache_path=str(tmp / "emb.sqlite"), llm=llm)


@loopback
def test_llm_methods_measure_extraction_fusion_and_answers(tmp_path: Path) -> None:
    data = write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)
    with StubOpenAI(chat=reply) as stub:
        llm = LLMSettings("stub-chat", base_url=stub.url, questions=3, concurrency=1,
                          cache_dir=str(tmp_path / "llm"), pipeline=False)
        result = run(config(data, tmp_path, llm, "first.json"))
        kinds = [kind_of(r.body) for r in stub.requests if r.path.endswith("/completions")]
    assert result["failed"] == {} and result["unavailable"] == {}
    kg = result["methods"]["g2cons_kg:kappa=0.5"]["diagnostics"]
    tokens = kg["extraction_tokens"]
    assert kg["all_chunks"] == 4 and 1 <= kg["core_chunks"] < 4
    assert kinds.count("kg") == kg["core_chunks"] == tokens["measured_at_kappa"]["calls"]
    assert tokens["estimated_at_kappa"]["calls"] == kg["core_chunks"]
    assert tokens["estimated_at_100"]["calls"] == 4
    assert 0 < tokens["input_share_of_100"] < 1
    assert kg["kg_entities"] >= 1 and kg["failed_chunks"] == 0
    assert kinds.count("terag_extract") == 1 and kinds.count("terag_query") == 4
    terag = result["methods"]["terag_llm"]["diagnostics"]
    assert terag["passages"] == 4 and terag["failures"] == {}
    assert set(terag["token_table"]) == {"ner_concepts", "query_ner"}
    assert kinds.count("answer") == 3 * 3
    for method in result["methods"].values():
        assert method["answers"]["questions"] == 3
        assert method["answers"]["em"] == pytest.approx(1 / 3)
        assert method["answers"]["failed_calls"] == 0
    assert result["llm"]["model"] == "stub-chat"

    # a rerun reads both extractions from the cache: no extraction call is paid again
    with StubOpenAI(chat=reply) as stub:
        llm = LLMSettings("stub-chat", base_url=stub.url, questions=3, concurrency=1,
                          cache_dir=str(tmp_path / "llm"), pipeline=False)
        again = run(config(data, tmp_path, llm, "second.json"))
        kinds = [kind_of(r.body) for r in stub.requests if r.path.endswith("/completions")]
    assert "kg" not in kinds and "terag_extract" not in kinds
    assert again["methods"]["g2cons_kg:kappa=0.5"]["cr"] == \
        result["methods"]["g2cons_kg:kappa=0.5"]["cr"]

    # the report shows these figures instead of "not measured"
    results = tmp_path / "results"
    results.mkdir()
    (results / "first.json").write_text((tmp_path / "first.json").read_text())
    write_report(results, tmp_path / "RESULTS.md")
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## With an LLM" in text and "33.3 / 33.3 (3 q)" in text
    assert f"our KG from {kg['core_chunks']} of 4 chunks" in text


def test_without_an_llm_the_llm_columns_say_not_measured(tmp_path: Path) -> None:
    data = write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)
    result = run(config(data, tmp_path, None, "plain.json"))
    assert set(result["methods"]) == {"bm25"} and "answers" not in result["methods"]["bm25"]
    assert result["unavailable"] == {"g2cons_kg:kappa=0.5": f"g2cons_kg: {NOT_MEASURED}",
                                     "terag_llm": f"terag_llm: {NOT_MEASURED}"}
    assert result["llm"] == {"measured": False, "note": NOT_MEASURED}
    results = tmp_path / "results"
    results.mkdir()
    (results / "plain.json").write_text(json.dumps({**result}))
    write_report(results, tmp_path / "RESULTS.md")
    assert "Not measured: no LLM was configured in any run above" in \
        (tmp_path / "RESULTS.md").read_text()


def test_g2cons_kg_refuses_protocols_whose_units_are_not_the_chunks(tmp_path: Path) -> None:
    data = write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)
    llm = LLMSettings("stub-chat", base_url="http://127.0.0.1:9/v1",
                      cache_dir=str(tmp_path / "llm"))
    cfg = RunConfig(data=str(data), protocol="sub100", methods=["g2cons_kg"], budget=200,
                    out=str(tmp_path / "r.json"), embedder="hashing", coverage=False,
                    cache_path=str(tmp_path / "emb.sqlite"), llm=llm)
    result = run(cfg)
    assert result["failed"]["g2cons_kg"]["type"] == "ValueError"
    assert "needs retrieval units that are the selection chunks" in \
        result["failed"]["g2cons_kg"]["message"]
