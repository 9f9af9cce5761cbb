"""2WikiMultihopQA: one sentence per line, no titles, no supporting labels.

So it runs under the chunk protocols only, has no SR, and gets its own report
section and plot after the other dev sets, with the missing protocol explained.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.data import corpus_for, load_dataset
from tests.benchmarks.dev_sets import write_dev_set

LINES = [
    "Harrison And Barrison is a 1917 film directed by Alf Goulding.",
    "Alf Goulding died in London.",
    "Asthram is a 1983 Indian film directed by Rajeev Nath.",
    "Five Deadly Venoms is a 1978 film by Chang Cheh.",
]
TWO_WIKI_QUESTIONS = [
    {"id": "w1", "question": "Where did the director of film Harrison And Barrison die?",
     "answers": ["London"], "supporting_ids": [], "hops": None},
    {"id": "w2", "question": "Which film came out first, Five Deadly Venoms or Asthram?",
     "answers": ["Five Deadly Venoms"], "supporting_ids": [], "hops": None},
    {"id": "w3", "question": "Where was the mother of Rajeev Nath born?",
     "answers": ["Naples"], "supporting_ids": [], "hops": None},
]  # fmt: skip
MUSIQUE_PASSAGES = [
    {"id": "m1", "title": "", "text": "Alice Moreau was born in Lyon in 1950."},
    {"id": "m2", "title": "", "text": "Bruno Keller composed the opera Glasswing."},
]
MUSIQUE_QUESTIONS = [
    {"id": "q1", "question": "Where was Alice Moreau born?", "answers": ["Lyon"],
     "supporting_ids": ["m1"], "hops": 2},
]  # fmt: skip



@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for ``../shared/data`` with tiny ``2wiki`` and ``musique`` sets."""
    root = tmp_path / "shared" / "data"
    lines = [{"id": f"tw-{i:05d}", "title": "", "text": t} for i, t in enumerate(LINES)]
    write_dev_set(root / "2wiki", lines, TWO_WIKI_QUESTIONS)
    write_dev_set(root / "musique", MUSIQUE_PASSAGES, MUSIQUE_QUESTIONS)
    monkeypatch.setattr("benchmarks.__main__.DATA_ROOT", root)
    return root


def _run(dataset: str, protocol: str, out: Path) -> int:
    return main(["run", "--dataset", dataset, "--protocol", protocol, "--methods", "bm25,random",
                 "--budget", "200", "--embedder", "hashing", "--no-coverage", "--out", str(out),
                 "--cache", str(out.parent / "cache.sqlite")])  # fmt: skip


def test_2wiki_has_no_passage_protocol(data_root: Path) -> None:
    dataset = load_dataset(data_root / "2wiki")
    with pytest.raises(ValueError, match=r"'passage' is not supported for 2wiki: .* one sentence"):
        corpus_for(dataset, "passage")
    assert len(corpus_for(dataset, "chunk1200").units) == 1
    # the same lines under another name are ordinary passages
    assert len(corpus_for(load_dataset(data_root / "musique"), "passage").units) == 2


def test_run_by_dataset_name(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "results" / "2wiki_chunk1200.json"
    assert _run("2wiki", "chunk1200", out) == 0
    result = json.loads(out.read_text())
    assert result["dataset"] == "2wiki"
    assert result["config"]["data"] == str((data_root / "2wiki").resolve())
    assert result["command"].startswith("python -m benchmarks run --dataset 2wiki")
    # the four lines are one chunk well under 200 tokens: every method's context holds
    # London and Five Deadly Venoms, never Naples; no question has supporting ids
    for m in result["methods"].values():
        assert m["units_mean"] == 1.0 and m["cr"] == pytest.approx(2 / 3)
        assert m["sr"] is None and m["sr_questions"] == 0
    with pytest.raises(ValueError, match="not supported for 2wiki"):
        _run("2wiki", "passage", tmp_path / "results" / "2wiki_passage.json")
    assert not (tmp_path / "results" / "2wiki_passage.json").exists()


def test_report_with_and_without_2wiki(data_root: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    _run("musique", "passage", results / "musique_passage.json")
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    assert "2wiki" not in out.read_text()

    _run("2wiki", "chunk1200", results / "2wiki_chunk1200.json")
    _run("2wiki", "sub20", results / "2wiki_sub20.json")
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    section = text[text.index("## 2wiki") : text.index("## Core coverage")]
    assert text.index("## musique") < text.index("## 2wiki")  # after the existing sets
    assert "3 questions, 4 passages" in section
    assert "Not measured under `passage`: its corpus is one sentence per line" in section
    assert "| method | chunk1200 | sub20 |" in section
    assert "| bm25 | 66.7 | " in section
    sr_table = "### SR % by method and protocol"
    assert sr_table not in section and sr_table in text  # 2wiki has no supporting labels
    assert "![CR by method](results/cr_2wiki.png)" in section
    assert "### 2wiki / chunk1200" in section and "### 2wiki / sub20" in section
    assert (results / "cr_2wiki.png").stat().st_size > 0
    assert "![cr_2wiki.png](results/cr_2wiki.png)" in text  # the plots section
