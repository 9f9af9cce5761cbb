"""An incremental refresh equals a full derivation, and recomputes only what changed."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.graph import edges as edges_module
from shared_core.graph.edges import certificate_slack, cooccurrence_change
from shared_core.search.ann import HnswSegments, segment_plan
from shared_core.search.walk import WalkGraph
from shared_core.state import derive_graph, merge_many, refresh_graph, take
from shared_core.state import derived as derived_module
from shared_core.state.corpus import CorpusState
from shared_core.state.derived import DerivedGraph, link_concepts
from shared_core.state.refresh import _concept_changes, _link_changes, chunk_moves
from shared_core.state.rows import VectorRows
from shared_core.state.saved import restore_graph, saved_parts
from tests.shared_core.test_index_state import CONFIGS, POOL

DIM = 64
# more chunks than the index-state pool, so that one chunk is a small change
SENTENCES = [s.strip() + "." for text in POOL for s in text.split(".") if s.strip()]
CHUNKS = [f"{SENTENCES[i % len(SENTENCES)]} {SENTENCES[(3 * i + 1) % len(SENTENCES)]} "
          f"{SENTENCES[(7 * i + 2) % len(SENTENCES)]}" for i in range(36)]


def corpus_of(positions: list[int], config: ConceptGraphConfig) -> CorpusState:
    index = ConceptGraphIndex.from_texts([CHUNKS[i] for i in positions],
                                         ids=[f"c{i:02d}" for i in positions],
                                         embedder=HashingEmbedder(DIM), config=config)
    return index.state.corpus


def assert_equal_graphs(refreshed: DerivedGraph, derived: DerivedGraph,
                        older_sums: bool = False) -> None:
    """Every derived array the same bit for bit (PageRank: within 1e-12). ``older_sums``:
    ``refreshed`` may keep every concept's sum or none, as saves before the per-concept
    rule did."""
    assert refreshed.concepts == derived.concepts
    for name in ("concept_terms", "vectors", "sentence_counts", "unit_offsets", "unit_tokens",
                 "unit_chunk", "unit_linked_concepts", "unit_idf", "concept_chunk_counts"):
        np.testing.assert_array_equal(getattr(refreshed, name), getattr(derived, name), name)
    # the exact sums a refresh updates: the same concepts' as a derivation keeps
    # (summed_concepts), or, in a graph loaded from a save made before that rule and not
    # refreshed since, every concept's or none
    a, b = refreshed.summed_concepts, derived.summed_concepts
    if older_sums and a is not None and len(a) == len(refreshed.concepts):
        a = None if b is None else b
        sums = None if b is None else np.asarray(refreshed.concept_sums)[b]
    elif older_sums and a is None:
        a, sums = b, derived.concept_sums
    else:
        sums = refreshed.concept_sums
    assert (a is None) == (b is None) and (sums is None) == (a is None)
    if a is not None:
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(sums, derived.concept_sums)
    for name in ("source", "target", "cooccurrence", "dice"):
        np.testing.assert_array_equal(getattr(refreshed.edges, name),
                                      getattr(derived.edges, name), f"edges.{name}")
    assert_equal_pairs(refreshed, derived)
    for name in ("links", "adjacency", "unit_links_csr"):
        a, b = getattr(refreshed, name), getattr(derived, name)
        assert (a != b).nnz == 0 and a.shape == b.shape, name
    np.testing.assert_allclose(refreshed.rank, derived.rank, rtol=0, atol=1e-12)
    if derived.unit_vectors is None:
        assert refreshed.unit_vectors is None
    else:
        np.testing.assert_array_equal(refreshed.unit_vectors, derived.unit_vectors)
    a, b = refreshed.unit_bm25.weights, derived.unit_bm25.weights
    assert (a != b).nnz == 0 and a.shape == b.shape, "unit_bm25"
    assert refreshed.walk is not None and derived.walk is not None
    a, b = refreshed.walk.links_csr, derived.walk.links_csr
    assert (a != b).nnz == 0 and a.shape == b.shape, "walk links (sentence concepts)"


def assert_equal_pairs(refreshed: DerivedGraph, derived: DerivedGraph) -> None:
    """The same strong pairs, counts and cosine decisions (margins depend on the history)."""
    assert refreshed.pairs is not None and derived.pairs is not None
    for name in ("source", "target", "count", "edge"):
        np.testing.assert_array_equal(getattr(refreshed.pairs, name),
                                      getattr(derived.pairs, name), f"pairs.{name}")
    keys = refreshed.pairs.keys(len(refreshed.concepts))
    assert np.all(np.diff(keys) > 0) and np.all(refreshed.pairs.source < refreshed.pairs.target)
    # a kept margin is a lower bound of the distance to theta_sem, up to float32 rounding
    slack = certificate_slack(refreshed.vectors.shape[1])
    assert np.all(np.abs(refreshed.pairs.margin) <= np.abs(derived.pairs.margin) + slack)


def with_thresholds(config: ConceptGraphConfig, theta_co: int,
                    theta_sem: float) -> ConceptGraphConfig:
    return ConceptGraphConfig.from_dict(config.to_dict() | {"theta_co": theta_co,
                                                            "theta_sem": theta_sem})


# (theta_co, theta_sem): every pair an edge; some cosines cut; counts and cosines both cut
# (theta_co 2 and 3: pairs below it whose count rises are recounted)
THRESHOLDS = [(1, 0.0), (1, 0.3), (2, 0.15), (3, 0.2)]
STEP = st.tuples(st.lists(st.integers(0, len(CHUNKS) - 1), max_size=4, unique=True),
                 st.lists(st.integers(0, 63), max_size=3, unique=True))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(CONFIGS)),
    thresholds=st.sampled_from(THRESHOLDS),
    held=st.lists(st.integers(0, len(CHUNKS) - 1), min_size=4, max_size=30, unique=True),
    steps=st.lists(STEP, min_size=1, max_size=4),
    key_block=st.sampled_from([2, edges_module.KEY_BLOCK]),
    sums_rule=st.sampled_from([0, 2, derived_module.SUMS_MIN_SENTENCES, 10**9]),
)
def test_a_sequence_of_refreshes_equals_a_full_derivation(
        name: str, thresholds: tuple[int, float], held: list[int],
        steps: list[tuple[list[int], list[int]]], key_block: int, sums_rule: int) -> None:
    """Property: after every step of any sequence of small adds and deletes, each refreshed
    from the previous refresh (so margins shrink across steps and get re-certified), every
    derived array equals a fresh derivation's; the pairs' keys looked up a block of two at a
    time or all in one; the concept vectors updated through kept sums or summed from the
    changed concepts' sentences: every concept's sum kept (rule 0), those of concepts in
    two sentences or more (concepts cross the line both ways), the default rule (few or
    none of them on these corpora), or none."""
    default_block, default_rule = (edges_module.KEY_BLOCK,
                                   derived_module.SUMS_MIN_SENTENCES)
    edges_module.KEY_BLOCK = key_block
    derived_module.SUMS_MIN_SENTENCES = sums_rule
    try:
        _refresh_steps(name, thresholds, held, steps)
    finally:
        edges_module.KEY_BLOCK = default_block
        derived_module.SUMS_MIN_SENTENCES = default_rule


def _refresh_steps(name: str, thresholds: tuple[int, float], held: list[int],
                   steps: list[tuple[list[int], list[int]]]) -> None:
    config = with_thresholds(CONFIGS[name], *thresholds)
    before = corpus_of(held, config)
    graph = derive_graph(before, config)
    for added, deleted in steps:
        gone = {i % len(before) for i in deleted} if len(before) > 1 else set()
        after = take(before, np.array([i for i in range(len(before)) if i not in gone]))
        new = [i for i in added if f"c{i:02d}" not in after.position]
        if new:
            after = merge_many([after, corpus_of(new, config)])
        graph = refresh_graph(before, graph, after, config, max_changed=1.0)
        assert_equal_graphs(graph, derive_graph(after, config))
        # what a save keeps of a refreshed graph (margins shrunk by its history) obeys the
        # rules a load takes it by, and passes a load that derives everything again
        for verify in (False, True):
            restored = restore_graph(after, config, saved_parts(graph), verify=verify)
            assert_equal_graphs(graph, restored)
            assert restored.pairs is not None and graph.pairs is not None
            if not verify:  # taken as read: the same margins
                np.testing.assert_array_equal(restored.pairs.margin, graph.pairs.margin)
        before = after


FRUIT_CONFIG = ConceptGraphConfig(concepts_per_chunk=2, theta_co=1, theta_sem=-1.0)
FRUIT_TEXTS = {"a": "apple banana apple banana.", "b": "banana cherry banana cherry.",
               "c": "cherry damson cherry damson.", "d": "damson elder damson elder."}


def fruit_state(ids: list[str]) -> CorpusState:
    """Chunks of two concepts each, every one sharing one with the next (a-b-c-d)."""
    return ConceptGraphIndex.from_texts([FRUIT_TEXTS[i] for i in ids], ids=ids,
                                        embedder=HashingEmbedder(DIM),
                                        config=FRUIT_CONFIG).state.corpus


def test_only_the_concepts_of_changed_chunks_are_recomputed() -> None:
    """Worked by hand: adding one chunk changes exactly the concepts it contains."""
    config, state = FRUIT_CONFIG, fruit_state
    before, after = state(["a", "b", "c"]), state(["a", "b", "c", "d"])
    graph = derive_graph(before, config)
    assert graph.concepts == ("apple", "banana", "cherry", "damson")
    found = link_concepts(after, config)
    changes = _concept_changes(graph, after, found, chunk_moves(before, after))
    # new: "elder"; linked by the new chunk: "damson"; apple, banana, cherry untouched
    names = [after.terms[t] for t in found.concept_terms]
    assert names == ["apple", "banana", "cherry", "damson", "elder"]
    assert [names[i] for i in changes.changed] == ["damson", "elder"]
    assert changes.old.tolist() == [0, 1, 2, 3, -1]
    # deleting "a" removes apple and changes banana (it loses a chunk)
    smaller = state(["b", "c", "d"])
    after_graph = derive_graph(after, config)
    found = link_concepts(smaller, config)
    changes = _concept_changes(after_graph, smaller, found, chunk_moves(after, smaller))
    names = [smaller.terms[t] for t in found.concept_terms]
    assert names == ["banana", "cherry", "damson", "elder"]
    assert [names[i] for i in changes.changed] == ["banana"]
    assert changes.new_of_old.tolist() == [-1, 0, 1, 2, 3]


def test_the_unchanged_concepts_sums_stay_in_the_array_they_were_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every concept's sum kept (one sentence suffices): adding chunk d recomputes damson's
    and elder's (new) sums only; apple's, banana's and cherry's are read from the old
    graph's array, not copied, and every sum is a derivation's."""
    monkeypatch.setattr(derived_module, "SUMS_MIN_SENTENCES", 1)
    config, state = FRUIT_CONFIG, fruit_state
    before, after = state(["a", "b", "c"]), state(["a", "b", "c", "d"])
    graph = derive_graph(before, config)
    assert graph.summed_concepts is not None and len(graph.summed_concepts) == 4
    refreshed = refresh_graph(before, graph, after, config, max_changed=1.0)
    sums = refreshed.concept_sums
    assert isinstance(sums, VectorRows) and sums.runs[0] is graph.concept_sums
    assert sums.index.tolist() == [0, 1, 2, 4, 5]  # damson and elder: the new run's rows
    np.testing.assert_array_equal(sums, derive_graph(after, config).concept_sums)


