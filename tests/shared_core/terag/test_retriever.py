"""TeragRetriever: query NER, exact vs semantic seeds, PPR parity, budget, token table.

The toy corpus is the hand-worked graph of test_graph_seeds_ppr.py, built here from a
TeragExtraction; the embedder maps each concept name and query to a fixed vector so
every cosine is known.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from shared_core.embeddings import FunctionEmbedder, HashingEmbedder
from shared_core.llm import LLMRunner, RetryPolicy, TokenLedger
from shared_core.llm.usage import counted_input_tokens
from shared_core.terag import (
    Concept,
    TeragExtraction,
    TeragRetriever,
    extract,
    extraction_messages,
    query_messages,
    token_table,
)
from shared_core.text import count_tokens
from tests.shared_core.llm.scripted import ScriptedChat
from tests.shared_core.terag.fakes import well_formed
from tests.shared_core.terag.test_graph_seeds_ppr import hand_graph

IDS = ["p0", "p1", "p2"]
TEXTS = ["Marie Curie did physics in Paris.", "The Seine flows through Paris.",
         "The Danube is a river in Europe."]
TOKENS = [5, 6, 7]
EXTRACTION = TeragExtraction(tuple(IDS), (
    (Concept("entity", "marie curie"), Concept("entity", "paris"), Concept("concept", "physics")),
    (Concept("entity", "paris"), Concept("entity", "seine"), Concept("concept", "geography")),
    (Concept("concept", "geography"), Concept("entity", "danube")),
))
NAMES = ["marie curie", "paris", "physics", "seine", "geography", "danube"]
VECTORS = {
    "marie curie": (1, 0, 0, 0), "paris": (0, 1, 0, 0), "physics": (1, 1, 0, 0),
    "seine": (0, 0, 1, 0), "geography": (0, 1, 1, 0), "danube": (0, 0, 0, 1),
    # cosines to the concepts: 0, .6, .6/r2, .8, 1.4/r2 = .98995, 0
    "Which waters pass the Eiffel Tower?": (0, 3, 4, 0),
}


class Recorder:
    """The embedding function, keeping every batch it was asked for."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.batches.append(list(texts))
        return np.array([VECTORS[t] for t in texts], dtype=np.float32)


def build(runner: LLMRunner | None = None, **options: object) -> tuple[TeragRetriever, Recorder]:
    recorder = Recorder()
    r = TeragRetriever.build(IDS, TEXTS, EXTRACTION, FunctionEmbedder(recorder, "fixed-4", 4),
                             runner=runner, passage_tokens=TOKENS, tol=1e-13,
                             **options)  # type: ignore[arg-type]
    return r, recorder


def chat_runner(script: object) -> LLMRunner:
    return LLMRunner(ScriptedChat(script), ledger=TokenLedger(),  # type: ignore[arg-type]
                     retry=RetryPolicy(output_attempts=2, jitter=False))


def test_build_embeds_each_name_once_and_wires_the_hand_graph() -> None:
    r, recorder = build()
    assert [c.name for c in r.concepts] == NAMES
    assert recorder.batches == [NAMES]  # one call, each name once
    assert r.frequency.tolist() == [1, 2, 1, 1, 2, 1]
    names = [*IDS, *NAMES]
    built = {(names[i], names[j]) for i, j in zip(*r.adjacency.nonzero(), strict=True)}
    assert built == set(hand_graph().edges)


def test_a_name_under_two_types_is_two_nodes_matched_together() -> None:
    extraction = TeragExtraction(("a", "b"), ((Concept("entity", "paris"),),
                                              (Concept("concept", "paris"),)))
    r = TeragRetriever.build(["a", "b"], ["x", "y"], extraction, HashingEmbedder(16))
    assert r.concepts == (Concept("entity", "paris"), Concept("concept", "paris"))
    search = r.search("Where is Paris?", 100, entities=["Paris"])
    assert [(s.concept, s.concept_type, s.weight) for s in search.seeds] == [
        ("paris", "entity", 0.5), ("paris", "concept", 0.5)]
    assert search.passage_ids == ["a", "b"]
    assert search.entities == ("paris",)  # as matched: normalised


