"""Concept extraction: the term analyzer, growing vocabulary counts, TF-IDF, top-n per row."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer

from shared_core.compiled import COMPILED_ENV
from shared_core.graph import extract_concepts, tfidf, top_n_per_row
from shared_core.text import count_terms, term_analyzer


def test_analyzer_drops_stop_words_and_short_tokens() -> None:
    analyze = term_analyzer()
    # "the", "is", "a", "of" are sklearn stop words; "x" is shorter than 2 characters
    assert analyze("The Fox is a friend of x Foxes") == ["fox", "friend", "foxes"]
    assert term_analyzer(min_chars=4)("ab abc abcd abcde") == ["abcd", "abcde"]
    assert analyze("the of and") == []


def test_analyzer_builds_ngrams_over_the_stop_word_free_stream() -> None:
    analyze = term_analyzer(ngram_max=3)
    # stream after stop words: quick, brown, fox, dog ("the", "and" dropped)
    assert analyze("The quick brown fox and the dog") == [
        "quick", "brown", "fox", "dog",
        "quick brown", "brown fox", "fox dog",
        "quick brown fox", "brown fox dog",
    ]


def test_analyzer_matches_sklearn_word_analyzer() -> None:
    text = "Graph-based retrieval; the concept graph, 2024 edition. RAG and GraphRAG!"
    ours = term_analyzer(ngram_max=2)(text)
    theirs = TfidfVectorizer(stop_words="english", ngram_range=(1, 2)).build_analyzer()(text)
    assert ours == theirs


def _old_analyzer(text: str, min_chars: int) -> list[str]:
    """The analyzer before CJK segmentation, written out: regex words minus stop words."""
    words = re.findall(rf"\b\w{{{min_chars},}}\b", text.lower())
    return [w for w in words if w not in ENGLISH_STOP_WORDS]


# Latin, accented Latin, Greek, Cyrillic, Arabic, digits, punctuation and spaces: no CJK
NON_CJK = st.text(st.sampled_from(list("abcXYZ éßÆΩλдЖلا09_-.,;'!?\n\t")), max_size=40)


@settings(max_examples=200, deadline=None)
@given(text=NON_CJK, min_chars=st.integers(1, 3))
def test_text_without_cjk_is_analysed_as_before_in_every_mode(text: str, min_chars: int) -> None:
    for mode in ("jieba", "bigram", "none"):
        assert term_analyzer(min_chars=min_chars, cjk_segmenter=mode)(text) == _old_analyzer(
            text, min_chars), mode


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.sampled_from(list("ab 日本的首都東京はの서울 ,。")), max_size=30))
def test_none_mode_is_the_old_analyzer_on_any_text(text: str) -> None:
    assert term_analyzer(cjk_segmenter="none")(text) == _old_analyzer(text, 2)


def test_count_terms_grows_the_vocabulary() -> None:
    vocab: dict[str, int] = {}
    analyze = term_analyzer()
    m = count_terms(["apple banana apple", "banana cherry"], vocab, analyze)
    assert vocab == {"apple": 0, "banana": 1, "cherry": 2}  # first-seen order
    assert m.shape == (2, 3)
    np.testing.assert_array_equal(m.toarray(), [[2, 1, 0], [0, 1, 1]])
    m2 = count_terms(["cherry date", "the"], vocab, analyze)
    assert vocab == {"apple": 0, "banana": 1, "cherry": 2, "date": 3}
    np.testing.assert_array_equal(m2.toarray(), [[0, 0, 1, 1], [0, 0, 0, 0]])


def test_tfidf_by_hand() -> None:
    # 3 docs; a in all 3 (idf ln(4/4)+1 = 1), b in 1 (idf ln(4/2)+1 = 1+ln 2)
    counts = sp.csr_matrix(np.array([[2, 1], [1, 0], [1, 0]]))
    out = tfidf(counts).toarray()
    np.testing.assert_allclose(out, [[2.0, 1 + math.log(2)], [1.0, 0.0], [1.0, 0.0]])


def test_tfidf_equals_sklearn_on_the_same_vocabulary() -> None:
    docs = [
        "Concept graphs link concepts. Concepts co-occur in chunks.",
        "PageRank ranks concepts in the concept graph graph graph.",
        "Chunks are selected by the rank of their concepts.",
        "Unrelated text about bananas.",
    ]
    analyze = term_analyzer(ngram_max=2)
    vocab: dict[str, int] = {}
    counts = count_terms(docs, vocab, analyze)
    ours = tfidf(counts).toarray()
    ref = TfidfVectorizer(norm=None, smooth_idf=True, sublinear_tf=False, analyzer=analyze,
                          vocabulary=vocab).fit_transform(docs).toarray()
    np.testing.assert_allclose(ours, ref, rtol=1e-12)


@pytest.fixture(params=["1", "0"], ids=["compiled", "numpy"], scope="module")
def loops_on_or_off(request: pytest.FixtureRequest) -> Iterator[str]:
    """The top-n selection by numba's loop (where installed), then by numpy's sorts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COMPILED_ENV, request.param)
        yield request.param


