"""An index's vectors in an outside store: keys, row layout, write-through, repair.

The stores here are the two engines with a backend of their own, each through the
client code that talks to its cluster: Milvus Lite (a real Milvus server in a local
file) through ``MilvusVectorStore``, and qdrant-client's local mode through
``QdrantStore``. Every engine test runs on both, and every test of vectors alone also
on a Milvus 2.3 standalone server over loopback (``milvus_server``), whose HNSW index
and segments Milvus Lite does not have. Milvus 2.3 has no sparse vectors, so the term
posting tests run on the first two and the server must refuse ``term_postings``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymilvus.exceptions import MilvusException

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.search.external import (
    KEY_FIELD,
    NO_TERMS,
    TERM_DIMENSIONS,
    StoredRows,
    TermPostingsBackend,
    VectorStoreBackend,
    chunk_digest,
    keeps_terms,
    key_uuid,
    parse_key,
    row_key,
    term_dimension,
    text_digest,
)
from shared_core.search.milvus import MilvusVectorStore
from shared_core.search.qdrant import QdrantStore
from tests.shared_core.search.milvus_server import database_client, milvus_server_uri
from tests.shared_core.test_store import TEXTS

DIM = 64
ROOT = Path(__file__).resolve().parents[3]
IDS = [f"t{i}" for i in range(len(TEXTS))]
QUERIES = ["Who wrote the first compiler?", "analytical engine", "punched cards and looms"]
# Milvus Lite's server talks to its client over loopback
loopback = pytest.mark.allow_hosts(["127.0.0.1"])


TERM_ENGINES = ["milvus", "qdrant"]  # the engines that keep term postings
ENGINES = [*TERM_ENGINES, "milvus-server"]
Engine = MilvusVectorStore | QdrantStore


def engine(kind: str, tmp_path: Path, name: str = "cg", terms: bool | None = None) -> Engine:
    """A store of engine ``kind`` in ``tmp_path`` (one per folder and process; for the
    server, in the database of ``tmp_path``'s test)."""
    if kind == "milvus":
        return MilvusVectorStore(str(tmp_path / "vectors.db"), name, index_type="FLAT",
                                 term_postings=terms)
    if kind == "milvus-server":
        return MilvusVectorStore(milvus_server_uri(), name, term_postings=terms,
                                 client=database_client(tmp_path))
    return QdrantStore(str(tmp_path / "qdrant"), name, term_postings=terms)


def reopened(store: Engine, name: str, terms: bool | None = None) -> Engine:
    """Another collection, or the same one again, over ``store``'s client."""
    if isinstance(store, MilvusVectorStore):
        return MilvusVectorStore(store.uri, name, client=store.client, term_postings=terms)
    return QdrantStore(store.client, name, term_postings=terms)


def built_metadata(i: int) -> dict[str, object]:
    return {"n": i, "tags": ["a", "b"]}


def build(store: VectorStoreBackend | None = None, **knobs: object) -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(
        TEXTS, ids=IDS, embedder=HashingEmbedder(DIM), vector_store=store,
        metadatas=[built_metadata(i) for i in range(len(TEXTS))],
        config=ConceptGraphConfig(**knobs))  # type: ignore[arg-type]


def built_digest(i: int) -> str:
    """The key digest of :func:`build`'s chunk ``i``: its text and its metadata's JSON."""
    return chunk_digest(TEXTS[i], json.dumps(built_metadata(i)))


def built_keys(positions: Iterable[int] = range(len(TEXTS))) -> set[str]:
    """The keys of :func:`build`'s chunks at these positions: two sentence rows each."""
    return {row_key(IDS[i], built_digest(i), "s", p) for i in positions for p in range(2)}


def expected_keys(ids: list[str], texts: list[str], parts: int = 2) -> set[str]:
    """The keys of chunks without metadata: every TEXTS chunk has two sentence rows."""
    return {row_key(i, text_digest(t), "s", p) for i, t in zip(ids, texts, strict=True)
            for p in range(parts)}


def contexts(index: ConceptGraphIndex) -> list[list[tuple[str, float]]]:
    return [[(c.id, round(c.score, 9)) for c in index.retrieve(q).chunks] for q in QUERIES]


# ------------------------------------------------------------------ keys and rows
def test_a_key_names_chunk_text_kind_and_part() -> None:
    digest = text_digest("some text")
    assert len(digest) == 12 and int(digest, 16) >= 0
    assert row_key("a#1.s2", digest, "s", 3) == f"a#1.s2#{digest}.s3"
    # the chunk id is everything before the last '#': ids may hold '#' and '.'
    assert parse_key(f"a#1.s2#{digest}.s3") == ("a#1.s2", digest, "s", 3)
    assert parse_key(f"x#{digest}.u0") == ("x", digest, "u", 0)
    for other in ["foo", f"#{digest}.s1", f"x#{digest}.s01", f"x#{digest}.t1",
                  f"x#{digest[:-1]}.s1", f"x#{digest.upper()}.s1", "550e8400-e29b-41d4"]:
        assert parse_key(other) is None, other


def test_a_chunks_metadata_is_part_of_its_keys_digest() -> None:
    text = "Ada wrote the first program."  # 28 characters
    # no metadata: the text's own BLAKE2b, the key every version has written
    assert (chunk_digest(text) == chunk_digest(text, "{}") == text_digest(text)
            == hashlib.blake2b(text.encode(), digest_size=6).hexdigest())
    # metadata: BLAKE2b personalised "cg-metadata" over the text's length (8 bytes,
    # little-endian), the text, then the metadata's JSON
    by_hand = hashlib.blake2b(b"\x1c\0\0\0\0\0\0\0" + text.encode() + b'{"n": 1}',
                              digest_size=6, person=b"cg-metadata").hexdigest()
    assert chunk_digest(text, '{"n": 1}') == by_hand
    # other metadata, or the same bytes split otherwise between text and metadata: other keys
    assert len({chunk_digest(text), by_hand, chunk_digest(text, '{"n": 2}'),
                chunk_digest(text[:-1], '.{"n": 1}')}) == 4


@settings(max_examples=200, deadline=None)
@given(chunk_id=st.text(min_size=1, max_size=40), text=st.text(min_size=1, max_size=40),
       kind=st.sampled_from("su"), part=st.integers(0, 10**6))
def test_every_key_parses_back(chunk_id: str, text: str, kind: str, part: int) -> None:
    digest = text_digest(text)
    assert parse_key(row_key(chunk_id, digest, kind, part)) == (chunk_id, digest, kind, part)


def test_sentence_rows_are_laid_out_chunk_by_chunk() -> None:
    index = build()
    rows = index.state.stored_rows()
    assert rows.kind == "s" and len(rows) == 10
    assert rows.first.tolist() == [0, 2, 4, 6, 8] and rows.count.tolist() == [2] * 5
    assert rows.rows_of([1, 3]).tolist() == [2, 3, 6, 7]
    assert rows.keys_of([1]) == [f"t1#{built_digest(1)}.s0",
                                 f"t1#{built_digest(1)}.s1"]
    assert rows.texts_of(np.array([2, 3])) == ["Charles Babbage designed the analytical engine.",
                                               "The engine was mechanical."]
    # scalar metadata only (the list is left in the index), with the chunk id and part
    assert rows.metadatas_of([1]) == [{"n": 1, "chunk_id": "t1", "part": 0},
                                      {"n": 1, "chunk_id": "t1", "part": 1}]


def test_unit_rows_are_the_units_when_units_have_vectors() -> None:
    index = build(chunk_similarity="direct", unit_tokens=12)
    rows = index.state.stored_rows()
    graph = index.state.graph
    assert rows.kind == "u" and len(rows) == len(graph.unit_tokens)
    assert rows.count.sum() == len(graph.unit_tokens)
    # unit u of chunk c is row first[c] + u, and its text is the unit's text
    for c in range(len(TEXTS)):
        assert (graph.unit_chunk[rows.first[c]:rows.first[c] + rows.count[c]] == c).all()
    first_unit = rows.texts_of(np.array([0]))[0]
    assert TEXTS[0].startswith(first_unit) and first_unit != TEXTS[0]


# ------------------------------------------------------------------ term postings
def test_a_term_dimension_is_a_hash_of_its_text_in_range() -> None:
    # BLAKE2b's first four bytes, little-endian, folded into 1 .. 2^31 - 1 (0: no terms)
    digest = int.from_bytes(hashlib.blake2b(b"engine", digest_size=4).digest(), "little")
    assert term_dimension("engine") == digest % (2**31 - 1) + 1
    assert TERM_DIMENSIONS == 2**31 - 1 and NO_TERMS == 0
    assert term_dimension("engine") != term_dimension("engines")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30))
def test_every_term_dimension_is_a_real_dimension(term: str) -> None:
    assert 1 <= term_dimension(term) <= TERM_DIMENSIONS


