"""A LlamaIndex vector store as the index's vector store: SimpleVectorStore, Chroma and
Qdrant (its embedded local mode; Qdrant takes only UUIDs as ids)."""

from __future__ import annotations

from pathlib import Path

import chromadb
import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from llama_index.vector_stores.chroma import ChromaVectorStore
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient
from qdrant_client.models import PointStruct

from llama_index_conceptgraph import ConceptGraphRetriever, CoreEmbedding, LlamaIndexVectorStore
from shared_core import ConceptGraphConfig, CorruptIndexError
from shared_core.search.external import KEY_FIELD, chunk_digest, key_uuid, parse_key, row_key
from shared_core.store import index_folder
from tests.shared_core.search.test_external import reopened

from .conftest import CORPUS

NODES = [TextNode(id_=key, text=text, metadata={"key": key}) for key, text, _ in CORPUS]
QUERIES = ["Who discovered polonium?", "Where did Einstein work?", "nuclear reactor"]
# two candidates per query: which rows the store proposes decides the ranking
CONFIG = ConceptGraphConfig(candidates=2)


def answers(retriever: ConceptGraphRetriever) -> list[list[tuple[str, float]]]:
    return [[(n.node.node_id, round(n.score or 0.0, 9)) for n in retriever.retrieve(q)]
            for q in QUERIES]


def in_process(embed_model: CoreEmbedding) -> ConceptGraphRetriever:
    config = ConceptGraphConfig(**{**CONFIG.to_dict(), "vector_index": "hnsw"})
    return ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                               config=config)


def chunk_ids(store: SimpleVectorStore) -> set[str]:
    return {parse_key(k)[0] for k in store.data.embedding_dict}  # type: ignore[index]


def chroma(tmp_path: Path) -> ChromaVectorStore:
    client = chromadb.PersistentClient(
        str(tmp_path / "chroma"), settings=chromadb.Settings(anonymized_telemetry=False))
    return ChromaVectorStore(chroma_collection=client.get_or_create_collection("conceptgraph"))


def test_a_chroma_store_retrieves_what_the_in_process_index_retrieves_and_is_repaired(
        tmp_path: Path, embed_model: CoreEmbedding) -> None:
    store: BasePydanticVectorStore = chroma(tmp_path)
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                                    config=CONFIG, vector_store=store)
    assert answers(retriever) == answers(in_process(embed_model))
    everything = {key for key, _, _ in CORPUS}
    held = {parse_key(i)[0] for i in store.client.get(include=[])["ids"]}  # type: ignore[index]
    assert held == everything
    retriever.persist(tmp_path / "idx")
    retriever.delete_nodes(["fermi"])
    left = {parse_key(i)[0] for i in store.client.get(include=[])["ids"]}  # type: ignore[index]
    assert left == everything - {"fermi"}
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "idx", embed_model,
                                                    vector_store=store)
    repair = loaded.index.vector_store_repair
    assert repair is not None and repair.listed and (repair.written, repair.deleted) == (1, 0)
    assert answers(loaded) == answers(in_process(embed_model))


def test_a_simple_vector_store_retrieves_what_the_in_process_index_retrieves(
        embed_model: CoreEmbedding) -> None:
    store = SimpleVectorStore()
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                                    config=CONFIG, vector_store=store)
    assert retriever.index.stats()["vector_index"] == "store:LlamaIndexVectorStore"
    assert answers(retriever) == answers(in_process(embed_model))
    # the store holds the index's own sentence vectors, keyed and tagged with the chunk
    rows = retriever.index.state.stored_rows()
    key, text = CORPUS[0][0], CORPUS[0][1]
    corpus = retriever.index.state.corpus
    position = corpus.position[key]  # chunks are kept in id order
    first = row_key(key, chunk_digest(text, corpus.metadata[position]), "s", 0)
    assert store.get(first) == rows.vectors[rows.first[position]].tolist()
    assert store.data.metadata_dict[first]["chunk_id"] == key
    assert store.data.metadata_dict[first]["key"] == key


def test_deletes_and_inserts_reach_the_store_and_a_load_repairs_it(
        tmp_path: Path, embed_model: CoreEmbedding) -> None:
    store = SimpleVectorStore()
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                                    config=CONFIG, vector_store=store)
    everything = {key for key, _, _ in CORPUS}
    assert chunk_ids(store) == everything
    retriever.persist(tmp_path / "idx")
    retriever.delete_nodes(["fermi"])
    retriever.insert_nodes([TextNode(id_="noether", text="Emmy Noether proved a theorem.")])
    assert chunk_ids(store) == everything - {"fermi"} | {"noether"}
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "idx", embed_model,
                                                    vector_store=store)
    repair = loaded.index.vector_store_repair
    fermi_rows = int(loaded.index.state.stored_rows().count[
        loaded.index.state.corpus.position["fermi"]])  # its sentences
    assert repair is not None and (repair.written, repair.deleted) == (fermi_rows, 1)
    assert chunk_ids(store) == everything
    assert answers(loaded) == answers(in_process(embed_model))


