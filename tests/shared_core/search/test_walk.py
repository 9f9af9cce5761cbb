"""The walk view: truncated personalised PageRank over units and concepts."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.search import fused_search
from shared_core.search.candidates import RescoredView
from shared_core.search.sparse_values import SparseValues
from shared_core.search.summing import COMPILED_ENV
from shared_core.search.walk import (
    WalkGraph,
    _walk_steps,
    summed_arrivals,
    walk_scores,
)

# u0 {c0, c1}, u1 {c1, c2}, u2 {c2, c3}, u3 {c3}: a chain, walked from c0.
CHAIN = sp.csr_matrix(np.array([[1, 1, 0, 0],
                                [0, 1, 1, 0],
                                [0, 0, 1, 1],
                                [0, 0, 0, 1]], dtype=np.float32))


def scores(links: sp.csr_matrix, seeds: np.ndarray | SparseValues, hops: int,
           width: int = 200) -> np.ndarray:
    return walk_scores(seeds, links, links.tocsc(), hops=hops, width=width)


def test_chain_walk_worked_by_hand() -> None:
    seed = np.array([1.0, 0, 0, 0])
    # hop 1: c0's one unit gets all of its mass
    np.testing.assert_allclose(scores(CHAIN, seed, 1), [1, 0, 0, 0])
    # hop 2: u0 gives 1/2 to c0 and c1; c0 gives .5 to u0, c1 .25 each to u0, u1;
    # weighted by c^2 = .25: u0 += .1875, u1 += .0625
    np.testing.assert_allclose(scores(CHAIN, seed, 2), [1.1875, 0.0625, 0, 0])
    # hop 3: arrived [.75, .25]; back c0 .375, c1 .5, c2 .125; on to u0 .625,
    # u1 .3125, u2 .0625; weighted by c^4 = .0625
    np.testing.assert_allclose(scores(CHAIN, seed, 3),
                               [1.2265625, 0.08203125, 0.00390625, 0])


def test_mass_scale_does_not_matter_and_width_bounds_the_frontier() -> None:
    seed = np.array([1.0, 0, 0, 0])
    np.testing.assert_allclose(scores(CHAIN, 7 * seed, 3), scores(CHAIN, seed, 3))
    # width 1 at hop 2: only u0 expands, then only c0 (.5 per posting, above c1's .25)
    np.testing.assert_allclose(scores(CHAIN, seed, 2, width=1), [1.125, 0, 0, 0])


def test_untruncated_width_equals_the_dense_power_series() -> None:
    rng = np.random.default_rng(3)
    dense = (rng.random((30, 12)) < 0.2).astype(np.float64)
    dense[np.arange(30), rng.integers(0, 12, 30)] = 1.0  # no unit without a concept
    links = sp.csr_matrix(dense.astype(np.float32))
    to_units = dense / np.maximum(dense.sum(axis=0), 1)           # concept -> unit
    to_concepts = (dense / dense.sum(axis=1, keepdims=True)).T    # unit -> concept
    seed = np.zeros(12)
    seed[[2, 5]] = [0.25, 0.75]
    expected, concept_mass = np.zeros(30), seed.copy()
    for hop in range(4):
        arrived = to_units @ concept_mass
        expected += 0.25 ** hop * arrived
        concept_mass = to_concepts @ arrived
    np.testing.assert_allclose(scores(links, seed, 4, width=10_000), expected, rtol=1e-12)


def dense_walk(seed: np.ndarray, links: sp.csr_matrix, hops: int, width: int) -> np.ndarray:
    """The walk written plainly, a Python loop over sources: the reference."""
    csc = links.tocsc()
    unit_degree = np.diff(links.indptr).astype(np.float64)
    concept_degree = np.diff(csc.indptr).astype(np.float64)

    def widest(values: np.ndarray) -> np.ndarray:
        positive = np.flatnonzero(values > 0)
        order = np.lexsort((positive, -values[positive]))[:width]
        return np.sort(positive[order])

    def spread(matrix: sp.spmatrix, sources: np.ndarray, share: np.ndarray, n: int
               ) -> np.ndarray:
        targets = np.concatenate([matrix.indices[matrix.indptr[i]:matrix.indptr[i + 1]]
                                  for i in sources] or [np.zeros(0, int)])
        owner = np.repeat(np.arange(len(sources)), np.diff(matrix.indptr)[sources])
        return np.bincount(targets, weights=share[owner], minlength=n)

    out = np.zeros(links.shape[0])
    concepts = np.flatnonzero(seed > 0)
    # normalised by the seeds' own sum, in order: a sum over the whole vocabulary-long
    # array would group its additions by position instead
    share = seed[concepts] / seed[concepts].sum() / np.maximum(concept_degree[concepts], 1.0)
    weight = 1.0
    for hop in range(hops):
        arrived = spread(csc, concepts, share, links.shape[0])
        out += weight * arrived
        if hop == hops - 1:
            break
        units = widest(arrived / np.maximum(unit_degree, 1.0))
        back = spread(links, units, arrived[units] / unit_degree[units], links.shape[1])
        concepts = widest(back / np.maximum(concept_degree, 1.0))
        share = back[concepts] / concept_degree[concepts]
        weight *= 0.25
    return out


@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_the_walk_equals_a_plain_loop_reference_to_the_bit(seed: int, hops: int,
                                                            width: int) -> None:
    """The vectorised walk gives every unit the reference's exact float (nodes as units)."""
    rng = np.random.default_rng(seed)
    links = sp.csr_matrix((rng.random((40, 15)) < 0.2).astype(np.float32))
    seeds = np.where(rng.random(15) < 0.3, rng.random(15), 0.0)
    expected = dense_walk(seeds, links, hops, width)
    np.testing.assert_array_equal(scores(links, seeds, hops, width), expected)
    np.testing.assert_array_equal(scores(links, SparseValues.of_dense(seeds), hops, width),
                                  expected)
    # nodes as sentences of 12 units: each unit's sum over all its nodes. The walk sums
    # each step's mass straight into the units (never a sentence-long array), so the
    # additions come in another order: equal to rounding, not to the bit
    node_unit = np.sort(rng.integers(0, 12, size=40))
    graph = WalkGraph(links, node_unit)
    np.testing.assert_allclose(graph.unit_scores(seeds, 12, hops=hops, width=width),
                               np.bincount(node_unit, weights=expected, minlength=12),
                               rtol=1e-12, atol=0)