def test_a_units_first_sentence_row_carries_the_units_terms() -> None:
    rows = build().state.stored_rows()
    d = term_dimension
    # rows 2 and 3 are chunk t1's sentences, "Charles Babbage designed the analytical
    # engine." and "The engine was mechanical." (stop words dropped, lowercased); the
    # chunk is the unit: its terms, once each, on its first row, none on the second
    assert rows.terms_of(np.array([3, 2])) == [
        {NO_TERMS: 1.0},
        {d("charles"): 1.0, d("babbage"): 1.0, d("designed"): 1.0, d("analytical"): 1.0,
         d("engine"): 1.0, d("mechanical"): 1.0}]


def test_sub_chunk_units_carry_their_terms_on_their_first_row() -> None:
    # units of at most 12 tokens: each sentence of TEXTS is a unit of its own
    index = build(unit_tokens=12)
    rows = index.state.stored_rows()
    assert rows.kind == "s" and len(index.state.graph.unit_tokens) == 10
    d = term_dimension
    assert rows.terms_of(np.array([2, 3])) == [
        {d("charles"): 1.0, d("babbage"): 1.0, d("designed"): 1.0, d("analytical"): 1.0,
         d("engine"): 1.0},
        {d("engine"): 1.0, d("mechanical"): 1.0}]


def test_unit_rows_carry_their_units_terms() -> None:
    index = build(chunk_similarity="direct", unit_tokens=30)
    rows = index.state.stored_rows()
    assert rows.kind == "u"
    # chunk 1 is one unit of its two sentences: "engine" in both, held once
    unit = int(rows.first[1])
    assert rows.count[1] == 1
    d = term_dimension
    assert rows.terms_of(np.array([unit])) == [
        {d("charles"): 1.0, d("babbage"): 1.0, d("designed"): 1.0, d("analytical"): 1.0,
         d("engine"): 1.0, d("mechanical"): 1.0}]


def test_a_row_without_terms_holds_the_no_terms_dimension() -> None:
    index = ConceptGraphIndex.from_texts(["Alpha beta gamma.", "It is what it was."],
                                         ids=["a", "b"], embedder=HashingEmbedder(DIM))
    rows = index.state.stored_rows()
    # "It is what it was." is all stop words
    assert rows.terms_of(rows.rows_of([1])) == [{NO_TERMS: 1.0}]


def terms_store(kind: str, tmp_path: Path, name: str = "cgt") -> Engine:
    return engine(kind, tmp_path, name, terms=True)


def keys_for(store: Engine, *terms: str) -> set[str]:
    [keys] = store.search_terms([{term_dimension(t): 1.0 for t in terms}], 100)
    return set(keys)


def record_requests(store: Engine) -> list[tuple[str, int]]:
    """Each request the store's client sends from now on: the field it searches and how
    many queries it holds. The client is the engine's own, recorded, not replaced."""
    sent: list[tuple[str, int]] = []
    client = store.client
    if isinstance(store, MilvusVectorStore):
        search = client.search

        def milvus_search(*args: object, **kwargs: object) -> object:
            sent.append((str(kwargs["anns_field"]), len(kwargs["data"])))  # type: ignore[arg-type]
            return search(*args, **kwargs)

        client.search = milvus_search
        return sent
    single, batch = client.query_points, client.query_batch_points

    def query_points(*args: object, **kwargs: object) -> object:
        sent.append((str(kwargs["using"]), 1))
        return single(*args, **kwargs)

    def query_batch_points(*args: object, **kwargs: object) -> object:
        requests = kwargs["requests"]
        assert {r.using for r in requests} == {"terms"}  # type: ignore[attr-defined]
        sent.append(("terms", len(requests)))  # type: ignore[arg-type]
        return batch(*args, **kwargs)

    client.query_points, client.query_batch_points = query_points, query_batch_points
    return sent


@loopback
@pytest.mark.parametrize("kind", TERM_ENGINES)
def test_an_engine_finds_the_rows_that_hold_a_term(tmp_path: Path, kind: str) -> None:
    store = terms_store(kind, tmp_path)
    index = build(store)
    assert keeps_terms(store) and isinstance(store, TermPostingsBackend)
    assert index.stats()["vector_index"] == f"store:{type(store).__name__}+terms"
    key = {IDS[i]: built_digest(i) for i in range(len(TEXTS))}
    # "babbage": chunks t0 and t1, each found by its first row
    assert keys_for(store, "babbage") == {f"t0#{key['t0']}.s0", f"t1#{key['t1']}.s0"}
    # ranked by the weighted sum over each chunk's terms: "analytical" and "engine" both
    # in t1 and t2 (2 each), "program" in t0 and t2, "programs" in t4
    ranked, weighted, none, empty = store.search_terms([
        {term_dimension("engine"): 1.0, term_dimension("analytical"): 1.0},
        {term_dimension("engine"): 1.0, term_dimension("program"): 5.0},
        {term_dimension("zeppelin"): 1.0},
        {}], 10)
    assert set(ranked) == {f"t1#{key['t1']}.s0", f"t2#{key['t2']}.s0"}
    assert weighted == [f"t2#{key['t2']}.s0", f"t0#{key['t0']}.s0", f"t1#{key['t1']}.s0"]
    assert none == [] and empty == []
    # each query alone finds what it finds among others
    assert store.search_terms([{term_dimension("engine"): 1.0,
                                term_dimension("program"): 5.0}], 10) == [weighted]
    assert store.search_terms([{}, {term_dimension("zeppelin"): 0.0}], 10) == [[], []]
    store.close()


@loopback
@pytest.mark.parametrize("kind", TERM_ENGINES)
def test_term_postings_follow_adds_and_deletes(tmp_path: Path, kind: str) -> None:
    store = terms_store(kind, tmp_path)
    index = build(store)
    index.add(["Zeppelins flew over the sea."], ids=["z"])
    digest = text_digest("Zeppelins flew over the sea.")
    assert keys_for(store, "zeppelins") == {f"z#{digest}.s0"}
    index.delete(["z", "t0"])
    assert keys_for(store, "zeppelins") == set()
    assert keys_for(store, "babbage") == {f"t1#{built_digest(1)}.s0"}
    store.close()


@loopback
@pytest.mark.parametrize("kind", TERM_ENGINES)
@pytest.mark.parametrize("lexical", [False, True])
@pytest.mark.parametrize("knobs", [{}, {"chunk_similarity": "direct", "unit_tokens": 12},
                                   {"concept_search": "hnsw"}])
def test_units_found_through_the_engine_rank_as_the_in_process_index(
        tmp_path: Path, knobs: dict[str, object], lexical: bool, kind: str) -> None:
    # one candidate per view and no walk: the pool is the nearest unit, the unit of most
    # evidence and (lexical) the best by BM25, which the engine's term postings must find
    # as local postings do (evidence found nothing, the engine's index answers the first
    # two queries with t1 alone; BM25 found nothing, the unit index answers "analytical
    # engine" with t1#u0 alone, not t1#u0 and t2#u0)
    store = terms_store(kind, tmp_path)
    knobs = {"candidates": 1, "lexical": lexical, "walk_hops": 0, **knobs}
    engine_index = build(store, **knobs)
    local = build(vector_index="hnsw", **knobs)
    queries = ["the the the was was was babbage", "The engine was mechanical silk", *QUERIES]
    sent = record_requests(store)

    def ids(index: ConceptGraphIndex) -> list[list[str]]:
        return [[c.id for c in index.retrieve(q).chunks] for q in queries]

    assert ids(engine_index) == ids(local)
    # per query: one request for terms holding the evidence view's query and BM25's
    # (both known before the ranking), then one for the nearest rows
    assert sent == [("terms", 2 if lexical else 1), ("vector", 1)] * len(queries)
    store.close()


@loopback
@pytest.mark.parametrize("kind", TERM_ENGINES)
def test_an_engine_that_answers_fewer_term_queries_than_asked_is_an_error(
        tmp_path: Path, kind: str) -> None:
    """A retrieval asks for two term queries in one request; an answer short of one (a
    server's, or another backend's) raises instead of ranking with a view missing."""
    store = terms_store(kind, tmp_path)
    index = build(store, lexical=True)
    client = store.client
    name = "search" if kind == "milvus" else "query_batch_points"
    answer = getattr(client, name)

    def short(*args: object, **kwargs: object) -> object:
        return answer(*args, **kwargs)[:-1]

    setattr(client, name, short)
    engine_name = "Milvus" if kind == "milvus" else "Qdrant"
    with pytest.raises(ValueError, match=rf"{engine_name} answered 1 of 2 queries"):
        index.retrieve("analytical engine")
    setattr(client, name, answer)

    class OneAnswer(type(store)):  # type: ignore[misc]
        """A backend that answers only the first query of a request."""

        def search_terms(self, queries: object, k: int) -> list[list[str]]:
            return super().search_terms(queries, k)[:1]  # type: ignore[no-any-return]

    other = (OneAnswer(store.uri, "cgt", client=client) if kind == "milvus"
             else OneAnswer(client, "cgt"))
    again = build(other, lexical=True)
    with pytest.raises(ValueError, match=r"OneAnswer.search_terms answered 1 queries of 2"):
        again.retrieve("analytical engine")
    store.close()


