"""An index's vectors in an engine outside it: Milvus, or a framework's vector store.

The engine proposes candidates; ranking rescores them from the index's own
vectors, as it does for the HNSW backend, or, in a read-only replica, from the rows
the engine returns by key (:class:`EngineRows`). Rows are stored under content keys,
not positions, so that positions can shift with every add and delete while the
engine's rows stay put::

    <chunk id>#<digest of the chunk's text>.<s|u><row within the chunk>

``s`` rows are a chunk's sentences, ``u`` rows its retrieval units (indexes whose
units have vectors of their own). A key names one chunk text: a chunk deleted and
added again with other text gets other keys, so a store left behind by a crash is
found out by comparing keys (:func:`reconcile`).

A store holds one index's rows and nothing else: :func:`reconcile` deletes any
key of this form that the index does not hold, and refuses a store that holds
other ids.

Listing a large store is slow (Milvus Lite: 55 µs a key), so a store that can
keeps a *generation* marker: every update clears it before writing and sets a
new random one after, the index's state carries the generation it ended with,
and a save records it. An open whose saved generation is the store's own skips
the listing; anything else (a crash mid-update, or between an update and the
save) lists and repairs.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import numpy as np
import scipy.sparse as sp

from ..text.sentences import concatenated_ranges, segment_matrix
from .vector_index import row_scores, scan_scores

if TYPE_CHECKING:  # the state package imports this module
    from ..state.corpus import CorpusState
    from ..state.rows import Rows

DIGEST_CHARS = 12  # hex characters of a chunk text's BLAKE2b digest in its keys
_KEY = re.compile(rf"^(?P<chunk>.+)#(?P<digest>[0-9a-f]{{{DIGEST_CHARS}}})"
                  r"\.(?P<kind>[su])(?P<part>0|[1-9][0-9]*)$", re.DOTALL)


@runtime_checkable
class VectorStoreBackend(Protocol):
    """What an outside engine does for an index: keep keyed rows and find the closest.

    Implementations: :class:`~shared_core.search.milvus.MilvusVectorStore`, and the
    framework adapters' wrappers of a LangChain ``VectorStore`` or a LlamaIndex
    vector store. ``vectors`` are unit float32 rows; ``search`` ranks by inner
    product (cosine), best first.
    """

    def upsert(self, keys: Sequence[str], vectors: np.ndarray, texts: Sequence[str],
               metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Write these rows, replacing any row held under the same key."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Remove the rows under these keys; a key not held is not an error."""
        ...

    def list_keys(self) -> Iterable[str]:
        """Every key the store holds."""
        ...

    def flush(self) -> None:
        """Make the writes so far durable and fully indexed (called once per update)."""
        ...

    def read_marker(self) -> str | None:
        """The generation last recorded by :meth:`write_marker`; None if the store keeps none."""
        ...

    def write_marker(self, value: str) -> None:
        """Record ``value`` beside the rows (a store that cannot may do nothing)."""
        ...

    def search(self, query: np.ndarray, k: int) -> list[str]:
        """The keys of the (up to) ``k`` rows closest to ``query``, best first."""
        ...


class MissingRowsError(ValueError):
    """The store no longer holds rows an index asked it for (see :class:`EngineRows`)."""


@runtime_checkable
class VectorRowsBackend(Protocol):
    """A store that also returns the vectors it holds, by key: what lets an index read
    its rows from the store instead of holding them (:class:`EngineRows`)."""

    def vectors_of(self, keys: Sequence[str]) -> np.ndarray:
        """The rows under ``keys``, in their order, as float32 exactly as written.
        Raises :class:`MissingRowsError` naming the keys it does not hold."""
        ...


def returns_vectors(store: object) -> bool:
    """Whether ``store`` returns its rows' vectors (:class:`VectorRowsBackend`)."""
    return isinstance(store, VectorRowsBackend)


@runtime_checkable
class VectorScoresBackend(Protocol):
    """A store that scores rows it holds against a query, by key, and returns only the
    scores: what lets a replica (``scores_in_store=True``) leave its rows in the store.
    A Milvus 2.3 server scored 5,200 rows of 442,000 in 52-116 ms, where returning them
    took 222-416 ms."""

    def scores_of(self, keys: Sequence[str], query: np.ndarray) -> np.ndarray:
        """Each key's row times ``query`` (inner product), float32, in ``keys``' order;
        NaN for a key the store did not score (one it does not hold, or its index did
        not return), which the caller reads with ``vectors_of`` instead."""
        ...

    def search_scored(self, query: np.ndarray, k: int) -> list[tuple[str, float]]:
        """``search``'s keys, each with the store's score of its row: the nearest rows
        come with their scores, so a replica does not ask for them again."""
        ...


def scores_rows(store: object) -> bool:
    """Whether ``store`` scores its rows by key (:class:`VectorScoresBackend`)."""
    return isinstance(store, VectorScoresBackend)


