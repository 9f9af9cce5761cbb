"""Merging corpus states: the term vocabulary and the term counts under it."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.state.corpus import (
    VECTOR_DTYPE,
    CorpusState,
    insertion_points,
    merge_many,
    positions_in,
    term_union,
)

WORDS = [f"w{i:02d}" for i in range(30)]


def state(prefix: str, counts: list[dict[str, int]]) -> CorpusState:
    """One chunk per sentence; ``counts`` are each sentence's term counts."""
    terms = tuple(sorted({t for row in counts for t in row}))
    column = {t: j for j, t in enumerate(terms)}
    dense = np.zeros((len(counts), len(terms)), dtype=np.int32)
    for i, row in enumerate(counts):
        for t, c in row.items():
            dense[i, column[t]] = c
    n = len(counts)
    return CorpusState(
        ids=tuple(f"{prefix}{i:03d}" for i in range(n)), texts=("text",) * n,
        metadata=("{}",) * n, tokens=np.ones(n, np.int64),
        sentence_offsets=np.arange(n + 1, dtype=np.int64),
        sentence_spans=np.tile(np.array([[0, 4]], np.int64), (n, 1)),
        sentence_vectors=np.ones((n, 2), VECTOR_DTYPE) / np.sqrt(2),
        terms=terms, sentence_terms=sp.csr_matrix(dense),
        unit_starts=np.zeros(0, np.int64), unit_tokens=np.zeros(0, np.int64), unit_vectors=None)


def test_term_union_worked_by_hand() -> None:
    """big: b d f; small: a d g -> a b d f g; big's b d f land at 1 2 3, small's a d g at 0 2 4."""
    big = state("x", [{"b": 1, "d": 2}, {"f": 1}])
    small = state("y", [{"a": 1, "d": 1, "g": 3}])
    terms, places = term_union([small, big])
    assert terms == ("a", "b", "d", "f", "g")
    assert [p.tolist() for p in places] == [[0, 2, 4], [1, 2, 3]]
    merged = merge_many([big, small])
    assert merged.terms == terms
    assert merged.sentence_terms.toarray().tolist() == [
        [0, 1, 2, 0, 0], [0, 0, 0, 1, 0], [1, 0, 1, 0, 3]]


def test_term_union_without_new_terms_keeps_the_big_vocabulary() -> None:
    big = state("x", [{"b": 1, "d": 2}, {"f": 1}])
    terms, places = term_union([big, state("y", [{"f": 2, "b": 1}])])
    assert terms is big.terms
    assert [p.tolist() for p in places] == [[0, 1, 2], [0, 2]]


rows = st.lists(st.dictionaries(st.sampled_from(WORDS), st.integers(1, 5), min_size=1,
                                max_size=6), min_size=1, max_size=6)


@given(st.lists(rows, min_size=1, max_size=4))
@settings(max_examples=60, deadline=None)
def test_merged_counts_are_every_part_s_counts_under_the_sorted_union(parts: list) -> None:
    states = [state(f"p{k}-", counts) for k, counts in enumerate(parts)]
    merged = merge_many(states)
    assert merged.terms == tuple(sorted({t for counts in parts for row in counts for t in row}))
    dense = merged.sentence_terms.toarray()
    expected = {f"p{k}-{i:03d}": row for k, counts in enumerate(parts)
                for i, row in enumerate(counts)}
    for pos, cid in enumerate(merged.ids):
        got = {merged.terms[j]: int(c) for j, c in enumerate(dense[pos]) if c}
        assert got == expected[cid]
    if len(states) > 1:  # one part is returned as it was given
        assert_canonical(merged.sentence_terms)


@given(st.lists(rows, min_size=1, max_size=4),
       st.lists(st.sampled_from([*WORDS, "", "w", "w0", "w99", "zz"]), max_size=8))
@settings(max_examples=60, deadline=None)
def test_term_positions_are_the_columns_of_the_merged_terms(parts: list, asked: list) -> None:
    merged = merge_many([state(f"p{k}-", counts) for k, counts in enumerate(parts)])
    column = {t: j for j, t in enumerate(merged.terms)}
    positions = merged.term_position
    assert len(positions) == len(column) and list(positions) == list(merged.terms)
    for term in asked:
        assert (term in positions) == (term in column)
        assert positions.get(term, -1) == column.get(term, -1)
    assert 3 not in positions and positions.get(None, -1) == -1  # type: ignore[call-overload]


def test_positions_in_sorted_keys_worked_by_hand() -> None:
    keys = ("ada", "babbage", "engine", "loom")
    assert insertion_points(keys, ["aaa", "ada", "card", "loom", "zz"]).tolist() == [0, 0, 2, 3, 4]
    assert positions_in(keys, ["aaa", "ada", "card", "loom", "zz"]).tolist() == [-1, 0, -1, 3, -1]
    assert positions_in(keys, []).tolist() == [] and positions_in((), ["ada"]).tolist() == [-1]


def assert_canonical(matrix: sp.csr_matrix) -> None:
    """int32 counts, int64 index arrays, every row's columns strictly increasing: checked
    from the arrays, not from scipy's flag."""
    assert matrix.data.dtype == np.int32
    assert matrix.indices.dtype == np.int64 and matrix.indptr.dtype == np.int64
    row = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    same_row = row[1:] == row[:-1]
    assert bool((np.diff(matrix.indices)[same_row] > 0).all())


def test_a_part_with_unsorted_columns_is_made_canonical_in_the_merge() -> None:
    big = state("x", [{"b": 1, "d": 2}, {"f": 1}])
    small = state("y", [{"a": 1, "d": 1, "g": 3}])
    # the same counts with each row's columns out of order (as a caller's matrix may be)
    shuffled = sp.csr_matrix((np.array([3, 1, 1], np.int32), np.array([2, 0, 1]),
                              np.array([0, 3])), shape=(1, 3))
    assert not shuffled.has_canonical_format
    odd = CorpusState(**{**{f: getattr(small, f) for f in (
        "ids", "texts", "metadata", "tokens", "sentence_offsets", "sentence_spans",
        "sentence_vectors", "terms", "unit_starts", "unit_tokens", "unit_vectors")},
        "sentence_terms": shuffled})
    for parts in ([big, small], [big, odd]):
        merged = merge_many(parts)
        assert merged.terms == ("a", "b", "d", "f", "g")
        assert merged.sentence_terms.toarray().tolist() == [[0, 1, 2, 0, 0], [0, 0, 0, 1, 0],
                                                            [1, 0, 1, 0, 3]]
        assert_canonical(merged.sentence_terms)
