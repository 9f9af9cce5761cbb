"""One suite, run against both frameworks: same corpus, embedder and calls, same answers.

Every expectation is the framework-free core's own answer (an index built directly
over the same rows) or worked out independently (cosines from the embedder, the
KNN PageRank from the texts alone), so an adapter cannot pass by agreeing with
the other one's mistake.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder, knn_pagerank_scores
from shared_core.answer import AnswerPipeline
from tests.shared_core.answer.test_pipeline import ANSWER, script
from tests.shared_core.llm.scripted import ScriptedChat, word_deltas

from .shims import SHIMS, Answered, Hit, Row, Shim

TEXTS = {
    "ada": "Ada Lovelace wrote the first computer program for the Analytical Engine.",
    "babbage": "Charles Babbage designed the Analytical Engine in London.",
    "turing": "Alan Turing proposed the Turing machine in 1936.",
    "hopper": "Grace Hopper built the first compiler for the Harvard Mark I.",
    "mark": "The Harvard Mark I was an electromechanical computer at Harvard University.",
    "web": "Tim Berners-Lee invented the World Wide Web at CERN.",
    "cern": "CERN is a physics laboratory near Geneva.",
    "curie": "Marie Curie won the Nobel Prize in Physics and in Chemistry.",
}
ROWS: list[Row] = [(cid, text, {"title": cid.title(), "n": i})
                   for i, (cid, text) in enumerate(TEXTS.items())]
# theta_co=1: on eight one-sentence chunks the default (3) would leave the graph edgeless
CFG = ConceptGraphConfig(theta_co=1, select_by="chunks")
# each query and the one chunk that answers it
QUERIES = {"Who wrote the first computer program?": "ada", "Where is CERN?": "cern",
           "Who designed the Analytical Engine?": "babbage"}
DELETED = ("ada", "web")
REMAINING = [row for row in ROWS if row[0] not in DELETED]


@pytest.fixture(params=SHIMS, ids=lambda shim: shim.name)
def shim(request: pytest.FixtureRequest) -> Shim:
    chosen: Shim = request.param
    return chosen


def core_index(rows: list[Row]) -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts([t for _, t, _ in rows], ids=[c for c, _, _ in rows],
                                        metadatas=[m for _, _, m in rows],
                                        embedder=HashingEmbedder(), config=CFG)


def core_hits(rows: list[Row], query: str, min_score: float | None = None) -> list[Hit]:
    """What the core retrieves, in the shape both adapters promise: the row's metadata
    plus chunk_id, score and provenance."""
    result = core_index(rows).retrieve(query, min_score=min_score)
    meta = {cid: m for cid, _, m in rows}
    return [(h.id, h.text, h.score,
             {**meta[h.id], "chunk_id": h.id, "score": h.score,
              "provenance": {"concept": h.provenance.concept,
                             "concept_similarity": h.provenance.concept_similarity,
                             "stage": h.provenance.stage, "hop": h.provenance.hop}})
            for h in result.chunks]


def ids_of(hits: list[Hit]) -> list[str]:
    return [h[0] for h in hits]


# ------------------------------------------------------------------------- retrieval
@pytest.mark.parametrize("query", QUERIES)
def test_retrieval_returns_the_cores_hits_with_provenance(shim: Shim, query: str) -> None:
    hits = shim.retrieve(shim.retriever(ROWS, CFG), query)
    assert hits == core_hits(ROWS, query)
    assert hits[0][0] == QUERIES[query]
    assert hits[0][3]["provenance"]["stage"] == "direct"
    assert len(hits) == 8  # the default budget (12000 tokens) holds all eight chunks


def cosine(text: str, query: str) -> float:
    rows = HashingEmbedder().embed([text, query])
    a, b = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return float(a @ b)


@pytest.mark.parametrize(("query", "floor", "expected"), [
    # only the two chunks that name CERN share a word (hash bucket) with the query
    ("Where is CERN?", 0.1, ["cern", "web"]),
    ("Where is CERN?", 0.2, ["cern"]),
    # ada shares "wrote the first computer program", hopper "the first": cosines .68 and .34
    ("Who wrote the first computer program?", 0.3, ["ada", "hopper"]),
    ("zebra saxophone", 0.3, []),  # about nothing in the corpus: nothing, not a full budget
])
def test_min_score_keeps_exactly_the_chunks_at_or_above_the_floor(
    shim: Shim, query: str, floor: float, expected: list[str]
) -> None:
    unfloored = ids_of(shim.retrieve(shim.retriever(ROWS, CFG), query))
    # every chunk is one sentence, so its similarity is that sentence's cosine to the query
    above = [cid for cid in unfloored if cosine(TEXTS[cid], query) >= floor]
    hits = shim.retrieve(shim.retriever(ROWS, CFG, min_score=floor), query)
    assert ids_of(hits) == above == expected
    assert hits == core_hits(ROWS, query, min_score=floor)


def test_min_score_is_validated(shim: Shim) -> None:
    with pytest.raises(ValueError, match="min_score"):
        shim.retriever(ROWS, CFG, min_score=1.5)


# ------------------------------------------------------------------------- selection
def ranked(method: str) -> list[str]:
    """Chunk ids best first, scored without the adapters: the core's concept scores, or
    KET-RAG's KNN PageRank computed from the texts alone; ties to the lower id."""
    ids = sorted(TEXTS)
    if method == "concept":
        by_id = core_index(ROWS).chunk_scores()
        scores = np.array([by_id[cid] for cid in ids])
    else:
        scores = knn_pagerank_scores([TEXTS[cid] for cid in ids], HashingEmbedder())
    return [ids[i] for i in np.lexsort((np.arange(len(ids)), -scores))]


