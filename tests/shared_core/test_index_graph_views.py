"""The index's entity terms, coverage selection and walk view, end to end."""

from __future__ import annotations

import numpy as np

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.search.walk import (
    AUTO_HOPS,
    AUTO_WALK_HOPS,
    WALK_MAX_MEAN_UNIT_TOKENS,
    expansion_hops_for,
    walk_hops_for,
)
from shared_core.select.coverage import coverage_order

TEXTS = [
    "Harrison and Barrison is a silent comedy film directed by Zorbek Quill.",
    "Zorbek Quill was a stage actor. Zorbek Quill died in Lisbon in 1950.",
    "Lisbon is the capital of Portugal. Portugal borders Spain.",
    "Spain and Portugal share the Iberian Peninsula.",
]
IDS = ["film", "director", "lisbon", "iberia"]


def build(**knobs: object) -> ConceptGraphIndex:
    config = ConceptGraphConfig(theta_co=1, theta_sem=-1.0, **knobs)  # type: ignore[arg-type]
    return ConceptGraphIndex.from_texts(TEXTS, ids=IDS, embedder=HashingEmbedder(64),
                                        config=config)


def test_entity_terms_make_names_concepts_and_match_a_query_exactly() -> None:
    plain, named = build(), build(entity_terms=True)
    assert "zorbek quill" not in plain.state.corpus.term_position
    assert {"zorbek quill", "harrison and barrison", "iberian peninsula"} <= set(
        named.state.graph.concepts)
    assert named.concept_chunks("zorbek quill") == ["director", "film"]
    result = named.retrieve("Who directed Harrison and Barrison?", budget=20)
    assert result.chunks[0].id == "film"


def test_coverage_selection_follows_the_greedy_order_of_the_graph() -> None:
    index = build()
    graph, corpus = index.state.graph, index.state.corpus
    order = coverage_order(graph.links, graph.rank, corpus.tokens)
    selection = index.select(1.0, method="coverage")
    assert list(selection.ranked_ids) == [corpus.ids[i] for i in order]
    assert selection.report.graph_edges == len(graph.edges)


def test_the_walk_reaches_the_director_through_his_name() -> None:
    # "director" shares no query word or name; only Zorbek Quill links it to "film".
    # Chunks hold 23, 18, 10 and 13 tokens: a 60-token budget takes three.
    index = build(entity_terms=True, walk_hops=0)
    query = "Where did the director of Harrison and Barrison die?"
    assert [c.id for c in index.retrieve(query, budget=60).chunks] == [
        "film", "lisbon", "iberia"]
    walked = index.reconfigured(walk_hops=2, walk_seeds="exact")
    assert walked.state.graph is index.state.graph  # a query knob: nothing re-derived
    result = walked.retrieve(query, budget=60)
    assert [c.id for c in result.chunks] == ["film", "director", "lisbon"]
    assert np.isfinite([c.score for c in result.chunks]).all()


def test_auto_walks_two_steps_over_short_units_and_none_over_long_chunks() -> None:
    assert walk_hops_for("auto", 160.0) == AUTO_WALK_HOPS == 2
    assert walk_hops_for("auto", float(WALK_MAX_MEAN_UNIT_TOKENS)) == 2
    assert walk_hops_for("auto", WALK_MAX_MEAN_UNIT_TOKENS + 1.0) == 0
    assert walk_hops_for("auto", None) == 0  # no units
    assert walk_hops_for(3, 2000.0) == 3  # a number is taken as given
    query = "Where did the director of Harrison and Barrison die?"
    short = build(entity_terms=True)  # the default: "auto", over chunks of 10-23 tokens
    assert short.config.walk_hops == "auto"
    assert [c.id for c in short.retrieve(query, budget=60).chunks] == [
        c.id for c in short.reconfigured(walk_hops=2).retrieve(query, budget=60).chunks]
    # the same chunks, each padded past the limit with a sentence of its own words
    long_texts = [f"{t} " + " ".join([t] * 40) for t in TEXTS]
    long = ConceptGraphIndex.from_texts(
        long_texts, ids=IDS, embedder=HashingEmbedder(64),
        config=ConceptGraphConfig(theta_co=1, theta_sem=-1.0, entity_terms=True, top_k=2))
    assert long.state.graph.unit_tokens.mean() > WALK_MAX_MEAN_UNIT_TOKENS
    for budget in (600, 2000):
        got = long.retrieve(query, budget=budget)
        off = long.reconfigured(walk_hops=0, hops=2).retrieve(query, budget=budget)
        assert [(c.id, c.score) for c in got.chunks] == [(c.id, c.score) for c in off.chunks]
        assert got.expanded_concepts == off.expanded_concepts > 0  # BFS runs where no walk does


def test_the_walk_replaces_bfs_expansion_where_it_runs() -> None:
    assert expansion_hops_for("auto", AUTO_WALK_HOPS) == 0
    assert expansion_hops_for("auto", 0) == AUTO_HOPS == 2  # the paper's depth, no walk
    assert expansion_hops_for(1, AUTO_WALK_HOPS) == 1  # a number is taken as given
    # top_k=2 leaves most of the 24 concepts to BFS: with it, "film" is found through
    # an expanded concept; the default walks instead and expands nothing
    query = "Where did the director of Harrison and Barrison die?"
    index = build(entity_terms=True, top_k=2)
    got = index.retrieve(query, budget=60)
    walk_only = index.reconfigured(walk_hops=2, hops=0).retrieve(query, budget=60)
    both = index.reconfigured(walk_hops=2, hops=2).retrieve(query, budget=60)
    assert got.expanded_concepts == walk_only.expanded_concepts == 0
    assert [(c.id, c.score) for c in got.chunks] == [(c.id, c.score) for c in walk_only.chunks]
    assert both.expanded_concepts > 0
    assert [c.provenance.stage for c in both.chunks].count("expanded") >= 1
    assert "expanded" not in {c.provenance.stage for c in got.chunks}
    # the paper's ranking never walks, so "auto" keeps its BFS
    paper = index.reconfigured(ranking="paper").retrieve(query, budget=60)
    assert paper.expanded_concepts == both.expanded_concepts