def test_exact_seeds_from_query_ner_and_ppr_parity_with_networkx() -> None:
    runner = chat_runner(["ENTITIES: Paris, Marie Curie"])
    r, recorder = build(runner)
    query = "Where did Marie Curie live in Paris?"
    search = r.search(query, 100)
    assert search.entities == ("paris", "marie curie")
    # paris s 1 f 2 -> 1/2, marie curie s 1 f 1 -> 1; normalised 1/3, 2/3
    assert [(s.concept, s.group) for s in search.seeds] == [("paris", "exact"),
                                                            ("marie curie", "exact")]
    np.testing.assert_allclose([s.weight for s in search.seeds], [1 / 3, 2 / 3])
    assert recorder.batches == [NAMES]  # exact matches: the query was never embedded
    reference = nx.pagerank(hand_graph(), alpha=0.85,
                            personalization={"paris": 1 / 3, "marie curie": 2 / 3},
                            tol=1e-14, max_iter=1000)
    assert search.passage_ids == sorted(IDS, key=lambda p: -reference[p])
    for hit in search.hits:
        assert hit.score == pytest.approx(reference[hit.passage_id], abs=1e-9)
    # the strongest seed among each passage's concepts: marie curie in p0, paris in p1;
    # p2 has no seed of its own (reached through geography)
    assert {h.passage_id: h.seed for h in search.hits} == {
        "p0": Concept("entity", "marie curie"), "p1": Concept("entity", "paris"), "p2": None}
    # the ledger books the NER call at its tiktoken counts
    usage = runner.ledger["query_ner"]
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (
        1, counted_input_tokens(query_messages(query)),
        count_tokens("ENTITIES: Paris, Marie Curie"))


def test_semantic_top3_when_no_entity_matches() -> None:
    r, recorder = build()
    query = "Which waters pass the Eiffel Tower?"
    search = r.search(query, 100, entities=["Eiffel Tower"])
    # top 3: geography .98995 (f 2), seine .8 (f 1), paris .6 (f 2)
    s = np.array([1.4 / np.sqrt(2), 0.8, 0.6])
    w = s / np.array([2, 1, 2])
    assert [(x.concept, x.group) for x in search.seeds] == [
        ("geography", "semantic"), ("seine", "semantic"), ("paris", "semantic")]
    np.testing.assert_allclose([x.similarity for x in search.seeds], s, rtol=1e-6)
    np.testing.assert_allclose([x.weight for x in search.seeds], w / w.sum(), rtol=1e-6)
    assert recorder.batches[-1] == [query]  # embedded once, for the semantic match
    reference = nx.pagerank(hand_graph(), alpha=0.85,
                            personalization={x.concept: x.weight for x in search.seeds},
                            tol=1e-14, max_iter=1000)
    for hit in search.hits:
        assert hit.score == pytest.approx(reference[hit.passage_id], abs=1e-9)
    # a query vector handed in is used instead of embedding the query
    given = r.search(query, 100, entities=[], query_vector=np.array([0, 3, 4, 0]))
    assert given.seeds == search.seeds and len(recorder.batches) == 2


def test_both_mode_adds_the_semantic_group() -> None:
    r, _ = build(seed_mode="both")
    search = r.search("Which waters pass the Eiffel Tower?", 100, entities=["paris"])
    assert [(x.concept, x.group) for x in search.seeds] == [
        ("paris", "exact"), ("geography", "semantic"), ("seine", "semantic"),
        ("physics", "semantic")]


def test_budget_and_top_k() -> None:
    r, _ = build()
    full = r.search("Paris?", 100, entities=["paris"])
    assert full.tokens_used == 18 and len(full.hits) == 3
    first, second, third = full.indices
    # a budget that holds the first passage and not the second: "skip" moves on to
    # the third when it fits, "stop" does not
    budget = TOKENS[first] + min(TOKENS[third], TOKENS[second] - 1)
    skip = r.search("Paris?", budget, entities=["paris"])
    assert skip.tokens_used <= budget and skip.indices[0] == first
    stop = TeragRetriever.build(IDS, TEXTS, EXTRACTION, HashingEmbedder(16), overflow="stop",
                                passage_tokens=TOKENS).search("Paris?", budget,
                                                              entities=["paris"])
    assert stop.indices == [first]
    assert r.search("Paris?", 100, entities=["paris"], top_k=1).indices == [first]


