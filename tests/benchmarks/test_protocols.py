"""Protocol chunking, core coverage and a full run on a tiny dataset written to tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.coverage import answer_chunks, coverage_of, random_selector, random_spread
from benchmarks.data import build_corpus, load_dataset, passage_text
from benchmarks.metrics import normalize_answer, passage_membership
from benchmarks.run import evaluate
from tests.benchmarks.dev_sets import write_dev_set

PASSAGES = [
    {"id": "p1", "title": "Alice", "text": "Alice Moreau was born in Lyon in 1950."},
    {"id": "p2", "title": "", "text": "Bruno Keller composed the opera Glasswing."},
    {"id": "p3", "title": "Glasswing", "text": "Glasswing premiered at the Vienna State Opera."},
    {"id": "p4", "title": "", "text": "Carla Rossi painted frescoes in Siena churches."},
    {"id": "p5", "title": "", "text": "   "},  # blank passages are skipped
]
QUESTIONS = [
    {"id": "q1", "question": "Where was Alice Moreau born?", "answers": ["Lyon"],
     "supporting_ids": ["p1"], "hops": 1},
    {"id": "q2", "question": "Where did the opera by Bruno Keller premiere?",
     "answers": ["the Vienna State Opera", "Vienna"], "supporting_ids": ["p2", "p3"], "hops": 2},
    {"id": "q3", "question": "What did Carla Rossi paint?", "answers": ["mosaics"],
     "supporting_ids": [], "hops": None},
]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)


def test_load_and_passage_protocol(data_dir: Path) -> None:
    ds = load_dataset(data_dir)
    assert ds.name == "tiny" and len(ds.passages) == 5 and len(ds.questions) == 3
    assert ds.questions[2].hops is None and ds.questions[1].answers[1] == "Vienna"
    corpus = build_corpus(ds.passages, "passage")
    assert corpus.passage_ids == ["p1", "p2", "p3", "p4"]
    assert corpus.units.texts[0] == "Alice\nAlice Moreau was born in Lyon in 1950."
    assert corpus.units.texts[1] == PASSAGES[1]["text"]  # no title, no title line
    for i, text in enumerate(corpus.units.texts):
        s, e = corpus.units.spans[i]
        assert corpus.text[s:e] == text
    # passage spans cover the text only, not the title
    s, e = corpus.passage_spans[2]
    assert corpus.text[s:e] == PASSAGES[2]["text"]
    assert passage_membership(corpus.passage_spans, corpus.units.spans) == [[0], [1], [2], [3]]


def test_chunk_protocol_windows_and_membership(data_dir: Path) -> None:
    ds = load_dataset(data_dir)
    whole = build_corpus(ds.passages, "chunk1200")
    assert len(whole.chunks) == 1 and whole.chunks.texts[0] == whole.text
    assert whole.text.startswith(passage_text(ds.passages[0]) + "\n\n")
    small = build_corpus(ds.passages, "chunk1200", chunk_tokens=16, overlap=4)
    assert len(small.chunks) > 2
    for i, text in enumerate(small.chunks.texts):
        s, e = small.chunks.spans[i]
        assert small.text[s:e] == text
        assert small.chunks.tokens[i] <= 16
    members = passage_membership(small.passage_spans, small.chunks.spans)
    for p, chunks in enumerate(members):
        s, e = small.passage_spans[p]
        for c in chunks:
            assert small.text[s:e] in small.chunks.texts[c]
        others = set(range(len(small.chunks))) - set(chunks)
        assert all(small.text[s:e] not in small.chunks.texts[c] for c in others)


def test_sub_protocol_units_keep_their_parent_chunk(data_dir: Path) -> None:
    ds = load_dataset(data_dir)
    corpus = build_corpus(ds.passages, "sub12", chunk_tokens=40, overlap=5)
    assert len(corpus.units) > len(corpus.chunks) > 1
    for i, text in enumerate(corpus.units.texts):
        s, e = corpus.units.spans[i]
        assert corpus.text[s:e] == text
        assert text in corpus.chunks.texts[int(corpus.units.parent[i])]
    with pytest.raises(ValueError, match="unknown protocol"):
        build_corpus(ds.passages, "sentences")


class _Fixed:
    def __init__(self, positions: list[int]) -> None:
        self.positions = positions

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        return self.positions


def test_evaluate_cr_sr_by_hand(data_dir: Path) -> None:
    ds = load_dataset(data_dir)
    corpus = build_corpus(ds.passages, "passage")
    norm = [normalize_answer(t) for t in corpus.units.texts]
    qvecs = np.zeros((3, 4), dtype=np.float32)
    # p1 + p3: q1 answer and support found; q2 answer found, support p2 missing; q3 never
    result = evaluate(_Fixed([0, 2]), corpus, ds.questions, qvecs, 1000, norm)
    assert result["cr"] == pytest.approx(2 / 3)
    assert result["sr"] == pytest.approx(1 / 2) and result["sr_questions"] == 2
    assert result["cr_by_hops"] == {"1": 1.0, "2": 1.0, "None": 0.0}
    assert result["context_tokens_max"] == int(corpus.units.tokens[[0, 2]].sum())
    with pytest.raises(AssertionError, match="over the budget"):
        evaluate(_Fixed([0, 2]), corpus, ds.questions, qvecs, 5, norm)


def test_core_coverage_by_hand(data_dir: Path) -> None:
    ds = load_dataset(data_dir)
    corpus = build_corpus(ds.passages, "passage")
    hits = answer_chunks(ds.questions, [normalize_answer(t) for t in corpus.chunks.texts])
    assert [h.tolist() for h in hits] == [[0], [2], []]
    keep = np.array([True, False, True, False])
    cov = coverage_of(keep, corpus, ds.questions, hits)
    # answers: q1 yes, q2 yes, q3 no; supports: q1 yes, q2 no (p2 dropped)
    assert cov["answer"] == pytest.approx(2 / 3)
    assert cov["support"] == pytest.approx(1 / 2)
    assert cov["both"] == pytest.approx(1 / 3)


def test_random_spread_over_seeds(data_dir: Path) -> None:
    ds = load_dataset(data_dir)
    corpus = build_corpus(ds.passages, "passage")
    hits = answer_chunks(ds.questions, [normalize_answer(t) for t in corpus.chunks.texts])
    spread = random_spread(corpus, ds.questions, hits, (1.0, 0.25), n_seeds=5)
    # keeping everything: 2 of 3 answers and both supported questions, every draw alike
    assert spread["1"]["answer"] == pytest.approx(2 / 3) and spread["1"]["answer_sd"] == 0
    assert spread["1"]["support"] == pytest.approx(1.0) and spread["1"]["seeds"] == 5
    # one passage of four: a draw covers q1 (passage 0) or q2 (passage 2) or nothing, so
    # each draw is 0 or 1/3, and the mean is the share of draws landing on 0 or 2
    draws = [random_selector(corpus, s, "chunks")(0.25).kept_ids for s in range(5)]
    lucky = sum(ids[0] in (corpus.chunks.ids[0], corpus.chunks.ids[2]) for ids in draws)
    assert spread["0.25"]["answer"] == pytest.approx(lucky / 5 / 3)


def test_full_run_with_hashing_embedder(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    code = main(["run", "--data", str(data_dir), "--protocol", "passage",
                 "--methods", "random,dense_mean,dense_direct,dense_max,bm25,hybrid,g2cons",
                 "--budget", "16", "--embedder", "hashing", "--out", str(out),
                 "--cache", str(tmp_path / "cache.sqlite")])
    assert code == 0
    result = json.loads(out.read_text())
    assert set(result["methods"]) == {"random", "dense_mean", "dense_direct", "dense_max",
                                      "bm25", "hybrid",
                                      "g2cons"}
    for m in result["methods"].values():
        assert 0.0 <= m["cr"] <= 1.0
        assert m["context_tokens_max"] <= 16
    # each passage is 10-16 tokens, so 16 tokens hold exactly one: BM25 finds the
    # name-bearing passage for q1 (Lyon) and q3 (whose answer is in no passage)
    assert result["methods"]["bm25"]["units_mean"] == 1.0
    assert result["methods"]["bm25"]["cr"] == pytest.approx(1 / 3)
    assert result["command"].startswith("python -m benchmarks run --data")
    assert result["core_coverage"]["all_chunks"]["answer"] == pytest.approx(2 / 3)
    for by in ("by_chunks", "by_tokens"):
        assert set(result["core_coverage"][by]["g2cons"]) == {"0.2", "0.5", "0.8"}
        assert result["core_coverage"][by]["random_seeds"]["0.8"]["seeds"] == 10
        assert result["core_coverage"][by]["g2cons"]["0.5"]["cost"]["by"] == by[3:]


def test_report_from_a_run(data_dir: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    main(["run", "--data", str(data_dir), "--protocol", "passage", "--methods", "bm25,random",
          "--budget", "16", "--embedder", "hashing", "--no-coverage",
          "--out", str(results / "tiny_passage.json"), "--cache", str(tmp_path / "c.sqlite")])
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| bm25 | 33.3 |" in text  # CR table: method x protocol
    assert "python -m benchmarks run --data" in text
    assert (results / "cr_tiny.png").stat().st_size > 0