def check_store_scores(store: object) -> None:
    """Refuse ``store`` as the scorer of a replica's rows (``scores_in_store``) where it
    has no ``scores_of``, or where its index scores from compressed codes (a
    ``scores_from_codes`` that is true): the ranking compares the store's scores with
    exact ones of the rows it holds, and a one-byte index's kept 0.904 of the context at
    1 M passages (Milvus ``IVF_SQ8``)."""
    if not scores_rows(store):
        raise TypeError(f"{type(store).__name__} does not score the rows it holds "
                        "(scores_of): MilvusVectorStore and QdrantStore do")
    if getattr(store, "scores_from_codes", False):
        raise ValueError(f"{type(store).__name__}'s index scores rows from compressed "
                         "codes, which a replica's ranking would compare with exact "
                         "scores: read the rows instead (scores_in_store=False), or index "
                         "the store with FLAT, IVF_FLAT or HNSW")


# Sparse dimensions a term hashes to (1 .. 2^31 - 1), and the one a row without terms
# holds: an engine refuses an empty sparse row (Milvus does), and no query asks for it.
TERM_DIMENSIONS = (1 << 31) - 1
NO_TERMS = 0


def term_dimension(term: str) -> int:
    """The sparse dimension ``term``'s postings live under in an engine: the same in every
    process and index (a hash of the term's text, not its position, which moves with
    every update). Two terms may share one; that only adds rows to what a search finds,
    which the index scores again exactly."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "little") % TERM_DIMENSIONS + 1


@runtime_checkable
class TermPostingsBackend(Protocol):
    """A store that also keeps each unit's terms, as a sparse vector over
    :func:`term_dimension` on one of its rows (``StoredRows.terms_of``), and finds the
    rows with the largest weighted sum of them: the concept and word postings in the
    engine (issue #17).

    The terms are the text's own (no corpus statistics), so a row never has to be
    written again when other chunks change the vocabulary; a query brings the weights.
    """

    @property
    def keeps_terms(self) -> bool:
        """Whether this store's rows carry their terms (a collection made with them)."""
        ...

    def upsert_with_terms(self, keys: Sequence[str], vectors: np.ndarray,
                          texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]],
                          terms: Sequence[Mapping[int, float]]) -> None:
        """:meth:`VectorStoreBackend.upsert`, each row with its terms (dimension -> weight)."""
        ...

    def search_terms(self, queries: Sequence[Mapping[int, float]], k: int) -> list[list[str]]:
        """For each query's ``weights`` (dimension -> weight), the keys of the (up to)
        ``k`` rows of largest ``sum(weights[d] * count[d])``, best first; rows sharing
        no dimension with a query are never returned for it. All in one request: a
        retrieval asks for its evidence and its BM25 units together (Milvus Lite, 60 K
        rows: 55 ms for both in one request, 88 ms in two)."""
        ...


def keeps_terms(store: object) -> bool:
    """Whether ``store`` keeps its rows' term postings (:class:`TermPostingsBackend`)."""
    return isinstance(store, TermPostingsBackend) and bool(store.keeps_terms)


# metadata field holding a row's key in stores whose ids must be UUIDs (Qdrant)
KEY_FIELD = "conceptgraph_key"
# framework store classes (LangChain's and LlamaIndex's) whose ids must be UUIDs
UUID_ID_STORES = ("QdrantVectorStore", "Qdrant")
_KEY_NAMESPACE = uuid.UUID("6f1c3e2a-5b0d-4c1e-9a7f-2d8b4e6a1c30")  # fixed: ids must not move


def key_uuid(key: str) -> str:
    """The UUID a key is stored under where ids must be UUIDs: the same for every run."""
    return str(uuid.uuid5(_KEY_NAMESPACE, key))


