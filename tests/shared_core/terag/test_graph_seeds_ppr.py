"""TERAG's graph (§3.2), restart weights (Eq. 3-5) and PPR, on examples worked by hand.

Expected values are derived in the comments; networkx is the independent reference
for PPR.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from shared_core.terag import (
    Seed,
    concept_passage_graph,
    group_weights,
    passage_concept_links,
    personalized_pagerank,
    ranked_passages,
    restart_vector,
    select_seeds,
)

# Three passages and their concepts (indices into NAMES):
#   p0: marie curie (0), paris (1), physics (2)
#   p1: paris (1), seine (3), geography (4)
#   p2: geography (4), danube (5)
NAMES = ["marie curie", "paris", "physics", "seine", "geography", "danube"]
ROWS = [[0, 1, 2], [1, 3, 4], [4, 5]]


def hand_graph() -> nx.DiGraph:
    """The graph of ROWS written out from §3.2 by hand: passages p0-p2, then concepts."""
    g = nx.DiGraph()
    g.add_nodes_from(["p0", "p1", "p2", *NAMES])
    g.add_edges_from([("marie curie", "p0"), ("paris", "p0"), ("physics", "p0"),
                      ("paris", "p1"), ("seine", "p1"), ("geography", "p1"),
                      ("geography", "p2"), ("danube", "p2")])  # has_passage
    pairs = [("marie curie", "paris"), ("marie curie", "physics"), ("paris", "physics"),  # p0
             ("paris", "seine"), ("paris", "geography"), ("seine", "geography"),  # p1
             ("geography", "danube")]  # p2
    g.add_edges_from(pairs)
    g.add_edges_from((b, a) for a, b in pairs)  # co_occurrence: both directions
    return g


def test_links_are_zero_one_and_repeats_are_one_link() -> None:
    links = passage_concept_links([[0, 1, 1], [], [2]], 3)
    assert links.toarray().tolist() == [[1, 1, 0], [0, 0, 0], [0, 0, 1]]
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        passage_concept_links([[3]], 3)


def test_graph_edges_match_the_hand_built_graph() -> None:
    adjacency = concept_passage_graph(passage_concept_links(ROWS, len(NAMES)))
    names = ["p0", "p1", "p2", *NAMES]
    built = {(names[i], names[j]) for i, j in zip(*adjacency.nonzero(), strict=True)}
    assert built == set(hand_graph().edges)
    assert len(built) == 8 + 2 * 7  # 8 has_passage, 7 co-occurring pairs both ways
    assert set(adjacency.data.tolist()) == {1.0}  # unweighted: paris-geography once
    # passages have no out-edges; every concept has at least its has_passage edge
    assert np.diff(adjacency.indptr).tolist()[:3] == [0, 0, 0]


def test_group_weights_eq3_to_5_by_hand() -> None:
    # exact group: s = 1, f = 2 and 1 -> w = 1/2, 1 -> 1/3, 2/3
    np.testing.assert_allclose(group_weights(np.ones(2), np.array([2, 1])), [1 / 3, 2 / 3])
    # a negative similarity gives no mass: s = .5, -.2 with f = 1, 1 -> 1, 0
    np.testing.assert_allclose(group_weights(np.array([0.5, -0.2]), np.ones(2)), [1.0, 0.0])
    # every seed dissimilar: 1/f alone, f = 1, 3 -> 1, 1/3 -> .75, .25
    np.testing.assert_allclose(group_weights(np.array([-0.1, 0.0]), np.array([1, 3])),
                               [0.75, 0.25])


FREQUENCY = np.array([1, 2, 1, 1, 2, 1])  # passages per concept in ROWS
# cosines of the concepts to a query, chosen by hand
SIMS = np.array([0.0, 0.6, 0.6 / np.sqrt(2), 0.8, 1.4 / np.sqrt(2), 0.0])


def never() -> np.ndarray:
    raise AssertionError("similarities were computed though exact matches suffice")


def test_exact_seeds_need_no_similarity() -> None:
    # paris (s 1, f 2) -> 1/2; marie curie (s 1, f 1) -> 1; sum 1.5 -> 1/3, 2/3
    seeds = select_seeds([1, 0], never, FREQUENCY, NAMES, types=["entity"] * 6)
    assert [(s.concept, s.group, s.similarity, s.frequency, s.node, s.concept_type)
            for s in seeds] == [("paris", "exact", 1.0, 2, 1, "entity"),
                                ("marie curie", "exact", 1.0, 1, 0, "entity")]
    np.testing.assert_allclose([s.weight for s in seeds], [1 / 3, 2 / 3])


def test_semantic_top3_when_nothing_matches() -> None:
    # top 3 by cosine: geography 1.4/r2 = .98995, seine .8, paris .6 (physics .4243 is 4th)
    # w = s/f: geography .98995/2, seine .8/1, paris .6/2; normalised by their sum
    seeds = select_seeds([], lambda: SIMS, FREQUENCY, NAMES)
    w = np.array([1.4 / np.sqrt(2) / 2, 0.8, 0.3])
    assert [(s.concept, s.group) for s in seeds] == [
        ("geography", "semantic"), ("seine", "semantic"), ("paris", "semantic")]
    np.testing.assert_allclose([s.similarity for s in seeds], [1.4 / np.sqrt(2), 0.8, 0.6])
    np.testing.assert_allclose([s.weight for s in seeds], w / w.sum())
    assert sum(s.weight for s in seeds) == pytest.approx(1.0)


def test_both_mode_normalises_each_group_and_halves_the_restart_mass() -> None:
    # exact: paris alone -> 1. semantic, paris excluded: geography .98995/2, seine .8,
    # physics .4243/1 -> normalised within the group
    seeds = select_seeds([1], lambda: SIMS, FREQUENCY, NAMES, mode="both")
    w = np.array([1.4 / np.sqrt(2) / 2, 0.8, 0.6 / np.sqrt(2)])
    assert [(s.concept, s.group) for s in seeds] == [
        ("paris", "exact"), ("geography", "semantic"), ("seine", "semantic"),
        ("physics", "semantic")]
    np.testing.assert_allclose([s.weight for s in seeds], [1.0, *(w / w.sum())])
    # graph nodes: 3 passages, then concepts; each group holds half the restart mass
    p = restart_vector(seeds, 9, 3)
    np.testing.assert_allclose(p, [0, 0, 0, 0, 0.5, 0.5 * w[2] / w.sum(),
                                   0.5 * w[1] / w.sum(), 0.5 * w[0] / w.sum(), 0])
    with pytest.raises(ValueError, match="seed_mode"):
        select_seeds([1], lambda: SIMS, FREQUENCY, NAMES, mode="all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no seeds"):
        restart_vector((), 9, 3)


def test_zero_weight_seeds_are_left_out() -> None:
    # cosines .9 and 0 and -1: the 0 and the negative get no restart mass
    sims = np.array([0.9, 0.0, -1.0, -1.0, -1.0, -1.0])
    seeds = select_seeds([], lambda: sims, FREQUENCY, NAMES)
    assert [(s.concept, s.weight) for s in seeds] == [("marie curie", 1.0)]


def test_ppr_from_seeds_matches_networkx_on_the_hand_graph() -> None:
    adjacency = concept_passage_graph(passage_concept_links(ROWS, len(NAMES)))
    seeds = (Seed("paris", "exact", 1.0, 2, 1.0, 1),)
    scores, _ = personalized_pagerank(adjacency, restart_vector(seeds, 9, 3), tol=1e-14,
                                      max_iter=1000)
    reference = nx.pagerank(hand_graph(), alpha=0.85, personalization={"paris": 1.0},
                            tol=1e-14, max_iter=1000)
    np.testing.assert_allclose(scores, [reference[n] for n in ["p0", "p1", "p2", *NAMES]],
                               atol=1e-10)
    # paris reaches p0 and p1 directly and p2 only through geography
    order = ranked_passages(scores[:3])
    assert order.tolist()[2] == 2 and scores[2] < min(scores[0], scores[1])


def test_personalized_pagerank_matches_networkx_on_a_random_digraph() -> None:
    rng = np.random.default_rng(3)
    n = 25
    dense = (rng.random((n, n)) < 0.15).astype(float)
    np.fill_diagonal(dense, 0)
    dense[:4] = 0  # four dangling nodes: their mass restarts from the personalization
    p = np.zeros(n)
    p[[4, 11, 17]] = [0.2, 0.5, 0.3]
    scores, iterations = personalized_pagerank(sp.csr_matrix(dense), p, tol=1e-14,
                                               max_iter=2000)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(*np.nonzero(dense), strict=True))
    reference = nx.pagerank(g, alpha=0.85, personalization={4: 0.2, 11: 0.5, 17: 0.3},
                            tol=1e-14, max_iter=2000)
    np.testing.assert_allclose(scores, [reference[i] for i in range(n)], atol=1e-10)
    assert 1 < iterations < 2000
    with pytest.raises(ValueError, match="personalization"):
        personalized_pagerank(sp.identity(2, format="csr"), np.zeros(2))
    with pytest.raises(ValueError, match="damping"):
        personalized_pagerank(sp.identity(2, format="csr"), np.ones(2), damping=1.0)


def test_ranked_passages_by_mass_ties_to_the_lower_index_unreached_left_out() -> None:
    assert ranked_passages(np.array([0.1, 0.0, 0.3, 0.1])).tolist() == [2, 0, 3]