@loopback
def test_a_milvus_server_without_sparse_vectors_refuses_term_postings(tmp_path: Path) -> None:
    """Milvus 2.3 has no sparse vector field: the store says so before it writes anything
    (the server's own error would come from ``create_index``, about "field 104")."""
    client = database_client(tmp_path)
    assert client.get_server_version().startswith("v2.3.")
    with pytest.raises(ValueError, match=r"term_postings=True needs sparse vector fields, "
                                         r"which Milvus has from 2\.4; the server at "
                                         r"'http://127\.0\.0\.1:\d+' runs v2\.3\.\d"):
        MilvusVectorStore(milvus_server_uri(), "cgt", term_postings=True, client=client)
    assert client.list_collections() == []
    store = MilvusVectorStore(milvus_server_uri(), "cg", term_postings=False, client=client)
    assert contexts(build(store)) == contexts(build(vector_index="hnsw"))
    store.close()


@loopback
def test_a_milvus_servers_index_is_built_and_searched_with_the_params_given(
        tmp_path: Path) -> None:
    client = database_client(tmp_path)
    store = MilvusVectorStore(milvus_server_uri(), "hnsw", index_type="HNSW",
                              index_params={"M": 8, "efConstruction": 64},
                              search_params={"ef": 64}, client=client)
    # 2,000 rows, sealed: the server indexes a segment of 1,024 rows or more
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((2000, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    keys = [row_key(f"c{i}", text_digest(f"c{i}"), "s", 0) for i in range(len(vectors))]
    store.upsert(keys, vectors, ["text"] * len(keys),
                 [{"chunk_id": f"c{i}", "part": 0} for i in range(len(keys))])
    client.flush("hnsw")
    for _ in range(120):  # the index is built in the background
        described = client.describe_index("hnsw", "vector")
        if described["state"] == "Finished" and int(described["indexed_rows"]) == 2000:
            break
        time.sleep(0.5)
    assert (described["index_type"], described["M"], described["efConstruction"],
            described["indexed_rows"]) == ("HNSW", "8", "64", 2000)
    client.release_collection("hnsw")  # loaded again, the segment is searched by its index
    client.load_collection("hnsw")
    # each row is its own nearest: the search runs with ef 64 on the built index ...
    assert [store.search(vectors[i], 1) for i in (0, 999, 1999)] == [
        [keys[0]], [keys[999]], [keys[1999]]]
    # asked for more rows than its ef, a search widens the beam to them (the server
    # refuses ef < k): the nearest 100, and the scores of 300 rows a replica asks for
    nearest = store.search(vectors[0], 100)
    assert len(nearest) == 100 and nearest[0] == keys[0]
    exact = vectors[:300] @ vectors[0]
    assert np.allclose(store.scores_of(keys[:300], vectors[0]), exact, atol=1e-4)
    # ... and the params are the engine's: an ef of 0 is refused by it, not by us
    refused = MilvusVectorStore(milvus_server_uri(), "hnsw", search_params={"ef": 0},
                                client=client)
    with pytest.raises(MilvusException, match=r"fail to Search"):
        refused.search(vectors[0], 1)
    with pytest.raises(TypeError, match=r"search_params must be a mapping .*got int"):
        MilvusVectorStore(milvus_server_uri(), "hnsw", search_params=64,  # type: ignore[arg-type]
                          client=client)
    store.close()


def test_a_milvus_server_is_read_with_session_consistency_after_one_strong_read(
        tmp_path: Path) -> None:
    """A strong read waits for the server's next time tick (200 ms a search on Milvus
    2.3), so a query's searches and row reads ask for session consistency, which still
    sees this client's own writes; a load makes one strong read of the rows first, so
    an index opened later sees every row written before it."""
    store = engine("milvus-server", tmp_path)
    writer = build(store)
    levels: list[tuple[str, object]] = []
    client = store.client
    for name in ("search", "get", "query"):
        def recorded(*args: object, _call: object = getattr(client, name), _name: str = name,
                     **kwargs: object) -> object:
            levels.append((_name, kwargs.get("consistency_level")))
            return _call(*args, **kwargs)  # type: ignore[operator]

        setattr(client, name, recorded)
    writer.add(["Zeppelins flew over the sea."], ids=["z"])
    zeppelin = f"z#{text_digest('Zeppelins flew over the sea.')}.s0"
    # the row written a moment ago is the nearest to its own vector: read-your-writes
    assert store.search(HashingEmbedder(DIM).embed(["Zeppelins flew over the sea."])[0],
                        1) == [zeppelin]
    writer.retrieve("zeppelins")
    assert levels and {level for _, level in levels} == {"Session"}
    writer.save(str(tmp_path / "idx"))
    levels.clear()
    replica = replica_of(tmp_path / "idx", store)
    assert levels[0] == ("query", "Strong")  # the load's one strong read, before the rest
    levels.clear()
    assert contexts(replica) == contexts(writer)
    assert {"search", "query"} <= {name for name, _ in levels}
    assert {level for _, level in levels} == {"Session"}
    scored = scored_replica_of(tmp_path / "idx", store)
    levels.clear()  # and rows the store scores are scored by session searches too
    assert same_answers(contexts(scored), contexts(writer))
    assert [name for name, _ in levels].count("search") > len(QUERIES)
    assert {level for _, level in levels} == {"Session"}
    store.close()


@pytest.mark.parametrize(("kind", "flushes"), [("milvus", 3), ("milvus-server", 0)])
def test_milvus_lite_is_flushed_after_each_update_and_a_server_never(
        tmp_path: Path, kind: str, flushes: int) -> None:
    """A flush cost a server 2 s and sped up none of its searches, while Milvus Lite
    searched unsealed rows 4-10x slower (``MilvusVectorStore.flush``). Without one, the
    server still finds and lists every row written."""
    store = engine(kind, tmp_path)
    assert store.is_lite == (kind == "milvus")
    sealed: list[str] = []
    flush = store.client.flush

    def recorded(name: str, *args: object, **kwargs: object) -> object:
        sealed.append(name)
        return flush(name, *args, **kwargs)

    store.client.flush = recorded
    index = build(store)  # the build, an add and a delete: one flush each on Lite
    index.add(["Zeppelins flew over the sea."], ids=["z"])
    index.delete(["t0"])
    assert sealed == ["cg"] * flushes
    zeppelin = f"z#{text_digest('Zeppelins flew over the sea.')}.s0"
    assert store.search(HashingEmbedder(DIM).embed(["Zeppelins flew over the sea."])[0],
                        1) == [zeppelin]
    assert set(store.list_keys()) == built_keys(range(1, len(TEXTS))) | {zeppelin}
    store.close()


LIST_KEYS = """
import json, sys
from shared_core.search.milvus import MilvusVectorStore
store = MilvusVectorStore(sys.argv[1], "cg")
print(json.dumps(sorted(store.list_keys())))
store.close()
"""


def keys_from_another_process(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LIST_KEYS, str(path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@loopback
def test_closing_the_last_milvus_lite_store_on_a_file_frees_it_for_another_process(
        tmp_path: Path) -> None:
    """Milvus Lite 3 serves a file from a thread of this process, holding the file's
    lock, until the process exits; closing a client does not stop it. The last store
    of the process closed on the file stops it, and another process then opens it."""
    first = engine("milvus", tmp_path)
    build(first)
    second = engine("milvus", tmp_path)  # the same file and collection
    first.close()
    assert set(second.list_keys()) == built_keys()  # still served for the open store
    held = keys_from_another_process(tmp_path / "vectors.db")
    assert held.returncode != 0 and "Open local milvus failed" in held.stderr
    second.close()
    freed = keys_from_another_process(tmp_path / "vectors.db")
    assert freed.returncode == 0, freed.stderr
    assert set(json.loads(freed.stdout)) == built_keys()


@loopback
@pytest.mark.parametrize("kind", TERM_ENGINES)
def test_term_postings_must_match_the_collection(tmp_path: Path, kind: str) -> None:
    store = terms_store(kind, tmp_path)
    build(store)
    with pytest.raises(ValueError, match=r"made with term postings, but term_postings=False"):
        reopened(store, "cgt", terms=False)
    assert reopened(store, "cgt").keeps_terms  # None: as made
    plain = reopened(store, "cg")
    build(plain)
    with pytest.raises(ValueError, match=r"made without term postings, but term_postings=True"):
        reopened(store, "cg", terms=True)
    assert not keeps_terms(reopened(store, "cg"))
    rows = np.zeros((1, DIM), np.float32)
    with pytest.raises(ValueError, match=r"keeps term postings: write its rows with"):
        store.upsert(["k#000000000000.s0"], rows, ["x"], [{"chunk_id": "k"}])
    with pytest.raises(ValueError, match=r"keeps no term postings"):
        plain.upsert_with_terms(["k#000000000000.s0"], rows, ["x"], [{"chunk_id": "k"}],
                                [{1: 1.0}])
    with pytest.raises(ValueError, match=r"keeps no term postings"):
        plain.search_terms([{1: 1.0}], 3)
    with pytest.raises(TypeError, match=r"term_postings must be a bool or None"):
        reopened(store, "cgx", terms="yes")  # type: ignore[arg-type]
    store.close()


@loopback
def test_a_search_asks_milvus_for_the_keys_alone(tmp_path: Path) -> None:
    """Without output_fields Milvus returns every field, the vectors too (2,000 rows of
    384 floats: 200 ms against 90 ms). The client is pymilvus's own, recorded."""
    store = terms_store("milvus", tmp_path)
    assert isinstance(store, MilvusVectorStore)
    build(store)
    asked: list[dict[str, object]] = []
    search = store.client.search

    def recorded(*args: object, **kwargs: object) -> object:
        asked.append(kwargs)
        found = search(*args, **kwargs)
        assert all(set(hit["entity"]) <= {"key"} for hit in found[0])
        return found

    store.client.search = recorded  # type: ignore[method-assign]
    store.search(np.ones(DIM, np.float32) / 8.0, 5)
    keys_for(store, "engine")
    assert [(a["anns_field"], a["output_fields"]) for a in asked] == [
        ("vector", ["key"]), ("terms", ["key"])]
    store.close()


def test_a_qdrant_store_finds_points_by_payload_key_and_never_returns_vectors(
        tmp_path: Path) -> None:
    store = terms_store("qdrant", tmp_path)
    build(store)
    key = f"t1#{built_digest(1)}.s0"
    [point] = store.client.retrieve("cgt", ids=[key_uuid(key)], with_payload=True,
                                    with_vectors=True)
    # the id is the key's UUID, the payload the key, chunk id and metadata; the rows are
    # compared by dot product, and the first row carries its unit's terms
    assert point.payload == {KEY_FIELD: key, "chunk_id": "t1",
                             "metadata": {"n": 1, "chunk_id": "t1", "part": 0}}
    assert np.isclose(np.linalg.norm(point.vector["vector"]), 1.0)
    assert sorted(point.vector["terms"].indices) == sorted(
        term_dimension(t) for t in ("charles", "babbage", "designed", "analytical",
                                    "engine", "mechanical"))
    found = store.client.query_points("cgt", query=point.vector["vector"], using="vector",
                                      limit=1, with_payload=[KEY_FIELD])
    assert found.points[0].vector is None and store.search(
        np.asarray(point.vector["vector"], np.float32), 1) == [key]
    store.close()


def test_a_qdrant_store_is_told_where_it_is(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"a URL, a folder, ':memory:' or a QdrantClient"):
        QdrantStore(42)
    with pytest.raises(ValueError, match=r"api_key is for a Qdrant server's URL"):
        QdrantStore(str(tmp_path / "q"), api_key="secret")
    with pytest.raises(ValueError, match=r"collection must be a non-empty str"):
        QdrantStore(":memory:", "")
    store = QdrantStore(":memory:")
    assert store.list_keys() == [] and store.search(np.ones(DIM, np.float32), 3) == []
    assert store.read_marker() is None
    store.close()


# ------------------------------------------------------------------ write-through
@loopback
@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("knobs", [{}, {"chunk_similarity": "mean"},
                                   {"chunk_similarity": "direct", "unit_tokens": 12}])
def test_an_engine_retrieves_what_the_in_process_index_retrieves(
        tmp_path: Path, knobs: dict[str, object], kind: str) -> None:
    # two candidates per query, so which rows the backend proposes decides the ranking;
    # on a few rows both backends propose the truly closest ones
    store = engine(kind, tmp_path)
    engine_index = build(store, candidates=2, **knobs)
    local = build(vector_index="hnsw", candidates=2, **knobs)
    assert engine_index.stats()["vector_index"] == f"store:{type(store).__name__}"
    assert contexts(engine_index) == contexts(local)
    assert len(set(store.list_keys())) == len(engine_index.state.stored_rows())
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_adds_and_deletes_write_through_to_the_store(tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    index = build(store)
    assert set(store.list_keys()) == built_keys()
    index.delete(["t1", "t3"])
    left = [0, 2, 4]
    assert set(store.list_keys()) == built_keys(left)
    new = "Alan Turing described a universal machine. It could compute anything computable."
    index.add([new], ids=["t9"])
    assert set(store.list_keys()) == built_keys(left) | expected_keys(["t9"], [new])
    assert index.vector_store_repair is not None
    assert (index.vector_store_repair.written, index.vector_store_repair.deleted) == (0, 0)
    store.close()


def stored_metadata(store: Engine, chunk_id: str) -> list[dict[str, object]]:
    """The metadata of every row the engine holds for ``chunk_id``, read by its own query."""
    if isinstance(store, MilvusVectorStore):
        rows = store.client.query("cg", filter=f'chunk_id == "{chunk_id}"',
                                  output_fields=["metadata"])
        return [r["metadata"] for r in rows]
    from qdrant_client import models

    points, _ = store.client.scroll("cg", limit=100, with_payload=True, scroll_filter=models.Filter(
        must=[models.FieldCondition(key="chunk_id", match=models.MatchValue(value=chunk_id))]))
    return [p.payload["metadata"] for p in points]


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_metadata_update_rewrites_the_chunks_rows(tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    index = build(store)
    index.add([TEXTS[2]], ids=["t2"], metadatas=[{"n": 20, "source": "new"}])
    rows = stored_metadata(store, "t2")
    assert sorted(r["part"] for r in rows) == [0, 1]  # type: ignore[type-var]
    assert all(r["n"] == 20 and r["source"] == "new" for r in rows)
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_load_repairs_rows_written_or_deleted_after_the_last_save(
        tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    index = build(store)
    index.save(str(tmp_path / "idx"))
    index.add(["Alan Turing described a universal machine."], ids=["t9"])  # not saved
    index.delete(["t0"])  # not saved either
    assert "t0" not in {parse_key(k)[0] for k in store.list_keys()}  # type: ignore[index]
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM),
                                    vector_store=store)
    # t9's one sentence row deleted, t0's two rows written again
    assert loaded.vector_store_repair is not None
    assert (loaded.vector_store_repair.written, loaded.vector_store_repair.deleted) == (2, 1)
    assert loaded.vector_store_repair.listed  # the store's generation was not the save's
    assert set(store.list_keys()) == built_keys()
    assert contexts(loaded) == contexts(build(vector_index="hnsw"))
    store.close()


CHILD = textwrap.dedent("""
    import os, sys, time
    from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
    from tests.shared_core.search.test_external import engine
    from tests.shared_core.test_store import TEXTS
    from pathlib import Path
    folder = sys.argv[1]
    store = engine(sys.argv[2], Path(folder))
    index = ConceptGraphIndex.from_texts(TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))],
                                         embedder=HashingEmbedder(64), vector_store=store)
    index.save(os.path.join(folder, "idx"))
    index.{step}
    print("written", flush=True)
    time.sleep(600)  # killed here: the store holds the step, the save does not
    index.save(os.path.join(folder, "idx"))
""")


def killed_once_it_says(line: bytes, code: str, *args: str) -> None:
    """Run ``code`` in a child Python with ``args``; once it prints ``line``, kill it with
    SIGKILL, with its session (Milvus Lite's server goes with it)."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             start_new_session=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == line
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize(("step", "written", "deleted"), [
    ('add(["Alan Turing described a universal machine."], ids=["t9"])', 0, 1),
    ('delete(["t2", "t4"])', 4, 0),
    # metadata alone: t2's rows under their saved keys again, the unsaved ones deleted
    ('add([TEXTS[2]], ids=["t2"], metadatas=[{"n": 20}])', 2, 2),
])
def test_a_process_killed_between_the_store_write_and_the_save_is_repaired(
        tmp_path: Path, step: str, written: int, deleted: int, kind: str) -> None:
    killed_once_it_says(b"written", CHILD.replace("{step}", step), str(tmp_path), kind)
    store = engine(kind, tmp_path)  # Qdrant's local mode: its folder unlocked by the kill
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM),
                                    vector_store=store)
    assert loaded.vector_store_repair is not None
    assert (loaded.vector_store_repair.written, loaded.vector_store_repair.deleted) == (
        written, deleted)
    assert loaded.vector_store_repair.listed
    assert set(store.list_keys()) == expected_keys(IDS, TEXTS)
    assert sorted(stored_metadata(store, "t2"), key=str) == [  # the saved metadata: none
        {"chunk_id": "t2", "part": 0}, {"chunk_id": "t2", "part": 1}]
    assert contexts(loaded) == contexts(build(vector_index="hnsw"))
    store.close()


# ------------------------------------------------------------------ bad input
@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_store_holding_other_ids_is_refused_and_left_alone(tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    vector = np.ones((1, DIM), dtype=np.float32) / np.sqrt(DIM)
    store.upsert(["their-doc-1"], vector, ["theirs"], [{"chunk_id": "x"}])
    with pytest.raises(ValueError, match=r"1 ids that are not a conceptgraph index's.*"
                                         "their-doc-1.*store or collection of its own"):
        build(store)
    assert list(store.list_keys()) == ["their-doc-1"]
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_collection_of_another_layout_is_refused(tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    if isinstance(store, MilvusVectorStore):
        store.client.create_collection("theirs", dimension=DIM)
    else:
        from qdrant_client import models

        store.client.create_collection("theirs", vectors_config=models.VectorParams(
            size=DIM, distance=models.Distance.COSINE))  # one unnamed vector
        store.client.create_collection("cosine", vectors_config={"vector": models.VectorParams(
            size=DIM, distance=models.Distance.COSINE)})
        with pytest.raises(ValueError, match=r"'cosine' compares by .*not by dot product"):
            reopened(store, "cosine")
    with pytest.raises(ValueError, match=r"'theirs' exists with .*not a conceptgraph"):
        reopened(store, "theirs")
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_store_of_another_dimension_fails_the_add_and_changes_nothing(
        tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    build(store).delete(IDS)  # the collection now exists, empty, with 64 dimensions
    index = ConceptGraphIndex(HashingEmbedder(32), vector_store=store)
    with pytest.raises(ValueError, match=r"holds 64-dimensional vectors, got 32"):
        index.add(TEXTS, ids=IDS)
    assert len(index) == 0 and list(store.list_keys()) == []
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_write_failing_midway_is_undone(tmp_path: Path, kind: str) -> None:
    # 2,100 two-sentence chunks: the rows go in two upserts, and the second fails (Milvus:
    # its last chunk's id is too long for the key field; Qdrant: the server refuses the
    # request holding it, as a full disk would): the first is deleted again
    store = engine(kind, tmp_path)
    index = build(store)
    texts = [f"Chunk {i} names item{i}. It has a second sentence." for i in range(2100)]
    ids = [f"n{i:05d}" for i in range(2099)] + ["z" * 5000]
    if isinstance(store, QdrantStore):
        upsert = store.client.upsert

        def refused(*args: object, **kwargs: object) -> object:
            if any(p.payload.get("chunk_id") == ids[-1] for p in kwargs.get(
                    "points", args[1] if len(args) > 1 else [])):  # type: ignore[union-attr]
                raise RuntimeError("no space left on device")
            return upsert(*args, **kwargs)

        store.client.upsert = refused  # type: ignore[method-assign]
    with pytest.raises((ValueError, RuntimeError),
                       match=r"chunk id too long for Milvus|no space left on device"):
        index.add(texts, ids=ids)
    assert len(index) == len(TEXTS)
    assert set(store.list_keys()) == built_keys()
    assert store.read_marker() == ""  # cleared: the next open lists the store
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_load_after_a_clean_save_trusts_the_store_generation(tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    index = build(store)
    index.delete(["t4"])
    index.save(str(tmp_path / "idx"))
    generation = index.state.store_generation
    assert generation is not None and store.read_marker() == generation
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM),
                                    vector_store=store)
    repair = loaded.vector_store_repair
    assert repair is not None and not repair.listed and (repair.written, repair.deleted) == (0, 0)
    assert loaded.state.store_generation == generation
    assert contexts(loaded) == contexts(index)
    # each update moves the generation: the save before it no longer matches the store
    loaded.add(["Alan Turing described a universal machine."], ids=["t9"])
    assert store.read_marker() not in ("", generation)
    again = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM),
                                   vector_store=store)
    assert again.vector_store_repair is not None and again.vector_store_repair.listed
    assert (again.vector_store_repair.written, again.vector_store_repair.deleted) == (0, 1)
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_tampered_store_generation_is_refused_or_listed(tmp_path: Path, kind: str) -> None:
    from shared_core.store import CorruptIndexError

    store = engine(kind, tmp_path)
    build(store).save(str(tmp_path / "idx"))
    manifest_path = saved_manifest(tmp_path / "idx")
    manifest = json.loads(manifest_path.read_text())
    manifest["vector_store_generation"] = "0" * 32  # well-formed, but not the store's
    manifest_path.write_text(json.dumps(manifest))
    loaded = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM),
                                    vector_store=store)
    assert loaded.vector_store_repair is not None and loaded.vector_store_repair.listed
    manifest["vector_store_generation"] = "not hex"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match=r"'vector_store_generation' must be 32 hex"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), vector_store=store)
    store.close()


def saved_manifest(path: Path) -> Path:
    from shared_core.store import index_folder

    return index_folder(path) / "manifest.json"


def without_store_keys(path: Path, value: object = None) -> None:
    """Make the save at ``path`` one from before 'vector_store_keys' (or give it ``value``)."""
    manifest = json.loads(saved_manifest(path).read_text())
    manifest.pop("vector_store_keys", None)
    if value is not None:
        manifest["vector_store_keys"] = value
    saved_manifest(path).write_text(json.dumps(manifest))


@loopback
@pytest.mark.parametrize("kind", TERM_ENGINES)
def test_a_save_from_before_metadata_keys_is_rekeyed_by_its_writer(
        tmp_path: Path, kind: str) -> None:
    # an older conceptgraph keyed every row by its chunk's text alone: the store holds
    # those keys, with the save's generation, and the save has no 'vector_store_keys'
    store = engine(kind, tmp_path)
    index = build(store)
    index.save(str(tmp_path / "idx"))
    corpus = index.state.corpus
    text_keyed = StoredRows.of(corpus.with_metadata(dict.fromkeys(range(len(corpus)), "{}")),
                               None)
    store.delete(sorted(store.list_keys()))
    text_keyed.write(store, range(len(corpus)))
    without_store_keys(tmp_path / "idx")
    load = functools.partial(ConceptGraphIndex.load, str(tmp_path / "idx"),
                             HashingEmbedder(DIM), vector_store=store)
    with pytest.raises(ValueError, match=r"saved by an older conceptgraph.*Load it once with "
                                         "its vectors"):
        load(vectors_in_store=True)  # a replica would not find the rows of chunks with metadata
    loaded = load()  # the store's generation is the save's, yet it is listed and rekeyed
    assert loaded.vector_store_repair is not None and loaded.vector_store_repair.listed
    assert (loaded.vector_store_repair.written, loaded.vector_store_repair.deleted) == (10, 10)
    assert set(store.list_keys()) == built_keys()
    assert contexts(loaded) == contexts(build(vector_index="hnsw"))
    loaded.save(str(tmp_path / "idx"))
    assert json.loads(saved_manifest(tmp_path / "idx").read_text())["vector_store_keys"] == 2
    assert contexts(load(vectors_in_store=True)) == contexts(loaded)
    store.close()


@loopback
def test_a_save_from_before_metadata_keys_without_metadata_is_not_listed(
        tmp_path: Path) -> None:
    from shared_core.store import CorruptIndexError

    store = engine("qdrant", tmp_path)
    ConceptGraphIndex.from_texts(TEXTS, ids=IDS, embedder=HashingEmbedder(DIM),
                                 vector_store=store).save(str(tmp_path / "idx"))
    without_store_keys(tmp_path / "idx")  # its keys are those of today: text alone
    load = functools.partial(ConceptGraphIndex.load, str(tmp_path / "idx"),
                             HashingEmbedder(DIM), vector_store=store)
    loaded = load()
    assert loaded.vector_store_repair is not None and not loaded.vector_store_repair.listed
    assert contexts(load(vectors_in_store=True)) == contexts(loaded)
    without_store_keys(tmp_path / "idx", 3)
    with pytest.raises(CorruptIndexError, match=r"'vector_store_keys' must be 2, got 3"):
        load()
    store.close()


def test_a_vector_store_must_implement_the_protocol() -> None:
    with pytest.raises(TypeError, match=r"VectorStoreBackend protocol .*got dict"):
        ConceptGraphIndex(HashingEmbedder(DIM), vector_store={})  # type: ignore[arg-type]


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_reconfiguring_to_other_rows_than_the_store_holds_raises(
        tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    index = build(store)
    with pytest.raises(ValueError, match=r"compares units by other vectors than the vector "
                                         "store holds"):
        index.reconfigured(chunk_similarity="mean")
    assert contexts(index.reconfigured(top_k=3)) != []  # search knobs keep the store
    store.close()


@loopback
def test_rescoring_from_codes_is_refused_where_a_store_scores_the_rows(tmp_path: Path) -> None:
    store = engine("qdrant", tmp_path)
    built = build(store, rescore_from="codes")  # the writer holds its rows: it codes them
    assert contexts(built) != []
    built.save(str(tmp_path / "idx"))
    replica = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM),
                                     vector_store=store, vectors_in_store=True)
    assert replica.config.rescore_from == "codes"
    with pytest.raises(ValueError, match="rows are in a vector store, which scores them"):
        replica.retrieve(QUERIES[0])
    with pytest.raises(ValueError, match="rows are in a vector store, which scores them"):
        replica.warm()
    assert contexts(replica.reconfigured(rescore_from="vectors")) == contexts(
        built.reconfigured(rescore_from="vectors"))
    store.close()


def test_stored_rows_of_an_empty_index_are_empty() -> None:
    rows = StoredRows.of(ConceptGraphIndex(HashingEmbedder(DIM)).state.corpus, None)
    assert len(rows) == 0 and rows.keys_of([]) == [] and rows.rows_of([]).tolist() == []


# ------------------------------------------------------------------ a replica's vectors
def replica_of(path: Path, store: VectorStoreBackend) -> ConceptGraphIndex:
    """The save at ``path`` opened as a read-only replica over ``store``."""
    return ConceptGraphIndex.load(str(path), HashingEmbedder(DIM), vector_store=store,
                                  vectors_in_store=True)


def record_vector_reads(store: Engine) -> list[int]:
    """How many rows each request that reads vectors back from the engine returns (the
    engine's own client, recorded: a Milvus ``query`` for vectors, a Qdrant ``retrieve``)."""
    sent: list[int] = []
    client = store.client
    name = "query" if isinstance(store, MilvusVectorStore) else "retrieve"
    read = getattr(client, name)

    def recorded(*args: object, **kwargs: object) -> object:
        found = read(*args, **kwargs)
        if name == "retrieve" or "vector" in kwargs.get("output_fields", ()):  # type: ignore[operator]
            sent.append(len(found))
        return found

    setattr(client, name, recorded)
    return sent


@loopback
@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("knobs", [{}, {"unit_tokens": 12}])
def test_a_replica_reads_its_vectors_from_the_store_and_answers_as_the_writer(
        tmp_path: Path, kind: str, knobs: dict[str, object]) -> None:
    from shared_core.search.external import EngineRows
    from shared_core.store import index_folder

    store = engine(kind, tmp_path)
    writer = build(store, **knobs)
    writer.save(str(tmp_path / "idx"))
    # the replica needs no file of sentence vectors: delete it from the save
    (index_folder(tmp_path / "idx") / "sentence_embeddings.npy").unlink()
    with pytest.raises(Exception, match=r"sentence_embeddings.npy"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), vector_store=store)
    replica = replica_of(tmp_path / "idx", store)
    assert replica.is_replica and not writer.is_replica
    rows = replica.state.corpus.sentence_vectors
    assert isinstance(rows, EngineRows)
    held = np.asarray(writer.state.corpus.sentence_vectors)
    read_back = rows[np.arange(len(rows))]
    assert held.dtype == read_back.dtype == np.float32
    assert read_back.tobytes() == held.tobytes()  # every bit of every row
    rows.cached_rows = 0  # the queries below read from the engine again
    reads = record_vector_reads(store)
    assert contexts(replica) == contexts(writer)
    assert reads and all(n > 0 for n in reads)  # the rows came from the engine
    assert replica.stats()["chunks"] == len(TEXTS)
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_replica_is_read_only(tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    build(store).save(str(tmp_path / "idx"))
    replica = replica_of(tmp_path / "idx", store)
    before = sorted(store.list_keys())
    for step in (lambda: replica.add(["Alan Turing described a machine."], ids=["t9"]),
                 lambda: replica.delete(["t0"]),
                 lambda: replica.save(str(tmp_path / "other"))):
        with pytest.raises(ValueError, match=r"a read-only replica"):
            step()
    assert sorted(store.list_keys()) == before and len(replica) == len(TEXTS)
    assert not (tmp_path / "other").exists()
    # a reconfigured replica is one too: its rows are still the store's
    with pytest.raises(ValueError, match=r"a read-only replica"):
        replica.reconfigured(top_k=3).delete(["t0"])
    # and it derives no graph nor KNN selection: they would read every vector from the
    # store; the concept selection reads none
    reads = record_vector_reads(store)
    with pytest.raises(ValueError, match=r"method='knn' compares every chunk's mean vector"):
        replica.select(method="knn")
    assert replica.select().kept_ids == build().select().kept_ids
    with pytest.raises(ValueError, match=r"changing theta_co derives the graph again from "
                                         "every sentence vector"):
        replica.reconfigured(theta_co=1)
    assert reads == []
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_replica_refuses_a_store_the_writer_changed_after_the_save(
        tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    writer = build(store)
    writer.save(str(tmp_path / "idx"))
    writer.add(["Alan Turing described a universal machine."], ids=["t9"])
    with pytest.raises(ValueError, match=r"generation is '[0-9a-f]{32}', not the '[0-9a-f]{32}' "
                                         r"this save was made with.*cannot repair"):
        replica_of(tmp_path / "idx", store)
    assert "t9" in {parse_key(k)[0] for k in store.list_keys()}  # type: ignore[index]
    writer.save(str(tmp_path / "idx"))  # the writer's latest save: the replica follows it
    replica = replica_of(tmp_path / "idx", store)
    assert "t9" in replica and contexts(replica) == contexts(writer)
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_replica_query_that_needs_rows_the_writer_deleted_raises(
        tmp_path: Path, kind: str) -> None:
    from shared_core.search.external import MissingRowsError

    store = engine(kind, tmp_path)
    writer = build(store)
    writer.save(str(tmp_path / "idx"))
    replica = replica_of(tmp_path / "idx", store)
    writer.delete(["t1", "t2"])  # the engine's rows of both go; the replica still lists them
    if kind == "milvus-server":
        # a replica's reads are session reads, which on Milvus 2.3 do not wait for this
        # client's deletes (the server returns no timestamp for them): until the server
        # has applied one, a read still returns the rows as the replica's save has them
        store.read_marker()  # a strong read: from now on every read sees the delete
    # BM25 and concept evidence (the replica's own postings) find t1 and t2 for these
    # words, and their cosines need rows the engine no longer holds
    with pytest.raises(MissingRowsError, match=r"does not hold \d+ of the \d+ rows asked for.*"
                                               "load the writer's latest save again"):
        replica.retrieve("Charles Babbage designed the analytical engine")
    store.close()


class StoreWithout:
    """A real engine's store that lacks one method (``hidden``): a store of another kind,
    for what a load refuses. The store protocol's methods are its own (a protocol check
    reads them from the class), and any other attribute is the engine's."""

    hidden = ""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        if name == self.hidden:
            raise AttributeError(name)
        return getattr(self.inner, name)

    def upsert(self, *args: object) -> None: ...
    def delete(self, keys: object) -> None: ...
    def list_keys(self) -> list[str]: return []
    def flush(self) -> None: ...
    def read_marker(self) -> str | None: return self.inner.read_marker()
    def write_marker(self, value: str) -> None: ...
    def search(self, query: object, k: int) -> list[str]: return []


@loopback
def test_a_replica_needs_a_store_that_returns_its_vectors(tmp_path: Path) -> None:
    store = engine("qdrant", tmp_path)
    build(store).save(str(tmp_path / "idx"))
    load = ConceptGraphIndex.load
    path, embedder = str(tmp_path / "idx"), HashingEmbedder(DIM)
    with pytest.raises(ValueError, match=r"vectors_in_store=True reads the vectors from "
                                         "vector_store"):
        load(path, embedder, vectors_in_store=True)
    with pytest.raises(ValueError, match=r"verify=True derives the concept vectors"):
        load(path, embedder, vector_store=store, vectors_in_store=True, verify=True)

    class KeysOnly(StoreWithout):
        """A store that keeps rows and finds them, but never gives a vector back."""

        hidden = "vectors_of"

    with pytest.raises(TypeError, match=r"KeysOnly does not return the vectors it holds"):
        load(path, embedder, vector_store=KeysOnly(store),  # type: ignore[arg-type]
             vectors_in_store=True)
    store.close()
    build().save(str(tmp_path / "plain_idx"))  # saved without a store
    with pytest.raises(ValueError, match=r"records no vector store generation: it was made "
                                         "without a store"):
        load(str(tmp_path / "plain_idx"), embedder, vector_store=QdrantStore(":memory:"),
             vectors_in_store=True)
    (tmp_path / "mean").mkdir()
    other = engine("milvus", tmp_path / "mean")
    build(other, chunk_similarity="mean").save(str(tmp_path / "mean_idx"))
    with pytest.raises(ValueError, match=r"compares units by 'mean' vectors.*"
                                         "chunk_similarity='max'"):
        load(str(tmp_path / "mean_idx"), embedder, vector_store=other, vectors_in_store=True)
    other.close()


def test_engine_rows_are_read_by_key_and_never_whole(tmp_path: Path) -> None:
    from shared_core.search.external import EngineRows

    store = QdrantStore(":memory:")
    index = build(store)
    corpus = index.state.corpus
    rows = EngineRows(store, corpus.ids, corpus.texts, corpus.metadata,
                      corpus.sentence_offsets, DIM)
    assert len(rows) == 10 and rows.shape == (10, DIM) and rows.dtype == np.float32
    # sentence 3 is chunk t1's second: its key names t1's text and part 1
    assert rows.keys_of(np.array([3, 0])) == [f"t1#{built_digest(1)}.s1",
                                             f"t0#{built_digest(0)}.s0"]
    held = np.asarray(corpus.sentence_vectors)
    assert np.array_equal(rows[np.array([3, 0, 3])], held[[3, 0, 3]])  # the same bits
    assert np.array_equal(rows[2:5], held[2:5]) and np.array_equal(rows[-1], held[-1])
    assert rows[np.zeros(0, dtype=np.int64)].shape == (0, DIM)
    with pytest.raises(IndexError, match=r"a row outside the 10 sentence rows"):
        rows[np.array([10])]
    with pytest.raises(ValueError, match=r"never scans them all"):
        rows @ np.ones(DIM, np.float32)
    with pytest.raises(ValueError, match=r"never reads them all"):
        np.asarray(rows)
    # the rows fetched last are kept: read again, they cost no request; past cached_rows
    # the first fetched go first
    sent = record_vector_reads(store)
    rows = EngineRows(store, corpus.ids, corpus.texts, corpus.metadata,
                      corpus.sentence_offsets, DIM, cached_rows=4)
    rows[np.array([0, 1, 2])]
    assert np.array_equal(rows[np.array([2, 0, 2, 1])], held[[2, 0, 2, 1]]) and sent == [3]
    rows[np.array([5, 6])]  # held 0, 1, 2 (fetched in that order), then 5 and 6: 0 goes
    assert sent == [3, 2]
    rows[np.array([1, 0])]
    assert sent == [3, 2, 1]
    rows.cached_rows = 0  # every read goes to the store
    rows[np.array([0])]
    rows[np.array([0])]
    assert sent == [3, 2, 1, 1, 1]
    rows.cached_rows = 2  # and rows are kept again, in a ring of the new size
    assert np.array_equal(rows[np.array([7, 8, 9])], held[[7, 8, 9]])
    rows[np.array([8, 9])]
    assert sent == [3, 2, 1, 1, 1, 3]
    with pytest.raises(TypeError, match=r"dict does not return the vectors it holds"):
        EngineRows({}, corpus.ids, corpus.texts, corpus.metadata, corpus.sentence_offsets,  # type: ignore[arg-type]
                   DIM)
    store.close()


@pytest.mark.parametrize("terms", [False, True])
@pytest.mark.parametrize("knobs", [{}, {"unit_tokens": 100}])
def test_a_replica_answers_the_sample_corpus_as_the_writer(
        tmp_path: Path, knobs: dict[str, object], terms: bool) -> None:
    """The shipped 300-passage sample and its questions: the candidate path with its rank
    samples, the walk over short units, every view (their units found in the engine too,
    with term postings): a replica reading its rows from Qdrant returns the writer's
    contexts to the bit."""
    import json

    sample = Path(__file__).parents[3] / "examples" / "data" / "musique_sample"
    records = [json.loads(line) for line in (sample / "corpus.jsonl").open()]
    questions = [json.loads(line)["question"]
                 for line in (sample / "questions.jsonl").open()][:25]
    store = QdrantStore(str(tmp_path / "qdrant"), "cg", term_postings=terms)
    writer = ConceptGraphIndex.from_texts(
        [r["text"] for r in records], ids=[r["id"] for r in records],
        embedder=HashingEmbedder(DIM), vector_store=store,
        config=ConceptGraphConfig(candidates=20, **knobs))  # type: ignore[arg-type]
    writer.save(str(tmp_path / "idx"))
    replica = replica_of(tmp_path / "idx", store)

    def answers(index: ConceptGraphIndex) -> list[list[tuple[str, float]]]:
        return [[(c.id, c.score) for c in index.retrieve(q).chunks] for q in questions]

    assert answers(replica) == answers(writer)
    store.close()


# ------------------------------------------------------------------ rows the store scores
def record_score_requests(store: Engine) -> list[int]:
    """How many rows each filtered search that scores rows asks for (recorded at the
    engine's own client: a Milvus ``search`` with a filter, a Qdrant ``query_points``
    with one)."""
    sent: list[int] = []
    client = store.client
    name = "search" if isinstance(store, MilvusVectorStore) else "query_points"
    search = getattr(client, name)

    def recorded(*args: object, **kwargs: object) -> object:
        if kwargs.get("filter") or kwargs.get("query_filter"):
            sent.append(int(kwargs["limit"]))  # type: ignore[call-overload]
        return search(*args, **kwargs)

    setattr(client, name, recorded)
    return sent


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_an_engine_scores_the_rows_it_holds_by_key(tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    q = np.random.default_rng(0).standard_normal(DIM).astype(np.float32)
    assert store.scores_of(["a#0123456789ab.s0"], q).tolist() != [0.0]  # no collection yet
    assert np.isnan(store.scores_of(["a#0123456789ab.s0"], q)).all()
    index = build(store)
    rows = index.state.stored_rows()
    keys = rows.keys_of(range(len(TEXTS)))
    held = np.asarray(index.state.corpus.sentence_vectors)
    gone = row_key("t9", text_digest("never written"), "s", 0)
    asked = [keys[3], gone, keys[0], keys[3], keys[9]]  # a repeat, and a key not held
    scores = store.scores_of(asked, q)
    assert scores.dtype == np.float32 and scores.shape == (5,)
    assert np.isnan(scores[1])
    # the engine's own float32 sums: the cosines held here, up to rounding
    np.testing.assert_allclose(scores[[0, 2, 3, 4]], held[[3, 0, 3, 9]] @ q, rtol=0, atol=2e-6)
    assert scores[0] == scores[3]
    assert store.scores_of([], q).shape == (0,)
    # the nearest rows come with the same scores
    nearest = store.search_scored(q, 3)
    assert [key for key, _ in nearest] == store.search(q, 3)
    at = {key: i for i, key in enumerate(keys)}
    np.testing.assert_allclose([score for _, score in nearest],
                               held[[at[key] for key, _ in nearest]] @ q, rtol=0, atol=2e-6)
    assert store.search_scored(q, 0) == []
    store.close()


ODD_IDS = ["it's", 'say "hi"', "back\\slash", "café", "line\nbreak", "cr\rtab\t", "ctl\x01",
           "emoji\U0001f600"]


@loopback
@pytest.mark.parametrize("kind", ["milvus", "milvus-server"])
def test_milvus_reads_scores_lists_and_deletes_rows_of_any_chunk_id(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """pymilvus's own ``get``, ``delete`` and ``query_iterator`` put keys between quotes
    unescaped, so an id with an apostrophe, a backslash or a line break broke them; the
    store's filters quote any key. Keys are listed three a page here, so that pages end
    on those ids."""
    from shared_core.search import milvus

    monkeypatch.setattr(milvus, "LIST_BATCH", 3)
    store = engine(kind, tmp_path)
    texts = (TEXTS * 2)[:len(ODD_IDS)]
    index = ConceptGraphIndex.from_texts(texts, ids=ODD_IDS, embedder=HashingEmbedder(DIM),
                                         vector_store=store)
    keys = [row_key(i, text_digest(t), "s", 0) for i, t in zip(ODD_IDS, texts, strict=True)]
    at = [index.state.corpus.position[i] for i in ODD_IDS]  # the corpus sorts its ids
    held = np.asarray(index.state.corpus.sentence_vectors)[index.state.stored_rows().first[at]]
    assert store.vectors_of(keys).tobytes() == held.tobytes()
    q = np.ones(DIM, np.float32)
    np.testing.assert_allclose(store.scores_of(keys, q), held @ q, rtol=0, atol=2e-6)
    listed = list(store.list_keys())
    assert listed == sorted(listed) and set(listed) == expected_keys(ODD_IDS, texts)
    index.delete(ODD_IDS[:4])
    assert sorted(parse_key(k)[0] for k in store.list_keys()  # type: ignore[index]
                  ) == sorted(ODD_IDS[4:] * 2)
    store.close()


def scored_replica_of(path: Path, store: VectorStoreBackend) -> ConceptGraphIndex:
    """The save at ``path`` opened as a replica whose store scores its rows."""
    return ConceptGraphIndex.load(str(path), HashingEmbedder(DIM), vector_store=store,
                                  vectors_in_store=True, scores_in_store=True)


def same_answers(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> bool:
    """The same chunks in the same order, with scores equal up to float32 rounding."""
    return ([[c for c, _ in q] for q in a] == [[c for c, _ in q] for q in b]
            and np.allclose([s for q in a for _, s in q], [s for q in b for _, s in q],
                            rtol=1e-5, atol=1e-6))


@loopback
@pytest.mark.parametrize("kind", ENGINES)
# two candidates a view: the engine's nearest search finds four of the ten rows, so the
# pool's other rows are scored by filtered searches
@pytest.mark.parametrize("knobs", [{"candidates": 2}, {"candidates": 2, "unit_tokens": 12}])
def test_a_replica_whose_store_scores_its_rows_reads_none_of_them(
        tmp_path: Path, kind: str, knobs: dict[str, object]) -> None:
    store = engine(kind, tmp_path)
    writer = build(store, **knobs)
    writer.save(str(tmp_path / "idx"))
    replica = scored_replica_of(tmp_path / "idx", store)
    assert replica.is_replica
    rows = replica.state.corpus.sentence_vectors
    rows.cached_rows = 0  # type: ignore[union-attr]
    first, scored = record_vector_reads(store), record_score_requests(store)
    assert same_answers(contexts(replica), contexts(writer))
    # the first queries read the rank sample's rows (the same units for every query,
    # gathered once and kept with the state), where ranks beyond the top are sampled
    assert first in ([], [10])
    assert all(0 < n <= 10 for n in scored)
    # at whole chunks the pool holds rows the nearest search did not find (at sentence
    # units, here, the nearest rows already are the pool's)
    assert scored or "unit_tokens" in knobs
    # a query's rows are scored once: the nearest rows come with their scores, and the
    # pool's sentences hold them
    assert sum(scored) < 10 * len(QUERIES)
    reads = record_vector_reads(store)
    assert same_answers(contexts(replica), contexts(writer))
    assert reads == []  # after that, not one vector comes back
    store.close()


@loopback
def test_a_replica_reads_the_rows_its_store_does_not_score(tmp_path: Path) -> None:
    """An engine whose search returns only some of the rows asked for (an index still
    being built does): the rest are read and scored here, and the answers stand."""
    from shared_core.search.external import EngineRows

    store = engine("qdrant", tmp_path)
    writer = build(store, candidates=2)
    writer.save(str(tmp_path / "idx"))
    scores_of = store.scores_of

    def every_other(keys: list[str], query: np.ndarray) -> np.ndarray:
        scores = scores_of(keys, query)
        scores[::2] = np.nan  # the engine did not return these
        return scores

    store.scores_of = every_other  # type: ignore[method-assign]
    replica = scored_replica_of(tmp_path / "idx", store)
    rows = replica.state.corpus.sentence_vectors
    assert isinstance(rows, EngineRows)
    rows.cached_rows = 0
    reads = record_vector_reads(store)
    assert same_answers(contexts(replica), contexts(writer))
    assert reads and all(n > 0 for n in reads)
    store.close()


@loopback
def test_scores_in_store_needs_a_replica_over_a_store_that_scores(tmp_path: Path) -> None:
    from shared_core.search.external import EngineRows

    store = engine("qdrant", tmp_path)
    build(store).save(str(tmp_path / "idx"))
    load, path, embedder = ConceptGraphIndex.load, str(tmp_path / "idx"), HashingEmbedder(DIM)
    with pytest.raises(ValueError, match=r"scores_in_store=True is for a replica"):
        load(path, embedder, vector_store=store, scores_in_store=True)
    with pytest.raises(TypeError, match=r"scores_in_store must be a bool, got str"):
        load(path, embedder, vector_store=store, vectors_in_store=True,
             scores_in_store="yes")  # type: ignore[arg-type]

    class RowsOnly(StoreWithout):
        """A store that returns its rows but does not score them."""

        hidden = "scores_of"

        def vectors_of(self, keys: list[str]) -> np.ndarray: return self.inner.vectors_of(keys)

    rows_only = RowsOnly(store)
    with pytest.raises(TypeError, match=r"RowsOnly does not score the rows it holds"):
        load(path, embedder, vector_store=rows_only,  # type: ignore[arg-type]
             vectors_in_store=True, scores_in_store=True)
    replica = load(path, embedder, vector_store=rows_only,  # type: ignore[arg-type]
                   vectors_in_store=True)
    rows = replica.state.corpus.sentence_vectors
    assert isinstance(rows, EngineRows) and not rows.scores_in_store
    with pytest.raises(TypeError, match=r"RowsOnly does not score the rows it holds"):
        rows.scores_in_store = True
    store.close()


@pytest.fixture(scope="module")
def sample_rows() -> tuple[QdrantStore, ConceptGraphIndex]:
    store = QdrantStore(":memory:")
    return store, build(store)


@settings(max_examples=60, deadline=None)
@given(reads=st.lists(st.lists(st.integers(-10, 9), max_size=12), min_size=1, max_size=6),
       kept=st.integers(0, 12))
def test_engine_rows_always_read_the_rows_held(
        sample_rows: tuple[QdrantStore, ConceptGraphIndex], reads: list[list[int]],
        kept: int) -> None:
    """Any run of reads (repeats, negative positions, a ring smaller or larger than what
    is read) gives the rows the index holds, to the bit."""
    from shared_core.search.external import EngineRows

    store, index = sample_rows
    corpus = index.state.corpus
    held = np.asarray(corpus.sentence_vectors)
    rows = EngineRows(store, corpus.ids, corpus.texts, corpus.metadata,
                      corpus.sentence_offsets, DIM, cached_rows=kept)
    for positions in reads:
        assert np.array_equal(rows[np.array(positions, dtype=np.int64)],
                              held[np.array(positions, dtype=np.int64)])


@settings(max_examples=60, deadline=None)
@given(reads=st.lists(st.tuples(st.lists(st.integers(-10, 9), max_size=12),
                                st.integers(0, 2)), min_size=1, max_size=6),
       kept=st.integers(0, 12))
def test_engine_rows_scored_in_the_store_are_the_rows_held_times_the_query(
        sample_rows: tuple[QdrantStore, ConceptGraphIndex],
        reads: list[tuple[list[int], int]], kept: int) -> None:
    """Any run of scorings (repeats, negative positions, rows kept or not, queries asked
    again) gives the held rows times the query, up to float32 rounding."""
    from shared_core.search.external import EngineRows

    store, index = sample_rows
    corpus = index.state.corpus
    held = np.asarray(corpus.sentence_vectors)
    queries = np.random.default_rng(1).standard_normal((3, DIM)).astype(np.float32)
    rows = EngineRows(store, corpus.ids, corpus.texts, corpus.metadata,
                      corpus.sentence_offsets, DIM, cached_rows=kept)
    rows.scores_in_store = True
    for positions, which in reads:
        at = np.array(positions, dtype=np.int64)
        if kept and len(at):
            rows[at[:1]]  # a row read now is kept, and scored here next time
        np.testing.assert_allclose(rows.scores_at(at, queries[which]), held[at] @ queries[which],
                                   rtol=0, atol=2e-6)


def test_a_store_whose_index_scores_from_codes_does_not_score_a_replicas_rows(
        tmp_path: Path) -> None:
    """A one-byte index's scores are not the rows' inner products: a replica that took
    them as exact kept 0.904 of the context at 1 M passages, so it reads the rows."""
    from shared_core.search.external import EngineRows

    store = MilvusVectorStore(str(tmp_path / "vectors.db"), "cg", index_type="IVF_SQ8",
                              index_params={"nlist": 4})
    assert store.scores_from_codes  # before the collection exists: the index it would build
    build(store).save(str(tmp_path / "idx"))
    assert store.client.describe_index("cg", "vector")["index_type"] == "IVF_SQ8"
    assert store.scores_from_codes
    load, path, embedder = ConceptGraphIndex.load, str(tmp_path / "idx"), HashingEmbedder(DIM)
    with pytest.raises(ValueError, match=r"MilvusVectorStore's index scores rows from "
                                         r"compressed codes.*scores_in_store=False"):
        load(path, embedder, vector_store=store, vectors_in_store=True, scores_in_store=True)
    replica = load(path, embedder, vector_store=store, vectors_in_store=True)
    rows = replica.state.corpus.sentence_vectors
    assert isinstance(rows, EngineRows)
    with pytest.raises(ValueError, match=r"compressed codes"):
        rows.scores_in_store = True
    # reading the rows gives the loaded index's answers
    assert contexts(replica) == contexts(ConceptGraphIndex.load(path, embedder,
                                                                vector_store=store))
    store.close()


def test_an_index_of_the_rows_themselves_scores_them(tmp_path: Path) -> None:
    from shared_core.search.external import EngineRows

    store = MilvusVectorStore(str(tmp_path / "vectors.db"), "cg", index_type="FLAT")
    build(store).save(str(tmp_path / "idx"))
    assert not store.scores_from_codes
    replica = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM),
                                     vector_store=store, vectors_in_store=True,
                                     scores_in_store=True)
    rows = replica.state.corpus.sentence_vectors
    assert isinstance(rows, EngineRows) and rows.scores_in_store
    store.close()
