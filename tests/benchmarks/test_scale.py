"""The scale benchmark's synthetic corpus: real sentences recombined, unique ids, repeatable."""

from __future__ import annotations

import re

from benchmarks.scale import passages

POOL = [f"Sentence number {i} is here." for i in range(20)]


def test_passages_recombine_pool_sentences_with_unique_ids() -> None:
    ids, texts = passages(POOL, 50, seed=1)
    assert len(ids) == len(set(ids)) == len(texts) == 50
    for text in texts:
        sentences = re.findall(r"Sentence number \d+ is here\.", text)
        assert 3 <= len(sentences) <= 6 and " ".join(sentences) == text
        assert set(sentences) <= set(POOL)
    # the same seed gives the same corpus; another seed another one, with other ids
    assert passages(POOL, 50, seed=1) == (ids, texts)
    other_ids, other_texts = passages(POOL, 50, seed=2)
    assert not set(other_ids) & set(ids) and other_texts != texts
