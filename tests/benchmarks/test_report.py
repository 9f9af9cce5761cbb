"""The report's core-coverage rows: every selection rule, and its distance from random."""

from __future__ import annotations

from typing import Any

from benchmarks.report import _coverage_rows, sd_from_random


def _kept(answer: float, support: float | None, kept: int) -> dict[str, Any]:
    return {"answer": answer, "support": support, "both": support if support is not None
            else answer, "cost": {"tokens_kept": kept, "tokens_total": 100,
                                  "cost_reduction": 1 - kept / 100}}


SPREAD = {"0.5": {"answer": 0.70, "answer_sd": 0.02, "support": 0.40, "support_sd": 0.01,
                  "both": 0.40, "both_sd": 0.01, "seeds": 10}}


def test_sd_from_random_by_hand() -> None:
    spread = SPREAD["0.5"]
    assert sd_from_random(0.75, spread, "answer") == "+2.5"  # 0.05 / 0.02
    assert sd_from_random(0.39, spread, "support") == "-1.0"  # -0.01 / 0.01
    assert sd_from_random(0.6999, spread, "answer") == "+0.0"  # not "-0.0"
    assert sd_from_random(None, spread, "support") == "–"  # a set without supporting ids
    assert sd_from_random(0.5, {**spread, "answer_sd": 0.0}, "answer") == "–"  # no spread
    assert sd_from_random(0.5, None, "answer") == "–"


def test_coverage_rows_show_every_rule_against_random() -> None:
    selectors = {"g2cons": {"0.5": _kept(0.75, 0.45, 50)},
                 "g2cons_coverage": {"0.5": _kept(0.72, 0.38, 49)},
                 "ketrag_knn": {"unavailable": "no module named scipy"},
                 "random": {"0.5": _kept(0.70, 0.40, 50)},
                 "random_seeds": SPREAD}
    rows = _coverage_rows(selectors, "tokens")
    assert rows == [
        "| g2cons | tokens | 0.5 | 75.0 | 45.0 | 45.0 | 50.0 | 50.0 | +2.5 | +5.0 |",
        "| g2cons_coverage | tokens | 0.5 | 72.0 | 38.0 | 38.0 | 49.0 | 51.0 | +1.0 | -2.0 |",
        "| ketrag_knn | tokens | | unavailable | | | | | | |",
        "| random | tokens | 0.5 | 70.0 | 40.0 | 40.0 | 50.0 | 50.0 | +0.0 | +0.0 |",
        "| random, mean ± sd of 10 seeds | tokens | 0.5 | 70.0 ± 2.0 | 40.0 ± 1.0 | "
        "40.0 ± 1.0 | | | | |",
    ]
    # a run from before the coverage rule: no row for it, the others unchanged
    del selectors["g2cons_coverage"]
    assert [r.split(" |")[0] for r in _coverage_rows(selectors, "tokens")] == [
        "| g2cons", "| ketrag_knn", "| random", "| random, mean ± sd of 10 seeds"]
