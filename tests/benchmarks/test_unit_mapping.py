"""G2ConS with ``unit_tokens``: the index's sentence units map back to harness units.

The index returns ``<unit id>#u<k>`` cuts; the harness scores its own units, so each
cut counts as the unit it came from, once, in first-seen order, within the budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.data import Passage, build_corpus
from benchmarks.methods import BuildInputs, G2ConSRetriever, build_g2cons
from shared_core.config import ConceptGraphConfig
from shared_core.embeddings import HashingEmbedder
from shared_core.index import (
    Chunk,
    ConceptGraphIndex,
    Provenance,
    RetrievalResult,
    RetrievedChunk,
)
from tests.benchmarks.dev_sets import write_dev_set

HARNESS_IDS = ["c0", "c1", "c2", "c3"]
HARNESS_TOKENS = np.array([40, 30, 20, 50])


def _hit(unit_id: str, parent: str | None, tokens: int = 5) -> RetrievedChunk:
    metadata = {} if parent is None else {"parent_chunk_id": parent}
    return RetrievedChunk(
        Chunk(unit_id, "text", tokens, metadata), 1.0, Provenance(None, None, "similarity", 0)
    )


class _StubIndex:
    """Answers every query with fixed hits, as ``ConceptGraphIndex`` would shape them."""

    def __init__(self, hits: list[RetrievedChunk], overflow: str = "skip") -> None:
        self.hits = tuple(hits)
        self.config = ConceptGraphConfig.from_dict({"overflow": overflow})

    def retrieve_by_vector(
        self, query_vector: np.ndarray, *, query: str = "", budget: int | None = None
    ) -> RetrievalResult:
        return RetrievalResult(query, self.hits, (), 0, False, budget or 0)

    def stats(self) -> dict[str, Any]:
        return {"concepts": 0, "edges": 0}


def _retriever(hits: list[RetrievedChunk], overflow: str = "skip") -> G2ConSRetriever:
    index = cast(ConceptGraphIndex, _StubIndex(hits, overflow))
    return G2ConSRetriever(index, HARNESS_IDS, HARNESS_TOKENS)


# c1 twice, then c0 twice (its second cut later), c3, c2; one hit is a whole unit (no parent)
HITS = [
    _hit("c1#u0", "c1"),
    _hit("c1#u2", "c1"),
    _hit("c0#u1", "c0"),
    _hit("c3#u0", "c3"),
    _hit("c0#u0", "c0"),
    _hit("c2", None),
]
QV = np.ones(4, dtype=np.float32)


def test_units_count_their_chunk_once_in_first_seen_order() -> None:
    retriever = _retriever(HITS)
    # first seen: c1, c0, c3, c2 = 30 + 40 + 50 + 20 = 140 tokens
    assert retriever.retrieve("q", QV, 140) == [1, 0, 3, 2]
    diag = retriever.diagnostics()
    assert diag["index_hits_mean"] == 6 and diag["mapped_units_mean"] == 4
    assert diag["units_over_budget_mean"] == 0


def test_mapped_units_are_refilled_to_the_budget_with_the_index_overflow_rule() -> None:
    # 100 tokens: c1 30 + c0 40 = 70; c3 (50) overflows; skip goes on to c2 (20) = 90
    skip = _retriever(HITS, "skip")
    assert skip.retrieve("q", QV, 100) == [1, 0, 2]
    assert skip.diagnostics()["units_over_budget_mean"] == 1
    # stop ends the context at the first unit that does not fit
    stop = _retriever(HITS, "stop")
    assert stop.retrieve("q", QV, 100) == [1, 0]
    assert stop.diagnostics()["units_over_budget_mean"] == 2
    assert skip.retrieve("q", QV, 10) == []  # no unit of the harness fits in 10 tokens


def test_a_hit_from_no_harness_unit_is_a_clear_error() -> None:
    with pytest.raises(LookupError, match="chunk 'c9', which is not a unit of this corpus view"):
        _retriever([_hit("c9#u0", "c9")]).retrieve("q", QV, 100)


def test_real_index_sub_protocol_units_map_through_chunk_id() -> None:
    """Harness sub-units are ``chunk-00000#u0``; the index's cuts of them are
    ``chunk-00000#u0#u1``: only the parent id field, not the id string, names the unit."""
    passages = [
        Passage("p1", "Alice", "Alice Moreau was born in Lyon in 1950. She studied law in Paris."),
        Passage("p2", "", "Bruno Keller composed the opera Glasswing. He lived in Bern."),
        Passage("p3", "", "Glasswing premiered at the Vienna State Opera. It ran for ten nights."),
    ]
    corpus = build_corpus(passages, "sub30", chunk_tokens=60, overlap=0)
    embedder = HashingEmbedder()
    retriever = build_g2cons(BuildInputs(corpus, embedder), {"unit_tokens": 12})
    assert isinstance(retriever, G2ConSRetriever)
    query = "Where was Alice Moreau born?"
    qv = embedder.embed([query])[0]
    everything = int(corpus.units.tokens.sum())
    raw = retriever.index.retrieve_by_vector(qv, query=query, budget=everything)
    parents = [hit.chunk_id for hit in raw.chunks]
    assert all(hit.id.startswith(f"{hit.chunk_id}#u") for hit in raw.chunks)
    assert {hit.id.split("#u")[0] for hit in raw.chunks}.isdisjoint(corpus.units.ids)
    assert len(parents) > len(set(parents))  # some harness unit was cut into several hits
    # a budget that holds every harness unit keeps each one exactly once
    positions = retriever.retrieve(query, qv, everything)
    assert sorted(positions) == list(range(len(corpus.units)))
    assert [corpus.units.ids[p] for p in positions] == list(dict.fromkeys(parents))