def test_a_qdrant_store_holds_rows_under_uuids_and_is_repaired(
        tmp_path: Path, embed_model: CoreEmbedding) -> None:
    client = QdrantClient(path=str(tmp_path / "qdrant"))  # the embedded mode, on disk
    store = QdrantVectorStore(client=client, collection_name="conceptgraph")
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                                    config=CONFIG, vector_store=store)
    assert answers(retriever) == answers(in_process(embed_model))
    key, text = CORPUS[0][0], CORPUS[0][1]
    corpus = retriever.index.state.corpus
    position = corpus.position[key]
    first = row_key(key, chunk_digest(text, corpus.metadata[position]), "s", 0)
    [point] = client.retrieve("conceptgraph", [key_uuid(first)], with_vectors=True)
    rows = retriever.index.state.stored_rows()
    assert point.payload is not None and point.payload[KEY_FIELD] == first
    assert point.payload["chunk_id"] == key
    assert point.vector == pytest.approx(rows.vectors[rows.first[position]].tolist(), abs=1e-6)
    everything = {k for k, _, _ in CORPUS}
    retriever.persist(tmp_path / "idx")
    retriever.delete_nodes(["fermi"])
    wrapped = LlamaIndexVectorStore(store)
    assert wrapped.uuid_ids and {parse_key(k)[0] for k in wrapped.list_keys()} == (  # type: ignore[index]
        everything - {"fermi"})
    loaded = ConceptGraphRetriever.from_persist_dir(tmp_path / "idx", embed_model,
                                                    vector_store=store)
    repair = loaded.index.vector_store_repair
    assert repair is not None and repair.written > 0 and repair.deleted == 0
    assert {parse_key(k)[0] for k in wrapped.list_keys()} == everything  # type: ignore[index]
    assert answers(loaded) == answers(in_process(embed_model))
    # a point that is not the index's: the next open refuses the store and leaves it be
    client.upsert("conceptgraph", [PointStruct(id=key_uuid("other"), vector=point.vector,
                                               payload={"a": 1})])
    with pytest.raises(ValueError, match="ids that are not a conceptgraph index's") as refused:
        ConceptGraphRetriever.from_persist_dir(tmp_path / "idx", embed_model,
                                               vector_store=store)
    assert not isinstance(refused.value, CorruptIndexError)  # the store's fault, not the save's
    assert client.count("conceptgraph").count == len(wrapped.list_keys())
    client.close()


def test_vector_store_must_be_a_store(embed_model: CoreEmbedding) -> None:
    with pytest.raises(TypeError, match="must be a LlamaIndex BasePydanticVectorStore or a "
                                        "conceptgraph VectorStoreBackend, got str"):
        ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                            vector_store="qdrant")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a LlamaIndex BasePydanticVectorStore, got"):
        LlamaIndexVectorStore([])  # type: ignore[arg-type]


@pytest.mark.allow_hosts(["127.0.0.1"])
@pytest.mark.parametrize("engine", ["milvus", "qdrant"])
def test_an_engine_store_with_term_postings_plugs_into_the_retriever(
        tmp_path: Path, embed_model: CoreEmbedding, engine: str) -> None:
    """The core's engine backends as a LlamaIndex user passes them: the views' units
    found in the engine (one request for both term queries), the same answers as in
    process. Qdrant's goes through the user's own ``QdrantClient``."""
    from shared_core import MilvusVectorStore, QdrantStore

    # one candidate per view and no walk: which unit each view's engine search finds
    # decides the pool (the walk would read the in-process postings)
    config = ConceptGraphConfig(candidates=1, walk_hops=0)
    store: MilvusVectorStore | QdrantStore
    if engine == "milvus":
        store = MilvusVectorStore(str(tmp_path / "vectors.db"), "cg", index_type="FLAT",
                                  term_postings=True)
    else:
        store = QdrantStore(QdrantClient(path=str(tmp_path / "qdrant")), "cg",
                            term_postings=True)
    retriever = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                                    config=config, vector_store=store)
    assert retriever.index.stats()["vector_index"] == f"store:{type(store).__name__}+terms"
    local = ConceptGraphRetriever.from_defaults(
        nodes=NODES, embed_model=embed_model,
        config=ConceptGraphConfig(candidates=1, walk_hops=0, vector_index="hnsw"))
    assert answers(retriever) == answers(local)
    # a read-only replica of the saved index, reading its vectors from the engine
    retriever.persist(str(tmp_path / "idx"))
    replica = ConceptGraphRetriever.from_persist_dir(str(tmp_path / "idx"), embed_model,
                                                     vector_store=store, vectors_in_store=True)
    assert replica.index.is_replica and answers(replica) == answers(retriever)
    # one whose engine scores the rows a query needs, instead of returning them
    scored = ConceptGraphRetriever.from_persist_dir(str(tmp_path / "idx"), embed_model,
                                                    vector_store=store, vectors_in_store=True,
                                                    scores_in_store=True)
    assert [[i for i, _ in q] for q in answers(scored)] == [[i for i, _ in q]
                                                            for q in answers(retriever)]
    # the writer that holds no vector: a delete reads its rows from the engine, and the
    # save holds no vector file
    writer = ConceptGraphRetriever.from_persist_dir(str(tmp_path / "idx"), embed_model,
                                                    vector_store=store, vectors_in_store=True,
                                                    writer=True)
    assert writer.index.vectors_in_store and not writer.index.is_replica

    held = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                               config=config,
                                               vector_store=reopened(store, "held", terms=True))
    gone = NODES[0].node_id
    writer.delete_nodes([gone])
    held.delete_nodes([gone])
    assert answers(writer) == answers(held)
    writer.persist(str(tmp_path / "idx"))
    assert not (index_folder(tmp_path / "idx") / "sentence_embeddings.npy").exists()
    # and one built that way from the start, in a collection of its own
    built = ConceptGraphRetriever.from_defaults(nodes=NODES, embed_model=embed_model,
                                                config=config,
                                                vector_store=reopened(store, "built", terms=True),
                                                vectors_in_store=True)
    assert built.index.vectors_in_store
    assert answers(built) == answers(ConceptGraphRetriever.from_defaults(
        nodes=NODES, embed_model=embed_model,
        config=ConceptGraphConfig(candidates=1, walk_hops=0, vector_index="hnsw")))
    store.close()
