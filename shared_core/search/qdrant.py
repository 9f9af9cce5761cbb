"""Qdrant as an index's vector store (the ``qdrant`` extra): a server, or local mode in a folder.

``QdrantStore("./vectors")`` runs qdrant-client's local mode over a folder
(in this process, for trying it out and for the tests);
``QdrantStore("http://host:6333", api_key=...)`` talks to a Qdrant server or
cluster with the same code, and ``QdrantStore(client)`` takes a
``QdrantClient`` you already have (a LangChain or LlamaIndex Qdrant store's
``.client``; the class is named apart from theirs, which hold documents rather than an
index's rows). A collection holds one index's rows: each point's id is the UUID of its
key (Qdrant ids must be UUIDs or integers), its payload the key itself
(``KEY_FIELD``), its chunk's id and its chunk's scalar metadata; its named vector
``vector`` is compared by dot product (the rows are unit vectors). Texts stay in the
index.

``term_postings=True`` gives the collection a sparse vector ``terms`` as well: on a
unit's first row, the unit's terms (``search.external.term_dimension``). Qdrant keeps
sparse vectors in an inverted index, so the index asks it for the units a query's
concepts and words reach, as well as the nearest vectors
(:class:`~shared_core.search.external.TermPostingsBackend`): the concept and word
postings live in the engine, as with Milvus.

Local mode is qdrant-client's own Python code, which searches by brute force; the
client warns past 20,000 points. Give large corpora a Qdrant server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .engine_store import checked_rows, rows_by_key, scores_by_key, term_searches
from .external import KEY_FIELD, key_uuid, qdrant_keys

VECTOR = "vector"  # the named dense vector of every point
TERMS = "terms"  # the named sparse vector of a unit's terms (``term_postings=True``)
WRITE_BATCH = 1024  # points per upsert or delete request
SCORE_BATCH = 16_384  # keys per filtered search of their scores (scores_of)
MARKER_ID = 0  # the one point of the generation collection


def _qdrant() -> Any:
    try:
        import qdrant_client
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("QdrantStore needs qdrant-client: "
                          "pip install 'conceptgraph[qdrant]'") from exc
    return qdrant_client


def _client(where: str, api_key: str | None) -> Any:
    """A client for a server's URL, ``":memory:"``, or a local-mode folder."""
    qdrant_client = _qdrant()
    if where.startswith(("http://", "https://")):
        return qdrant_client.QdrantClient(url=where, api_key=api_key)
    if api_key is not None:
        raise ValueError("api_key is for a Qdrant server's URL, not a local folder")
    if where == ":memory:":
        return qdrant_client.QdrantClient(location=":memory:")
    return qdrant_client.QdrantClient(path=where)


