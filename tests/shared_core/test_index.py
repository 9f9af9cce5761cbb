"""ConceptGraphIndex: Eq. 1 vectors on a tiny corpus, add/delete semantics, retrieval, bad input."""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.config import ConceptGraphConfig
from shared_core.embeddings import FunctionEmbedder, HashingEmbedder
from shared_core.index import ConceptGraphIndex, content_id
from shared_core.text import count_tokens, split_sentences, term_analyzer
from tests.shared_core.fakes import STORED_COSINE_TOL, STORED_VECTOR_TOL, RecordingEmbedder

DIM = 128


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def E(*sentences: str) -> np.ndarray:  # reads like the paper's phi
    return HashingEmbedder(DIM).embed(list(sentences))


# ------------------------------------------------------------------ Eq. 1 on a tiny corpus
ZEBRA = "Zebra zebra runs. Zebra sleeps."
LIONS = "Lions hunt lions. Lions eat zebra."
# TF-IDF (2 chunks, smoothed idf = ln(3/(1+df)) + 1):
#   ZEBRA: zebra 3·1 (df 2) = 3,  runs 1·1.405, sleeps 1.405        -> top-1 concept: zebra
#   LIONS: lions 3·1.405 = 4.22,  hunt 1.405, eat 1.405, zebra 1·1  -> top-1 concept: lions


def test_concept_vector_uses_only_sentences_of_linked_chunks() -> None:
    cfg = ConceptGraphConfig(concepts_per_chunk=1, concept_links="extracted")
    index = ConceptGraphIndex.from_texts([ZEBRA, LIONS], ids=["z", "l"],
                                         embedder=HashingEmbedder(DIM), config=cfg)
    assert index.concepts == ["lions", "zebra"]  # terms in sorted order, not first sight
    # "zebra" was extracted only from chunk z, so "Lions eat zebra." does not count
    assert index.concept_chunks("zebra") == ["z"]
    assert index.concept_chunks("lions") == ["l"]
    expected = unit(E("Zebra zebra runs.", "Zebra sleeps.").mean(axis=0))
    np.testing.assert_allclose(index.concept_vector("zebra"), expected, atol=STORED_VECTOR_TOL)
    expected = unit(E("Lions hunt lions.", "Lions eat zebra.").mean(axis=0))
    np.testing.assert_allclose(index.concept_vector("lions"), expected, atol=STORED_VECTOR_TOL)


def test_concept_vector_with_contains_links_and_hand_built_edge() -> None:
    cfg = ConceptGraphConfig(concepts_per_chunk=1, concept_links="contains", theta_co=1,
                             theta_sem=-1.0)
    index = ConceptGraphIndex.from_texts([ZEBRA, LIONS], ids=["z", "l"],
                                         embedder=HashingEmbedder(DIM), config=cfg)
    # "zebra" now links every chunk containing it: both; its sentences are the three
    # that contain the word (not "Lions hunt lions.")
    assert index.concept_chunks("zebra") == ["l", "z"]  # chunks in id order
    zebra = unit(E("Zebra zebra runs.", "Zebra sleeps.", "Lions eat zebra.").mean(axis=0))
    lions = unit(E("Lions hunt lions.", "Lions eat zebra.").mean(axis=0))
    np.testing.assert_allclose(index.concept_vector("zebra"), zebra, atol=STORED_VECTOR_TOL)
    np.testing.assert_allclose(index.concept_vector("lions"), lions, atol=STORED_VECTOR_TOL)
    # Co(zebra, lions) = 1 (chunk l); Dice = 2·1/(|T_zebra| 2 + |T_lions| 1) = 2/3
    [(a, b, co, cos, dice)] = index.edges
    assert (a, b, co) == ("lions", "zebra", 1)
    assert cos == pytest.approx(float(zebra @ lions), abs=2 * STORED_VECTOR_TOL)
    assert dice == pytest.approx(2 / 3)
    # two nodes joined by one edge: PageRank 1/2 each; chunk score (sum): z has zebra only,
    # l has both -> 0.5 and 1.0; kappa .5 keeps ceil(1) = 1 chunk: l
    assert index.concept_pagerank() == pytest.approx({"zebra": 0.5, "lions": 0.5})
    assert index.chunk_scores() == pytest.approx({"z": 0.5, "l": 1.0})
    assert index.select(0.5).kept_ids == ("l",)
    # theta_co = 2: Co is 1, so the edge is gone and PageRank is uniform anyway
    strict = ConceptGraphIndex.from_texts([ZEBRA, LIONS], embedder=HashingEmbedder(DIM),
                                          config=ConceptGraphConfig(concepts_per_chunk=1,
                                                                    concept_links="contains",
                                                                    theta_co=2))
    assert strict.edges == []


