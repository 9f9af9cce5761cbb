"""Greedy max-coverage selection order."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from shared_core.select.coverage import coverage_order, order_scores

# c0 c1 c2 c3 weights 4, 3, 2, 1
WEIGHT = np.array([4.0, 3.0, 2.0, 1.0])
LINKS = sp.csr_matrix(np.array([[1, 1, 0, 0],    # chunk 0: 7
                                [1, 1, 0, 0],    # chunk 1: 7, the same concepts
                                [0, 0, 1, 1],    # chunk 2: 3
                                [1, 0, 1, 0]]))  # chunk 3: 6


def test_greedy_skips_a_chunk_that_repeats_what_is_covered() -> None:
    # by PageRank sum the order would be 0, 1, 3, 2; greedy: 0 (7), then 2 gains 3 and
    # 3 gains 2 (c2 only), 1 gains 0. After 0 and 2 everything is covered: the rest
    # follow by full weight (1: 7, 3: 6)
    assert coverage_order(LINKS, WEIGHT, np.ones(4)).tolist() == [0, 2, 1, 3]


def test_per_token_cost_and_soft_repeats() -> None:
    # chunk 2 costs 1 token, the others 4: 2 first (3/1), then 0 (7/4, tied with 1);
    # then all is covered and 1 (7/4) comes before 3 (6/4) by full weight per token
    assert coverage_order(LINKS, WEIGHT, np.array([4, 4, 1, 4])).tolist() == [2, 0, 1, 3]
    # repeat .5: after 0 (7), 1 gains (4+3)/2 = 3.5, 2 gains 3, 3 gains 4/2 + 2 = 4 => 3;
    # after 0, 3: 1 gains 4/4 + 3/2 = 2.5, 2 gains 2/2 + 1 = 2 => 1, then 2
    assert coverage_order(LINKS, WEIGHT, np.ones(4), repeat=0.5).tolist() == [0, 3, 1, 2]


def test_ties_go_to_the_lower_index_and_scores_keep_the_order() -> None:
    same = sp.csr_matrix(np.eye(3))
    assert coverage_order(same, np.ones(3), np.ones(3)).tolist() == [0, 1, 2]
    order = np.array([2, 0, 1])
    assert np.argsort(-order_scores(order), kind="stable").tolist() == [2, 0, 1]


def test_greedy_reaches_the_guarantee_on_random_instances() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        dense = (rng.random((8, 10)) < 0.3).astype(float)
        weight = rng.random(10)
        order = coverage_order(sp.csr_matrix(dense), weight, np.ones(8))
        for k in (1, 2, 3):
            covered = dense[order[:k]].any(axis=0)
            best = max(weight[dense[list(c)].any(axis=0)].sum()
                       for c in itertools.combinations(range(8), k))
            assert weight[covered].sum() >= (1 - 1 / np.e) * best - 1e-12


def test_bad_repeat_raises() -> None:
    with pytest.raises(ValueError, match="repeat"):
        coverage_order(LINKS, WEIGHT, np.ones(4), repeat=1.0)