def test_no_seed_mass_reaches_nothing_and_bad_hops_raise() -> None:
    assert not scores(CHAIN, np.zeros(4), 2).any()
    with pytest.raises(ValueError, match="walk hops must be >= 1"):
        scores(CHAIN, np.ones(4), 0)


def test_sentence_nodes_sum_into_their_units() -> None:
    # the chain's four rows as sentences, two per unit: unit masses are the sums
    graph = WalkGraph(CHAIN, np.array([0, 0, 1, 1]))
    np.testing.assert_allclose(graph.unit_scores(np.array([1.0, 0, 0, 0]), 2, hops=3),
                               [1.2265625 + 0.08203125, 0.00390625])


def test_the_graph_keeps_each_concepts_posting_length_and_walks_the_same_with_it() -> None:
    # c0 in row 0; c1 in rows 0, 1; c2 in rows 1, 2; c3 in rows 2, 3
    graph = WalkGraph(CHAIN, np.array([0, 0, 1, 1]))
    assert graph.concept_degree.tolist() == [1.0, 2.0, 2.0, 2.0]
    assert graph.concept_degree is graph.concept_degree  # made once, for every query
    rng = np.random.default_rng(5)
    links = sp.csr_matrix((rng.random((40, 15)) < 0.25).astype(np.float32))
    seed = rng.random(15) * (rng.random(15) < 0.4)
    kept = WalkGraph(links)
    assert kept.unit_scores(seed, 40, hops=3).tolist() == scores(links, seed, 3).tolist()
    view = kept.unit_view(seed, 40, hops=3, max_postings=6)
    recomputed = list(_walk_steps(seed, links, links.tocsc(), hops=3, continue_prob=0.5,
                                  width=200, unit_degree=None, node_unit=None,
                                  entry_unit=None, max_postings=6))
    assert isinstance(view, RescoredView)
    assert view.found.units.tolist() == summed_arrivals(recomputed, 40).units.tolist()


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_unit_mass_by_hand_and_the_sample_read_once(compiled: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Numpy gathers the units' entries and keeps the rank sample's for the next query;
    the compiled loop (``search.summing.run_sums``) reads the rows and keeps nothing."""
    if compiled == "1":
        pytest.importorskip("numba")
    monkeypatch.setenv(COMPILED_ENV, compiled)
    # the chain as sentences: unit 0 = rows 0, 1 (c0 c1 + c1 c2), unit 1 = rows 2, 3 (c2 c3 + c3)
    graph = WalkGraph(CHAIN, np.array([0, 0, 1, 1]))
    mass = np.array([1.0, 10.0, 100.0, 1000.0])
    assert graph.unit_mass(np.array([1, 0]), mass).tolist() == [2100.0, 121.0]
    # kept: the second query's masses are read off the entries the first read
    assert graph.unit_mass(np.array([0, 1]), mass, keep=True).tolist() == [121.0, 2100.0]
    assert len(graph.kept_entries) == (1 if compiled == "0" else 0)
    assert graph.unit_mass(np.array([0, 1]), mass * 2, keep=True).tolist() == [242.0, 4200.0]
    # a unit past the last with nodes has none: no mass
    assert graph.unit_mass(np.array([2]), mass).tolist() == [0.0]


def test_what_the_first_walk_builds_goes_to_the_keeper_and_walks_the_same() -> None:
    kept: list[list[np.ndarray]] = []

    def keeper(arrays: list[np.ndarray]) -> list[np.ndarray]:  # read-only copies, as mapped
        copies = [np.array(a) for a in arrays]
        for copy in copies:
            copy.flags.writeable = False
        kept.append(copies)
        return copies

    graph = WalkGraph(CHAIN, np.array([0, 0, 1, 1]), keep_arrays=keeper)
    plain = WalkGraph(CHAIN, np.array([0, 0, 1, 1]))
    seed = np.array([1.0, 0, 0, 0])
    assert graph.unit_scores(seed, 2, hops=3).tolist() == plain.unit_scores(seed, 2,
                                                                            hops=3).tolist()
    assert len(kept) == 1 and len(kept[0]) == 4  # once: data, indices, indptr, entry units
    data, indices, indptr, entry_unit = kept[0]
    assert np.shares_memory(graph.links_csc.indices, indices)  # views of what it kept
    assert np.shares_memory(graph.links_csc.data, data) and graph.entry_unit is entry_unit
    assert data.dtype == np.int8  # the structure only: a walk reads no counts
    # c0 in node 0; c1 in 0, 1; c2 in 1, 2; c3 in 2, 3 -> units 0 0 | 0 0 | 0 1 | 1 1
    assert indptr.tolist() == [0, 1, 3, 5, 7] and indices.tolist() == [0, 0, 1, 1, 2, 2, 3]
    assert entry_unit.tolist() == [0, 0, 0, 0, 1, 1, 1]
    graph.unit_scores(seed, 2, hops=2)
    assert len(kept) == 1


def test_the_walk_view_lifts_the_unit_one_shared_name_away() -> None:
    # c0 is the query's concept; u0 {c0, c1} names c1, which u1 {c1} is about;
    # u2, u3 {c2} are nearer the query by similarity alone.
    links = sp.csr_matrix(np.array([[1, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1]], dtype=float))
    args: dict[str, object] = {"top_k": 1, "hops": 0, "decay": 0.5, "rrf_k": 1,
                               "budget": 100, "overflow": "stop"}
    concept_sim, unit_sim = np.array([0.9, 0.0, 0.0]), np.array([0.9, 0.1, 0.3, 0.2])

    def order(walk_hops: int) -> list[int]:
        hits, _ = fused_search(concept_sim, links, sp.csr_matrix((3, 3)), unit_sim,
                               np.ones(4, dtype=np.int64), np.ones(3),
                               walk_hops=walk_hops, **args)  # type: ignore[arg-type]
        return [h.chunk for h in hits]

    # without the walk: similarity ranks u0, u2, u3, u1; evidence has u0 alone
    assert order(0) == [0, 2, 3, 1]
    # walk (hops 2): u0 1.1875, u1 .0625 -> walk ranks u0 1, u1 2; fused with rrf_k 1:
    # u1 1/5 + 1/3 = .533 > u2 1/3 > u3 1/4
    assert order(2) == [0, 1, 2, 3]


def test_the_bounded_walk_view_worked_by_hand() -> None:
    seed = np.array([1.0, 1.0, 0, 0])
    graph = WalkGraph(CHAIN)

    def view(hops: int, max_postings: int, cut: bool) -> tuple[dict[int, float], list[float]]:
        """What the bounded reads found, and every unit's exact mass."""
        walked = graph.unit_view(seed, 4, hops=hops, max_postings=max_postings)
        # a walk that read every posting found the exact masses and is its own view
        read = walked.found if isinstance(walked, RescoredView) else walked
        assert isinstance(walked, RescoredView) == cut  # some posting left unread
        found = dict(zip(read.units.tolist(), read.values.tolist(), strict=True))
        return found, walked.scores_of(np.arange(4)).tolist()

    # hop 1: c0 passes .5 to its one unit, c1 .25 to each of its two; one entry a step
    # reads c0 alone (.5 per entry), yet the exact masses count both seeds
    assert view(1, 3, cut=False) == (pytest.approx({0: 0.75, 1: 0.25}),
                                     pytest.approx([0.75, 0.25, 0, 0]))
    assert view(1, 1, cut=True) == (pytest.approx({0: 0.5}), pytest.approx([0.75, 0.25, 0, 0]))
    # unbounded, two hops: back from u0 (.375 each to c0, c1) and u1 (.125 to c1, c2);
    # c0 .375, c1 .25 and c2 .0625 per entry; weighted by .25: u0 .90625, u1 .328125,
    # u2 .015625 -- what walk_scores gives
    full = [0.90625, 0.328125, 0.015625, 0]
    assert view(2, 100, cut=False) == (pytest.approx({0: 0.90625, 1: 0.328125, 2: 0.015625}),
                            pytest.approx(full))
    np.testing.assert_allclose(scores(CHAIN, seed, 2), full)
    # one entry a step: hop 1 reads c0, u0 gets .5 and sends .25 back to c0 and c1
    # (.25 and .125 per entry); hop 2 reads c0 alone: found u0 .5 + .25 * .25. Exact:
    # c0 carries .5 + .25 * .25, c1 .25 + .25 * .125: u0 .84375, u1 .28125
    assert view(2, 1, cut=True) == (pytest.approx({0: 0.5625}),
                                    pytest.approx([0.84375, 0.28125, 0, 0]))


@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 200),
       st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_the_bounded_view_finds_within_its_exact_masses_and_ranks_like_a_full_sort(
        seed: int, hops: int, max_postings: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    links = sp.csr_matrix((rng.random((40, 15)) < 0.2).astype(np.float32))
    seeds = np.where(rng.random(15) < 0.3, rng.random(15), 0.0)
    node_unit = np.sort(rng.integers(0, 12, size=40))
    graph = WalkGraph(links, node_unit)
    walked = graph.unit_view(seeds, 12, hops=hops, max_postings=max_postings)
    exact = walked.scores_of(np.arange(12))
    # the seeds given as the valued concepts alone (as the fused ranking gives them):
    # the same walk, to the bit
    given = graph.unit_view(SparseValues.of_dense(seeds), 12, hops=hops,
                            max_postings=max_postings)
    assert np.array_equal(given.scores_of(np.arange(12)), exact)
    assert given.top(k).tolist() == walked.top(k).tolist()
    found = walked.found if isinstance(walked, RescoredView) else walked
    assert (found.values > 0).all() and (np.diff(found.units) > 0).all()
    # the reads found part of each unit's mass under the same steps, never more
    assert (found.values <= exact[found.units] * (1 + 1e-12)).all()
    # summed by a sort (no unit count) or into an array: the same
    steps = list(_walk_steps(seeds, links, links.tocsc(), hops=hops, continue_prob=0.5,
                             width=200, unit_degree=None, node_unit=node_unit,
                             entry_unit=None, max_postings=max_postings))
    by_sort = summed_arrivals(steps, None)
    assert by_sort.units.tolist() == found.units.tolist()
    np.testing.assert_allclose(by_sort.values, found.values, rtol=1e-12)
    if max_postings >= links.nnz:  # the bound never binds: the full walk, both ways
        full = graph.unit_scores(seeds, 12, hops=hops)
        np.testing.assert_allclose(exact, full, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(found.scores_of(np.arange(12)), full, rtol=1e-12)
    # the top: found units by exact mass, best first, ties to the lower unit
    top = walked.top(k)
    candidates = found.top(2 * k)
    expected = sorted((u for u in candidates.tolist() if exact[u] > 0),
                      key=lambda u: (-exact[u], u))[:k]
    assert top.tolist() == expected
    # ranks: 12 units fit the rank sample, so a rank beyond the top is exact
    ranks = walked.ranks(np.arange(12), top)
    rest = [u for u in range(12) if u not in top.tolist()]
    for unit in range(12):
        if unit in top.tolist():
            assert ranks[unit] == top.tolist().index(unit) + 1
        elif exact[unit] <= 0:
            assert ranks[unit] == 0
        else:
            above = sum(1 for v in rest if (exact[v], -v) > (exact[unit], -unit))
            assert ranks[unit] == len(top) + 1 + above