def test_theta_sem_filters_the_index_edge() -> None:
    base = dict(concepts_per_chunk=1, concept_links="contains", theta_co=1)
    index = ConceptGraphIndex.from_texts([ZEBRA, LIONS], embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig(theta_sem=-1.0, **base))
    cos = index.edges[0][3]
    above = ConceptGraphIndex.from_texts([ZEBRA, LIONS], embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig(theta_sem=cos + 1e-3, **base))
    below = ConceptGraphIndex.from_texts([ZEBRA, LIONS], embedder=HashingEmbedder(DIM),
                                         config=ConceptGraphConfig(theta_sem=cos - 1e-3, **base))
    assert above.edges == [] and len(below.edges) == 1


# ------------------------------------------------------------------ a small corpus
CORPUS = [
    "Ada Lovelace wrote the first computer program. She worked with Charles Babbage.",
    "Charles Babbage designed the analytical engine. The engine was mechanical.",
    "The analytical engine could run a program. Programs used punched cards.",
    "Punched cards came from the Jacquard loom. The loom wove silk patterns.",
    "Alan Turing described a universal machine. The machine could compute anything.",
    "Turing worked at Bletchley Park. Bletchley Park broke the Enigma cipher.",
    "The Enigma cipher machine was used by the German navy.",
    "Grace Hopper wrote the first compiler. The compiler translated programs.",
]
# the paper's local + global reranking, whose order the tests below work out by hand
CFG = ConceptGraphConfig(theta_co=1, theta_sem=0.0, top_k=3, hops=2, concepts_per_chunk=4,
                         ranking="paper")


@functools.lru_cache(maxsize=4)
def corpus_index(overflow: str = "stop", chunk_similarity: str = "max",
                 ranking: str = "paper") -> ConceptGraphIndex:
    cfg = ConceptGraphConfig(**{**CFG.to_dict(), "overflow": overflow,
                                "chunk_similarity": chunk_similarity, "ranking": ranking})
    ids = [f"d{i}" for i in range(len(CORPUS))]
    return ConceptGraphIndex.from_texts(CORPUS, ids=ids, embedder=HashingEmbedder(DIM),
                                        config=cfg)


def test_retrieval_scores_and_provenance_by_hand() -> None:
    index = corpus_index()
    query = "Who wrote the first compiler?"
    q = E(query)[0]
    result = index.retrieve(query)
    assert result.chunks, "something must be retrieved"
    for hit in result.chunks:
        sentences = [hit.text[s:e] for s, e in split_sentences(hit.text)]
        # chunk_similarity="max": the chunk's best sentence against the query
        assert hit.score == pytest.approx(float((E(*sentences) @ q).max()), abs=STORED_COSINE_TOL)
        c = hit.provenance.concept
        assert hit.provenance.concept_similarity == pytest.approx(
            float(index.concept_vector(c) @ q), abs=1e-5)
        assert hit.id in index.concept_chunks(c)
    # the direct concepts are the top_k concepts by cosine to the query
    sims = {c: float(index.concept_vector(c) @ q) for c in index.concepts}
    best = sorted(sims, key=lambda c: -sims[c])[:3]
    assert set(result.direct_concepts) == set(best)
    assert result.chunks[0].id == "d7"  # the Grace Hopper chunk
    assert result.query == query and result.budget == CFG.budget


def test_mean_chunk_similarity_by_hand() -> None:
    index = corpus_index(chunk_similarity="mean")
    q = E("analytical engine")[0]
    for hit in index.retrieve("analytical engine").chunks:
        sentences = [hit.text[s:e] for s, e in split_sentences(hit.text)]
        assert hit.score == pytest.approx(float(unit(E(*sentences).sum(axis=0)) @ q),
                                         abs=STORED_VECTOR_TOL)