class FrameworkStore:
    """What the adapters' wrappers of a framework's store share: ``store``, listed through
    ``list_ids(store)``; writes the framework makes visible itself; and no generation
    (a framework store has no place for one), so every open lists the store.

    ``uuid_ids``: the store takes only UUIDs as ids (Qdrant; ``None``: whether its
    class is one of ``UUID_ID_STORES``). Each row is then stored under
    :func:`key_uuid` of its key, with the key itself in its metadata
    (``KEY_FIELD``), and ``list_ids`` must return those keys (a row without one is
    not the index's, and the index refuses the store).
    """

    def __init__(self, store: Any, list_ids: Callable[[Any], Iterable[str]],
                 uuid_ids: bool | None = None) -> None:
        if uuid_ids is None:
            uuid_ids = type(store).__name__ in UUID_ID_STORES
        if not isinstance(uuid_ids, bool):
            raise TypeError(f"uuid_ids must be a bool, got {type(uuid_ids).__name__}")
        self.store = store
        self._list_ids = list_ids
        self.uuid_ids = uuid_ids

    def list_keys(self) -> Iterable[str]:
        return list(self._list_ids(self.store))

    def row_ids(self, keys: Sequence[str]) -> list[str]:
        """The ids the store holds these keys' rows under."""
        return [key_uuid(k) for k in keys] if self.uuid_ids else list(keys)

    def row_metadatas(self, keys: Sequence[str],
                      metadatas: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The metadata stored with each row (with its key, where ids are UUIDs)."""
        if not self.uuid_ids:
            return [dict(m) for m in metadatas]
        return [{**m, KEY_FIELD: k} for k, m in zip(keys, metadatas, strict=True)]

    def key_of(self, row_id: str | None, metadata: Mapping[str, Any]) -> str:
        """The key of a row the store returned, from its id or (UUID ids) its metadata."""
        key = metadata.get(KEY_FIELD) if self.uuid_ids else row_id
        if not isinstance(key, str):
            what = f"metadata field {KEY_FIELD!r}" if self.uuid_ids else "id"
            raise ValueError(f"{type(self.store).__name__} returned a row without its {what}, "
                             "so it cannot be matched to the index's rows")
        return key

    def flush(self) -> None:
        """Nothing to do: the framework's store makes its own writes visible."""

    def read_marker(self) -> str | None:
        return None

    def write_marker(self, value: str) -> None:
        """Nothing: see :meth:`read_marker`."""


def qdrant_keys(client: Any, collection: str, field: Sequence[str], page: int = 1024
                ) -> list[str]:
    """Every row's key in a Qdrant collection, read from the payload at the path
    ``field``. A point without one gives its id, which :func:`reconcile` then
    refuses as not the index's. (Qdrant ids must be UUIDs: see ``FrameworkStore``.)"""
    keys: list[str] = []
    offset = None
    while True:
        points, offset = client.scroll(collection, limit=page, offset=offset,
                                       with_payload=[field[0]], with_vectors=False)
        for point in points:
            value: Any = point.payload or {}
            for name in field:
                value = value.get(name) if isinstance(value, dict) else None
            keys.append(value if isinstance(value, str) else str(point.id))
        if offset is None:
            return keys


def as_backend(store: object, framework_type: type, wrap: Callable[[Any], VectorStoreBackend],
               what: str) -> VectorStoreBackend:
    """``store`` wrapped by ``wrap`` when it is a ``framework_type``, or a
    ``VectorStoreBackend`` as given; ``what`` names the framework type in the error."""
    if isinstance(store, framework_type):
        return wrap(store)
    if isinstance(store, VectorStoreBackend):
        return store
    raise TypeError(f"vector_store must be {what} or a conceptgraph VectorStoreBackend, "
                    f"got {type(store).__name__}")


def text_digest(text: str) -> str:
    """The digest that ties a chunk's keys to its text."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=DIGEST_CHARS // 2).hexdigest()


NO_METADATA = "{}"  # a chunk's metadata JSON when it has none


def chunk_digest(text: str, metadata: str = NO_METADATA) -> str:
    """The digest that ties a chunk's keys to its text and its metadata (JSON text).

    Metadata is part of the key so that a store whose rows carry other metadata
    than the index's (an update the index never saved) holds other keys, which
    :func:`reconcile` finds as it finds any missing or stale row. A chunk without
    metadata keeps its text's digest, the key every version has written.
    """
    if metadata == NO_METADATA:
        return text_digest(text)
    encoded = text.encode("utf-8")
    with_metadata = hashlib.blake2b(len(encoded).to_bytes(8, "little"),
                                    digest_size=DIGEST_CHARS // 2, person=b"cg-metadata")
    with_metadata.update(encoded)
    with_metadata.update(metadata.encode("utf-8"))
    return with_metadata.hexdigest()


def row_key(chunk_id: str, digest: str, kind: str, part: int) -> str:
    return f"{chunk_id}#{digest}.{kind}{part}"


def parse_key(key: str) -> tuple[str, str, str, int] | None:
    """``(chunk id, digest, kind, part)`` of a key of this module's form, else None."""
    found = _KEY.match(key)
    if found is None:
        return None
    return found["chunk"], found["digest"], found["kind"], int(found["part"])


@dataclass(frozen=True, eq=False)
class StoredRows:
    """Where the rows an engine holds for one corpus state sit in its vectors.

    Row ``first[c] + p`` of ``vectors`` is part ``p`` of chunk ``c``; chunk ``c``
    has ``count[c]`` parts. ``kind`` is ``"s"`` (sentence rows) or ``"u"`` (units).
    """

    corpus: CorpusState
    kind: str
    vectors: Rows
    first: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, corpus: CorpusState, unit_vectors: np.ndarray | None) -> StoredRows:
        """The rows a vector index over ``corpus`` holds: sentences, or units with vectors."""
        n_chunks = len(corpus)
        if unit_vectors is None:
            first = np.asarray(corpus.sentence_offsets[:-1], dtype=np.int64)
            count = np.diff(corpus.sentence_offsets).astype(np.int64)
            return cls(corpus, "s", corpus.sentence_vectors, first, count)
        unit_chunk = corpus.sentence_chunk()[corpus.unit_offsets()[:-1]]
        count = np.bincount(unit_chunk, minlength=n_chunks).astype(np.int64)
        first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        return cls(corpus, "u", unit_vectors, first, count)

    def __len__(self) -> int:
        return len(self.vectors)

    def keys_of(self, chunks: Iterable[int]) -> list[str]:
        """Every key of these chunk positions, chunk by chunk."""
        out: list[str] = []
        for c in chunks:
            digest = chunk_digest(self.corpus.texts[c], self.corpus.metadata[c])
            cid = self.corpus.ids[c]
            out.extend(row_key(cid, digest, self.kind, p) for p in range(int(self.count[c])))
        return out

    def rows_of(self, chunks: Sequence[int]) -> np.ndarray:
        """The row positions of these chunks, in :meth:`keys_of` order."""
        c = np.asarray(chunks, dtype=np.int64)
        return concatenated_ranges(self.first[c], self.first[c] + self.count[c])

    def texts_of(self, rows: np.ndarray) -> list[str]:
        """Each row's text: its sentence, or its unit's sentences."""
        corpus = self.corpus
        spans = corpus.sentence_spans
        chunk_of = corpus.sentence_chunk()
        if self.kind == "s":
            sentence_first, sentence_last = rows, rows
        else:
            offsets = corpus.unit_offsets()
            sentence_first, sentence_last = offsets[rows], offsets[rows + 1] - 1
        return [corpus.texts[int(chunk_of[a])][int(spans[a][0]):int(spans[b][1])]
                for a, b in zip(sentence_first.tolist(), sentence_last.tolist(), strict=True)]

    def metadatas_of(self, chunks: Sequence[int]) -> list[dict[str, Any]]:
        """Each row's metadata, in :meth:`keys_of` order: its chunk's id, its part, and
        the chunk's scalar metadata fields (what every store can filter on)."""
        out: list[dict[str, Any]] = []
        for c in chunks:
            scalar = {k: v for k, v in self.corpus.metadata_of(c).items()
                      if isinstance(v, (str, int, float, bool))}
            cid = self.corpus.ids[c]
            out.extend({**scalar, "chunk_id": cid, "part": p} for p in range(int(self.count[c])))
        return out

    def unit_terms(self, rows: np.ndarray) -> sp.csr_matrix:
        """(rows x the corpus's terms) counts of the unit each row opens: a unit row's
        own, a sentence row's unit's when it is the unit's first sentence, none for the
        unit's other sentences. One row per unit holds its terms, so an engine ranks
        units, not sentences, and each unit it finds takes one row of what it returns."""
        offsets = self.corpus.unit_offsets()
        rows = np.asarray(rows, dtype=np.int64)
        if self.kind == "s":
            units = np.searchsorted(offsets, rows, side="right") - 1
            opens = offsets[units] == rows
        else:
            units, opens = rows, np.ones(len(rows), dtype=bool)
        first = offsets[units]
        end = np.where(opens, offsets[units + 1], first)
        sentences = concatenated_ranges(first, end)
        within = np.concatenate([[0], np.cumsum(end - first)]).astype(np.int64)
        return sp.csr_matrix(segment_matrix(within, len(sentences))
                             @ self.corpus.sentence_terms[sentences])

    def terms_of(self, rows: np.ndarray) -> list[dict[int, float]]:
        """Each row's postings: 1.0 on the :func:`term_dimension` of every term of the
        unit it opens (:meth:`unit_terms`; terms sharing a dimension hold it once),
        ``{NO_TERMS: 1.0}`` for a row that holds none. Presence, as the concept links
        are: a query weighted by concept values then scores a unit by its evidence."""
        counts = self.unit_terms(rows)
        used, entry_term = np.unique(counts.indices, return_inverse=True)
        names = self.corpus.terms
        dimensions = np.fromiter((term_dimension(names[t]) for t in used.tolist()),
                                 dtype=np.int64, count=len(used))[entry_term].tolist()
        bounds = counts.indptr.tolist()
        return [dict.fromkeys(dimensions[a:b], 1.0) if b > a else {NO_TERMS: 1.0}
                for a, b in itertools.pairwise(bounds)]

    def write(self, store: VectorStoreBackend, chunks: Sequence[int],
              batch_rows: int = 4096) -> int:
        """Upsert every row of these chunks, ``batch_rows`` at a time (with their terms
        where the store keeps them); returns rows written."""
        keys = self.keys_of(chunks)
        rows = self.rows_of(chunks)
        metadatas = self.metadatas_of(chunks)
        with_terms = keeps_terms(store)
        for start in range(0, len(keys), batch_rows):
            part = slice(start, start + batch_rows)
            picked = rows[part]
            vectors = np.asarray(self.vectors[picked], dtype=np.float32)
            if with_terms:
                cast(TermPostingsBackend, store).upsert_with_terms(
                    keys[part], vectors, self.texts_of(picked), metadatas[part],
                    self.terms_of(picked))
            else:
                store.upsert(keys[part], vectors, self.texts_of(picked), metadatas[part])
        return len(keys)