def test_counts_by_delta_equal_a_full_recount_worked_by_hand() -> None:
    """Chunks a-f, every term a concept linking every chunk that contains it, theta_co 2.

    before  a: apple banana cherry   b: apple banana   c: banana cherry   d: cherry damson
            Co: apple-banana 2, banana-cherry 2 (strong); apple-cherry 1, cherry-damson 1
    delete b, add e: apple cherry damson, f: cherry damson elder
            change: b -apple-banana; e +apple-cherry +apple-damson +cherry-damson;
                    f +cherry-damson +cherry-elder +damson-elder
    after   apple-banana 2-1 = 1 (drops out), banana-cherry 2 (carried as is),
            apple-cherry 1+1 = 2 and cherry-damson 1+2 = 3 (not strong before: recounted)
    """
    config = ConceptGraphConfig(concepts_per_chunk=3, theta_co=2, theta_sem=-1.0)
    texts = {"a": "apple banana cherry.", "b": "apple banana.", "c": "banana cherry.",
             "d": "cherry damson.", "e": "apple cherry damson.", "f": "cherry damson elder."}

    def state(ids: list[str]) -> CorpusState:
        return ConceptGraphIndex.from_texts([texts[i] for i in ids], ids=ids,
                                            embedder=HashingEmbedder(DIM),
                                            config=config).state.corpus

    before, after = state(["a", "b", "c", "d"]), state(["a", "c", "d", "e", "f"])
    graph = derive_graph(before, config)
    assert graph.pairs is not None
    names = graph.concepts
    assert names == ("apple", "banana", "cherry", "damson")
    assert _named_pairs(graph) == [("apple", "banana", 2), ("banana", "cherry", 2)]
    found = link_concepts(after, config)
    changes = _concept_changes(graph, after, found, chunk_moves(before, after))
    change = cooccurrence_change(*_link_changes(found.links, changes))
    new_names = [after.terms[t] for t in found.concept_terms]
    assert [(new_names[a], new_names[b], int(d)) for a, b, d in
            zip(change.row, change.col, change.data, strict=True)] == [
        ("apple", "banana", -1), ("apple", "cherry", 1), ("apple", "damson", 1),
        ("cherry", "damson", 2), ("cherry", "elder", 1), ("damson", "elder", 1)]
    refreshed = refresh_graph(before, graph, after, config, max_changed=1.0)
    expected = [("apple", "cherry", 2), ("banana", "cherry", 2), ("cherry", "damson", 3)]
    assert _named_pairs(refreshed) == expected
    assert _named_pairs(derive_graph(after, config)) == expected