def test_direct_chunk_similarity_embeds_each_unit_once() -> None:
    recorder = RecordingEmbedder(HashingEmbedder(DIM))
    cfg = ConceptGraphConfig(**{**CFG.to_dict(), "chunk_similarity": "direct",
                                "ranking": "paper"})
    index = ConceptGraphIndex.from_texts(CORPUS, embedder=recorder, config=cfg)
    # every sentence once (Eq. 1) and every chunk's whole text once, nothing more
    sentences = [t[s:e] for t in CORPUS for s, e in split_sentences(t)]
    assert sorted(recorder.texts) == sorted(sentences + list(CORPUS))
    q = E("analytical engine")[0]
    hits = index.retrieve("analytical engine").chunks
    assert hits
    for hit in hits:  # the paper ranking's score is the unit similarity itself
        assert hit.score == pytest.approx(float(E(hit.text)[0] @ q), abs=STORED_COSINE_TOL)
    # delete keeps each remaining chunk's vector: same as building without the chunk
    doomed = hits[0].id
    index.delete([doomed])
    rebuilt = ConceptGraphIndex.from_texts([index.get(i).text for i in index.chunk_ids],
                                           ids=index.chunk_ids, embedder=HashingEmbedder(DIM),
                                           config=cfg)
    assert [(h.id, h.score) for h in index.retrieve("analytical engine").chunks] == [
        (h.id, h.score) for h in rebuilt.retrieve("analytical engine").chunks]


def test_retrieval_order_follows_local_then_global_reranking() -> None:
    index = corpus_index()
    for query in ["analytical engine program", "Enigma cipher machine", "Turing machine",
                  "punched cards loom"]:
        result = index.retrieve(query)
        stages = [c.provenance.stage for c in result.chunks]
        n_direct = stages.count("direct")
        assert stages == ["direct"] * n_direct + ["expanded"] * (len(stages) - n_direct)
        direct = result.chunks[:n_direct]
        # local reranking: concept by concept in similarity order...
        concept_sims = [c.provenance.concept_similarity for c in direct]
        assert concept_sims == sorted(concept_sims, reverse=True)
        for a, b in itertools.pairwise(direct):
            assert a.provenance.concept in result.direct_concepts
            if a.provenance.concept == b.provenance.concept:  # ...chunks by similarity
                assert a.score >= b.score
        # global reranking of every expanded chunk together
        expanded = [c.score for c in result.chunks[n_direct:]]
        assert expanded == sorted(expanded, reverse=True)
        assert all(c.provenance.hop >= 1 for c in result.chunks[n_direct:])
        assert all(c.provenance.hop == 0 for c in direct)
        ids = [c.id for c in result.chunks]
        assert len(ids) == len(set(ids))
        assert result.tokens_by_stage()["direct"] == sum(c.chunk.tokens for c in direct)


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(1, 150), overflow=st.sampled_from(["stop", "skip"]),
       ranking=st.sampled_from(["paper", "fused"]),
       query=st.sampled_from(["engine program", "Enigma machine", "first compiler",
                              "loom silk cards"]))
def test_budget_is_never_exceeded(budget: int, overflow: str, ranking: str, query: str) -> None:
    index = corpus_index(overflow, ranking=ranking)
    result = index.retrieve(query, budget=budget)
    assert sum(count_tokens(c.text) for c in result.chunks) <= budget
    assert result.tokens <= budget and result.budget == budget
    # against the unlimited order: stop keeps a prefix, skip keeps greedily what fits
    full = [c.id for c in index.retrieve(query, budget=10**6).chunks]
    tokens = {c: index.get(c).tokens for c in full}
    got = [c.id for c in result.chunks]
    expected: list[str] = []
    used = 0
    for cid in full:
        if used + tokens[cid] <= budget:
            expected.append(cid)
            used += tokens[cid]
        elif overflow == "stop":
            break
    assert got == expected


