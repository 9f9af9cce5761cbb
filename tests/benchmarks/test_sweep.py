"""The G2ConS sweep command on the tiny dataset of test_protocols."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.sweep import main
from shared_core import ConceptGraphConfig

from .test_protocols import data_dir  # noqa: F401  (the tiny dataset fixture)


def test_sweep_scores_each_variant(data_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "sweep.json"
    main(["--data", str(data_dir), "--protocol", "passage", "--embedder", "hashing",
          "--cache", str(tmp_path / "cache.sqlite"), "--out", str(out),
          "--variant", "{}", "--variant", '{"unit_tokens": 5, "top_k": 50}'])
    result = json.loads(out.read_text())
    assert [row["variant"] for row in result["rows"]] == [{}, {"unit_tokens": 5, "top_k": 50}]
    # each row records the whole resolved config, so "defaults" stays meaningful later
    assert result["rows"][0]["config"] == ConceptGraphConfig(budget=result["budget"]).to_dict()
    assert result["rows"][1]["config"]["unit_tokens"] == 5
    # the four passages hold ~40 tokens, far under the 12,000 budget, and have ~20
    # distinct terms, fewer than top_k=25, so every concept is direct and every
    # passage is in the context. q1 (Lyon) and q2 (Vienna) are answered by it,
    # q3 (mosaics) is not: CR = 2/3
    for row in result["rows"]:
        assert abs(row["cr"] - 2 / 3) < 1e-9
        assert row["stats"]["chunks"] == 4
