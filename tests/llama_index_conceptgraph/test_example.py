"""The LlamaIndex example runs offline end to end (hashing embedder, a slice of the corpus)."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.shared_core.openai_stub import StubOpenAI

EXAMPLE = Path(__file__).parents[2] / "examples" / "llamaindex_pgi_prefilter.py"


def test_example_runs_offline_and_says_which_llm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--embedder", "hashing", "--passages", "40",
                                      "--questions", "1", "--kappa", "0.5"])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "deterministic rule-based stand-in (no language model, offline)" in out
    kept, total = map(int, re.search(r"kept (\d+)/(\d+) chunks", out).groups())  # type: ignore[union-attr]
    used, tokens = map(int, re.search(  # type: ignore[union-attr]
        r"chunks (\d+)/(\d+) tokens", out.replace(",", "")).groups())
    assert 0 < kept < total and used <= tokens / 2  # kappa=0.5 of the tokens
    calls = int(re.search(r"extractor actually called (\d+) times", out).group(1))  # type: ignore[union-attr]
    assert calls == kept
    assert f"KG built from {kept} core chunks" in out
    assert "Q: " in out and "answer: " in out


def stub_chat(body: dict[str, Any]) -> str:
    """Two triples for an extraction prompt, names for a keyword prompt, else a fixed answer."""
    prompt = body["messages"][-1]["content"]
    if "Triplets:" in prompt:
        return "(Orlando, in, Florida)\n(Orlando, has, American Federal Building)"
    return "Orlando^Florida" if "KEYWORDS:" in prompt else "stub answer"


@pytest.mark.allow_hosts(["127.0.0.1"])
def test_example_real_llm_option_reaches_an_openai_compatible_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With OPENAI_API_KEY and OPENAI_BASE_URL, extraction, answers and embeddings hit the stub."""
    with StubOpenAI(native_dim=1536, chat=stub_chat) as stub:
        monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
        monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
        monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--chat-model", "stub-chat",
                                          "--passages", "6", "--questions", "1",
                                          "--kappa", "0.5"])
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert out.startswith(f"LLM (KG extraction, synonym keywords, answers): stub-chat at "
                          f"{stub.url}\nEmbeddings: openai/text-embedding-3-small@1536\n")
    kept = int(re.search(r"kept (\d+)/(\d+) chunks", out).group(1))  # type: ignore[union-attr]
    assert f"extractor actually called {kept} times" in out
    assert f"KG built from {kept} core chunks" in out and "answer: stub answer" in out
    chats = [r for r in stub.requests if r.path == "/v1/chat/completions"]
    prompts = [r.body["messages"][-1]["content"] for r in chats]
    assert sum("Triplets:" in p for p in prompts) == kept  # only the core chunks
    assert all(r.body["model"] == "stub-chat" for r in chats)
    embeds = [r for r in stub.requests if r.path == "/v1/embeddings"]
    assert embeds and len(embeds) + len(chats) == len(stub.requests)
    assert all(r.body["model"] == "text-embedding-3-small" and "dimensions" not in r.body
               for r in embeds)