def test_retrieve_overrides_and_async() -> None:
    index = corpus_index()
    one = index.retrieve("analytical engine", top_k=1, hops=0)
    assert len(one.direct_concepts) == 1 and one.expanded_concepts == 0
    assert all(c.provenance.stage == "direct" for c in one.chunks)
    with pytest.raises(ValueError, match="top_k"):
        index.retrieve("engine", top_k=0)
    with pytest.raises(ValueError, match="budget"):
        index.retrieve("engine", budget=-1)
    sync = index.retrieve("Turing machine")
    result = asyncio.run(index.aretrieve("Turing machine"))
    assert [(c.id, c.score, c.provenance) for c in result.chunks] == [
        (c.id, c.score, c.provenance) for c in sync.chunks]


def test_docstring_example() -> None:
    index = ConceptGraphIndex.from_texts(
        ["Ada Lovelace wrote the first program.", "Charles Babbage designed the engine."],
        embedder=HashingEmbedder())
    assert index.retrieve("Who wrote the first program?").chunks[0].text == (
        "Ada Lovelace wrote the first program.")


# ------------------------------------------------------------------ add
def test_add_is_idempotent() -> None:
    emb = RecordingEmbedder(HashingEmbedder(DIM))
    index = ConceptGraphIndex(emb, CFG)
    ids = index.add(CORPUS[:4])
    assert ids == [content_id(t) for t in CORPUS[:4]]
    n_sentences = sum(len(split_sentences(t)) for t in CORPUS[:4])
    assert len(emb.texts) == n_sentences == 8  # two sentences per chunk
    stats = index.stats()
    assert index.add(CORPUS[:4]) == ids
    assert len(emb.texts) == 8  # nothing new embedded
    assert index.stats() == stats
    # a batch mixing known and new chunks embeds only the new chunk's sentences
    index.add([CORPUS[1], CORPUS[4]])
    assert emb.texts[8:] == ["Alan Turing described a universal machine.",
                             "The machine could compute anything."]
    assert len(index) == 5


def test_identical_texts_under_content_ids_are_one_chunk() -> None:
    emb = RecordingEmbedder(HashingEmbedder(DIM))
    index = ConceptGraphIndex(emb, CFG)
    ids = index.add([CORPUS[0], CORPUS[0], CORPUS[1]])
    assert ids[0] == ids[1] == content_id(CORPUS[0])
    assert len(index) == 2 and index.chunk_ids == sorted([ids[0], ids[2]])
    assert len(emb.texts) == 4  # 2 + 2 sentences, the duplicate not embedded


def test_explicit_duplicate_ids_and_changed_text_raise() -> None:
    index = ConceptGraphIndex(HashingEmbedder(DIM), CFG)
    with pytest.raises(ValueError, match="duplicate chunk id 'a'"):
        index.add(["one text.", "two text."], ids=["a", "a"])
    assert len(index) == 0
    index.add(["one text."], ids=["a"])
    stats = index.stats()
    with pytest.raises(ValueError, match="already holds different text"):
        index.add(["another text."], ids=["a"])
    assert index.stats() == stats and index.get("a").text == "one text."
    index.add(["one text."], ids=["a"])  # same id, same text: a no-op
    assert len(index) == 1


def test_metadata_round_trips_and_is_copied() -> None:
    index = ConceptGraphIndex(HashingEmbedder(DIM), CFG)
    meta = {"source": "wiki", "page": 3, "tags": ["a", "b"], "nested": {"k": None}}
    index.add([CORPUS[0], CORPUS[1]], ids=["x", "y"], metadatas=[meta, {}])
    chunk = index.get("x")
    assert chunk.metadata == meta and chunk.id == "x" and chunk.text == CORPUS[0]
    assert chunk.tokens == count_tokens(CORPUS[0])
    chunk.metadata["source"] = "changed"
    assert index.get("x").metadata["source"] == "wiki"
    meta["page"] = 99  # the caller's dict is not aliased either
    assert index.get("x").metadata["page"] == 3
    hit = next(c for c in index.retrieve("Ada Lovelace program").chunks if c.id == "x")
    assert hit.chunk.metadata == index.get("x").metadata
    item = hit.to_context_item()
    assert item.chunk_id == "x" and item.metadata["source"] == "wiki"
    assert item.metadata["provenance"] == hit.provenance.to_dict()
    assert item.source_id == ""  # a whole chunk votes under its own id