def test_no_runner_needs_entities_and_bad_input_is_refused() -> None:
    r, _ = build()
    with pytest.raises(ValueError, match="no runner for query NER"):
        r.search("Where is Paris?", 100)
    with pytest.raises(ValueError, match="budget"):
        r.search("Where is Paris?", 0, entities=["paris"])
    with pytest.raises(ValueError, match="top_k"):
        r.search("Where is Paris?", 10, entities=["paris"], top_k=0)
    with pytest.raises(TypeError, match="not one str"):
        r.search("Where is Paris?", 10, entities="paris")
    with pytest.raises(ValueError, match="empty or blank"):
        r.search("  ", 10, entities=["paris"])
    with pytest.raises(ValueError, match="exactly the passages"):
        TeragRetriever.build(["p0"], ["x"], EXTRACTION, HashingEmbedder(16))
    with pytest.raises(ValueError, match="no concept"):
        TeragRetriever.build(["a"], ["x"], TeragExtraction(("a",), ((),)), HashingEmbedder(16))
    with pytest.raises(ValueError, match="seed_mode"):
        build(seed_mode="all")
    # arguments are checked before the query NER call is paid for
    silent, _ = build(chat_runner([]))
    with pytest.raises(ValueError, match="budget"):
        silent.search("Where is Paris?", 0)
    assert isinstance(silent.runner, LLMRunner) and "query_ner" not in silent.runner.ledger


async def test_async_search_awaits_query_ner() -> None:
    r, _ = build(chat_runner(["ENTITIES: Seine"]))
    search = await r.asearch("What flows through Paris?", 100)
    assert [s.concept for s in search.seeds] == ["seine"]
    assert search.passage_ids[0] == "p1"


def test_extract_then_retrieve_end_to_end_with_the_token_table() -> None:
    texts = [
        "Ada Lovelace wrote notes on the Analytical Engine.",
        "Charles Babbage designed the Analytical Engine in London.",
        "London is the capital of England.",
        "Lovelace was the daughter of Lord Byron.",
        "Byron was a poet of the Romantic movement.",
    ]
    ids = [f"d{i}" for i in range(5)]
    answers = {
        texts[0]: ("Ada Lovelace, Analytical Engine", "Computing History"),
        texts[1]: ("Charles Babbage, Analytical Engine, London", "Computing History"),
        texts[2]: ("London, England", "Capital City"),
        texts[3]: ("Ada Lovelace, Lord Byron", "Family"),
        texts[4]: ("Byron, Romantic movement", "Poetry"),
    }
    chat = ScriptedChat(well_formed(answers))
    runner = LLMRunner(chat, ledger=TokenLedger(), concurrency=1)
    extraction = extract(runner, ids, texts, passages_per_call=2)
    assert len(chat.calls) == 3
    r = TeragRetriever.build(ids, texts, extraction, HashingEmbedder(32), runner=runner)
    r.runner.model.script = lambda messages: "ENTITIES: Ada Lovelace"  # type: ignore[union-attr]
    query = "Who was the father of Ada Lovelace?"
    search = r.search(query, 1000, top_k=2)
    assert [(s.concept, s.frequency) for s in search.seeds] == [("ada lovelace", 2)]
    # the two passages Ada Lovelace was extracted from come first
    assert sorted(search.passage_ids) == ["d0", "d3"]
    # token table: every call's prompt and reply counted with tiktoken, per stage
    batches = [texts[0:2], texts[2:4], texts[4:5]]
    replies = [well_formed(answers)(extraction_messages(b)) for b in batches]
    expected = [("ner_concepts", sum(counted_input_tokens(extraction_messages(b))
                                     for b in batches), sum(count_tokens(x) for x in replies)),
                ("query_ner", counted_input_tokens(query_messages(query)),
                 count_tokens("ENTITIES: Ada Lovelace"))]
    table = token_table(runner.ledger)
    assert [(row.stage, row.input_tokens, row.output_tokens) for row in table.rows] == expected
    assert table.total.input_tokens == expected[0][1] + expected[1][1]
    assert table.total.output_tokens == expected[0][2] + expected[1][2]
    assert token_table(runner.ledger, ["query_ner"]).rows == table.rows[1:]
