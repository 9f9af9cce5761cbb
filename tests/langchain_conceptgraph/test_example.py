"""examples/langchain_rag_chain.py runs offline on the sample corpus and says which LLM it used."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.shared_core.openai_stub import StubOpenAI

EXAMPLE = Path(__file__).parents[2] / "examples" / "langchain_rag_chain.py"


def test_example_runs_offline_and_names_its_stand_in_llms(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = importlib.util.spec_from_file_location("langchain_rag_chain", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--embedder", "hashing", "--passages", "40", "--questions", "2",
                 "--kappa", "0.5"])
    out = capsys.readouterr().out
    assert out.startswith("LLM: offline stand-ins, no language model")
    # kappa is a share of tokens: at most half the tokens, whatever the chunk count
    kept, total, used, tokens = map(int, re.search(  # type: ignore[union-attr]
        r"kept (\d+)/(\d+) chunks (\d+)/(\d+) tokens", out.replace(",", "")).groups())
    assert total == 40 and 0 < kept < 40 and used <= tokens / 2
    assert f"from {kept} extractor calls ({40 - kept} calls saved)" in out
    assert out.count("\nQ: ") == 2 and out.count("   answer: ") == 2


# the KG a "model" returns for every chunk: two nodes, one relationship, so one fact a chunk
STUB_GRAPH = {
    "nodes": [{"id": "Orlando", "type": "Place"}, {"id": "Florida", "type": "Place"}],
    "relationships": [{"source_node_id": "Orlando", "source_node_type": "Place",
                       "target_node_id": "Florida", "target_node_type": "Place",
                       "type": "IN"}],
}


def stub_chat(body: dict[str, Any]) -> str:
    """LLMGraphTransformer asks for JSON by schema (``response_format``); answers are text."""
    return json.dumps(STUB_GRAPH) if "response_format" in body else "stub answer"


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_example_real_llm_option_reaches_an_openai_compatible_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real-LLM option (the ``openai`` extra) with OPENAI_BASE_URL: every call to the stub."""
    with StubOpenAI(native_dim=1536, chat=stub_chat) as stub:
        monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
        monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
        spec = importlib.util.spec_from_file_location("langchain_rag_chain", EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main(["--chat-model", "stub-chat", "--passages", "6", "--questions", "2",
                     "--kappa", "0.5"])
    out = capsys.readouterr().out
    assert out.startswith(f"LLM: stub-chat at {stub.url} (KG extraction and answers)\n"
                          "embeddings: openai/text-embedding-3-small@1536\n")
    kept = int(re.search(r"kept (\d+)/6 chunks", out).group(1))  # type: ignore[union-attr]
    assert 0 < kept < 6
    # one extraction call per core chunk, one relationship (fact) per call
    assert f"{kept} facts from {kept} extractor calls ({6 - kept} calls saved)" in out
    assert out.count("   answer: stub answer\n") == 2
    chats = [r for r in stub.requests if r.path == "/v1/chat/completions"]
    assert sum("response_format" in r.body for r in chats) == kept
    assert len(chats) == kept + 2 and all(r.body["model"] == "stub-chat" for r in chats)
    embeds = [r for r in stub.requests if r.path == "/v1/embeddings"]
    assert embeds and len(embeds) + len(chats) == len(stub.requests)
    assert all(r.body["model"] == "text-embedding-3-small" and "dimensions" not in r.body
               for r in embeds)
    assert all(r.headers["authorization"] == "Bearer EMPTY" for r in stub.requests)