@pytest.mark.parametrize(("method", "expected"), [
    ("concept", ["ada", "hopper", "web", "curie"]),
    ("knn", ["ada", "babbage", "cern", "curie"]),
])
def test_selection_keeps_the_best_half_by_the_methods_ranking(
    shim: Shim, method: str, expected: list[str]
) -> None:
    kept = shim.select(shim.selector(CFG, 0.5, method), ROWS)
    best = set(ranked(method)[:4])  # ceil(0.5 * 8) chunks
    assert kept == [cid for cid, _, _ in ROWS if cid in best] == expected


def test_every_batch_is_told_when_the_graph_has_no_edges(shim: Shim) -> None:
    # the default theta_co=3: no two concepts of these one-sentence chunks share three
    selector = shim.selector(ConceptGraphConfig(select_by="chunks"), 0.5, "concept")
    for batch in (ROWS[:4], ROWS[4:]):  # the second is ranked against the whole graph
        shim.select(selector, batch)
        report = shim.last_selection(selector).report
        assert (report.chunks_total, report.graph_edges) == (4, 0)
        assert "the concept graph has no edges" in report.warnings[0]
    selector = shim.selector(CFG, 0.5, "concept")  # theta_co=1: a graph with edges
    shim.select(selector, ROWS[:4])
    shim.select(selector, ROWS[4:])
    report = shim.last_selection(selector).report
    assert report.graph_edges == len(shim.graph(selector).edges) > 0 and report.warnings == ()


def test_an_unknown_method_is_refused_before_anything_is_embedded(shim: Shim) -> None:
    with pytest.raises(ValueError, match="method must be one of concept, coverage, knn, random"):
        shim.selector(CFG, 0.5, "pagerank")


# --------------------------------------------------------------------------- updates
def test_add_then_delete_gives_the_graph_that_never_held_the_deleted(shim: Shim) -> None:
    retriever = shim.retriever(ROWS[:5], CFG)
    shim.add(retriever, ROWS[5:])
    shim.delete(retriever, list(DELETED))
    shim.delete(retriever, ["ada", "never-added"])  # gone already, or never there: skipped
    assert shim.graph(retriever).chunk_ids == sorted(cid for cid, _, _ in REMAINING)
    for query in QUERIES:
        assert shim.retrieve(retriever, query) == core_hits(REMAINING, query)
    assert ids_of(shim.retrieve(retriever, "Who wrote the first computer program?"))[0] != "ada"

    selector = shim.selector(CFG, 0.5, "concept")
    shim.add(selector, ROWS)
    shim.delete(selector, list(DELETED))
    assert shim.graph(selector).chunk_ids == sorted(cid for cid, _, _ in REMAINING)
    fresh = shim.selector(CFG, 0.5, "concept")
    assert shim.select(selector, REMAINING) == shim.select(fresh, REMAINING)