def _named_pairs(graph: DerivedGraph) -> list[tuple[str, str, int]]:
    assert graph.pairs is not None
    return [(graph.concepts[a], graph.concepts[b], int(c)) for a, b, c in
            zip(graph.pairs.source, graph.pairs.target, graph.pairs.count, strict=True)]


def test_chunk_moves_follow_ids_through_sentences_and_units() -> None:
    config = ConceptGraphConfig(unit_tokens=12)
    before = corpus_of([0, 2, 4], config)
    after = merge_many([take(before, np.array([0, 2])), corpus_of([1], config)])
    moves = chunk_moves(before, after)
    # ids c00 c02 c04 -> c00 c01 c04: c02 deleted, c04 one place on
    assert moves.chunk.tolist() == [0, -1, 2] and moves.added_chunks == 1
    for old, new in enumerate(moves.sentence.tolist()):
        if new >= 0:
            np.testing.assert_array_equal(before.sentence_vectors[old],
                                          after.sentence_vectors[new])
    units_before, units_after = before.unit_offsets(), after.unit_offsets()
    for old, new in enumerate(moves.unit.tolist()):
        if new >= 0:
            assert (np.diff(units_before)[old] == np.diff(units_after)[new])
    assert (moves.unit < 0).sum() == np.diff(np.searchsorted(before.unit_starts,
                                                             before.sentence_offsets))[1]