# ------------------------------------------------------------------ delete
def test_delete_removes_a_chunk_everywhere() -> None:
    ids = [f"d{i}" for i in range(len(CORPUS))]
    index = ConceptGraphIndex.from_texts(CORPUS, ids=ids, embedder=HashingEmbedder(DIM),
                                         config=CFG)
    before = index.stats()
    index.delete(["d7"])  # the Grace Hopper chunk (2 sentences)
    assert "d7" not in index and len(index) == 7
    with pytest.raises(KeyError):
        index.get("d7")
    for concept in index.concepts:
        assert "d7" not in index.concept_chunks(concept)
    assert "compiler" not in index.concepts and "hopper" not in index.concepts
    assert all(c.id != "d7" for c in index.retrieve("Grace Hopper compiler").chunks)
    after = index.stats()
    assert after["chunks"] == before["chunks"] - 1
    assert after["sentences"] == before["sentences"] - 2
    assert after["tokens"] == before["tokens"] - count_tokens(CORPUS[7])
    assert after["terms"] < before["terms"]
    # the graph is exactly the one built without the chunk: no sentence of it survives
    fresh = ConceptGraphIndex.from_texts(CORPUS[:7], ids=ids[:7],
                                         embedder=HashingEmbedder(DIM), config=CFG)
    assert index.concepts == fresh.concepts
    for concept in fresh.concepts:
        np.testing.assert_allclose(index.concept_vector(concept), fresh.concept_vector(concept),
                                   atol=1e-6)
    assert [e[:3] for e in index.edges] == [e[:3] for e in fresh.edges]
    for mine, theirs in zip(index.edges, fresh.edges, strict=True):
        assert mine[3:] == pytest.approx(theirs[3:], abs=1e-6)
    assert index.stats() == fresh.stats()


def test_delete_in_the_middle_keeps_the_rest_intact() -> None:
    ids = [f"d{i}" for i in range(len(CORPUS))]
    index = ConceptGraphIndex.from_texts(CORPUS, ids=ids, embedder=HashingEmbedder(DIM),
                                         config=CFG)
    index.delete(iter(["d1", "d4"]))
    keep = [0, 2, 3, 5, 6, 7]
    fresh = ConceptGraphIndex.from_texts([CORPUS[i] for i in keep], ids=[ids[i] for i in keep],
                                         embedder=HashingEmbedder(DIM), config=CFG)
    assert index.chunk_ids == fresh.chunk_ids
    assert index.stats() == fresh.stats()
    assert index.chunk_scores() == pytest.approx(fresh.chunk_scores())
    q = "engine program cards"
    assert [c.id for c in index.retrieve(q).chunks] == [c.id for c in fresh.retrieve(q).chunks]
    index.add([CORPUS[1]], ids=["d1"])  # re-adding after delete works
    assert "d1" in index


def test_delete_errors_and_no_op() -> None:
    index = ConceptGraphIndex.from_texts(CORPUS[:2], ids=["a", "b"],
                                         embedder=HashingEmbedder(DIM), config=CFG)
    stats = index.stats()
    with pytest.raises(KeyError, match="nope"):
        index.delete(["a", "nope"])
    assert len(index) == 2  # nothing deleted on error
    with pytest.raises(TypeError, match="single str"):
        index.delete("a")
    index.delete([])
    assert index.stats() == stats
    index.delete(["a", "b"])
    assert len(index) == 0 and index.stats()["concepts"] == 0
    assert index.retrieve("anything").chunks == ()


def test_empty_index() -> None:
    index = ConceptGraphIndex(HashingEmbedder(DIM), CFG)
    stats = index.stats()
    assert (stats["chunks"], stats["sentences"], stats["concepts"], stats["edges"]) == (0, 0, 0, 0)
    assert stats["embedding_model"] == "hashing-bow-128" and stats["embedding_dim"] == DIM
    result = index.retrieve("query")
    assert result.chunks == () and result.tokens == 0 and result.context == ""
    assert index.select().kept_ids == ()


