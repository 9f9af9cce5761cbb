"""The load-time command on a tiny saved index: it times real loads and the query after
each, and an upgrade saves first."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.load_time import main
from shared_core import ConceptGraphIndex, HashingEmbedder
from shared_core.store import read_manifest
from tests.shared_core.test_store import TEXTS


def test_load_time_times_each_load_and_upgrades_first(tmp_path: Path) -> None:
    ConceptGraphIndex.from_texts(TEXTS, embedder=HashingEmbedder(32)).save(str(tmp_path / "idx"))
    out = tmp_path / "report.json"
    main([str(tmp_path / "idx"), "--embedding-dim", "32", "--loads", "2",
          "--upgrade", str(tmp_path / "upgraded"), "--out", str(out)])
    report = json.loads(out.read_text(encoding="utf-8"))
    assert len(report["load_s"]) == 2 and all(s > 0 for s in report["load_s"])
    # a real query ran after each load (a tiny index answers in well over 0.1 ms)
    assert len(report["first_query_s"]) == 2 and all(s > 0 for s in report["first_query_s"])
    assert report["save_s"] > 0 and report["load_before_upgrade_s"] > 0
    assert read_manifest(tmp_path / "upgraded")["chunks"] == len(TEXTS)
    assert report["command"].startswith("python -m benchmarks.load_time ")
