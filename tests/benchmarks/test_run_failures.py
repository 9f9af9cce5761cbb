"""A failing method costs only itself: the others run, every result is on disk as it
completes, the failure is recorded and reported, and the exit status says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.methods import METHODS, BuildInputs
from benchmarks.run import write_json_atomic
from tests.benchmarks.dev_sets import write_dev_set

PASSAGES = [
    {"id": "p1", "title": "Alice", "text": "Alice Moreau was born in Lyon in 1950."},
    {"id": "p2", "title": "", "text": "Bruno Keller composed the opera Glasswing."},
    {"id": "p3", "title": "", "text": "Carla Rossi painted frescoes in Siena churches."},
]
QUESTIONS = [
    {"id": "q1", "question": "Where was Alice Moreau born?", "answers": ["Lyon"],
     "supporting_ids": ["p1"], "hops": 1},
    {"id": "q2", "question": "What did Carla Rossi paint?", "answers": ["mosaics"],
     "supporting_ids": ["p3"], "hops": 1},
]  # fmt: skip


class _BrokenRetriever:
    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        raise KeyError("chunk-00312#u7")


def _broken(inputs: BuildInputs, options: dict[str, Any]) -> _BrokenRetriever:
    return _BrokenRetriever()


def _interrupted(inputs: BuildInputs, options: dict[str, Any]) -> _BrokenRetriever:
    raise KeyboardInterrupt


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)


def _argv(data_dir: Path, methods: str, out: Path) -> list[str]:
    return ["run", "--data", str(data_dir), "--protocol", "passage", "--methods", methods,
            "--budget", "16", "--embedder", "hashing", "--no-coverage", "--out", str(out),
            "--cache", str(out.parent / "cache.sqlite")]  # fmt: skip


def test_a_failing_method_is_recorded_and_the_others_still_run(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setitem(METHODS, "broken", _broken)
    out = tmp_path / "results" / "tiny_passage.json"
    assert main(_argv(data_dir, "bm25,broken,random", out)) == 1
    result = json.loads(out.read_text())
    assert list(result["methods"]) == ["bm25", "random"]
    # each passage is 9-14 tokens, so 16 hold one: BM25 finds the passage naming the
    # question's person (both supports), which holds q1's answer; q2's answer is nowhere
    assert result["methods"]["bm25"]["cr"] == 0.5 and result["methods"]["bm25"]["sr"] == 1.0
    assert result["failed"] == {"broken": {"type": "KeyError", "message": "'chunk-00312#u7'"}}
    assert result["complete"] is True
    err = capsys.readouterr()
    assert "FAILED: KeyError: 'chunk-00312#u7'" in err.err
    assert "Traceback" in err.err
    assert "broken               FAILED KeyError: 'chunk-00312#u7'" in err.out
    assert [p.name for p in out.parent.iterdir() if p.suffix == ".tmp"] == []


def test_each_method_is_on_disk_before_the_next_starts(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt (not a method failure) still stops the run, but what was measured stays."""
    monkeypatch.setitem(METHODS, "interrupted", _interrupted)
    out = tmp_path / "tiny_passage.json"
    with pytest.raises(KeyboardInterrupt):
        main(_argv(data_dir, "bm25,interrupted,random", out))
    result = json.loads(out.read_text())
    assert list(result["methods"]) == ["bm25"] and result["methods"]["bm25"]["cr"] == 0.5
    assert result["failed"] == {} and result["complete"] is False


def test_write_json_atomic_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_report_shows_a_failed_method(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(METHODS, "broken", _broken)
    results = tmp_path / "results"
    main(_argv(data_dir, "bm25,broken", results / "tiny_passage.json"))
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| broken | failed |" in text  # CR and SR tables
    assert "| bm25 | 50.0 |" in text
    assert "| broken | failed: KeyError: 'chunk-00312#u7' |" in text  # detail table
    assert "; failed: broken)" in text  # the commands list
    assert (results / "cr_tiny.png").stat().st_size > 0  # plotted from bm25 alone


def test_report_when_every_method_failed(tmp_path: Path) -> None:
    """No measured method, so no CR plot and no link to one; the table still says why."""
    results = tmp_path / "results"
    results.mkdir()
    run = {"dataset": "tiny", "protocol": "passage", "budget": 16, "embedder": "hashing",
           "command": "python -m benchmarks run", "started_unix": 0, "wall_time_s": 6.0,
           "corpus": {"passages": 3}, "questions": 2, "methods": {}, "unavailable": {},
           "failed": {"g2cons": {"type": "ValueError", "message": "a | b\nc"}},
           "core_coverage": None, "complete": True}  # fmt: skip
    (results / "tiny_passage.json").write_text(json.dumps(run))
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| g2cons | failed: ValueError: a \\| b c |" + " |" * 8 in text
    assert "cr_tiny.png" not in text and not (results / "cr_tiny.png").exists()