def test_stats_of_a_tiny_index() -> None:
    cfg = ConceptGraphConfig(concepts_per_chunk=1, concept_links="contains", theta_co=1,
                             theta_sem=-1.0)
    index = ConceptGraphIndex.from_texts([ZEBRA, LIONS], embedder=HashingEmbedder(DIM),
                                         config=cfg)
    s = index.stats()
    # 2 chunks, 4 sentences, terms zebra runs sleeps lions hunt eat, 2 concepts, 1 edge
    assert (s["chunks"], s["sentences"], s["terms"], s["concepts"], s["edges"]) == (2, 4, 6, 2, 1)
    assert s["isolated_concepts"] == 0 and s["mean_degree"] == 1.0
    assert s["tokens"] == count_tokens(ZEBRA) + count_tokens(LIONS)


def test_context_joins_texts() -> None:
    result = corpus_index().retrieve("analytical engine")
    assert result.context == "\n\n".join(c.text for c in result.chunks)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"texts": ["ok", "   "]}, ValueError, r"texts\[1\] is empty"),
        ({"texts": [""]}, ValueError, "empty"),
        ({"texts": "a single string"}, TypeError, "sequence of str"),
        ({"texts": ["ok", 5]}, TypeError, r"texts\[1\] must be str"),
        ({"texts": ["a", "b"], "ids": ["x"]}, ValueError, "1 ids for 2 texts"),
        ({"texts": ["a"], "ids": [7]}, ValueError, r"ids\[0\] must be a non-empty str"),
        ({"texts": ["a"], "ids": [" "]}, ValueError, r"ids\[0\]"),
        ({"texts": ["a"], "ids": "x"}, TypeError, "ids must be a sequence"),
        ({"texts": ["a"], "metadatas": [1]}, TypeError, r"metadatas\[0\] must be a mapping"),
        ({"texts": ["a"], "metadatas": [{"f": object()}]}, TypeError, "JSON"),
        ({"texts": ["a"], "metadatas": [{"f": {1, 2}}]}, TypeError, "JSON"),
        ({"texts": ["a", "b"], "metadatas": [{}]}, ValueError, "1 metadata entries for 2"),
    ],
)
def test_add_rejects_bad_input(kwargs: dict[str, Any], error: type[Exception],
                               message: str) -> None:
    index = ConceptGraphIndex(HashingEmbedder(DIM), CFG)
    texts = kwargs.pop("texts")
    with pytest.raises(error, match=message):
        index.add(texts, **kwargs)
    assert len(index) == 0


