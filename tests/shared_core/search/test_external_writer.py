"""A writer that holds no vector: its rows in the store, read back by key for updates.

``ConceptGraphIndex.load(..., vectors_in_store=True, writer=True)`` adds, deletes and
saves while its sentence vectors stay in the engine. Each test compares it with an
index that holds its vectors and makes the same changes (no store, HNSW in process:
on a few rows both find the truly closest), on the engines of ``test_external``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shared_core import ConceptGraphIndex, HashingEmbedder
from shared_core.search.external import EngineRows, EngineVectorIndex, MissingRowsError
from shared_core.search.qdrant import QdrantStore
from shared_core.store import index_folder
from tests.shared_core.search.test_external import (
    DIM,
    ENGINES,
    TEXTS,
    build,
    built_keys,
    built_metadata,
    chunk_digest,
    contexts,
    engine,
    killed_once_it_says,
    loopback,
    row_key,
    stored_metadata,
    text_digest,
)

ADDED = ["Alan Turing described a universal machine.", "Grace Hopper wrote a compiler."]


def writer_of(path: Path, store: object) -> ConceptGraphIndex:
    """The save at ``path`` opened as the writer that holds no vector."""
    return ConceptGraphIndex.load(str(path), HashingEmbedder(DIM), vector_store=store,  # type: ignore[arg-type]
                                  vectors_in_store=True, writer=True)


def graph_of(index: ConceptGraphIndex) -> tuple[object, ...]:
    """What the graph is: concepts, edges, PageRank and concept vectors, to the bit."""
    graph = index.state.graph
    return (index.concepts, index.edges, graph.rank.tobytes(),
            np.asarray(graph.vectors).tobytes())


@loopback
@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("knobs", [{}, {"unit_tokens": 12}])
def test_a_writer_without_vectors_updates_and_saves_as_one_that_holds_them(
        tmp_path: Path, kind: str, knobs: dict[str, object]) -> None:
    store = engine(kind, tmp_path)
    build(store, **knobs).save(str(tmp_path / "idx"))
    writer = writer_of(tmp_path / "idx", store)
    held = build(vector_index="hnsw", **knobs)
    assert writer.vectors_in_store and not writer.is_replica
    assert isinstance(writer.state.corpus.sentence_vectors, EngineRows)
    for step in (lambda i: i.add(ADDED, ids=["t9", "t10"]),
                 lambda i: i.delete(["t1", "t3"]),
                 lambda i: i.add([TEXTS[2]], ids=["t2"], metadatas=[{"n": 20}])):
        step(writer)
        step(held)
        assert isinstance(writer.state.corpus.sentence_vectors, EngineRows)
        assert contexts(writer) == contexts(held)
        assert graph_of(writer) == graph_of(held)
    # the rows of t1 and t3, and t2's under its old key, are still in the store: the last
    # save lists them. The store's searches ask for those five more, so none is missed
    new_keys = {row_key(i, text_digest(t), "s", p)
                for i, t in zip(["t9", "t10"], ADDED, strict=True) for p in range(1)}
    t2_now = {row_key("t2", chunk_digest(TEXTS[2], json.dumps({"n": 20})), "s", p)
              for p in range(2)}
    assert set(store.list_keys()) == built_keys() | new_keys | t2_now
    ann = writer.state.graph.ann
    assert isinstance(ann, EngineVectorIndex) and ann.surplus == 6
    writer.save(str(tmp_path / "idx"))
    assert set(store.list_keys()) == built_keys([0, 4]) | new_keys | t2_now
    # every row a query reads now comes from the store, under the keys it holds now
    writer.state.corpus.sentence_vectors.cached_rows = 0  # type: ignore[union-attr]
    cast_ann(writer).rows.vectors.cached_rows = 0  # type: ignore[union-attr]
    assert cast_ann(writer).surplus == 0 and contexts(writer) == contexts(held)
    assert sorted(stored_metadata(store, "t2"), key=str) == [
        {"chunk_id": "t2", "n": 20, "part": 0}, {"chunk_id": "t2", "n": 20, "part": 1}]
    # the save holds no vector: it loads with its store only, as a writer or a replica
    assert not (index_folder(tmp_path / "idx") / "sentence_embeddings.npy").exists()
    with pytest.raises(ValueError, match=r"holds no sentence vectors: its vector store does"):
        ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), vector_store=store)
    replica = ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM),
                                     vector_store=store, vectors_in_store=True)
    assert replica.is_replica and contexts(replica) == contexts(held)
    reopened = writer_of(tmp_path / "idx", store)
    assert reopened.vector_store_repair is not None
    assert not reopened.vector_store_repair.listed  # the store took the save's generation
    assert contexts(reopened) == contexts(held) and graph_of(reopened) == graph_of(held)
    store.close()


def cast_ann(index: ConceptGraphIndex) -> EngineVectorIndex:
    ann = index.state.graph.ann
    assert isinstance(ann, EngineVectorIndex)
    return ann


CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from shared_core import ConceptGraphIndex, HashingEmbedder
    from tests.shared_core.search.test_external import build, engine
    folder = Path(sys.argv[1])
    store = engine(sys.argv[2], folder)
    build(store).save(str(folder / "idx"))
    index = ConceptGraphIndex.load(str(folder / "idx"), HashingEmbedder(64), vector_store=store,
                                   vectors_in_store=True, writer=True)
    index.add(["Alan Turing described a universal machine."], ids=["t9"])
    index.delete(["t2", "t4"])
    print("updated", flush=True)
    time.sleep(600)  # killed here: the store holds t9's rows, and still t2's and t4's
""")


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_writer_without_vectors_killed_before_its_save_reopens_the_last_save(
        tmp_path: Path, kind: str) -> None:
    killed_once_it_says(b"updated", CHILD, str(tmp_path), kind)
    store = engine(kind, tmp_path)
    writer = writer_of(tmp_path / "idx", store)
    repair = writer.vector_store_repair
    assert repair is not None and repair.listed
    assert (repair.written, repair.deleted) == (0, 1)  # t9's one row: no save lists it
    assert set(store.list_keys()) == built_keys()
    assert contexts(writer) == contexts(build(vector_index="hnsw"))
    store.close()


