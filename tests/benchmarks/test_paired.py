"""Per-question outcomes: CR without yes/no questions, and paired comparisons of methods.

A yes/no answer is found in a context whenever the word occurs in it, so those
questions are scored apart; two methods' CR gap is read from the questions that
only one of them answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import main
from benchmarks.metrics import hits_with_yes_no_by_support, is_yes_no, sign_test
from benchmarks.report import paired_lines, variant_lines
from tests.benchmarks.dev_sets import write_dev_set

PASSAGES = [
    {"id": "p1", "title": "", "text": "Alice Moreau was born in Lyon in 1950."},
    {"id": "p2", "title": "", "text": "Bruno Keller composed the opera Glasswing."},
    {"id": "p3", "title": "", "text": "Glasswing premiered at the Vienna State Opera."},
    {"id": "p4", "title": "", "text": "Yes, Carla Rossi painted frescoes in Siena churches."},
]
QUESTIONS = [
    {"id": "q1", "question": "Where was Alice Moreau born?", "answers": ["Lyon"],
     "supporting_ids": ["p1"], "hops": 1},
    {"id": "q2", "question": "Where did the opera by Bruno Keller premiere?",
     "answers": ["Vienna"], "supporting_ids": ["p2", "p3"], "hops": 2},
    {"id": "q3", "question": "Did Carla Rossi paint frescoes in Siena?", "answers": ["Yes"],
     "supporting_ids": ["p4"], "hops": 1},
    {"id": "q4", "question": "Was Alice Moreau born in Lyon?", "answers": ["yes."],
     "supporting_ids": [], "hops": None},
]  # fmt: skip


@pytest.mark.parametrize(("answers", "expected"), [
    (["Yes"], True), (["no."], True), (["yes", "No"], True), (["", "yes"], True),
    (["yes", "Lyon"], False), (["Lyon"], False), ([""], False), ([], False),
    (["yes sir"], False),
])  # fmt: skip
def test_yes_no_answers(answers: list[str], expected: bool) -> None:
    assert is_yes_no(answers) is expected


def test_sign_test_by_hand() -> None:
    assert sign_test(0, 0) == 1.0
    # n = 10, the smaller side 3: 2 * (1 + 10 + 45 + 120) / 1024
    assert sign_test(3, 7) == pytest.approx(352 / 1024)
    assert sign_test(7, 3) == sign_test(3, 7)
    assert sign_test(0, 5) == pytest.approx(2 / 32)
    assert sign_test(5, 5) == 1.0  # the doubled tail passes 1
    with pytest.raises(ValueError, match="counts"):
        sign_test(-1, 2)


def test_a_run_records_each_question(tmp_path: Path) -> None:
    data = write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)
    out = tmp_path / "results" / "tiny_passage.json"
    assert main(["run", "--data", str(data), "--protocol", "passage", "--methods", "bm25",
                 "--budget", "12", "--embedder", "hashing", "--no-coverage",
                 "--out", str(out), "--cache", str(tmp_path / "c.sqlite")]) == 0
    result = json.loads(out.read_text())
    assert result["open_answers"] == "1100"
    bm25 = result["methods"]["bm25"]
    # 12 tokens hold one passage. BM25 takes the one with the question's names: p1 (Lyon),
    # p2 (Bruno Keller's, without Vienna), p4 (holds "Yes"), p1 again (no "yes" in it)
    assert bm25["units_mean"] == 1.0
    assert bm25["cr_hits"] == "1010"
    assert bm25["cr"] == pytest.approx(2 / 4)
    assert bm25["cr_open"] == pytest.approx(1 / 2) and bm25["open_questions"] == 2
    assert bm25["sr_hits"] == "101-"  # q2 needs p2 and p3; q4 has no supporting ids
    assert bm25["sr"] == pytest.approx(2 / 3)


def _metrics(cr_hits: str, sr_hits: str | None, open_answers: str) -> dict[str, Any]:
    hits = [c == "1" for c in cr_hits]
    kept = [h for h, o in zip(hits, open_answers, strict=True) if o == "1"]
    sr = None if sr_hits is None else sr_hits.count("1") / max(1, len(sr_hits.strip("-")))
    return {"cr": sum(hits) / len(hits), "cr_open": sum(kept) / len(kept), "cr_hits": cr_hits,
            "sr": sr, "sr_hits": sr_hits, "_open_answers": open_answers}


def test_paired_lines_count_the_questions_that_differ() -> None:
    open_answers = "111110"
    per_protocol = {"passage": {
        "g2cons": _metrics("110100", "1101--", open_answers),
        "bm25": _metrics("101011", "1011--", open_answers),  # CR 4/6: the best other
        "hybrid": _metrics("100011", "1000--", open_answers),
        "random": _metrics("111111", None, open_answers),  # never the method compared
        "g2cons:hops=0": _metrics("111111", None, open_answers),  # nor a variant
    }}
    lines = paired_lines(per_protocol)
    assert lines[0].startswith("| protocol | best other method (CR) | CR gap |")
    # all six: g2cons alone on q2, q4; bm25 alone on q3, q5, q6 -> 2 / 3, p = 2 * 16 / 32 = 1
    # open (q1-q5): 2 / 2, p = 2 * 11 / 16 -> 1. SR: g2cons alone on q2, bm25 on q3
    # q6 is yes/no without supporting ids: no outcome by SR
    assert lines[2] == ("| passage | bm25 | -16.7 | 2 / 3 | 1.00 | +0.0 | 2 / 2 | 1.00 | "
                        "1 / 1 | 1.00 | – | – | – |")
    # runs from before per-question outcomes give no row
    for metrics in per_protocol["passage"].values():
        metrics.pop("cr_hits")
    assert paired_lines(per_protocol) == []


def test_paired_lines_significance() -> None:
    open_answers = "1" * 12
    per_protocol = {"sub100": {
        "g2cons": _metrics("1" * 12, None, open_answers),
        "bm25": _metrics("0" * 6 + "1" * 6, None, open_answers),
    }}
    # six questions only g2cons answers: 2 / 64
    assert paired_lines(per_protocol)[2] == ("| sub100 | bm25 | +50.0 | 6 / 0 | 0.03 | +50.0 | "
                                             "6 / 0 | 0.03 | – | – | – | – | – |")
    # eight: 2 / 256, under 0.01
    per_protocol["sub100"]["bm25"] = _metrics("0" * 8 + "1" * 4, None, open_answers)
    assert "| 8 / 0 | < 0.01 |" in paired_lines(per_protocol)[2]


def test_yes_no_questions_take_their_support_outcome() -> None:
    # q1, q2 open (CR kept: 1, 0); q3, q4 yes/no (SR taken: 0, 1); q2's SR is ignored
    assert hits_with_yes_no_by_support("1011", "1001", "1100") == "1001"
    assert hits_with_yes_no_by_support("1011", "1-01", "1100") == "1001"  # "-" on an open one
    assert hits_with_yes_no_by_support("1011", "10-1", "1100") is None  # on a yes/no one
    assert hits_with_yes_no_by_support("", "", "") == ""
    with pytest.raises(ValueError, match="differ in length"):
        hits_with_yes_no_by_support("101", "10", "111")


def test_paired_lines_with_yes_no_scored_by_support() -> None:
    open_answers = "1100"
    ours = _metrics("1011", "1001", open_answers)
    theirs = _metrics("1111", "1110", open_answers)
    ours.update(cr_by_support=2 / 4, cr_by_support_hits="1001")
    theirs.update(cr_by_support=3 / 4, cr_by_support_hits="1110")
    line = paired_lines({"chunk1200": {"g2cons": ours, "bm25": theirs}})[2]
    # by support: only g2cons on q4, only bm25 on q2 and q3 -> 1 / 2, p = 2 * 4 / 8 -> 1
    assert line.endswith("| -25.0 | 1 / 2 | 1.00 |")


def test_report_scores_yes_no_apart(tmp_path: Path) -> None:
    data = write_dev_set(tmp_path / "tiny", PASSAGES, QUESTIONS)
    results = tmp_path / "results"
    assert main(["run", "--data", str(data), "--protocol", "passage", "--methods",
                 "bm25,random,g2cons", "--budget", "12", "--embedder", "hashing",
                 "--no-coverage", "--out", str(results / "tiny_passage.json"),
                 "--cache", str(tmp_path / "c.sqlite")]) == 0
    # a method from a run that recorded no per-question outcomes (an older file)
    older = json.loads((results / "tiny_passage.json").read_text())
    bm25 = older["methods"]["bm25"]
    older["methods"] = {"hybrid": {k: v for k, v in bm25.items()
                                   if k not in ("cr_open", "open_questions", "cr_hits", "sr_hits")}}
    older["started_unix"] -= 1
    (results / "older_passage.json").write_text(json.dumps(older))
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    section = text[text.index("### CR % on open-answer questions"):]
    section = section[:section.index("\n### ", 1)]
    assert "(2 of 4 questions remain)" in section and "| bm25 | 50.0 |" in section
    assert "| hybrid |" not in section and "| hybrid | 50.0 |" in text  # in the CR table only
    assert "### G2ConS against the best other method, question by question" in text
    assert "| passage | bm25 |" in text
    # q4, a yes/no question, has no supporting ids: nothing to score it by
    assert "yes/no questions scored by their supporting passages" not in text


def test_report_scores_yes_no_by_support(tmp_path: Path) -> None:
    comparison = {"id": "q5", "question": "Did Bruno Keller compose an opera?", "answers": ["no"],
                  "supporting_ids": ["p2", "p3"], "hops": 2}
    data = write_dev_set(tmp_path / "tiny", PASSAGES, [*QUESTIONS[:3], comparison])
    results = tmp_path / "results"
    assert main(["run", "--data", str(data), "--protocol", "passage", "--methods", "bm25",
                 "--budget", "12", "--embedder", "hashing", "--no-coverage",
                 "--out", str(results / "tiny_passage.json"),
                 "--cache", str(tmp_path / "c.sqlite")]) == 0
    out = tmp_path / "RESULTS.md"
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    section = text[text.index("### CR % with yes/no questions scored by their supporting"):]
    section = section[:section.index("\n### ", 1)]
    # p1 for q1 (Lyon: hit), p2 for q2 (no Vienna: miss), p4 for q3 (its support: hit),
    # p2 for q5: "no" is in "bruno", a CR hit, but p3 is missing, an SR miss
    assert "| bm25 | 50.0 |" in section
    assert "| bm25 | 75.0 |" in text[:text.index("### SR %")]  # CR over all questions


def test_variant_lines_compare_each_variant_with_the_default() -> None:
    open_answers = "1" * 6
    per_protocol = {
        "sub300": {"g2cons": _metrics("111100", None, open_answers),
                   "g2cons:walk_hops=0": _metrics("110011", None, open_answers),
                   "bm25": _metrics("111111", None, open_answers)},  # not a variant
        "passage": {"g2cons": _metrics("101010", None, open_answers),
                    "g2cons:walk_hops=0": _metrics("101010", None, open_answers),
                    "g2cons:hops=0": {"error": "RuntimeError: broke"}},  # failed: no cell
    }
    lines = variant_lines(per_protocol)
    assert lines[0] == "| variant | sub300 | passage |"
    # sub300: default 4/6, variant 4/6; only the default on q3, q4, only the variant on q5, q6
    assert lines[2:] == ["| g2cons:walk_hops=0 | +0.0 (2 / 2, 1.00) | +0.0 (0 / 0, 1.00) |"]
    per_protocol["sub300"]["g2cons:walk_hops=0"] = _metrics("000000", None, open_answers)
    # four questions only the default answers: 2 / 16
    assert variant_lines(per_protocol)[2] == ("| g2cons:walk_hops=0 | +66.7 (4 / 0, 0.12) | "
                                              "+0.0 (0 / 0, 1.00) |")