async def test_async_updates_and_retrieval_match_the_sync_ones(shim: Shim) -> None:
    retriever = shim.retriever(ROWS[:5], CFG)
    await shim.aadd(retriever, ROWS[5:])
    await shim.adelete(retriever, [*DELETED, "never-added"])
    for query in QUERIES:
        assert await shim.aretrieve(retriever, query) == core_hits(REMAINING, query)

    selector = shim.selector(CFG, 0.5, "knn")
    await shim.aadd(selector, ROWS)
    await shim.adelete(selector, list(DELETED))
    fresh = shim.selector(CFG, 0.5, "knn")
    assert await shim.aselect(selector, REMAINING) == shim.select(fresh, REMAINING)


def test_delete_needs_an_explicit_list_of_ids(shim: Shim) -> None:
    retriever = shim.retriever(ROWS, CFG)
    with pytest.raises(ValueError, match="ids is None"):
        shim.delete(retriever, None)
    with pytest.raises(TypeError, match="iterable of str, not str"):
        shim.delete(retriever, "ada")
    assert len(shim.graph(retriever)) == 8


# ------------------------------------------------------------------------ duplicates
def test_an_object_passed_twice_is_one_chunk(shim: Shim) -> None:
    twice = ROWS + ROWS[:2]
    retriever = shim.retriever(twice, CFG)
    assert len(shim.graph(retriever)) == 8
    assert shim.retrieve(retriever, "Where is CERN?") == core_hits(ROWS, "Where is CERN?")
    kept = shim.select(shim.selector(CFG, 0.5, "concept"), twice)
    # the same four as without the repeats; ada is kept at both of its positions
    assert kept == ["ada", "hopper", "web", "curie", "ada"]


def test_one_id_with_two_texts_raises_naming_both_positions(shim: Shim) -> None:
    clash: list[Row] = [*ROWS[:2], ("ada", "Ada Lovelace translated a paper by Menabrea.", {})]
    message = rf"{shim.what}\[0\] and {shim.what}\[2\] share id 'ada' but differ in text"
    with pytest.raises(ValueError, match=message):
        shim.retriever(clash, CFG)
    selector = shim.selector(CFG, 0.5, "concept")
    with pytest.raises(ValueError, match=message):
        shim.select(selector, clash)
    retriever = shim.retriever(ROWS[2:], CFG)
    with pytest.raises(ValueError, match=message):
        shim.add(retriever, clash)
    assert shim.graph(retriever).chunk_ids == sorted(cid for cid, _, _ in ROWS[2:])  # untouched
    # the graph holds the id already: new text under it is refused too (delete it first)
    shim.add(retriever, ROWS[:1])
    with pytest.raises(ValueError, match="'ada' already holds different text"):
        shim.add(retriever, clash[2:])
    assert shim.graph(retriever).get("ada").text == TEXTS["ada"]


def test_one_chunk_with_two_metadatas_raises_naming_both_positions(shim: Shim) -> None:
    cid, text, _ = ROWS[0]
    clash: list[Row] = [ROWS[0], (cid, text, {"title": "Someone else"})]
    with pytest.raises(ValueError, match=rf"{shim.what}\[0\] and {shim.what}\[1\] are the "
                                         r"same chunk \(id 'ada'\) with different metadata"):
        shim.retriever(clash, CFG)


# ------------------------------------------------------------------------ threads
class MeetingEmbedder:
    """Hashing vectors; two threads embedding at the same moment meet at a barrier.

    Were two selector calls to run side by side (each starting its own graph,
    one of them later lost) they would meet; run one after the other, the first
    waits a second, breaks the barrier, and both go on.
    """

    model_id = "meeting-hashing"
    dim = 64

    def __init__(self) -> None:
        self.inner = HashingEmbedder(64)
        self.barrier = threading.Barrier(2, timeout=1)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()
        return self.inner.embed(texts)


