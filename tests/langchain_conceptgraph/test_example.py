"""examples/langchain_rag_chain.py runs offline on the sample corpus and says which LLM it used."""

from __future__ import annotations

import importlib.util
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
    assert "kept 20/40 chunks" in out  # ceil(0.5 * 40)
    assert "from 20 extractor calls (20 calls saved)" in out
    assert out.count("\nQ: ") == 2 and out.count("   answer: ") == 2
