"""Strong pairs' keys looked up, and sentences counted, a block at a time: the answers of
the whole-array computation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.graph import edges as edges_module
from shared_core.graph.edges import StrongPairs


def pairs_of(keys: list[int], n: int) -> StrongPairs:
    keys_array = np.asarray(keys, dtype=np.int64)
    size = len(keys_array)
    return StrongPairs((keys_array // n).astype(np.int32), (keys_array % n).astype(np.int32),
                       np.ones(size, np.int32), np.zeros(size, bool),
                       np.zeros(size, np.float32))


def test_key_positions_by_hand_across_blocks_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edges_module, "KEY_BLOCK", 2)
    n = 10
    pairs = pairs_of([1, 12, 13, 25, 47], n)  # blocks [1, 12], [13, 25], [47]
    asked = np.array([0, 1, 2, 12, 13, 14, 30, 47, 48, 99])
    # below 1 -> 0; 1 is at 0; 2..12 -> 1; 12 at 1; 13 at 2; 14..25 -> 3; 30 -> 4; 47 at 4
    assert pairs.key_positions(asked, n).tolist() == [0, 0, 1, 1, 2, 3, 4, 4, 5, 5]
    assert pairs.key_positions(asked[::-1], n).tolist() == [5, 5, 4, 4, 3, 2, 1, 1, 0, 0]
    assert pairs.keys_at(np.array([4, 0]), n).tolist() == [47, 1]
    assert pairs.ascending(n) and not pairs_of([1, 13, 12], n).ascending(n)
    assert not pairs_of([1, 12, 12], n).ascending(n)  # strictly


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 400), max_size=40, unique=True),
       st.lists(st.integers(-5, 410), max_size=30), st.integers(1, 7))
def test_key_positions_equal_a_search_over_every_key(keys: list[int], asked: list[int],
                                                     block: int) -> None:
    n = 21
    pairs = pairs_of(sorted(keys), n)
    previous = edges_module.KEY_BLOCK
    edges_module.KEY_BLOCK = block
    try:
        found = pairs.key_positions(np.asarray(asked, dtype=np.int64), n)
        ascending = pairs.ascending(n)
        shuffled = pairs_of(keys, n).ascending(n)
    finally:
        edges_module.KEY_BLOCK = previous
    np.testing.assert_array_equal(found, np.searchsorted(pairs.keys(n), asked))
    assert ascending
    assert shuffled == (keys == sorted(keys))


def test_sentence_counts_by_hand_across_blocks_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edges_module, "COUNT_BLOCK", 2)
    # three sentences over four concepts: entries [0, 2], [2], [1, 2, 3] in blocks of two
    links = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 0, 1, 0], [0, 1, 1, 1]], np.float32))
    counts = edges_module.sentence_counts(links)
    assert counts.tolist() == [1, 1, 3, 1] and counts.dtype == np.int64
    assert edges_module.sentence_counts(sp.csr_matrix((0, 3), dtype=np.float32)).tolist() == [
        0, 0, 0]
