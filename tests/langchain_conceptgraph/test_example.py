"""examples/langchain_rag_chain.py runs offline on the sample corpus and says which LLM it used."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "langchain_rag_chain.py"


def test_example_runs_offline_and_names_its_stand_in_llms(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
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
