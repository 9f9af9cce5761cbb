"""The LlamaIndex example runs offline end to end (hashing embedder, a slice of the corpus)."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "llamaindex_pgi_prefilter.py"


def test_example_runs_offline_and_says_which_llm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
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