def test_an_update_makes_the_walk_postings_where_the_state_was_walked() -> None:
    index = ConceptGraphIndex.from_texts(CHUNKS[:30], ids=[f"c{i:02d}" for i in range(30)],
                                         embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig(walk_hops=2))
    assert index.state.graph.walk is not None and not index.state.graph.walk.has_postings
    index.add([CHUNKS[30]], ids=["c30"])
    assert index.state.graph.walk is not None
    assert not index.state.graph.walk.has_postings  # never walked: the update makes none
    index.retrieve("Who wrote the first program?")
    assert index.state.graph.walk.has_postings
    for update in (lambda: index.add([CHUNKS[31]], ids=["c31"]),
                   lambda: index.delete(["c00", "c07"])):
        update()
        walk = index.state.graph.walk
        assert walk is not None and walk.has_postings  # made by the update, before a query
        built = WalkGraph(walk.links_csr, walk.node_unit)  # as a first walk builds them
        assert (walk.links_csc != built.links_csc).nnz == 0
        assert walk.links_csc.shape == built.links_csc.shape
        assert walk.entry_unit is not None and built.entry_unit is not None
        np.testing.assert_array_equal(walk.entry_unit, built.entry_unit)


def test_a_large_change_derives_the_graph_whole() -> None:
    config = CONFIGS["default"]
    before = corpus_of(list(range(8)), config)
    after = merge_many([before, corpus_of(list(range(8, 12)), config)])  # a third is new
    graph = derive_graph(before, config)
    assert_equal_graphs(refresh_graph(before, graph, after, config), derive_graph(after, config))