@pytest.mark.usefixtures("loops_on_or_off")
def test_top_n_per_row_ties_go_to_the_lower_column() -> None:
    scores = sp.csr_matrix(np.array([
        [0.5, 0.9, 0.5, 0.1],   # n=2: 0.9 (col 1), then 0.5 tie -> col 0 beats col 2
        [0.0, 0.0, 0.0, 0.0],   # empty row keeps nothing
        [0.3, 0.0, 0.0, 0.0],   # fewer entries than n: keeps what there is
        [0.7, 0.7, 0.7, 0.7],   # all tied: the two lowest columns
    ]))
    mask = top_n_per_row(scores, 2).toarray()
    np.testing.assert_array_equal(mask, [
        [1, 1, 0, 0],
        [0, 0, 0, 0],
        [1, 0, 0, 0],
        [1, 1, 0, 0],
    ])


@pytest.mark.usefixtures("loops_on_or_off")
def test_top_n_per_row_ignores_explicit_zeros_and_unsorted_indices() -> None:
    # entries given out of column order, with an explicitly stored zero at col 0
    data = np.array([0.2, 0.0, 0.8, 0.2])
    indices = np.array([3, 0, 2, 1])
    m = sp.csr_matrix((data, indices, np.array([0, 4])), shape=(1, 4))
    mask = top_n_per_row(m, 3).toarray()
    # 0.8 (col 2), then 0.2 tie between cols 1 and 3; the stored 0 is never kept
    np.testing.assert_array_equal(mask, [[0, 1, 1, 1]])
    np.testing.assert_array_equal(top_n_per_row(m, 2).toarray(), [[0, 1, 1, 0]])
    assert top_n_per_row(m, 0).nnz == 0


@pytest.mark.usefixtures("loops_on_or_off")
@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), st.integers(1, 40), st.integers(0, 5), st.integers(0, 2**31 - 1))
def test_top_n_per_row_keeps_each_rows_best_by_value_then_column(
        n_rows: int, n_cols: int, n: int, seed: int) -> None:
    """Against a row-by-row sort on (-value, column), with values drawn from a few
    levels so that ties are common, and rows long enough to fall in several of the
    length batches the rows are sorted in."""
    rng = np.random.default_rng(seed)
    dense = rng.integers(0, 4, size=(n_rows, n_cols)) * (rng.random((n_rows, n_cols)) < 0.7)
    expected = np.zeros((n_rows, n_cols))
    for r in range(n_rows):
        best = sorted((c for c in range(n_cols) if dense[r, c] > 0),
                      key=lambda c: (-dense[r, c], c))[:n]
        expected[r, best] = 1
    got = top_n_per_row(sp.csr_matrix(dense.astype(np.float64)), n).toarray()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.usefixtures("loops_on_or_off")
def test_extract_concepts_top_tfidf_terms() -> None:
    # doc0: zebra x3 (df 2, idf 1 -> 3), lion x1 (df 2 -> 1), runs x1 (df 1, idf 1+ln 1.5 ≈ 1.405)
    # doc1: lion x2 (-> 2), zebra x1 (-> 1)
    counts = sp.csr_matrix(np.array([[3, 1, 1], [1, 2, 0]]))
    mask = extract_concepts(counts, 2).toarray()
    np.testing.assert_array_equal(mask, [[1, 0, 1], [1, 1, 0]])
    np.testing.assert_array_equal(extract_concepts(counts, 1).toarray(), [[1, 0, 0], [0, 1, 0]])


@pytest.mark.usefixtures("loops_on_or_off")
@pytest.mark.parametrize("n", [1, 2, 5])
def test_top_n_keeps_at_most_n_per_row(n: int) -> None:
    rng = np.random.default_rng(n)
    m = sp.random(20, 15, density=0.4, random_state=rng, format="csr")
    mask = top_n_per_row(m, n)
    per_row = np.diff(mask.indptr)
    assert (per_row == np.minimum(n, np.diff(m.indptr))).all()
    dense, kept = m.toarray(), mask.toarray().astype(bool)
    for r in range(20):
        if kept[r].any() and (~kept[r] & (dense[r] > 0)).any():
            assert dense[r][kept[r]].min() >= dense[r][~kept[r]].max()