class ReadsFail(QdrantStore):
    """A Qdrant collection whose reads by key fail once ``failing`` is set, as a store
    that goes away in the middle of an update."""

    failing = False

    def vectors_of(self, keys: Sequence[str]) -> np.ndarray:
        if self.failing:
            raise ConnectionError("the vector store went away")
        return super().vectors_of(keys)


def test_a_deleted_chunk_added_back_keeps_its_rows_through_the_save(tmp_path: Path) -> None:
    """Its rows (the same keys) were to be deleted at the save; written again, they stay."""
    store = engine("qdrant", tmp_path)
    build(store).save(str(tmp_path / "idx"))
    writer = writer_of(tmp_path / "idx", store)
    writer.delete(["t1", "t2"])
    writer.add([TEXTS[1]], ids=["t1"], metadatas=[built_metadata(1)])
    assert cast_ann(writer).surplus == 2  # t2's two rows, no longer t1's
    writer.save(str(tmp_path / "idx"))
    assert set(store.list_keys()) == built_keys([0, 1, 3, 4])
    reopened = writer_of(tmp_path / "idx", store)
    reopened.state.corpus.sentence_vectors.cached_rows = 0  # type: ignore[union-attr]
    assert contexts(reopened) == contexts(writer)
    store.close()


def test_an_update_that_fails_leaves_the_rows_of_the_last_save(tmp_path: Path) -> None:
    """The update's rows are deleted again, but not the rows of a chunk it was adding
    back as it was: the last save, which a crash would reopen, lists them."""
    store = ReadsFail(str(tmp_path / "qdrant"), "cg")
    build(store).save(str(tmp_path / "idx"))
    writer = writer_of(tmp_path / "idx", store)
    writer.delete(["t1"])
    answers = contexts(writer)
    store.failing = True
    with pytest.raises(ConnectionError, match="went away"):
        writer.add([TEXTS[1], ADDED[0]], ids=["t1", "t9"], metadatas=[built_metadata(1), {}])
    store.failing = False
    assert "t1" not in writer and "t9" not in writer and contexts(writer) == answers
    assert set(store.list_keys()) == built_keys()  # t9's row gone, t1's still there
    reopened = writer_of(tmp_path / "idx", store)  # as after a crash: the last save
    assert not reopened.vector_store_repair.deleted  # type: ignore[union-attr]
    writer.save(str(tmp_path / "idx"))
    assert set(store.list_keys()) == built_keys([0, 2, 3, 4])
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_a_writer_without_vectors_refuses_a_store_that_lost_rows_of_its_save(
        tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    build(store).save(str(tmp_path / "idx"))
    lost = sorted(built_keys([3]))[0]
    store.delete([lost])
    store.write_marker("")  # as a crash between the delete and a new generation leaves it
    with pytest.raises(MissingRowsError, match=r"lacks rows of 1 of this save's chunks "
                                               r"\(e.g. 't3'\).*holds no vector to write them"):
        writer_of(tmp_path / "idx", store)
    assert set(store.list_keys()) == built_keys() - {lost}  # nothing was changed
    # the index that holds its vectors writes the row again
    ConceptGraphIndex.load(str(tmp_path / "idx"), HashingEmbedder(DIM), vector_store=store)
    assert set(store.list_keys()) == built_keys()
    store.close()


class GatedStore(QdrantStore):
    """Qdrant's local store whose first read of vectors by a thread named ``reader``
    waits until the test lets it go: a query that began before an update and a save."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.reading = threading.Event()
        self.go_on = threading.Event()

    def vectors_of(self, keys: object) -> np.ndarray:
        if threading.current_thread().name == "reader" and not self.reading.is_set():
            self.reading.set()
            assert self.go_on.wait(60)
        return super().vectors_of(keys)  # type: ignore[arg-type]


def test_a_query_begun_before_a_save_deleted_its_rows_runs_again_on_the_new_state(
        tmp_path: Path) -> None:
    store = GatedStore(str(tmp_path / "qdrant"), "cg")
    build(store).save(str(tmp_path / "idx"))
    writer = writer_of(tmp_path / "idx", store)
    rows = writer.state.corpus.sentence_vectors
    assert isinstance(rows, EngineRows)
    rows.cached_rows = 0  # every read goes to the store
    query = "Charles Babbage designed the analytical engine"  # finds t1 and t2 by words
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.append(writer.retrieve(query)), name="reader")
    reader.start()
    assert store.reading.wait(60)  # the reader holds the state that lists t1 and t2
    writer.delete(["t1", "t2"])
    writer.save(str(tmp_path / "idx"))  # their rows leave the store
    store.go_on.set()
    reader.join(60)
    held = build(vector_index="hnsw")
    held.delete(["t1", "t2"])
    # the reader's first state listed t1 and t2: only a query run again answers as this
    assert [c.id for c in found[0].chunks] == [c.id for c in held.retrieve(query).chunks]  # type: ignore[attr-defined]
    store.close()


@loopback
def test_writer_is_for_an_index_whose_vectors_are_in_its_store(tmp_path: Path) -> None:
    store = engine("qdrant", tmp_path)
    build(store).save(str(tmp_path / "idx"))
    load = ConceptGraphIndex.load
    with pytest.raises(ValueError, match=r"writer=True is for an index whose vectors are in "
                                         "its store: pass vectors_in_store=True"):
        load(str(tmp_path / "idx"), HashingEmbedder(DIM), vector_store=store, writer=True)
    with pytest.raises(ValueError, match=r"scores_in_store=True is for a read-only replica"):
        load(str(tmp_path / "idx"), HashingEmbedder(DIM), vector_store=store,
             vectors_in_store=True, scores_in_store=True, writer=True)
    with pytest.raises(TypeError, match=r"writer must be a bool, got str"):
        load(str(tmp_path / "idx"), HashingEmbedder(DIM), vector_store=store,
             vectors_in_store=True, writer="yes")  # type: ignore[arg-type]
    writer = writer_of(tmp_path / "idx", store)
    with pytest.raises(ValueError, match=r"method='knn' compares every chunk's mean vector"):
        writer.select(method="knn")
    with pytest.raises(ValueError, match=r"changing theta_co derives the graph again"):
        writer.reconfigured(theta_co=1)
    assert not writer.reconfigured(top_k=3).is_replica  # search knobs: still the writer
    store.close()


@loopback
@pytest.mark.parametrize("kind", ENGINES)
def test_an_index_built_with_vectors_in_store_keeps_none_of_them(
        tmp_path: Path, kind: str) -> None:
    store = engine(kind, tmp_path)
    index = ConceptGraphIndex.from_texts(
        TEXTS, ids=[f"t{i}" for i in range(len(TEXTS))], embedder=HashingEmbedder(DIM),
        metadatas=[built_metadata(i) for i in range(len(TEXTS))], vector_store=store,
        vectors_in_store=True)
    held = build(vector_index="hnsw")
    rows = index.state.corpus.sentence_vectors
    assert isinstance(rows, EngineRows) and cast_ann(index).rows.vectors is rows
    assert index.vectors_in_store and not index.is_replica
    assert contexts(index) == contexts(held) and graph_of(index) == graph_of(held)
    assert set(store.list_keys()) == built_keys()
    index.delete(["t0"])
    held.delete(["t0"])
    assert contexts(index) == contexts(held) and graph_of(index) == graph_of(held)
    index.save(str(tmp_path / "idx"))
    assert set(store.list_keys()) == built_keys(range(1, len(TEXTS)))
    assert not (index_folder(tmp_path / "idx") / "sentence_embeddings.npy").exists()
    store.close()


@loopback
def test_vectors_in_store_needs_a_store_that_returns_its_rows(tmp_path: Path) -> None:
    from shared_core import ConceptGraphConfig
    from tests.shared_core.search.test_external import StoreWithout

    store = engine("qdrant", tmp_path)
    embedder = HashingEmbedder(DIM)
    with pytest.raises(ValueError, match=r"vectors_in_store=True keeps the vectors in "
                                         "vector_store: give one"):
        ConceptGraphIndex(embedder, vectors_in_store=True)
    with pytest.raises(TypeError, match=r"vectors_in_store must be a bool, got int"):
        ConceptGraphIndex(embedder, vector_store=store, vectors_in_store=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"needs chunk_similarity='max'"):
        ConceptGraphIndex(embedder, ConceptGraphConfig(chunk_similarity="direct"),
                          vector_store=store, vectors_in_store=True)

    class KeysOnly(StoreWithout):
        """A store that keeps rows and finds them, but never gives a vector back."""

        hidden = "vectors_of"

    with pytest.raises(TypeError, match=r"KeysOnly does not return the vectors it holds"):
        ConceptGraphIndex(embedder, vector_store=KeysOnly(store),  # type: ignore[arg-type]
                          vectors_in_store=True)
    store.close()


# ------------------------------------------------------------------ any run of changes
# Every chunk a run may hold: the build's five, and two more. An id always names the
# same text, so an add is new, an upsert of metadata, or a deleted chunk added back.
POOL = {**{f"t{i}": text for i, text in enumerate(TEXTS)}, "t9": ADDED[0], "t10": ADDED[1]}


class WriterRuns(RuleBasedStateMachine):
    """Adds, deletes, upserts, saves and crashes (the writer dropped without a save,
    then its save reopened) on the writer that holds no vector, and the same on an
    index that holds its vectors. After each step both answer alike; the store holds
    every row of the writer's chunks and of its latest save; after a save or a reopen
    it holds those rows and no other."""

    kind = "qdrant"

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="writer-runs-"))
        self.store = engine(self.kind, self.folder)
        build(self.store).save(str(self.folder / "idx"))
        self.writer = self.opened()
        self.held = build(vector_index="hnsw")
        self.held.save(str(self.folder / "held"))
        self.saved_keys = self.keys_of(self.held)

    def opened(self) -> ConceptGraphIndex:
        """The index under test, from its save."""
        return writer_of(self.folder / "idx", self.store)

    @staticmethod
    def keys_of(index: ConceptGraphIndex) -> set[str]:
        return set(index.state.stored_rows().keys_of(range(len(index))))

    @rule(ids=st.lists(st.sampled_from(sorted(POOL)), min_size=1, max_size=3, unique=True),
          metadata=st.sampled_from(["none", "built", "other"]))
    def add(self, ids: list[str], metadata: str) -> None:
        texts = [POOL[i] for i in ids]
        metadatas = (None if metadata == "none" else
                     [built_metadata(int(i[1:])) if metadata == "built" else {"n": 20}
                      for i in ids])
        self.writer.add(texts, ids=ids, metadatas=metadatas)
        self.held.add(texts, ids=ids, metadatas=metadatas)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        held = self.held.chunk_ids
        if len(held) < 2:  # keep a chunk to retrieve
            return
        doomed = data.draw(st.lists(st.sampled_from(held), min_size=1,
                                    max_size=len(held) - 1, unique=True))
        self.writer.delete(doomed)
        self.held.delete(doomed)

    @rule()
    def save(self) -> None:
        self.writer.save(str(self.folder / "idx"))
        self.held.save(str(self.folder / "held"))
        self.saved_keys = self.keys_of(self.held)
        assert set(self.store.list_keys()) == self.saved_keys
        replica = ConceptGraphIndex.load(str(self.folder / "idx"), HashingEmbedder(DIM),
                                         vector_store=self.store, vectors_in_store=True)
        assert contexts(replica) == contexts(self.held)  # it reads every row from the store

    @rule()
    def crash(self) -> None:
        """The writer is gone before its save: its save is reopened, and the store
        loses the rows no save lists."""
        self.writer = self.opened()
        self.held = ConceptGraphIndex.load(str(self.folder / "held"), HashingEmbedder(DIM))
        assert set(self.store.list_keys()) == self.saved_keys

    @invariant()
    def both_answer_alike(self) -> None:
        assert self.writer.chunk_ids == self.held.chunk_ids
        assert contexts(self.writer) == contexts(self.held)
        assert graph_of(self.writer) == graph_of(self.held)
        assert set(self.store.list_keys()) >= self.keys_of(self.held) | self.kept_keys()

    def kept_keys(self) -> set[str]:
        """Rows the store keeps besides the index's own: a writer's, those of its save."""
        return self.saved_keys

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        # hypothesis keeps a finished machine in a reference cycle: without this its
        # indexes' mapped files stay open until the next full collection (1,000 a run)
        vars(self).clear()


TestWriterRunsOnQdrant = WriterRuns.TestCase
TestWriterRunsOnQdrant.settings = settings(max_examples=25, stateful_step_count=8,
                                           deadline=None)


class WriterRunsOnMilvusLite(WriterRuns):
    kind = "milvus"


TestWriterRunsOnMilvusLite = WriterRunsOnMilvusLite.TestCase
TestWriterRunsOnMilvusLite.settings = settings(max_examples=10, stateful_step_count=8,
                                               deadline=None)


class MirroredRuns(WriterRuns):
    """The same runs on an index that holds its vectors and keeps its store's rows as
    its own: after every step the store holds its chunks' rows and no other."""

    def opened(self) -> ConceptGraphIndex:
        return ConceptGraphIndex.load(str(self.folder / "idx"), HashingEmbedder(DIM),
                                      vector_store=self.store)

    def kept_keys(self) -> set[str]:
        return set()  # a reopened save writes back the rows the store no longer holds

    @invariant()
    def the_store_holds_the_index_s_rows(self) -> None:
        assert set(self.store.list_keys()) == self.keys_of(self.writer)


TestMirroredRunsOnQdrant = MirroredRuns.TestCase
TestMirroredRunsOnQdrant.settings = settings(max_examples=20, stateful_step_count=8,
                                             deadline=None)
