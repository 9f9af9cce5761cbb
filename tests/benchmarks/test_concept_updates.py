"""The concept-updates benchmark: the kept concept graph through a run of updates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.concept_updates import main
from shared_core.search import concepts
from tests.benchmarks.dev_sets import write_dev_set
from tests.shared_core.test_store import TEXTS

MORE = [
    "Alan Turing described a universal machine. The machine read a tape.",
    "Konrad Zuse built the Z3 computer. The Z3 used relays.",
    "John von Neumann described stored programs. Programs lived in memory.",
    "Tommy Flowers built Colossus. Colossus broke ciphers with valves.",
    "The ENIAC used vacuum tubes. Engineers rewired the ENIAC by hand.",
]


def test_a_run_of_updates_reports_the_kept_graph_after_each(tmp_path: Path) -> None:
    data = tmp_path / "data"
    texts = TEXTS + MORE
    write_dev_set(data / "tiny", [{"id": f"p{i}", "title": "", "text": t}
                                  for i, t in enumerate(texts)],
                  [{"id": "q1", "question": "Who designed the analytical engine?",
                    "answers": ["Babbage"]},
                   {"id": "q2", "question": "What did Colossus break?", "answers": ["ciphers"]}])
    out = tmp_path / "updates.json"
    main(["--dataset", "tiny", "--data", str(data), "--embedder", "hashing",
          "--cache", str(tmp_path / "cache.sqlite"), "--start", "0.5", "--share", "0.1",
          "--steps", "2", "--max-drift", "0.05", "2.0", "--max-beside", "1000", "--max-dead", "1.0",
          "--out", str(out)])
    # restored
    assert (concepts.MAX_ROW_DRIFT, concepts.MAX_BESIDE, concepts.MAX_DEAD_SHARE) == (
        0.2, 16_384, 0.25)
    report = json.loads(out.read_text(encoding="utf-8"))
    assert (report["passages"], report["questions"]) == (10, 2)
    assert [(r["max_row_drift"], r["max_beside"], r["max_dead_share"])
            for r in report["runs"]] == [(0.05, 1000, 1.0), (2.0, 1000, 1.0)]
    for run in report["runs"]:
        steps = run["steps"]
        # five built; each step adds one (and deletes half as many: none). One in six
        # chunks is a refresh; past a quarter, an update derives the graph whole
        assert [s["chunks"] for s in steps] == [5, 6, 7]
        assert "rebuilt" not in steps[0] and all("rebuilt" in s for s in steps[1:])
        for step in steps:
            assert step["live_rows"] + step["beside"] == step["usable"]
            assert sum(step["segments"]) == step["graph_rows"]
            assert step["dead_share"] == pytest.approx(
                1 - step["live_rows"] / step["graph_rows"], abs=1e-4)
            # so few concepts sit inside one beam: both graphs propose every one
            assert step["recall_kept"] == step["recall_fresh"] == 1.0
        assert run["context_kept_against_the_scan"] == 1.0
    # a concept may move as far as two unit vectors apart: none is put beside for moving,
    # only new concepts are, and the graph built first is kept throughout
    loose = report["runs"][1]["steps"]
    assert all(not s["rebuilt"] and not s["segment_written"]
               and s["segments"] == [loose[0]["usable"]] for s in loose[1:])
    assert loose[1]["beside"] > 0  # the added passage's new names (Turing, tape ...)


def test_the_codes_are_reported_through_the_same_updates(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_dev_set(data / "tiny", [{"id": f"p{i}", "title": "", "text": t}
                                  for i, t in enumerate(TEXTS + MORE)],
                  [{"id": "q1", "question": "Who designed the analytical engine?",
                    "answers": ["Babbage"]}])
    out = tmp_path / "codes.json"
    main(["--dataset", "tiny", "--data", str(data), "--embedder", "hashing",
          "--cache", str(tmp_path / "cache.sqlite"), "--start", "0.5", "--share", "0.1",
          "--steps", "2", "--codes", "--out", str(out)])
    (run,) = json.loads(out.read_text(encoding="utf-8"))["runs"]  # no concept graph swept
    steps = run["steps"]
    assert [s["chunks"] for s in steps] == [5, 6, 7]
    assert not steps[0]["carried"] and all(s["carried"] for s in steps[1:])
    assert not any(s["trained_again"] for s in steps)
    for step in steps:
        assert step["same_as_scan"] == step["same_as_scan_fresh"] == 1.0
        assert step["first_ask_carried"] == step["first_ask_fresh"] == 1.0  # 8 * top_k asked
    assert "update_s" not in steps[0] and all(s["update_s"] > 0 for s in steps[1:])