def test_retrieve_rejects_bad_queries() -> None:
    index = corpus_index()
    with pytest.raises(TypeError, match="the query must be a str, got int"):
        index.retrieve(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the query must be a str, got list"):
        index.retrieve(["a list"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the query is empty or blank"):
        index.retrieve("   ")
    with pytest.raises(ValueError, match="the query contains a NUL character at character 3"):
        index.retrieve("abc\x00")
    with pytest.raises(ValueError, match=r"the query contains a lone surrogate \(U\+D800\)"):
        index.retrieve("abc\ud800")
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(128,\)"):
        index.retrieve_by_vector(np.ones(3))


def test_constructor_and_embedder_validation() -> None:
    with pytest.raises(TypeError, match="Embedder protocol"):
        ConceptGraphIndex(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ConceptGraphConfig"):
        ConceptGraphIndex(HashingEmbedder(DIM), {"kappa": 0.5})  # type: ignore[arg-type]
    # an embedder that declares dim 8 but returns 4-wide vectors
    liar = FunctionEmbedder(lambda texts: np.ones((len(texts), 4)), "liar", 8)
    index = ConceptGraphIndex(liar)
    with pytest.raises(ValueError, match="dimension 4, expected 8"):
        index.add(["Some text here."])
    assert len(index) == 0 and index.stats()["terms"] == 0  # nothing half-added


def test_select_validates_kappa_by_name() -> None:
    index = corpus_index()
    with pytest.raises(ValueError, match="kappa"):
        index.select(0.0)
    with pytest.raises(ValueError, match="kappa"):
        index.select(1.5)
    sel = index.select(0.5, prompt_tokens_per_chunk=10)
    assert len(sel.kept_ids) == 4  # ceil(.5·8)
    assert sel.report.extraction_input_tokens == sel.report.tokens_kept + 40


def _reference_bm25(texts: list[str], query: str) -> list[float]:
    """Lucene BM25 (k1 1.5, b .75) over the analyzer's words, written out term by term."""
    analyze = term_analyzer()
    docs = [analyze(t) for t in texts]
    mean_length = sum(map(len, docs)) / len(docs)
    scores = []
    for doc in docs:
        score = 0.0
        for term in set(analyze(query)):
            df = sum(term in d for d in docs)
            tf = doc.count(term)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf / (tf + 1.5 * (0.25 + 0.75 * len(doc) / mean_length))
        scores.append(score)
    return scores


def _reference_fused_order(index: ConceptGraphIndex, query: str, top_k: int, hops: int,
                           decay: float, rrf_k: int,
                           lexical: bool) -> list[tuple[str, str | None]]:
    """The fused ranking written out with plain Python over the index's public API."""
    q = E(query)[0]
    ids = index.chunk_ids
    sims = {c: float(index.concept_vector(c) @ q) for c in index.concepts}
    hop = {c: 0 for c in sorted(sims, key=lambda c: -sims[c])[:top_k]}
    neighbours: dict[str, set[str]] = {c: set() for c in sims}
    for a, b, *_ in index.edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    frontier = set(hop)
    for h in range(1, hops + 1):
        frontier = {n for c in frontier for n in neighbours[c] if n not in hop}
        hop.update({n: h for n in frontier})
    value = {c: max(sims[c], 0.0) * decay ** h
             * (np.log((len(ids) + 1) / (len(index.concept_chunks(c)) + 1)) + 1)
             for c, h in hop.items()}
    evidence = {i: sum(v for c, v in value.items() if i in index.concept_chunks(c)) for i in ids}
    similarity = {i: max(float(E(index.get(i).text[s:e])[0] @ q)
                         for s, e in split_sentences(index.get(i).text)) for i in ids}

    def ranks(score: dict[str, float]) -> dict[str, int]:
        order = sorted(ids, key=lambda i: (-score[i], ids.index(i)))
        return {i: r for r, i in enumerate(order, 1)}

    r_sim, r_ev = ranks(similarity), ranks(evidence)
    fused = {i: 1 / (rrf_k + r_sim[i]) + (evidence[i] > 0) / (rrf_k + r_ev[i]) for i in ids}
    if lexical:
        bm25 = dict(zip(ids, _reference_bm25([index.get(i).text for i in ids], query),
                        strict=True))
        r_lex = ranks(bm25)
        fused = {i: fused[i] + (bm25[i] > 0) / (rrf_k + r_lex[i]) for i in ids}
    order = sorted(ids, key=lambda i: (-fused[i], ids.index(i)))
    best = {i: max((c for c in value if i in index.concept_chunks(c) and value[c] > 0),
                   key=lambda c: value[c], default=None) for i in ids}
    return [(i, best[i]) for i in order]


@pytest.mark.parametrize("query", ["analytical engine program", "Enigma cipher machine",
                                   "Who wrote the first compiler?", "punched cards loom"])
@pytest.mark.parametrize(("hops", "rrf_k", "lexical"), [(2, 60, True), (0, 1, False),
                                                     (2, 1, True)])
def test_fused_ranking_matches_a_plain_python_reference(query: str, hops: int, rrf_k: int,
                                                        lexical: bool) -> None:
    # the reference fuses the three views of the ranking; the walk view has its own tests
    cfg = ConceptGraphConfig(**{**CFG.to_dict(), "ranking": "fused", "hops": hops,
                                "rrf_k": rrf_k, "lexical": lexical, "walk_hops": 0})
    index = ConceptGraphIndex.from_texts(CORPUS, ids=[f"d{i}" for i in range(len(CORPUS))],
                                         embedder=HashingEmbedder(DIM), config=cfg)
    result = index.retrieve(query, budget=10**6)
    expected = _reference_fused_order(index, query, 3, hops, cfg.expansion_decay, rrf_k,
                                      lexical)
    assert [(c.id, c.provenance.concept) for c in result.chunks] == expected
    # every chunk fits the unlimited budget; one without a reached concept is "similarity"
    for hit in result.chunks:
        assert (hit.provenance.stage == "similarity") == (hit.provenance.concept is None)
    assert result.tokens_by_stage()["similarity"] == sum(
        c.chunk.tokens for c in result.chunks if c.provenance.stage == "similarity")