# rows a replica keeps of those it fetched last (:class:`EngineRows`): 96 MB at 384
# dimensions
ENGINE_ROWS_CACHED = 1 << 16
SCORED_QUERIES_KEPT = 8  # queries whose store scores a replica keeps (EngineRows)


class EngineRows:
    """A state's sentence vectors read from the store that holds them: a read-only
    replica's (``ConceptGraphIndex.load(..., vectors_in_store=True)``), which holds no
    vector of its own beyond the rows it fetched last.

    Row ``i`` is sentence ``i``, stored under its key (:func:`row_key`: chunk id, the
    digest of the chunk's text, part). It answers what a replica's queries ask of its
    sentence vectors: ``len``, ``shape``, ``dtype`` and rows by position (an int, a
    slice, an array of positions), in one request to the store for the rows not among
    the ``cached_rows`` fetched last. Reading every row (``@`` or ``np.asarray``)
    raises: a replica's paths never scan them all.

    Queries score rows through :meth:`scores_at`. With ``scores_in_store`` on (a store
    that is a :class:`VectorScoresBackend`), the rows not kept here are scored by the
    store, which returns floats instead of vectors; its float32 sums may differ from
    this process's in the last bits, so answers then equal the writer's only up to
    such ties. Off (the default), the rows are read and scored here, to the writer's
    bits.
    """

    ndim = 2

    def __init__(self, store: VectorRowsBackend, ids: Sequence[str], texts: Sequence[str],
                 metadata: Sequence[str], sentence_offsets: np.ndarray, dim: int,
                 cached_rows: int = ENGINE_ROWS_CACHED) -> None:
        if not isinstance(store, VectorRowsBackend):
            raise TypeError(f"{type(store).__name__} does not return the vectors it holds "
                            "(vectors_of), so an index cannot read its rows from it")
        self.store = store
        self._ids, self._texts, self._metadata = ids, texts, metadata  # the keys' parts
        self._offsets = np.asarray(sentence_offsets, dtype=np.int64)
        self.shape = (int(self._offsets[-1]), int(dim))
        self.dtype = np.dtype(np.float32)
        # the rows fetched last, in a ring of slots: a query reads the engine's nearest
        # rows, then its pool's sentences, which hold them (a fifth of what it reads)
        self.cached_rows = cached_rows  # may be changed; 0 reads every row from the store
        self._scores_in_store = False
        self._lock = threading.Lock()
        self._slot_of: dict[int, int] = {}
        self._ring = np.zeros((0, int(dim)), dtype=np.float32)
        self._ring_position = np.zeros(0, dtype=np.int64)
        self._next_slot = 0
        # the store's scores of the last few queries, by the query's bytes: the pool's
        # sentences hold the engine's nearest rows, scored just before
        self._scored_last: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def scores_in_store(self) -> bool:
        """Whether rows not kept here are scored by the store (see the class docstring)."""
        return self._scores_in_store

    @scores_in_store.setter
    def scores_in_store(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise TypeError(f"scores_in_store must be a bool, got {type(on).__name__}")
        if on:
            check_store_scores(self.store)
        self._scores_in_store = on

    def __len__(self) -> int:
        return self.shape[0]

    def keys_of(self, positions: np.ndarray) -> list[str]:
        """The store's key of each sentence position."""
        positions = np.asarray(positions, dtype=np.int64)
        chunks = np.searchsorted(self._offsets, positions, side="right") - 1
        parts = (positions - self._offsets[chunks]).tolist()
        used, which = np.unique(chunks, return_inverse=True)
        prefixes = [row_key(self._ids[c], chunk_digest(self._texts[c], self._metadata[c]),
                            "s", 0)[:-1]
                    for c in used.tolist()]
        return [prefixes[w] + str(p) for w, p in zip(which.tolist(), parts, strict=True)]

    def _positions(self, key: Any) -> np.ndarray:
        """The row positions ``key`` names, wrapped if negative, as one flat array."""
        if isinstance(key, tuple):
            raise TypeError("EngineRows is read by row: rows[i], rows[a:b] or rows[positions]")
        if isinstance(key, slice):
            positions = np.arange(*key.indices(len(self)), dtype=np.int64)
        else:
            positions = np.asarray(key, dtype=np.int64).reshape(-1)
        if len(positions) and (int(positions.min()) < -len(self)
                               or int(positions.max()) >= len(self)):
            raise IndexError(f"a row outside the {len(self)} sentence rows")
        return np.where(positions < 0, positions + len(self), positions)

    def _held(self, unique: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of these distinct positions are kept here, and a copy of their rows."""
        with self._lock:
            if self.cached_rows <= 0 and len(self._ring):
                self._emptied()
            slots = np.fromiter((self._slot_of.get(p, -1) for p in unique.tolist()),
                                dtype=np.int64, count=len(unique))
            held = slots >= 0
            return held, self._ring[slots[held]]  # copied while no write moves them

    def _read(self, positions: np.ndarray) -> np.ndarray:
        """These distinct rows from the store, kept here after."""
        fetched = self._fetched(positions)
        if self.cached_rows > 0 and len(positions):
            with self._lock:
                self._keep(positions, fetched)
        return fetched

    def __getitem__(self, key: Any) -> np.ndarray:
        single = not isinstance(key, (slice, tuple)) and np.ndim(key) == 0
        unique, inverse = np.unique(self._positions(key), return_inverse=True)
        rows = np.empty((len(unique), self.shape[1]), dtype=np.float32)
        held, held_rows = self._held(unique)
        rows[held] = held_rows
        rows[~held] = self._read(unique[~held])
        out = rows[inverse]
        return out[0] if single else out

    def scores_at(self, positions: np.ndarray, query: np.ndarray) -> np.ndarray:
        """``self[positions] @ query`` as float32. With ``scores_in_store``, the rows not
        kept here are scored by the store, and those it does not score are read."""
        q = np.asarray(query, dtype=np.float32)
        if not self._scores_in_store:
            return scan_scores(self[positions], q)
        unique, inverse = np.unique(self._positions(positions), return_inverse=True)
        scores = np.empty(len(unique), dtype=np.float32)
        held, held_rows = self._held(unique)
        scores[held] = scan_scores(held_rows, q)
        asked = unique[~held]
        found = self._scored(asked, q)
        unscored = np.isnan(found)
        if unscored.any():
            found[unscored] = scan_scores(self._read(asked[unscored]), q)
        scores[~held] = found
        return scores[inverse]

    def _scored(self, positions: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The store's scores of these distinct, ascending positions (NaN where it gave
        none), those it gave this query before taken from the last queries' scores."""
        memo_key = q.tobytes()
        out = np.full(len(positions), np.nan, dtype=np.float32)
        with self._lock:
            before = self._scored_last.get(memo_key)
        if before is not None and len(before[0]):
            at = np.minimum(np.searchsorted(before[0], positions), len(before[0]) - 1)
            known = before[0][at] == positions
            out[known] = before[1][at[known]]
        asked = np.isnan(out)
        if not asked.any():
            return out
        store = cast(VectorScoresBackend, self.store)
        got = np.asarray(store.scores_of(self.keys_of(positions[asked]), q), dtype=np.float32)
        if got.shape != (int(asked.sum()),):
            raise ValueError(f"{type(store).__name__}.scores_of returned scores of shape "
                             f"{got.shape} for {int(asked.sum())} keys")
        out[asked] = got
        self.remember(q, positions, out)
        return out

    def remember(self, query: np.ndarray, positions: np.ndarray, scores: np.ndarray) -> None:
        """Keep the store's scores of these rows for this query (NaN ones are dropped):
        the rows a search found come with their scores, asked for again by the pool."""
        memo_key = np.asarray(query, dtype=np.float32).tobytes()
        known = ~np.isnan(scores)
        positions, scores = np.asarray(positions, np.int64)[known], scores[known]
        with self._lock:
            before = self._scored_last.get(memo_key)
            if before is None and len(self._scored_last) >= SCORED_QUERIES_KEPT:
                del self._scored_last[next(iter(self._scored_last))]
            if before is not None:
                positions = np.concatenate([before[0], positions])
                scores = np.concatenate([before[1], scores])
            positions, first = np.unique(positions, return_index=True)
            self._scored_last[memo_key] = (positions, scores[first])

    def _keep(self, positions: np.ndarray, rows: np.ndarray) -> None:
        """Put fetched rows in the ring's next slots, over the oldest (under the lock)."""
        size = min(self.cached_rows, len(self))
        if len(self._ring) != size:  # made, or resized: start again
            self._emptied()
            self._ring = np.zeros((size, self.shape[1]), dtype=np.float32)
            self._ring_position = np.full(size, -1, dtype=np.int64)
        positions, rows = positions[-size:], rows[-size:]
        slots = (self._next_slot + np.arange(len(positions))) % size
        for old in self._ring_position[slots].tolist():
            if old >= 0:
                del self._slot_of[old]
        self._ring[slots] = rows
        self._ring_position[slots] = positions
        self._slot_of.update(zip(positions.tolist(), slots.tolist(), strict=True))
        self._next_slot = int((self._next_slot + len(positions)) % size)

    def _emptied(self) -> None:
        """Drop every kept row (under the lock)."""
        self._slot_of.clear()
        self._ring = np.zeros((0, self.shape[1]), dtype=np.float32)
        self._ring_position = np.zeros(0, dtype=np.int64)
        self._next_slot = 0

    def _fetched(self, positions: np.ndarray) -> np.ndarray:
        """These rows, read from the store in one request."""
        if not len(positions):
            return np.zeros((0, self.shape[1]), dtype=np.float32)
        try:
            rows = self.store.vectors_of(self.keys_of(positions))
        except MissingRowsError as exc:
            raise MissingRowsError(
                f"{exc}. The store no longer returns rows of chunks this index loaded. "
                "Either the writer changed it after the save this replica read: load the "
                "writer's latest save again. Or the engine does not return rows it holds: "
                "a Milvus 2.3.5 server with memory-mapped segments (queryNode.mmapDirPath) "
                "returns few of its rows by key; run it without.") from exc
        rows = np.asarray(rows, dtype=np.float32)
        if rows.shape != (len(positions), self.shape[1]):
            raise ValueError(f"{type(self.store).__name__}.vectors_of returned rows of shape "
                             f"{rows.shape} for {len(positions)} keys of {self.shape[1]} values")
        return rows

    def __setitem__(self, key: Any, value: Any) -> None:
        raise ValueError("assignment destination is read-only: a state's vectors never change")

    def __matmul__(self, query: np.ndarray) -> np.ndarray:
        raise ValueError("a replica reads its vectors from the store and never scans them "
                         "all; this needs an index that holds its vectors")

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        raise ValueError("a replica reads its vectors from the store and never reads them "
                         "all; this needs an index that holds its vectors")

    def __repr__(self) -> str:
        return f"EngineRows({len(self)} rows of {self.shape[1]} in {type(self.store).__name__})"


@dataclass(frozen=True, eq=False)
class EngineVectorIndex:
    """A :class:`~shared_core.search.vector_index.VectorIndex` over an outside engine.

    The engine's keys are mapped to this state's rows; a key of a chunk this state
    does not hold (a writer's newer rows, or rows a crash left behind) is skipped.
    Scores are the exact cosines of the rows found, from the index's own vectors (a
    replica's: the same rows, read back from the engine).

    ``surplus``: rows the engine is known to hold beyond this state's (a writer's that
    holds no vector keeps the rows its updates dropped until its next save). Each
    search asks for that many more, so the ``k`` best of this state's rows are still
    all found: at most ``surplus`` rows it does not hold can rank above them.
    """

    store: VectorStoreBackend
    rows: StoredRows
    surplus: int = 0

    def __len__(self) -> int:
        return len(self.rows)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self))
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        rows = self.rows.vectors
        if isinstance(rows, EngineRows) and rows.scores_in_store:  # the store's scores
            found = cast(VectorScoresBackend, self.store).search_scored(query, k)
            picked, which = self._positions_of(key for key, _ in found)
            rows.remember(query, picked, np.array([found[i][1] for i in which.tolist()],
                                                  dtype=np.float32))
        else:
            picked = self._best(self.store.search(query, k + self.surplus), k)
        return picked, row_scores(rows, picked, query)

    @property
    def keeps_terms(self) -> bool:
        """Whether the engine also holds the rows' term postings (:func:`keeps_terms`)."""
        return keeps_terms(self.store)

    def search_terms(self, queries: Sequence[Mapping[int, float]], k: int) -> list[np.ndarray]:
        """For each query's term weights (term positions in this corpus -> weight), the
        rows of this state the engine finds, best first, up to ``k``: one request."""
        k = min(k, len(self))
        names = self.rows.corpus.terms
        asked: list[dict[int, float]] = []
        for weights in queries:
            by_dimension: dict[int, float] = {}
            for term, weight in weights.items():
                if weight > 0:
                    d = term_dimension(names[term])
                    by_dimension[d] = by_dimension.get(d, 0.0) + float(weight)
            asked.append(by_dimension)
        if k <= 0:
            return [np.zeros(0, dtype=np.int64) for _ in asked]
        keys = cast(TermPostingsBackend, self.store).search_terms(asked, k + self.surplus)
        if len(keys) != len(asked):
            raise ValueError(f"{type(self.store).__name__}.search_terms answered "
                             f"{len(keys)} queries of {len(asked)}")
        return [self._best(query_keys, k) for query_keys in keys]

    def _best(self, keys: Iterable[str], k: int) -> np.ndarray:
        """The first ``k`` rows of this state the engine's keys name, each once: with a
        surplus, a chunk whose metadata changed is there under its old key too."""
        rows = self._rows_of(keys)
        if self.surplus:
            _, first = np.unique(rows, return_index=True)
            rows = rows[np.sort(first)]
        return rows[:k]

    def _rows_of(self, keys: Iterable[str]) -> np.ndarray:
        """The rows of this state the engine's keys name, in their order; a key of a chunk
        this state does not hold (a writer's newer rows, or a crash's) is skipped."""
        return self._positions_of(keys)[0]

    def _positions_of(self, keys: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_rows_of`, and which of ``keys`` each row is (its index among them)."""
        position, rows = self.rows.corpus.position, self.rows
        found: list[int] = []
        which: list[int] = []
        for i, key in enumerate(keys):
            parsed = parse_key(key)
            if parsed is None:
                continue
            chunk_id, _, kind, part = parsed
            c = position.get(chunk_id)
            if c is None or kind != rows.kind or part >= rows.count[c]:
                continue
            found.append(int(rows.first[c]) + part)
            which.append(i)
        return np.asarray(found, dtype=np.int64), np.asarray(which, dtype=np.int64)


@dataclass(frozen=True)
class Reconciled:
    """What :func:`reconcile` did: rows written and deleted, whether it listed the store
    (False: the store's generation was the expected one), and the generation now."""

    written: int
    deleted: int
    listed: bool
    generation: str


def reconcile(store: VectorStoreBackend, rows: StoredRows,
              generation: str | None = None) -> Reconciled:
    """Make ``store`` hold exactly ``rows``' keys: write the missing, delete the rest.

    ``generation``: the store generation ``rows`` were saved with; when the store
    records the same one, it holds exactly these rows and is not listed. A chunk
    is rewritten whole when any of its keys is missing. Raises ``ValueError``,
    changing nothing, when the store holds ids of another form (it is not this
    index's store). Where ``rows`` are the store's own (:class:`EngineRows`: a writer
    that holds no vector), a missing row cannot be written again: ``MissingRowsError``,
    changing nothing.
    """
    if generation and store.read_marker() == generation:
        return Reconciled(0, 0, listed=False, generation=generation)
    held = set(store.list_keys())
    foreign = [key for key in held if parse_key(key) is None]
    if foreign:
        raise ValueError(
            f"the vector store holds {len(foreign)} ids that are not a conceptgraph index's "
            f"(e.g. {sorted(foreign)[0]!r}); give the index a store or collection of its own")
    missing_chunks: list[int] = []
    expected: set[str] = set()
    for c in range(len(rows.corpus)):
        keys = rows.keys_of([c])
        expected.update(keys)
        if not held.issuperset(keys):
            missing_chunks.append(c)
    stale = sorted(held - expected)
    if missing_chunks and isinstance(rows.vectors, EngineRows):
        raise MissingRowsError(
            f"the vector store lacks rows of {len(missing_chunks)} of this save's chunks (e.g. "
            f"{rows.corpus.ids[missing_chunks[0]]!r}), and this index holds no vector to "
            "write them again: load the save with its vectors (without vectors_in_store), "
            "or the latest save made with this store")
    store.write_marker("")
    if stale:
        store.delete(stale)
    written = rows.write(store, missing_chunks) if missing_chunks else 0
    if stale or written:
        store.flush()
    return Reconciled(written, len(stale), listed=True, generation=_new_generation(store))


def _new_generation(store: VectorStoreBackend) -> str:
    generation = secrets.token_hex(16)
    store.write_marker(generation)
    return generation


def rows_written_ahead(store: VectorStoreBackend, corpora: Sequence[CorpusState],
                       held: Collection[str] = ()) -> list[str]:
    """Upsert every sentence row of these states' chunks, whose rows this process holds
    (an update's new chunks, before the index that holds no vector reads them back by
    key). Clears the store's generation first: the store now holds rows no save lists.
    On an error, every row written is deleted again before it raises, except those in
    ``held``: rows the store held already (a deleted chunk added back as it was, whose
    rows the latest save still lists). Returns the keys."""
    store.write_marker("")
    written: list[str] = []
    try:
        for corpus in corpora:
            rows = StoredRows.of(corpus, None)
            chunks = range(len(corpus))
            written.extend(rows.keys_of(chunks))
            rows.write(store, chunks)
    except BaseException:
        store.delete([key for key in written if key not in held])
        raise
    if written:
        store.flush()
    return written


def changed_rows(store: VectorStoreBackend, before: StoredRows, after: StoredRows,
                 rewritten: Iterable[str] = ()) -> str:
    """Bring ``store`` from ``before``'s rows to ``after``'s: one write of the new chunks
    (and of ``rewritten`` ids, whose metadata changed, under their new keys), one
    delete of the gone ones' rows and of the rewritten ones' old rows. Returns the
    store's new generation.

    On an error the rows it wrote are deleted again before it raises, so that the
    store holds what it held; rows it could not delete are found by the next
    :func:`reconcile` (the generation stays cleared).
    """
    kinds_differ = before.kind != after.kind
    before_ids, after_ids = before.corpus.position, after.corpus.position
    kept = [i for i in rewritten if i in after_ids and i in before_ids]
    new = sorted({after_ids[i] for i in kept}
                 | {c for i, c in after_ids.items() if kinds_differ or i not in before_ids})
    gone = [c for i, c in before_ids.items() if kinds_differ or i not in after_ids]
    # a chunk's metadata is part of its keys: a rewritten chunk's old rows go too
    old_keys = set(before.keys_of(before_ids[i] for i in kept))
    new_keys = set(after.keys_of(after_ids[i] for i in kept))
    store.write_marker("")
    try:
        after.write(store, new)
    except BaseException:  # what was written goes; the rows it replaces are still there
        written = after.keys_of(c for c in new if after.corpus.ids[c] not in before_ids)
        store.delete(written + sorted(new_keys - old_keys))
        raise
    stale = sorted(set(before.keys_of(gone)) | (old_keys - new_keys))  # each key once
    if stale:
        store.delete(stale)
    if new or stale:
        store.flush()
    return _new_generation(store)
