"""The Milvus Lite memory benchmark: real rows written, reopened and searched in fresh processes."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.milvus_memory import main


def test_milvus_memory_reports_each_row_count_and_a_projection(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    main(["--rows", "2500", "3000", "--dim", "16", "--project", "1000000",
          "--out", str(out)])
    report = json.loads(out.read_text(encoding="utf-8"))
    assert [row["rows"] for row in report["rows"]] == [2500, 3000]
    for row in report["rows"]:
        assert row["raw_float32_mb"] == 0.2  # 2,500 or 3,000 rows x 16 float32: 0.15, 0.18 MiB
        # the file holds at least the raw vectors; the reopened process holds the rows
        assert row["file_mb"] >= row["raw_float32_mb"]
        assert row["reopened_collection_mb"] > 0 and row["search_2000_s"] > 0
    # the projection is the slope between the two counts, times the projected rows
    a, b = report["rows"]
    slope = (b["reopened_collection_mb"] - a["reopened_collection_mb"]) * 2**20 / 500
    assert report["bytes_per_row_slope"] == round(slope)
    assert report["projected_reopened_gb"] == round(
        slope * 1_000_000 / 1e9, 1)
    # Milvus Lite's answer to half-precision vectors is recorded, whichever it is
    assert isinstance(report["float16_vectors"], str) and report["float16_vectors"]
