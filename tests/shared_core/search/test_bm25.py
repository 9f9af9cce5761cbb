"""BM25 over unit term counts: a hand-worked example and parity with bm25s (Lucene variant)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from shared_core.search import BM25Scorer

# terms: 0 ada, 1 wrote, 2 program, 3 babbage, 4 engine
#   d0 = ada wrote program (3 terms), d1 = babbage engine engine (3), d2 = program engine (2)
COUNTS = sp.csr_matrix(np.array([[1, 1, 1, 0, 0], [0, 0, 0, 1, 2], [0, 0, 1, 0, 1]]))


def test_bm25_by_hand() -> None:
    # n 3, avgdl 8/3; "program" and "engine" have df 2: idf = ln(1 + 1.5 / 2.5) = ln 1.6
    # k1 (1 - b + b dl/avgdl): dl 3 -> 1.5 * 1.09375 = 1.640625, dl 2 -> 1.5 * .8125 = 1.21875
    idf = np.log(1.6)
    expected = [idf * 1 / (1 + 1.640625),            # d0: program once
                idf * 2 / (2 + 1.640625),            # d1: engine twice
                idf / (1 + 1.21875) * 2]             # d2: both once
    scorer = BM25Scorer.from_counts(COUNTS)
    np.testing.assert_allclose(scorer.scores([4, 2]), expected, rtol=1e-12)
    np.testing.assert_allclose(scorer.scores([4, 2, 2]), expected, rtol=1e-12)  # once per term
    assert scorer.scores([]).tolist() == [0.0, 0.0, 0.0]
    assert scorer.scores([0]).tolist()[1:] == [0.0, 0.0]


def test_parity_with_bm25s_lucene() -> None:
    bm25s = pytest.importorskip("bm25s")
    rng = np.random.default_rng(7)
    vocabulary = [f"w{i}" for i in range(40)]
    docs = [list(rng.choice(vocabulary, size=int(rng.integers(1, 30)))) for _ in range(60)]
    counts = sp.lil_matrix((len(docs), len(vocabulary)))
    for d, doc in enumerate(docs):
        for word in doc:
            counts[d, vocabulary.index(word)] += 1
    reference = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    reference.index(docs, show_progress=False)
    scorer = BM25Scorer.from_counts(counts.tocsr())
    for query in (["w1", "w5"], ["w39"], ["w2", "w3", "w7", "w11"]):
        np.testing.assert_allclose(scorer.scores(vocabulary.index(w) for w in query),
                                   reference.get_scores(query), rtol=1e-5)


def test_view_holds_the_units_with_a_score_and_their_scores() -> None:
    """The sparse view reads only the query terms' postings; it holds exactly the units
    the full scores rank, with the same values, by a sort (few entries) or a pass over
    every unit (entries at least a fifth of the units)."""
    scorer = BM25Scorer.from_counts(COUNTS)
    view = scorer.view([4, 2, 2])
    assert view.units.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(view.values, scorer.scores([4, 2]))
    assert scorer.view([3]).units.tolist() == [1]  # babbage: d1 only
    assert scorer.view([]).units.tolist() == []
    rng = np.random.default_rng(3)
    counts = sp.random(500, 80, density=0.02, format="csr", random_state=4)
    counts.data = np.ceil(counts.data * 3)
    big = BM25Scorer.from_counts(counts)
    for terms in ([1], [5, 9], rng.choice(80, size=30, replace=False).tolist()):
        full = big.scores(terms)
        got = big.view(terms)
        assert got.units.tolist() == np.flatnonzero(full > 0).tolist()
        np.testing.assert_allclose(got.values, full[got.units], rtol=1e-12)


def test_idf_of_given_terms_is_lucenes() -> None:
    # n 3: "program" and "engine" in 2 units, "ada" in 1: ln(1 + 1.5/2.5), ln(1 + 2.5/1.5)
    scorer = BM25Scorer.from_counts(COUNTS)
    np.testing.assert_allclose(scorer.idf(np.array([2, 4, 0])),
                               [np.log(1.6), np.log(1.6), np.log(1 + 2.5 / 1.5)], rtol=1e-12)


def test_unit_scores_are_the_views_sums_to_the_bit() -> None:
    """A unit's BM25 read by binary search of each query column equals the one the
    postings sum gives, bit for bit, for units with and without a score."""
    rng = np.random.default_rng(5)
    counts = sp.random(400, 60, density=0.1, format="csr", random_state=6,
                       data_rvs=lambda n: rng.integers(1, 4, n))
    scorer = BM25Scorer.from_counts(counts)
    for terms in ([3], [7, 1, 40, 1], list(range(0, 60, 4))):
        view = scorer.view(terms)
        columns = np.unique(terms)
        assert np.array_equal(scorer.unit_scores(view.units, columns), view.values)
        others = np.setdiff1d(np.arange(400), view.units)
        assert not scorer.unit_scores(others, columns).any()
        assert np.array_equal(scorer.unit_scores(np.arange(400), columns),
                              scorer.scores(terms))
    assert scorer.unit_scores(np.zeros(0, np.int64), np.array([3])).shape == (0,)


def test_a_found_view_ranks_as_the_full_view() -> None:
    """Found every unit with a score (and some without), the view's best list and ranks
    are the full view's; a unit not found drops out of the best list only."""
    # d0..d2 as above: "engine" (4) scores d1 > d2, "program" (2) d0, d2
    scorer = BM25Scorer.from_counts(COUNTS)
    full = scorer.view([4, 2])
    found = scorer.found_view(np.array([2, 0, 1, 2]), [2, 4])
    assert found.top(None).tolist() == full.top(None).tolist() == [2, 1, 0]
    pool = np.arange(3)
    assert found.ranks(pool, found.top(2)).tolist() == full.ranks(pool, full.top(2)).tolist()
    missed = scorer.found_view(np.array([0, 1]), [4, 2])
    assert missed.top(None).tolist() == [1, 0]
    assert missed.scores_of(np.array([2])).tolist() == full.scores_of(np.array([2])).tolist()
