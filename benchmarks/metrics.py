"""Retrieval metrics that need no LLM: answer coverage (CR), supporting recall (SR),
core coverage of a chunk selection, and latency percentiles.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_in_context(answers: Iterable[str], normalized_context: str) -> bool:
    """True if any non-empty normalised alias occurs in the (already normalised) context."""
    for answer in answers:
        norm = normalize_answer(answer)
        if norm and norm in normalized_context:
            return True
    return False


# answers CR cannot tell apart from chance: "yes" or "no" occurs somewhere in most
# contexts of a few thousand tokens, whichever passages they hold
YES_NO = frozenset({"yes", "no"})


def is_yes_no(answers: Iterable[str]) -> bool:
    """True when every normalised alias is "yes" or "no": a comparison question, whose
    CR says whether the word occurs in the context, not whether the passages do."""
    normalized = {normalize_answer(a) for a in answers} - {""}
    return bool(normalized) and normalized <= YES_NO


def hits_with_yes_no_by_support(cr_hits: str, sr_hits: str, open_answers: str) -> str | None:
    """Each question's outcome with a yes/no question scored by its supporting passages.

    CR cannot score a comparison question ("Are A and B both ...?"): the word occurs in
    contexts whatever they hold. What answers it is having both passages, which SR
    checks. Open answers keep their CR outcome. The three strings are a run's per-question
    marks in question order; ``None`` when a yes/no question has no supporting ids
    (``"-"``), since it then has no outcome to take.
    """
    if not len(cr_hits) == len(sr_hits) == len(open_answers):
        raise ValueError(f"per-question marks differ in length: {len(cr_hits)} CR, "
                         f"{len(sr_hits)} SR, {len(open_answers)} open-answer")
    marks = []
    for cr, sr, is_open in zip(cr_hits, sr_hits, open_answers, strict=True):
        if is_open == "1":
            marks.append(cr)
        elif sr == "-":
            return None
        else:
            marks.append(sr)
    return "".join(marks)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test of paired outcomes: the chance of a split at least this
    uneven if each discordant question went either way with probability 1/2."""
    if wins < 0 or losses < 0:
        raise ValueError(f"wins and losses must be counts, got {wins} and {losses}")
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / 2**n)


def merge_spans(spans: np.ndarray) -> np.ndarray:
    """Union of ``[start, end)`` intervals as sorted, disjoint intervals."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    if len(spans) == 0:
        return spans
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    merged = [list(spans[0])]
    for start, end in spans[1:].tolist():
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return np.asarray(merged, dtype=np.int64)


def span_covered(span: Sequence[int], merged: np.ndarray) -> bool:
    """Is ``[start, end)`` inside one interval of ``merged`` (output of :func:`merge_spans`)?"""
    start, end = int(span[0]), int(span[1])
    if len(merged) == 0:
        return False
    i = int(np.searchsorted(merged[:, 0], start, side="right")) - 1
    return i >= 0 and merged[i, 0] <= start and end <= merged[i, 1]


def passage_membership(passage_spans: np.ndarray, unit_spans: np.ndarray) -> list[list[int]]:
    """For each passage, the units whose span fully contains the passage text's span."""
    passage_spans = np.asarray(passage_spans, dtype=np.int64).reshape(-1, 2)
    unit_spans = np.asarray(unit_spans, dtype=np.int64).reshape(-1, 2)
    order = np.argsort(unit_spans[:, 0], kind="stable")
    starts = unit_spans[order, 0]
    out: list[list[int]] = []
    for start, end in passage_spans.tolist():
        candidates = order[: int(np.searchsorted(starts, start, side="right"))]
        inside = candidates[unit_spans[candidates, 1] >= end]
        out.append(sorted(int(u) for u in inside))
    return out


def supports_in_context(support_spans: np.ndarray, context_spans: np.ndarray) -> bool:
    """All supporting passages fully inside the union of the context units' spans."""
    merged = merge_spans(context_spans)
    return all(span_covered(s, merged) for s in np.asarray(support_spans).reshape(-1, 2))


def share(flags: Sequence[bool]) -> float | None:
    """Fraction of True; ``None`` when there is nothing to measure."""
    return None if len(flags) == 0 else float(np.mean(np.asarray(flags, dtype=bool)))


def percentile_ms(seconds: Sequence[float], q: float) -> float | None:
    return None if len(seconds) == 0 else float(np.percentile(np.asarray(seconds) * 1e3, q))


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    """SQuAD exact match: the normalised prediction equals a normalised alias."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers if normalize_answer(a))


def token_f1(prediction: str, answers: Iterable[str]) -> float:
    """SQuAD token F1 against the best alias (bag-of-tokens overlap of normalised texts)."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        if not gold or not pred:
            continue
        overlap = sum((Counter(pred) & Counter(gold)).values())
        if overlap:
            precision, recall = overlap / len(pred), overlap / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best