def test_two_threads_selecting_at_once_share_one_graph_and_one_latest_selection(
    shim: Shim,
) -> None:
    selector = shim.selector(CFG, 0.5, "concept", MeetingEmbedder())
    batches = [ROWS[:4], ROWS[4:]]
    results: dict[int, list[str]] = {}

    def run(i: int) -> None:
        results[i] = shim.select(selector, batches[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert shim.graph(selector).chunk_ids == sorted(TEXTS)  # both batches, none lost
    assert [len(results[0]), len(results[1])] == [2, 2]  # ceil(0.5 * 4) of each batch
    for i in range(2):
        assert set(results[i]) <= {cid for cid, _, _ in batches[i]}
    # the latest selection is one whole call's, never a mix of two
    latest = shim.last_selection(selector)
    assert latest.report.chunks_total == 4
    assert set(latest.kept_ids) in ({*results[0]}, {*results[1]})


# ------------------------------------------------------------------- both at once
def run_scenario(shim: Shim) -> dict[str, Any]:
    """Everything observable from one fixed sequence of calls."""
    retriever = shim.retriever(ROWS[:5], CFG)
    floored = shim.retriever(ROWS, CFG, min_score=0.1)
    selector = shim.selector(CFG, 0.5, "knn")
    first = shim.select(selector, ROWS[:5] + ROWS[:1])
    shim.add(retriever, ROWS[5:])
    shim.delete(retriever, [*DELETED, "never-added"])
    shim.add(selector, ROWS[5:])
    shim.delete(selector, ["turing"])
    return {
        "hits": {q: shim.retrieve(retriever, q) for q in QUERIES},
        "floored": {q: shim.retrieve(floored, q) for q in QUERIES},
        "first_selection": first,
        "second_selection": shim.select(selector, REMAINING),
        "graphs": (shim.graph(retriever).chunk_ids, shim.graph(selector).chunk_ids),
    }


def test_both_frameworks_give_identical_results_for_the_same_calls() -> None:
    langchain, llama_index = (run_scenario(shim) for shim in SHIMS)
    assert langchain == llama_index
    assert langchain["hits"]["Where is CERN?"][0][0] == "cern"


# ------------------------------------------------------------------- answers
def core_answer(rows: list[Row], chat: ScriptedChat, query: str) -> Answered:
    """The core pipeline's own answer over an index built directly from ``rows``."""
    answer = AnswerPipeline(chat, core_index(rows)).answer(query)
    meta = {cid: m for cid, _, m in rows}
    sources = [(e.piece_id, e.text, e.score, {**meta[e.chunk_id], **e.metadata()})
               for e in answer.evidence]
    return answer.text, answer.route, sources, answer.trace.names


@pytest.mark.parametrize(("replies", "route"), [
    ({}, "logic_form"),
    ({"decompose": "I would look it up."}, "dual_level"),
])
def test_answers_are_the_cores_with_the_rows_metadata(
    shim: Shim, replies: dict[str, str], route: str
) -> None:
    query = "How much taller is the Eiffel Tower than the Statue of Liberty?"
    expected = core_answer(ROWS, script(**replies), query)
    answered = shim.answer(shim.retriever(ROWS, CFG), script(**replies), query)
    assert answered == expected
    assert answered[0] == ANSWER and answered[1] == route and answered[2]
    assert all(hit[3]["title"] == hit[3]["chunk_id"].title() for hit in answered[2])


async def test_answers_stream_the_llms_deltas_sync_and_async(shim: Shim) -> None:
    retriever = shim.retriever(ROWS, CFG)
    assert shim.stream(retriever, script(), "Who designed the Analytical Engine?") \
        == word_deltas(ANSWER)
    assert await shim.astream(retriever, script(), "Who designed the Analytical Engine?") \
        == word_deltas(ANSWER)