def test_the_index_refreshes_on_add_and_delete() -> None:
    """The refreshed state is what ``add`` and ``delete`` publish (not a re-derivation)."""
    config = CONFIGS["default"]
    index = ConceptGraphIndex.from_texts(CHUNKS[:30], ids=[f"c{i:02d}" for i in range(30)],
                                         embedder=HashingEmbedder(DIM), config=config)
    index.add(CHUNKS[30:31], ids=["c30"])
    assert_equal_graphs(index.state.graph, derive_graph(index.state.corpus, config))
    index.delete(["c03"])
    assert_equal_graphs(index.state.graph, derive_graph(index.state.corpus, config))


@pytest.mark.parametrize("deleted", [[], [3]])
def test_a_refresh_leaves_the_graph_it_started_from_as_it_was(deleted: list[int]) -> None:
    """Readers hold the old graph while a refresh builds the next: its decisions and
    margins are updated in place only when the refresh copied them (a deleted chunk's
    pairs filtered out), never the old graph's own."""
    config = with_thresholds(CONFIGS["default"], 1, 0.1)
    before = corpus_of(list(range(24)), config)
    graph = derive_graph(before, config)
    assert graph.pairs is not None
    edge, margin = graph.pairs.edge.copy(), graph.pairs.margin.copy()
    kept = np.array([i for i in range(24) if i not in deleted])
    after = merge_many([take(before, kept), corpus_of([30, 31], config)])
    refreshed = refresh_graph(before, graph, after, config, max_changed=1.0)
    assert_equal_graphs(refreshed, derive_graph(after, config))
    np.testing.assert_array_equal(graph.pairs.edge, edge)
    np.testing.assert_array_equal(graph.pairs.margin, margin)


def test_edges_are_only_recomputed_where_links_changed() -> None:
    """Links differ only in the columns reported changed (the premise of carrying edges)."""
    config = CONFIGS["paper"]
    before = corpus_of(list(range(20)), config)
    after = merge_many([take(before, np.arange(1, 20)), corpus_of([25], config)])
    graph = derive_graph(before, config)
    found = link_concepts(after, config)
    moves = chunk_moves(before, after)
    changes = _concept_changes(graph, after, found, moves)
    unchanged = np.setdiff1d(np.flatnonzero(changes.old >= 0), changes.changed)
    assert len(unchanged) and len(changes.changed)
    old_columns = sp.csc_matrix(graph.links)[:, changes.old[unchanged]]
    kept_rows = np.flatnonzero(moves.chunk >= 0)
    new_columns = sp.csc_matrix(found.links)[moves.chunk[kept_rows]][:, unchanged]
    assert (old_columns[kept_rows] != new_columns).nnz == 0
    assert old_columns[np.flatnonzero(moves.chunk < 0)].nnz == 0