def _tiny_data(root: Path) -> Path:
    passages = [
        {"id": "p1", "title": "Alice", "text": "Alice Moreau was born in Lyon in 1950."},
        {"id": "p2", "title": "", "text": "Bruno Keller composed the opera Glasswing."},
        {"id": "p3", "title": "Glasswing",
         "text": "Glasswing premiered at the Vienna State Opera."},
        {"id": "p4", "title": "", "text": "Carla Rossi painted frescoes in Siena churches."},
    ]  # fmt: skip
    questions = [
        {"id": "q1", "question": "Where was Alice Moreau born?", "answers": ["Lyon"],
         "supporting_ids": ["p1"], "hops": 1},
        {"id": "q2", "question": "Where did Glasswing premiere?", "answers": ["Vienna"],
         "supporting_ids": ["p3"], "hops": 1},
        {"id": "q3", "question": "What did Carla Rossi paint?", "answers": ["mosaics"],
         "supporting_ids": [], "hops": 1},
    ]  # fmt: skip
    return write_dev_set(root, passages, questions)


def test_chunk1200_run_with_unit_tokens(tmp_path: Path) -> None:
    """The issue's command on a tiny set: one 46-token chunk1200 chunk, cut into 4 units."""
    data = _tiny_data(tmp_path / "tiny")
    out = tmp_path / "r.json"

    def run(budget: int) -> dict[str, Any]:
        argv = ["run", "--data", str(data), "--protocol", "chunk1200", "--budget", str(budget),
                "--methods", "g2cons:unit_tokens=12", "--embedder", "hashing", "--no-coverage",
                "--out", str(out), "--cache", str(tmp_path / "c.sqlite")]  # fmt: skip
        assert main(argv) == 0
        return cast(dict[str, Any], json.loads(out.read_text())["methods"]["g2cons:unit_tokens=12"])

    # 46 tokens hold every unit, so the chunk is the context, counted once: q1 and q2 have
    # their answer and their supporting passage in it, q3's answer is nowhere
    whole = run(46)
    assert whole["units_mean"] == 1.0 and whole["context_tokens_max"] == 46
    assert whole["cr"] == pytest.approx(2 / 3) and whole["sr"] == 1.0
    assert whole["diagnostics"]["mapped_units_mean"] == 1.0
    assert whole["diagnostics"]["index_hits_mean"] > 1
    # 45 tokens: the index still returns units, but their 46-token chunk does not fit
    cut = run(45)
    assert cut["units_mean"] == 0.0 and cut["cr"] == 0.0
    assert cut["diagnostics"]["units_over_budget_mean"] == 1.0