class QdrantStore:
    """One Qdrant collection as a :class:`~shared_core.search.external.VectorStoreBackend`.

    ``where``: a server's URL, a local-mode folder, ``":memory:"``, or a
    ``QdrantClient``. The collection is created on the first write; every write waits
    until Qdrant has applied it (``wait=True``), so a search sees it. An existing
    collection must have this layout and dimension, else ``ValueError``.
    """

    def __init__(self, where: Any, collection: str = "conceptgraph", *,
                 api_key: str | None = None, term_postings: bool | None = None) -> None:
        if not isinstance(collection, str) or not collection:
            raise ValueError(f"collection must be a non-empty str, got {collection!r}")
        if term_postings is not None and not isinstance(term_postings, bool):
            raise TypeError(f"term_postings must be a bool or None, got "
                            f"{type(term_postings).__name__}")
        if isinstance(where, str):
            self.client = _client(where, api_key)
        elif isinstance(where, _qdrant().QdrantClient):
            self.client = where
        else:
            raise TypeError(f"where must be a URL, a folder, ':memory:' or a QdrantClient, "
                            f"got {type(where).__name__}")
        self.collection = collection
        self._models = _qdrant().models
        self._terms = bool(term_postings)
        self._dim: int | None = self._existing_dim(term_postings)

    @property
    def keeps_terms(self) -> bool:
        """Whether the rows carry their term postings (``term_postings``; for an existing
        collection left at None, whether it was made with them)."""
        return self._terms

    def _existing_dim(self, term_postings: bool | None) -> int | None:
        if not self.client.collection_exists(self.collection):
            return None
        params = self.client.get_collection(self.collection).config.params
        vectors = params.vectors if isinstance(params.vectors, dict) else {}
        vector = vectors.get(VECTOR)
        sparse = params.sparse_vectors or {}
        if vector is None or len(vectors) != 1 or set(sparse) - {TERMS}:
            raise ValueError(
                f"Qdrant collection {self.collection!r} exists with vectors "
                f"{sorted(vectors)} and sparse vectors {sorted(sparse)}, not a conceptgraph "
                f"index's ({VECTOR!r}, and {TERMS!r} with term postings); name another "
                "collection")
        if vector.distance != self._models.Distance.DOT:
            raise ValueError(f"Qdrant collection {self.collection!r} compares by "
                             f"{vector.distance}, not by dot product; name another collection")
        has_terms = TERMS in sparse
        if term_postings is not None and term_postings != has_terms:
            raise ValueError(
                f"Qdrant collection {self.collection!r} was made "
                f"{'with' if has_terms else 'without'} term postings, but term_postings="
                f"{term_postings}: pass term_postings={has_terms} (or None), or name "
                "another collection")
        self._terms = has_terms
        return int(vector.size)

    def _create(self, dim: int) -> int:
        models = self._models
        self.client.create_collection(
            self.collection,
            vectors_config={VECTOR: models.VectorParams(size=dim, distance=models.Distance.DOT)},
            sparse_vectors_config={TERMS: models.SparseVectorParams()} if self._terms else None)
        self._dim = dim
        return dim

    @property
    def _where(self) -> str:
        return f"Qdrant collection {self.collection!r}"

    def upsert(self, keys: Sequence[str], vectors: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[Mapping[str, Any]]) -> None:
        self._upsert(keys, vectors, metadatas, None)

    def upsert_with_terms(self, keys: Sequence[str], vectors: np.ndarray,
                          texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]],
                          terms: Sequence[Mapping[int, float]]) -> None:
        self._upsert(keys, vectors, metadatas, terms)

    def _upsert(self, keys: Sequence[str], vectors: np.ndarray,
                metadatas: Sequence[Mapping[str, Any]],
                terms: Sequence[Mapping[int, float]] | None) -> None:
        rows = checked_rows(self._where, self._terms, self._dim, self._create, keys, vectors,
                            metadatas, terms)
        if rows is None:
            return
        models = self._models
        for start in range(0, len(keys), WRITE_BATCH):
            end = start + WRITE_BATCH
            points = []
            for i, (key, vector, meta) in enumerate(zip(
                    keys[start:end], rows[start:end].tolist(), metadatas[start:end],
                    strict=True)):
                named: dict[str, Any] = {VECTOR: vector}
                if terms is not None:
                    dims = sorted(int(d) for d in terms[start + i])
                    named[TERMS] = models.SparseVector(
                        indices=dims, values=[float(terms[start + i][d]) for d in dims])
                points.append(models.PointStruct(
                    id=key_uuid(key), vector=named,
                    payload={KEY_FIELD: key, "chunk_id": meta["chunk_id"],
                             "metadata": dict(meta)}))
            self.client.upsert(self.collection, points, wait=True)

    def delete(self, keys: Sequence[str]) -> None:
        if not len(keys) or self._dim is None:
            return
        for start in range(0, len(keys), WRITE_BATCH):
            ids = [key_uuid(k) for k in keys[start:start + WRITE_BATCH]]
            self.client.delete(self.collection, wait=True,
                               points_selector=self._models.PointIdsList(points=ids))

    def flush(self) -> None:
        """Nothing to do: every write waited until Qdrant had applied it."""

    @property
    def marker_collection(self) -> str:
        """The collection beside the rows that records the store's generation (one point)."""
        return f"{self.collection}__generation"

    def read_marker(self) -> str | None:
        if not self.client.collection_exists(self.marker_collection):
            return None
        found = self.client.retrieve(self.marker_collection, ids=[MARKER_ID],
                                     with_payload=True)
        return str(found[0].payload["value"]) if found and found[0].payload else None

    def write_marker(self, value: str) -> None:
        if not self.client.collection_exists(self.marker_collection):
            self.client.create_collection(self.marker_collection, vectors_config={})
        self.client.upsert(self.marker_collection, wait=True, points=[
            self._models.PointStruct(id=MARKER_ID, vector={}, payload={"value": value})])

    def list_keys(self) -> Iterable[str]:
        if self._dim is None:
            return []
        return qdrant_keys(self.client, self.collection, [KEY_FIELD])

    def vectors_of(self, keys: Sequence[str]) -> np.ndarray:
        """The rows under ``keys`` (``VectorRowsBackend``), retrieved by point id."""

        def read(batch: list[str]) -> Iterable[tuple[str, Sequence[float]]]:
            return ((self._key(point), point.vector[VECTOR]) for point in self.client.retrieve(
                self.collection, ids=[key_uuid(k) for k in batch], with_payload=[KEY_FIELD],
                with_vectors=[VECTOR]))

        return rows_by_key(keys, self._dim, self._where, WRITE_BATCH, read)

    def scores_of(self, keys: Sequence[str], query: np.ndarray) -> np.ndarray:
        """Each row's dot product with ``query`` (``VectorScoresBackend``): a search
        filtered to the keys' point ids, which returns scores and no vectors. Rows a
        search does not return are NaN."""
        q, models = np.asarray(query, np.float32).tolist(), self._models

        def score(batch: list[str]) -> Iterable[tuple[str, float]]:
            found = self.client.query_points(
                self.collection, query=q, using=VECTOR, limit=len(batch),
                query_filter=models.Filter(must=[models.HasIdCondition(
                    has_id=[key_uuid(k) for k in batch])]),
                with_payload=[KEY_FIELD])
            return ((self._key(point), point.score) for point in found.points)

        return scores_by_key(keys, self._dim, SCORE_BATCH, score)

    def search(self, query: np.ndarray, k: int) -> list[str]:
        return [key for key, _ in self.search_scored(query, k)]

    def search_scored(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The nearest ``k`` rows' keys with their dot products (``VectorScoresBackend``)."""
        if self._dim is None or k <= 0:
            return []
        found = self.client.query_points(
            self.collection, query=np.asarray(query, np.float32).tolist(), using=VECTOR,
            limit=k, with_payload=[KEY_FIELD])
        return [(self._key(point), point.score) for point in found.points]

    def search_terms(self, queries: Sequence[Mapping[int, float]], k: int) -> list[list[str]]:
        if not self._terms:
            raise ValueError(f"{self._where} keeps no term postings")
        return term_searches(queries, k, self._dim is not None,
                             lambda asked: self._term_keys(asked, k))

    def _term_keys(self, asked: list[dict[int, float]], k: int) -> list[list[str]]:
        """The keys of the best ``k`` rows on ``terms`` for each query, in one request."""
        models = self._models
        requests = [models.QueryRequest(
            query=models.SparseVector(indices=sorted(weights),
                                      values=[weights[d] for d in sorted(weights)]),
            using=TERMS, limit=k, with_payload=[KEY_FIELD]) for weights in asked]
        answers = self.client.query_batch_points(self.collection, requests=requests)
        if len(answers) != len(requests):
            raise ValueError(f"Qdrant answered {len(answers)} of {len(requests)} queries")
        return [[self._key(point) for point in answer.points] for answer in answers]

    def _key(self, point: Any) -> str:
        key = (point.payload or {}).get(KEY_FIELD)
        if not isinstance(key, str):
            raise ValueError(f"Qdrant collection {self.collection!r} returned point "
                             f"{point.id} without its {KEY_FIELD!r}, so it is not this "
                             "index's row")
        return key

    def close(self) -> None:
        """Release the client (local mode unlocks its folder)."""
        self.client.close()