@pytest.mark.parametrize("similarity", ["max", "direct"])
def test_the_approximate_index_is_appended_to_and_masks_deleted_rows(similarity: str) -> None:
    pytest.importorskip("faiss")
    config = ConceptGraphConfig(**{**CONFIGS["default"].to_dict(), "vector_index": "hnsw",
                                   "chunk_similarity": similarity})
    ids = [f"c{i:02d}" for i in range(30)]
    index = ConceptGraphIndex.from_texts(CHUNKS[:30], ids=ids, embedder=HashingEmbedder(DIM),
                                         config=config)
    first = index.state.graph.ann
    rows = len(first)  # type: ignore[arg-type]
    index.delete(["c03"])
    index.add(CHUNKS[30:32], ids=["c30", "c31"])
    graph, corpus = index.state.graph, index.state.corpus
    assert graph.ann is not first and len(first) == rows  # type: ignore[arg-type]
    assert graph.ann_rows is not None and len(graph.ann) == len(graph.ann_rows)  # type: ignore[arg-type]
    live = graph.ann_rows[graph.ann_rows >= 0]
    n_vectors = len(corpus.unit_offsets()) - 1
    if similarity == "max":
        n_vectors = len(corpus.sentence_spans)
    assert sorted(live.tolist()) == list(range(n_vectors))  # every vector once
    dead = int((graph.ann_rows < 0).sum())
    assert dead > 0 and dead == len(graph.ann_rows) - n_vectors  # c03's rows, masked
    fresh = ConceptGraphIndex.from_texts(
        [CHUNKS[int(i[1:])] for i in corpus.ids], ids=list(corpus.ids),
        embedder=HashingEmbedder(DIM), config=config)
    for query in ["Who wrote the first compiler?", "analytical engine punched cards"]:
        got = [(c.id, round(c.score, 9)) for c in index.retrieve(query).chunks]
        assert got == [(c.id, round(c.score, 9)) for c in fresh.retrieve(query).chunks]


def test_one_chunk_at_a_time_the_hnsw_segments_follow_their_plan_and_retrieve_as_a_build(
        ) -> None:
    """Twelve chunks, then the other 24 added one at a time: new rows are appended as a
    segment, grown into the last, merged, and at last rebuilt, as ``segment_plan`` says;
    after each add every vector is indexed once and retrieval is a fresh build's."""
    pytest.importorskip("faiss")
    config = ConceptGraphConfig(**{**CONFIGS["default"].to_dict(), "vector_index": "hnsw"})
    index = ConceptGraphIndex.from_texts(CHUNKS[:12], ids=[f"c{i:02d}" for i in range(12)],
                                         embedder=HashingEmbedder(DIM), config=config)
    plans = []
    for i in range(12, len(CHUNKS)):
        before = index.state.graph.ann
        assert isinstance(before, HnswSegments)
        rows_before = len(index.state.corpus.sentence_spans)
        index.add([CHUNKS[i]], ids=[f"c{i:02d}"])
        graph = index.state.graph
        added = len(index.state.corpus.sentence_spans) - rows_before
        plan = segment_plan(before.sizes(), added)
        plans.append(plan)
        after = graph.ann
        assert isinstance(after, HnswSegments) and graph.ann_rows is not None
        expected = {"grow": [*before.sizes()[:-1], before.sizes()[-1] + added],
                    "append": [*before.sizes(), added],
                    "merge": [before.sizes()[0], sum(before.sizes()[1:]) + added],
                    "rebuild": [len(before) + added]}[plan]
        assert after.sizes() == expected
        assert after.segments[0] is before.segments[0] or plan == "rebuild"
        assert sorted(graph.ann_rows.tolist()) == list(range(len(index.state.corpus
                                                                 .sentence_spans)))
        fresh = ConceptGraphIndex.from_texts(CHUNKS[:i + 1],
                                             ids=[f"c{j:02d}" for j in range(i + 1)],
                                             embedder=HashingEmbedder(DIM), config=config)
        query = "Who wrote the first compiler?"
        assert ([(c.id, round(c.score, 9)) for c in index.retrieve(query).chunks]
                == [(c.id, round(c.score, 9)) for c in fresh.retrieve(query).chunks])
    assert {"append", "grow", "merge", "rebuild"} <= set(plans)
