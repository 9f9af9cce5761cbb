"""Metric functions on hand-worked examples."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.baselines import fill_budget, rrf_scores
from benchmarks.metrics import (
    answer_in_context,
    exact_match,
    merge_spans,
    normalize_answer,
    passage_membership,
    percentile_ms,
    share,
    span_covered,
    supports_in_context,
    token_f1,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("An  apple, a day", "apple day"),
        ("U.S.A.", "usa"),
        ("  Théâtre   du Soleil ", "théâtre du soleil"),
        ("the", ""),
    ],
)
def test_squad_normalisation(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_answer_in_context_any_alias_and_normalised() -> None:
    context = normalize_answer("In 1979, the U.S.A. opened the stadium.")
    assert answer_in_context(["Canada", "usa"], context)
    assert answer_in_context(["The stadium"], context)
    assert not answer_in_context(["Canada"], context)
    # an answer that normalises to nothing never counts as found
    assert not answer_in_context(["the", "!!"], context)


def test_merge_spans_and_coverage() -> None:
    merged = merge_spans(np.array([[5, 10], [0, 3], [3, 4], [9, 12]]))
    assert merged.tolist() == [[0, 4], [5, 12]]
    assert span_covered((1, 4), merged)
    assert span_covered((5, 12), merged)
    assert not span_covered((3, 6), merged)  # crosses the gap [4, 5)
    assert not span_covered((12, 13), merged)
    assert not span_covered((0, 1), merge_spans(np.zeros((0, 2))))


def test_passage_membership_full_containment_only() -> None:
    passages = np.array([[0, 10], [8, 20], [30, 35], [12, 27]])
    units = np.array([[0, 15], [5, 25], [28, 40]])
    # [12, 27] overhangs every unit: it is in no single unit
    assert passage_membership(passages, units) == [[0], [1], [2], []]


def test_supporting_passages_inside_union_of_context() -> None:
    support = np.array([[8, 20], [30, 35]])
    assert supports_in_context(support, np.array([[0, 15], [15, 22], [28, 40]]))
    assert not supports_in_context(support, np.array([[0, 15], [28, 40]]))
    assert not supports_in_context(support[:1], np.zeros((0, 2)))


def test_fill_budget_skips_what_does_not_fit_and_continues() -> None:
    tokens = np.array([5, 10, 3, 4])
    assert fill_budget([2, 0, 1, 3], tokens, 12) == [2, 0, 3]
    assert fill_budget([1], tokens, 9) == []


def test_rrf_by_hand() -> None:
    fused = rrf_scores([np.array([0, 1, 2]), np.array([2, 1, 0])], 3, k=60)
    assert fused == pytest.approx([1 / 61 + 1 / 63, 2 / 62, 1 / 63 + 1 / 61])


def test_share_and_percentiles() -> None:
    assert share([True, False, True, True]) == 0.75
    assert share([]) is None
    assert percentile_ms([0.001, 0.003], 50) == pytest.approx(2.0)


def test_exact_match_is_normalised_and_takes_any_alias() -> None:
    assert exact_match("The Beatles.", ["beatles", "Fab Four"])
    assert exact_match("fab four", ["beatles", "Fab Four"])
    assert not exact_match("the beatles band", ["beatles"])
    assert not exact_match("", ["beatles"])
    assert not exact_match("anything", ["", "the"])  # aliases that normalise to nothing


def test_token_f1_by_hand() -> None:
    # pred "john lennon smith" vs gold "john lennon": overlap 2, P 2/3, R 1 -> F1 0.8
    assert token_f1("John Lennon Smith", ["John Lennon"]) == pytest.approx(0.8)
    # the best alias wins: "lennon" vs ["paul", "lennon john"] -> P 1, R 1/2 -> 2/3
    assert token_f1("Lennon", ["paul", "Lennon, John"]) == pytest.approx(2 / 3)
    # repeated tokens count once per match: pred "x y y" gold "y" -> overlap 1, P 1/3, R 1
    assert token_f1("x y y", ["y"]) == pytest.approx(0.5)
    assert token_f1("", ["y"]) == 0.0
    assert token_f1("z", ["y"]) == 0.0
