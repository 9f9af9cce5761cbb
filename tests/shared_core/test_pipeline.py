"""Adapter-shared steps: core-chunk selection on a (reused) index, concurrent path fusion."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from dataclasses import replace

import numpy as np
import pytest

from shared_core.config import ConceptGraphConfig
from shared_core.embeddings import HashingEmbedder
from shared_core.fusion import ContextItem, fuse_contexts, merge_by_chunk
from shared_core.index import ConceptGraphIndex
from shared_core.pipeline import (
    afuse_paths,
    concept_context_items,
    function_embedder,
    fuse_paths,
    fused_metadata,
    kg_context_item,
    provenance_metadata,
    rank_candidates,
    rerank_by_concepts,
    select_core_chunks,
)
from shared_core.text import count_tokens
from tests.shared_core.fakes import RecordingEmbedder

DIM = 64
TEXTS = [
    "Ada Lovelace wrote the first computer program. She worked with Charles Babbage.",
    "Charles Babbage designed the analytical engine. The engine was mechanical.",
    "The analytical engine could run a program. Programs used punched cards.",
    "Punched cards came from the Jacquard loom. The loom wove silk patterns.",
    "Alan Turing described a universal machine. The machine could compute anything.",
    "Turing worked at Bletchley Park. Bletchley Park broke the Enigma cipher.",
    "The Enigma cipher machine was used by the German navy.",
    "Grace Hopper wrote the first compiler. The compiler translated programs.",
    "Compilers turn source code into machine code.",
    "Silk weaving patterns inspired early computing.",
]
IDS = [f"d{i}" for i in range(len(TEXTS))]
CFG = ConceptGraphConfig(theta_co=1, theta_sem=0.0, concepts_per_chunk=3)


@pytest.mark.parametrize(("kappa", "kept"), [(0.2, 2), (0.5, 5), (0.8, 8), (1.0, 10)])
def test_select_core_chunks_on_a_new_index(kappa: float, kept: int) -> None:
    core = select_core_chunks(TEXTS, IDS, kappa=kappa, embedder=HashingEmbedder(DIM),
                              config=replace(CFG, select_by="chunks"))
    sel = core.selection
    assert len(sel.kept_ids) == kept  # ceil(kappa·10)
    assert set(sel.kept_ids) <= set(IDS)
    assert sel == core.index.select(kappa)
    assert all(core.keeps(i) == (i in sel.kept_ids) for i in IDS)


def test_select_core_chunks_reuses_an_index_and_ranks_only_the_passed_chunks(
        caplog: pytest.LogCaptureFixture) -> None:
    emb = RecordingEmbedder(HashingEmbedder(DIM))
    index = ConceptGraphIndex.from_texts(TEXTS[:7], ids=IDS[:7], embedder=emb, config=CFG)
    n_before = len(emb.texts)
    batch_ids = ["d5", "d7", "d8"]  # one already indexed, two new
    batch = [TEXTS[5], TEXTS[7], TEXTS[8]]
    with caplog.at_level(logging.INFO, logger="conceptgraph"):
        core = select_core_chunks(batch, batch_ids, kappa=0.5, index=index)
    assert core.index is index and len(index) == 9
    # only the two new chunks' sentences were embedded (2 + 1)
    assert emb.texts[n_before:] == [
        "Grace Hopper wrote the first compiler.", "The compiler translated programs.",
        "Compilers turn source code into machine code."]
    sel = core.selection
    # the three passed chunks ranked by score per token in the whole graph (select_by
    # "tokens", the default); kept: the ranked prefix within half the batch's tokens
    scores, tokens = index.chunk_scores(), {i: index.get(i).tokens for i in batch_ids}
    density = {i: scores[i] / tokens[i] for i in batch_ids}
    assert sel.scores == pytest.approx(density)
    ranked = sorted(batch_ids, key=lambda i: (-density[i], batch_ids.index(i)))
    assert sel.ranked_ids == tuple(ranked)
    half = 0.5 * sum(tokens.values())
    n_kept = max(1, sum(sum(tokens[i] for i in ranked[:n]) <= half for n in (1, 2, 3)))
    assert set(sel.kept_ids) == set(ranked[:n_kept])
    assert sel.report.tokens_kept <= half and sel.report.by == "tokens"
    assert sel.report.chunks_total == 3
    assert sel.report.tokens_total == sum(count_tokens(t) for t in batch)
    assert sel.report.summary() in caplog.text
    # running again on the same chunks embeds nothing and selects the same
    n_after = len(emb.texts)
    again = select_core_chunks(batch, batch_ids, kappa=0.5, index=index)
    assert len(emb.texts) == n_after and again.selection == sel


def test_select_core_chunks_prompt_tokens_and_errors() -> None:
    core = select_core_chunks(TEXTS[:4], IDS[:4], kappa=0.5, embedder=HashingEmbedder(DIM),
                              config=CFG, prompt_tokens_per_chunk=50)
    r = core.selection.report
    assert r.extraction_input_tokens == r.tokens_kept + 2 * 50  # ceil(.5·4) = 2 chunks
    with pytest.raises(ValueError, match="index or an embedder"):
        select_core_chunks(TEXTS, IDS, kappa=0.5)
    with pytest.raises(ValueError, match="kappa"):
        select_core_chunks(TEXTS, IDS, kappa=0.0, embedder=HashingEmbedder(DIM))


CONCEPT = [ContextItem("A", "chunk A", 30), ContextItem("B", "chunk B", 20),
           ContextItem("C", "chunk C", 25)]
KG = [ContextItem("E", "fact E", 30), ContextItem("B", "fact B", 5),
      ContextItem("F", "fact F", 15)]


def test_fuse_paths_runs_both_paths_concurrently_and_equals_fuse_contexts() -> None:
    barrier = threading.Barrier(2, timeout=10)  # breaks unless both paths run at once

    def concept_path() -> list[ContextItem]:
        barrier.wait()
        return CONCEPT

    def kg_path() -> list[ContextItem]:
        barrier.wait()
        return KG

    fused = fuse_paths(concept_path, kg_path, budget=100, lam=0.6)
    assert fused == fuse_contexts(CONCEPT, KG, budget=100, lam=0.6)
    shared = fuse_paths(lambda: CONCEPT, lambda: KG, budget=60, lam=0.3, share_unused=True)
    assert shared == fuse_contexts(CONCEPT, KG, budget=60, lam=0.3, share_unused=True)


def test_fuse_paths_propagates_a_path_error() -> None:
    def broken() -> list[ContextItem]:
        raise RuntimeError("kg store down")

    with pytest.raises(RuntimeError, match="kg store down"):
        fuse_paths(lambda: CONCEPT, broken, budget=100, lam=0.5)


def test_afuse_paths_awaits_both_concurrently() -> None:
    async def main() -> object:
        started = asyncio.Event()

        async def concept_path() -> list[ContextItem]:
            started.set()
            return CONCEPT

        async def kg_path() -> list[ContextItem]:
            await asyncio.wait_for(started.wait(), 5)  # needs the other path to have run
            return KG

        return await afuse_paths(kg_path(), concept_path(), budget=100, lam=0.6)

    # argument order: the first awaitable is the concept path
    assert asyncio.run(main()) == fuse_contexts(KG, CONCEPT, budget=100, lam=0.6)


def test_merge_by_chunk_and_kg_items() -> None:
    items = [kg_context_item("fact one", "K", score=0.2, metadata={"rel": 1}),
             kg_context_item("fact L", "L", score=0.9),
             kg_context_item("fact two", "K", score=0.7),
             kg_context_item("fact one", "K", score=0.1)]
    assert items[0].tokens == count_tokens("fact one") and items[0].chunk_id == "K"
    merged = merge_by_chunk(items)
    # K's distinct texts joined in order, tokens recounted, best score, first metadata
    assert [m.chunk_id for m in merged] == ["K", "L"]
    assert merged[0].text == "fact one\nfact two"
    assert merged[0].tokens == count_tokens("fact one\nfact two")
    assert merged[0].score == 0.7 and merged[0].metadata == {"rel": 1}
    with pytest.raises(ValueError, match="non-empty text"):
        kg_context_item("  ", "K")


def test_concept_items_and_fused_metadata() -> None:
    index = ConceptGraphIndex.from_texts(TEXTS, ids=IDS, embedder=HashingEmbedder(DIM),
                                         metadatas=[{"n": i} for i in range(10)], config=CFG)
    result = index.retrieve("analytical engine")
    items = concept_context_items(result)
    assert [i.chunk_id for i in items] == [c.id for c in result.chunks]
    assert [i.tokens for i in items] == [count_tokens(c.text) for c in result.chunks]
    meta = provenance_metadata(result.chunks[0])
    assert meta["chunk_id"] == result.chunks[0].id and meta["n"] == int(meta["chunk_id"][1:])
    assert meta["provenance"] == result.chunks[0].provenance.to_dict()
    fused = fuse_contexts(items, [], budget=10_000, lam=0.0)
    fm = fused_metadata(fused.items[0])
    assert fm["fusion"] == {"path": "concept", "concept_rank": 0, "kg_rank": None}


def test_rerank_by_concepts_splits_reached_and_unreached() -> None:
    index = ConceptGraphIndex.from_texts(TEXTS, ids=IDS, embedder=HashingEmbedder(DIM),
                                         config=CFG)
    q = HashingEmbedder(DIM).embed(["analytical engine"])[0]
    full = [c.id for c in index.retrieve_by_vector(q, budget=10**6).chunks]
    candidates = ["d9", "d1", "d2", "d1"]
    reached, rest = rerank_by_concepts(index, q, candidates)
    # reached candidates in concept-search order, the rest in the order given, deduplicated
    assert [h.id for h in reached] == [c for c in full if c in {"d9", "d1", "d2"}]
    assert rest == [c for c in ["d9", "d1", "d2"] if c not in full]
    assert rerank_by_concepts(index, q, []) == ([], [])


def test_function_embedder_probes_the_dimension() -> None:
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        return [[1.0, 2.0, 2.0]] * len(texts)

    emb = function_embedder(embed, "fw-model")
    assert emb.dim == 3 and emb.model_id == "fw-model" and len(calls) == 1
    np.testing.assert_allclose(emb.embed(["x"]), [[1 / 3, 2 / 3, 2 / 3]], rtol=1e-6)
    assert function_embedder(embed, "fw", dim=3).dim == 3 and len(calls) == 2
    with pytest.raises(ValueError, match="model_id"):
        function_embedder(embed, "")
    with pytest.raises(ValueError, match="dim"):
        function_embedder(embed, "fw", dim=0)
    with pytest.raises(ValueError, match="pass dim="):
        function_embedder(lambda t: [1.0, 2.0], "flat")
    assert math.isclose(float(np.linalg.norm(emb.embed(["y"])[0])), 1.0, rel_tol=1e-6)


def test_rank_candidates_counts_a_chunks_units_once_with_the_best_hit() -> None:
    cfg = replace(CFG, unit_tokens=8)  # every sentence of TEXTS is its own unit
    index = ConceptGraphIndex.from_texts(TEXTS, ids=IDS, embedder=HashingEmbedder(DIM),
                                         config=cfg)
    q = HashingEmbedder(DIM).embed(["analytical engine"])[0]
    result = index.retrieve_by_vector(q, query="analytical engine", budget=10**6)
    units = [h for h in result.chunks if h.chunk_id in {"d1", "d2"}]
    assert {h.id.split("#")[0] for h in units} == {"d1", "d2"} and len(units) > 2
    reached, rest = rank_candidates(result, ["d2", "d1", "nope", "d2"])
    # each chunk once, where its first unit stands, scored by its best unit
    first_seen = list(dict.fromkeys(h.chunk_id for h in units))
    assert [h.chunk_id for h in reached] == first_seen and rest == ["nope"]
    for hit in reached:
        assert hit.score == max(h.score for h in units if h.chunk_id == hit.chunk_id)
    # rerank_by_concepts is that over a whole-index search with the query's words
    again, _ = rerank_by_concepts(index, q, ["d2", "d1"], query="analytical engine")
    assert [(h.id, h.score) for h in again] == [(h.id, h.score) for h in reached]
