"""``ConceptGraphIndex``: chunks in, core-chunk selection and concept-graph retrieval out.

The index's data is one immutable :class:`IndexState`: the stored chunks
(:mod:`shared_core.state.corpus`) and the concept graph derived from them
(:mod:`shared_core.state.derived`). ``add`` and ``delete`` build the next state beside
the current one and publish it by swapping one reference under a writer lock;
every read takes the current state once and uses only it. So a failed update
publishes nothing, and a query running while another thread writes sees either
the old index or the new one, never half of each.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import itertools
import json
import logging
import operator
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal, cast

import numpy as np

from .config import KNOB_GROUPS, CjkSegmenter, ConceptGraphConfig, SelectBy
from .embeddings.base import Embedder, check_texts, embed_query
from .fusion import ContextItem
from .heap import give_back_free_heap
from .paging import advise_random_reads
from .search.ann import HnswSegments
from .search.candidates import (
    ROWS_PER_UNIT_SEARCHED,
    CandidateSimilarity,
    GatheredUnits,
    StartedSimilarity,
    UnitSimilarity,
    UnitView,
    similarity_beside,
)
from .search.coded_scan import CodedScan
from .search.concepts import ConceptHnsw, searched_weighting
from .search.external import (
    EngineRows,
    EngineVectorIndex,
    MissingRowsError,
    Reconciled,
    StoredRows,
    VectorRowsBackend,
    VectorStoreBackend,
    changed_rows,
    check_store_scores,
    keeps_terms,
    reconcile,
    returns_vectors,
    rows_written_ahead,
)
from .search.fused import ConceptWeighting, concept_weights, fused_search
from .search.local import Hit, SearchTrace, Stage, local_search
from .search.row_codes import coded_rows_at, make_codes
from .search.side_thread import prepare_side_thread
from .search.summing import compiled as sums_compiled
from .search.summing import missing as sums_missing
from .search.summing import prepare as prepare_sums
from .search.vector_index import ScoredRows, row_scores, rows_at, scan_scores
from .search.walk import expansion_hops_for, walk_hops_for
from .select.cost import Selection
from .select.coverage import coverage_order, order_scores
from .select.scores import chunk_scores, id_random_scores, select_by_scores, value_per_token
from .state.corpus import (
    CorpusState,
    empty_corpus,
    merge_many,
    replaced,
    rows_placeholder,
    take,
)
from .state.derived import (
    ANN_MIN_ROWS,
    DerivedGraph,
    VectorSearch,
    chunk_term_counts,
    concept_search_used,
    derive_graph,
    failed_self_recall,
    segment_means,
    wants_concept_graph,
    with_concept_search,
    with_vector_search,
)
from .state.ingest import prepare_chunks, prepare_shard
from .state.refresh import refresh_graph
from .state.rows import RowsToAttach
from .state.saved import SavedGraph, restore_graph, saved_parts
from .state.spill import DEFAULT_SPILL, VectorSpill
from .text.hygiene import check_query, invalid_character
from .text.sentences import concatenated_ranges
from .text.terms import Analyzer, resolve_cjk_segmenter, term_analyzer
from .text.tokens import count_tokens_batch, load_tokenizer

logger = logging.getLogger(__name__)

SelectionMethod = Literal["concept", "coverage", "knn", "random"]
# chunks split, embedded and counted per step of an add: bounds the memory a step
# takes beyond the stored data, whatever the input's size
ADD_BATCH = 2048
# batches submitted to an add's executor and not yet collected: keeps its workers busy
# while bounding what waits in memory
SHARDS_IN_FLIGHT = 8
# units recounted per step of warm(): two cores' worth of texts (text.tokens), bounded
WARM_BATCH = 8192
# what reconfigured() must rebuild or re-derive (see config.KNOB_GROUPS)
CORPUS_KNOBS = KNOB_GROUPS["build"]
GRAPH_KNOBS = (*KNOB_GROUPS["graph"], "chunk_similarity")


def content_id(text: str) -> str:
    """The id a chunk gets from its text alone, so re-adding it is a no-op."""
    return "c" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One indexed chunk as stored: its id, text, token count and metadata."""

    id: str
    text: str
    tokens: int
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Why a chunk is in the context: the concept that brought it and at which stage.

    Stage ``"similarity"`` (fused ranking only): the unit contains no concept the
    query reached and is there on its own similarity; it has no concept.
    """

    concept: str | None
    concept_similarity: float | None
    stage: Stage
    hop: int

    def to_dict(self) -> dict[str, Any]:
        return {"concept": self.concept, "concept_similarity": self.concept_similarity,
                "stage": self.stage, "hop": self.hop}


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    """A chunk in a retrieval result, with its score and why it was chosen."""

    chunk: Chunk
    score: float
    provenance: Provenance

    @property
    def id(self) -> str:
        return self.chunk.id

    @property
    def text(self) -> str:
        return self.chunk.text

    @property
    def chunk_id(self) -> str:
        """The chunk this hit stands for: its own id, or the chunk a sentence unit was cut from."""
        parent = self.chunk.metadata.get("parent_chunk_id")
        return parent if isinstance(parent, str) else self.chunk.id

    def metadata(self) -> dict[str, Any]:
        """What a framework object carries: the chunk's metadata plus id, score, provenance."""
        return {**self.chunk.metadata, "chunk_id": self.chunk.id, "score": self.score,
                "provenance": self.provenance.to_dict()}

    def to_context_item(self) -> ContextItem:
        """This hit as fusion input; a unit votes through the chunk it was cut from."""
        return ContextItem(self.chunk.id, self.chunk.text, self.chunk.tokens, self.score,
                           self.metadata(),
                           source_id=self.chunk.metadata.get("parent_chunk_id", ""))


@dataclass(frozen=True)
class RetrievalResult:
    """The context for one query: chunks in context order, and how the budget went."""

    query: str
    chunks: tuple[RetrievedChunk, ...]
    direct_concepts: tuple[str, ...]
    expanded_concepts: int
    stopped_by_budget: bool
    budget: int

    @property
    def tokens(self) -> int:
        return sum(c.chunk.tokens for c in self.chunks)

    @property
    def context(self) -> str:
        return "\n\n".join(c.text for c in self.chunks)

    def tokens_by_stage(self) -> dict[str, int]:
        out = {"direct": 0, "expanded": 0, "similarity": 0}
        for c in self.chunks:
            out[c.provenance.stage] += c.chunk.tokens
        return out


@dataclass(frozen=True, eq=False)
class IndexState:
    """Everything one version of an index holds; never changed once published.

    ``corpus`` is what is stored and saved, ``graph`` what is derived from it
    under ``config``. A reader that holds a state can use it for as long as it
    likes, whatever writers do meanwhile.
    """

    config: ConceptGraphConfig
    corpus: CorpusState
    graph: DerivedGraph
    vector_store: VectorStoreBackend | None = None
    # the store's generation once it holds this state's rows (see search.external)
    store_generation: str | None = None

    def __post_init__(self) -> None:
        # with an approximate index, queries gather scattered sentence rows: no read-around
        # of them (``paging``), whether they are a build's spill or a loaded save's map
        if self.graph.ann is not None:
            advise_random_reads(self.corpus.sentence_vectors)

    @classmethod
    def build(cls, corpus: CorpusState, config: ConceptGraphConfig,
              ann: VectorSearch | None = None, saved: SavedGraph | None = None,
              verify: bool = False,
              vector_store: VectorStoreBackend | None = None,
              spill: VectorSpill | None = None) -> IndexState:
        """The state over ``corpus``, its graph derived, or restored from ``saved`` parts
        (which raises ``ValueError`` when they do not fit the chunks; ``verify``
        derives what they hold again and compares). ``vector_store``: an outside
        engine that finds the vector candidates (``search.external``); ``spill``:
        where a newly built approximate index is mapped from."""
        graph = (derive_graph(corpus, config, ann, vector_store, spill) if saved is None
                 else restore_graph(corpus, config, saved, ann, verify, vector_store, spill))
        return cls(config, corpus, with_concept_search(graph, config), vector_store)

    def stored_rows(self) -> StoredRows:
        """The vector rows an outside store holds for this state (see ``search.external``)."""
        return StoredRows.of(self.corpus, self.graph.unit_vectors)

    def updated(self, corpus: CorpusState, spill: VectorSpill | None = None) -> IndexState:
        """The state over ``corpus`` (this one's chunks after an add or delete).

        The graph is refreshed from this state's, not derived again: equal to a
        full derivation (``shared_core.state.refresh``), at a fraction of its cost.
        ``spill``: where a new or grown approximate index is mapped from.
        """
        graph = refresh_graph(self.corpus, self.graph, corpus, self.config,
                              vector_store=self.vector_store, spill=spill)
        return IndexState(self.config, corpus, with_concept_search(graph, self.config),
                          self.vector_store)


class ConceptGraphIndex:
    """The G2ConS concept graph over a set of chunks; safe to query while another thread writes.

    >>> from shared_core import ConceptGraphIndex, HashingEmbedder
    >>> index = ConceptGraphIndex.from_texts(
    ...     ["Ada Lovelace wrote the first program.", "Charles Babbage designed the engine."],
    ...     embedder=HashingEmbedder())
    >>> index.retrieve("Who wrote the first program?").chunks[0].text
    'Ada Lovelace wrote the first program.'

    Chunks are kept in id order, and every tie in selection and retrieval is
    broken by content (ids, terms), so an index depends only on the chunks it
    holds: deleting a chunk gives the index that never held it, and adding in
    pieces gives the index built at once.

    ``vector_store`` (a :class:`~shared_core.search.external.VectorStoreBackend`:
    Milvus, or a LangChain or LlamaIndex vector store through its adapter) holds
    copies of the vectors and finds each query's vector candidates instead of the
    in-process scan or HNSW; ranking still rescores them exactly. Every add and
    delete writes the store before the new state is published. The store is the
    index's own: on attach (and on :meth:`load`) it is reconciled with the chunks.

    ``vector_spill`` (a :class:`~shared_core.state.spill.VectorSpill`) is where
    builds and updates put arrays of vectors too large for the heap: by default,
    past 256 MB, memory-mapped files in the system's temporary folder, which the
    kernel caches while memory is free. ``None`` keeps every vector on the heap.

    ``vectors_in_store=True`` (with a ``vector_store`` that returns its rows: Milvus,
    Qdrant) keeps no sentence vector here once an add is published: the store holds
    them, and updates read back the rows they need by key (see :meth:`load`'s
    ``writer``). Needs the default ``chunk_similarity="max"``.
    """

    def __init__(self, embedder: Embedder, config: ConceptGraphConfig | None = None, *,
                 vector_store: VectorStoreBackend | None = None,
                 vector_spill: VectorSpill | None = DEFAULT_SPILL,
                 vectors_in_store: bool = False) -> None:
        if not isinstance(embedder, Embedder):
            raise TypeError(
                f"embedder must implement the Embedder protocol (model_id, dim, embed), "
                f"got {type(embedder).__name__}"
            )
        if config is not None and not isinstance(config, ConceptGraphConfig):
            raise TypeError(f"config must be a ConceptGraphConfig, got {type(config).__name__}")
        config = config or ConceptGraphConfig()
        config = _with_resolved_segmenter(config)
        if vector_spill is not None and not isinstance(vector_spill, VectorSpill):
            raise TypeError("vector_spill must be a VectorSpill or None, got "
                            f"{type(vector_spill).__name__}")
        self._embedder = embedder
        self._spill = vector_spill
        self._analyzer: Analyzer = term_analyzer(config.ngram_max, config.min_term_chars,
                                                 config.cjk_segmenter, config.entity_terms)
        self._write_lock = threading.Lock()
        # an index whose vectors are its store's and that writes (load(..., writer=True)):
        # the rows its updates dropped, deleted from the store by its next save
        self._writes_store_rows = _vectors_in_store_checked(vectors_in_store, vector_store,
                                                            config)
        self._pending_deletes: set[str] = set()
        corpus = empty_corpus(embedder.dim, direct_units=config.chunk_similarity == "direct")
        self.vector_store_repair: Reconciled | None = None
        if vector_store is None:
            self._state = IndexState.build(corpus, config)
        else:  # the store is reconciled first: rows another index left are deleted
            _check_vector_store(vector_store)
            self._publish_reconciled(IndexState.build(corpus, config, vector_store=vector_store))

    def _publish_reconciled(self, state: IndexState) -> None:
        """Reconcile ``state``'s vector store with its chunks, then publish ``state``
        (whose ``store_generation``, if any, is the one it was saved with)."""
        assert state.vector_store is not None
        repair = reconcile(state.vector_store, state.stored_rows(), state.store_generation)
        if repair.written or repair.deleted:
            logger.warning("vector store %s reconciled with the index: %d rows written, "
                           "%d deleted", type(state.vector_store).__name__, repair.written,
                           repair.deleted)
        self.vector_store_repair = repair
        self._state = replace(state, store_generation=repair.generation)

    def _publish(self, before: IndexState, after: IndexState,
                 rewritten: Iterable[str] = ()) -> None:
        """Publish ``after``, once its vector store (if any) holds its rows."""
        if after.vector_store is not None:
            after = replace(after, store_generation=changed_rows(
                after.vector_store, before.stored_rows(), after.stored_rows(), rewritten))
        self._state = after
        give_back_free_heap()  # what the build or update freed: see ``heap``

    def _update_in_store(self, state: IndexState, corpus: CorpusState,
                         parts: list[CorpusState], rewritten: list[int]) -> None:
        """An add by an index whose rows are its store's: the new chunks' rows (and the
        rows of chunks whose metadata changed, under their new keys) go to the store
        first, then the graph is refreshed reading the rows it needs back by key.
        ``corpus``: the state's chunks with their new metadata."""
        before = state.corpus
        moved: list[CorpusState] = []
        if rewritten:  # their rows, read under their old keys, are written under the new
            at = np.asarray(rewritten, dtype=np.int64)
            offsets = before.sentence_offsets
            rows = before.sentence_vectors[concatenated_ranges(offsets[at], offsets[at + 1])]
            moved.append(replaced(take(corpus, at), sentence_vectors=rows))
        old_keys = set(StoredRows.of(before, None).keys_of(rewritten))
        store = cast(VectorStoreBackend, state.vector_store)
        # rows the store holds for the latest save though updates dropped them: a chunk
        # added back as it was writes the same keys, which must then stay
        held = frozenset(self._pending_deletes)
        written = rows_written_ahead(store, [*parts, *moved], held)
        try:
            merged = merge_many([corpus, *parts], self._spill) if parts else corpus
            if not parts:  # metadata alone: the same graph, its rows under their new keys
                after = _rows_left_in_store(IndexState(state.config, merged, state.graph,
                                                       store))
            elif isinstance(merged.sentence_vectors, RowsToAttach):  # read back by key
                after = state.updated(_store_rows_attached(merged, store), self._spill)
            else:  # this index held no chunk: the graph from the rows at hand, then let go
                after = _rows_left_in_store(state.updated(merged, self._spill))
        except BaseException:
            store.delete([key for key in written if key not in held])
            raise
        self._publish_in_store(after, sorted(old_keys - set(written)), written)

    def _publish_in_store(self, after: IndexState, stale: list[str],
                          written: Iterable[str] = ()) -> None:
        """Publish an update of an index whose rows are its store's. The rows it dropped
        (``stale``) stay in the store until the next save: until then the latest save's
        rows are all there, so a process killed before it saves reopens that save (see
        :meth:`save`), and readers still on an older state find their rows. The rows it
        wrote (``written``) are live again, if an earlier update had dropped them."""
        self._pending_deletes.difference_update(written)
        self._pending_deletes.update(stale)
        self._state = _with_store_surplus(replace(after, store_generation=None),
                                          len(self._pending_deletes))
        give_back_free_heap()

    @classmethod
    def from_state(cls, embedder: Embedder, config: ConceptGraphConfig,
                   corpus: CorpusState, *, ann: VectorSearch | None = None,
                   saved: SavedGraph | None = None, verify: bool = False,
                   vector_store: VectorStoreBackend | None = None,
                   store_generation: str | None = None,
                   vector_spill: VectorSpill | None = DEFAULT_SPILL,
                   source: str | None = None,
                   writer: bool = False) -> ConceptGraphIndex:
        """An index over an existing corpus state (e.g. one read from disk).

        ``ann`` is an approximate vector index already built over its vectors (a
        saved one); it is used if it fits, and built otherwise. ``saved`` is a
        saved graph's edges and PageRank, checked and used instead of finding
        the edges again (``verify``: the values it holds are derived again and
        compared; see :func:`~shared_core.state.saved.restore_graph`). ``vector_store``
        is reconciled with the chunks (see :meth:`__init__`) and finds the vector
        candidates; ``store_generation`` is the store generation the chunks were
        saved with (a store that records the same one is not listed). ``source``:
        the folder the state was read from, named by the ``CorruptIndexError`` a
        saved graph that does not fit its chunks raises (a ``ValueError`` without it).
        ``writer``: with rows read from the store (``EngineRows``), the index writes
        (see :meth:`load`); the store is reconciled with the chunks by key.
        """
        if corpus.dim != embedder.dim:
            raise ValueError(f"the chunks hold {corpus.dim}-dimensional vectors, but the "
                             f"embedder gives {embedder.dim}")
        index = cls(embedder, config, vector_spill=vector_spill)
        if vector_store is not None:
            _check_vector_store(vector_store)
            ann = None
        try:
            state = IndexState.build(corpus, index.config, ann, saved, verify, vector_store,
                                     vector_spill)
        except ValueError as exc:
            if saved is None or source is None:
                raise
            from .store import CorruptIndexError

            raise CorruptIndexError(f"{source}: {exc}") from exc
        if vector_store is None:
            index._state = state
        elif isinstance(corpus.sentence_vectors, EngineRows) and writer:
            index._writes_store_rows = True  # reconciled by key: it holds no row to write
            index._publish_reconciled(replace(state, store_generation=store_generation))
        elif isinstance(corpus.sentence_vectors, EngineRows):  # a replica writes nothing
            if not store_generation:
                raise ValueError("this save records no vector store generation: it was made "
                                 "without a store, so no store holds its rows for a replica")
            held = vector_store.read_marker()
            if held != store_generation:
                raise ValueError(
                    f"the vector store's generation is {held!r}, not the {store_generation!r} "
                    "this save was made with: the store has changed since (or a crash left "
                    "it unrepaired). A replica cannot repair it; load the writer's latest "
                    "save, or load this one with its vectors to repair the store.")
            index._state = replace(state, store_generation=store_generation)
        else:  # a store's own errors (foreign rows, another model) are not the save's
            index._publish_reconciled(replace(state, store_generation=store_generation))
        return index

    @property
    def vectors_in_store(self) -> bool:
        """Whether this index reads its sentence vectors from its vector store (loaded
        with ``vectors_in_store=True``) instead of holding them."""
        return isinstance(self._state.corpus.sentence_vectors, EngineRows)

    @property
    def is_replica(self) -> bool:
        """Whether this index reads its vectors from its vector store and never writes
        (loaded with ``vectors_in_store=True`` and not ``writer=True``): a read-only
        replica of the index that writes them."""
        return self.vectors_in_store and not self._writes_store_rows

    def _check_writable(self, what: str) -> None:
        if self.is_replica:
            raise ValueError(
                f"cannot {what} this index: it reads its vectors from the vector store "
                "(loaded with vectors_in_store=True), a read-only replica. Add, delete and "
                "save on the index that holds its vectors, then load its save again here.")

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def config(self) -> ConceptGraphConfig:
        return self._state.config

    @property
    def state(self) -> IndexState:
        """The current immutable state: hold it to make several reads see one version."""
        return self._state

    def reconfigured(self, **changes: Any) -> ConceptGraphIndex:
        """A new index over the same chunks with other knobs, sharing what it can.

        Search knobs (``top_k``, ``ranking``, ``budget`` ...) cost nothing; graph
        knobs (``theta_co``, ``concept_links`` ...) re-derive the graph from the
        stored chunks without embedding anything, except ``vector_index`` alone,
        which only builds (or drops) the vector index. Knobs that shape the stored
        chunks (``unit_tokens``, ``ngram_max`` ...) need a rebuild and raise.
        The new index shares this one's vector store, if any, which holds one
        index's rows: add to and delete from only one of the two.
        """
        state = self._state
        config = _with_resolved_segmenter(
            ConceptGraphConfig.from_dict({**state.config.to_dict(), **changes}))
        rebuild = [k for k in CORPUS_KNOBS if getattr(config, k) != getattr(state.config, k)]
        direct = config.chunk_similarity == "direct"
        if direct and state.corpus.unit_vectors is None:
            rebuild.append("chunk_similarity")
        if rebuild:
            raise ValueError(f"changing {', '.join(rebuild)} changes the stored chunks; "
                             "build a new index with ConceptGraphIndex.from_texts")
        corpus = state.corpus
        if not direct and corpus.unit_vectors is not None:
            corpus = replaced(corpus, unit_vectors=None)
        index = ConceptGraphIndex(self._embedder, config, vector_spill=self._spill)
        graph_changed = [k for k in GRAPH_KNOBS if getattr(config, k) != getattr(state.config, k)]
        if graph_changed and self.vectors_in_store:
            raise ValueError(
                f"changing {', '.join(graph_changed)} derives the graph again from every "
                "sentence vector, which this index reads from the vector store row by row; "
                "reconfigure an index that holds its vectors, save, and load that save here")
        index._writes_store_rows = self._writes_store_rows
        index._pending_deletes = set(self._pending_deletes)
        store = state.vector_store
        if graph_changed == ["vector_index"] and store is None:  # the graph is the same
            graph = with_vector_search(state.graph, corpus, config, self._spill)
            index._state = IndexState(config, corpus, graph, store)
        elif graph_changed:
            index._state = IndexState.build(corpus, config, vector_store=store, spill=self._spill)
        else:
            index._state = IndexState(config, corpus, state.graph, store)
        if store is not None and index._state.stored_rows().kind != state.stored_rows().kind:
            raise ValueError(
                f"chunk_similarity={config.chunk_similarity!r} compares units by other vectors "
                "than the vector store holds, and the store is this index's; build a new "
                "index with a store of its own")
        return index

    # ----------------------------------------------------------------- building
    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        *,
        embedder: Embedder,
        ids: Iterable[str] | None = None,
        metadatas: Iterable[Mapping[str, Any]] | None = None,
        config: ConceptGraphConfig | None = None,
        show_progress: bool = False,
        batch_size: int = ADD_BATCH,
        vector_store: VectorStoreBackend | None = None,
        executor: Executor | None = None,
        vector_spill: VectorSpill | None = DEFAULT_SPILL,
        vectors_in_store: bool = False,
    ) -> ConceptGraphIndex:
        """An index over ``texts`` (a list, or any iterable: see :meth:`add`); its vectors
        also go to ``vector_store`` when given (and only there with
        ``vectors_in_store=True``), and large arrays of them to ``vector_spill`` (see
        the class docstring)."""
        index = cls(embedder, config, vector_store=vector_store, vector_spill=vector_spill,
                    vectors_in_store=vectors_in_store)
        index.add(texts, ids=ids, metadatas=metadatas, show_progress=show_progress,
                  batch_size=batch_size, executor=executor)
        return index

    def add(
        self,
        texts: Iterable[str],
        *,
        ids: Iterable[str] | None = None,
        metadatas: Iterable[Mapping[str, Any]] | None = None,
        show_progress: bool = False,
        batch_size: int = ADD_BATCH,
        executor: Executor | None = None,
    ) -> list[str]:
        """Add chunks; returns their ids. All or nothing: on any error the index is unchanged.

        Without ``ids`` a chunk's id is the hash of its text, so identical texts are
        one chunk. A chunk already present (same id, same text) is not embedded
        again; when ``metadatas`` is given its metadata is replaced by the new one
        (an upsert), and when it is not the stored metadata is kept. Raises on
        blank text, duplicate explicit ids, mismatched lengths, an existing id that
        now holds different text, or one content id given twice with different
        metadata.

        ``texts`` (and ``ids``, ``metadatas``) may be any iterables, e.g. generators
        over a corpus larger than memory: chunks are split, embedded and counted
        ``batch_size`` at a time, and the graph is derived once, at the end. A list
        is checked whole before anything is embedded; a stream is checked batch by
        batch, and an error names the chunk's position in the stream. The progress
        bar shows an ETA where ``texts`` knows its length (a list, or a stream with
        ``__length_hint__`` such as :class:`~shared_core.corpus.CountedStream`). With a
        ``CachedEmbedder`` over a file cache, a build that dies midway (a killed
        process, a bad chunk late in the stream) resumes without re-embedding
        what it had embedded.

        ``executor`` (any ``concurrent.futures.Executor``: a ``ProcessPoolExecutor``,
        a Dask cluster's ``client.get_executor()``, ...) splits, embeds and counts
        the batches in its workers, a few at a time, while this process checks ids
        and merges; the index equals the one built here. The embedder travels to
        the workers (this package's embedders load their model, or open their
        cache file, there).
        """
        self._check_writable("add to")
        _check_batch_size(batch_size)
        total: int | None = None
        if isinstance(texts, Sequence) and not isinstance(texts, (str, bytes)):
            checked = check_texts(texts)  # a list: every input is checked first
            id_list = self._check_ids(checked, None if ids is None else _as_sequence(ids, "ids"))
            meta = None if metadatas is None else _metadata_json(
                checked, _as_sequence(metadatas, "metadatas"))
            batches: Iterable[_Batch] = _slices(checked, id_list, meta, batch_size)
            total = len(checked)
        elif isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
            raise TypeError(f"texts must be a sequence of str (or an iterable of str), got "
                            f"{type(texts).__name__}")
        else:  # a stream that says how long it is (__len__, __length_hint__) gets an ETA
            batches = self._stream(texts, ids, metadatas, batch_size)
            total = operator.length_hint(texts) or None
        return self._add_batches(batches, total, ids is None, show_progress, executor)

    def _stream(self, texts: Iterable[str], ids: Iterable[str] | None,
                metadatas: Iterable[Mapping[str, Any]] | None, batch_size: int
                ) -> Iterator[_Batch]:
        """Checked batches of a stream of chunks, with their start positions."""
        columns: list[Iterator[Any]] = [iter(texts)]
        for name, column in (("ids", ids), ("metadatas", metadatas)):
            if column is not None:
                if isinstance(column, (str, bytes, Mapping)) or not isinstance(column, Iterable):
                    raise TypeError(f"{name} must be an iterable, got {type(column).__name__}")
                columns.append(iter(column))
        rows = zip(*columns, strict=True)
        start = 0
        while True:
            try:
                block = list(itertools.islice(rows, batch_size))
            except ValueError as exc:
                if not str(exc).startswith("zip()"):
                    raise  # the input's own error (e.g. a bad corpus line): as it was
                # zip(strict=True): the columns differ in length
                raise ValueError(f"texts, ids and metadatas differ in length: {exc}") from None
            if not block:
                return
            batch_texts = check_texts([row[0] for row in block], start=start)
            batch_ids = (self._check_ids(batch_texts, [row[1] for row in block], start)
                         if ids is not None else [content_id(t) for t in batch_texts])
            meta = None
            if metadatas is not None:
                meta = _metadata_json(batch_texts, [row[-1] for row in block], start)
            yield _Batch(start, batch_texts, batch_ids, meta)
            start += len(block)

    def _add_batches(self, batches: Iterable[_Batch], total: int | None, content_ids: bool,
                     show_progress: bool, executor: Executor | None = None) -> list[str]:
        """Prepare every batch's new chunks, then publish one state (or nothing, on error)."""
        bar = None
        if show_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc="adding chunks", unit="chunk", smoothing=0.1)
        with self._write_lock:
            state = self._state
            corpus, cfg = state.corpus, state.config
            first_of: dict[str, tuple[int, str | None]] = {}  # id -> first position, metadata
            all_ids: list[str] = []
            updates: dict[int, str] = {}
            shards = _Shards(executor, self._embedder, self._analyzer, cfg, bar, self._spill)
            try:
                for batch in batches:
                    new: list[int] = []
                    for j, (cid, text) in enumerate(zip(batch.ids, batch.texts, strict=True)):
                        meta = None if batch.metadata is None else batch.metadata[j]
                        seen = first_of.get(cid)
                        if seen is not None:  # explicit ids were checked for repeats
                            if content_ids and meta is not None and seen[1] != meta:
                                raise ValueError(
                                    f"texts[{seen[0]}] and texts[{batch.start + j}] are the same "
                                    f"text (one chunk, id {cid!r}) with different metadata; "
                                    "pass explicit ids to keep both")
                            if not content_ids:
                                raise ValueError(f"duplicate chunk id {cid!r} at positions "
                                                 f"{seen[0]} and {batch.start + j}")
                            continue
                        first_of[cid] = (batch.start + j, meta)
                        held = corpus.position.get(cid)
                        if held is None:
                            new.append(j)
                        elif corpus.texts[held] != text:
                            raise ValueError(f"chunk id {cid!r} already holds different text; "
                                             "delete it before re-adding")
                        elif meta is not None and corpus.metadata[held] != meta:
                            updates[held] = meta
                    all_ids.extend(batch.ids)
                    new.sort(key=batch.ids.__getitem__)  # canonical order: no reordering
                    shards.put([batch.ids[j] for j in new], [batch.texts[j] for j in new],
                               [batch.metadata[j] if batch.metadata is not None else "{}"
                                for j in new], len(batch.texts))
                parts = shards.results()
            finally:
                shards.close()
                if bar is not None:
                    bar.close()
            if updates:
                corpus = corpus.with_metadata(updates)
            rewritten = [corpus.ids[pos] for pos in updates]
            if self._writes_store_rows and (parts or updates):
                self._update_in_store(state, corpus, parts, sorted(updates))
            elif parts:
                merged = merge_many([corpus, *parts], self._spill)
                del parts  # their vectors (a spilled log, maybe) are merged: let them go
                self._publish(state, state.updated(merged, self._spill), rewritten)
            elif updates:  # metadata only: the derived graph does not change
                self._publish(state, IndexState(cfg, corpus, state.graph, state.vector_store),
                              rewritten)
        return all_ids

    def delete(self, ids: Iterable[str]) -> None:
        """Remove chunks everywhere (text, sentences, embeddings, terms, concepts, edges).

        The result is the index that never held them. Unknown ids raise ``KeyError``
        and nothing is deleted.
        """
        if isinstance(ids, str):
            raise TypeError("delete takes an iterable of ids, not a single str")
        self._check_writable("delete from")
        doomed = set(ids)
        with self._write_lock:
            state = self._state
            corpus = state.corpus
            unknown = sorted(str(d) for d in doomed if d not in corpus.position)
            if unknown:
                raise KeyError(f"unknown chunk ids: {', '.join(unknown[:5])}")
            if not doomed:
                return
            keep = np.flatnonzero([cid not in doomed for cid in corpus.ids])
            if self._writes_store_rows:  # the rows stay in the store until the next save
                gone = [corpus.position[cid] for cid in sorted(doomed)]
                after = state.updated(_store_rows_attached(take(corpus, keep, self._spill),
                                                           state.vector_store), self._spill)
                self._publish_in_store(after, StoredRows.of(corpus, None).keys_of(gone))
                return
            self._publish(state, state.updated(take(corpus, keep, self._spill), self._spill))

    @staticmethod
    def _check_ids(texts: list[str], ids: Sequence[str] | None, start: int = 0) -> list[str]:
        if ids is None:
            return [content_id(t) for t in texts]
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise TypeError(f"ids must be a sequence of str, got {type(ids).__name__}")
        out = list(ids)
        if len(out) != len(texts):
            raise ValueError(f"got {len(out)} ids for {len(texts)} texts")
        seen: dict[str, int] = {}
        for i, cid in enumerate(out, start=start):
            if not isinstance(cid, str) or not cid.strip():
                raise ValueError(f"ids[{i}] must be a non-empty str, got {cid!r}")
            bad = invalid_character(cid)
            if bad is not None:
                raise ValueError(f"ids[{i}] contains {bad[1]} at character {bad[0]}")
            if cid in seen:
                raise ValueError(f"duplicate chunk id {cid!r} at positions {seen[cid]} and {i}")
            seen[cid] = i
        return out

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._state.corpus)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._state.corpus.position

    @property
    def chunk_ids(self) -> list[str]:
        """Every chunk id, in the index's canonical (sorted) order."""
        return list(self._state.corpus.ids)

    def get(self, chunk_id: str) -> Chunk:
        corpus = self._state.corpus
        pos = corpus.position.get(chunk_id)
        if pos is None:
            raise KeyError(f"unknown chunk id {chunk_id!r}")
        return _chunk(corpus, pos)

    @property
    def concepts(self) -> list[str]:
        return list(self._state.graph.concepts)

    def concept_vector(self, concept: str) -> np.ndarray:
        graph = self._state.graph
        return graph.vectors[_concept_position(graph, concept)].copy()

    def concept_chunks(self, concept: str) -> list[str]:
        """The chunk ids a concept links to."""
        state = self._state
        graph = state.graph
        col = _concept_position(graph, concept)
        rows = graph.links_csc.indices[graph.links_csc.indptr[col]:graph.links_csc.indptr[col + 1]]
        return [state.corpus.ids[r] for r in sorted(rows.tolist())]

    @property
    def edges(self) -> list[tuple[str, str, int, float, float]]:
        """(concept, concept, Co, cosine, Dice) for every edge.

        Cosines are not stored with the graph: they are recomputed here, each the
        same float32 the derivation compared with theta_sem.
        """
        from .graph.edges import pair_cosines

        graph = self._state.graph
        e = graph.edges
        cosine = pair_cosines(graph.vectors, e.source, e.target)
        return [(graph.concepts[a], graph.concepts[b], int(c), float(s), float(d))
                for a, b, c, s, d in zip(e.source, e.target, e.cooccurrence, cosine, e.dice,
                                         strict=True)]

    def concept_pagerank(self) -> dict[str, float]:
        graph = self._state.graph
        return dict(zip(graph.concepts, graph.rank.tolist(), strict=True))

    def stats(self) -> dict[str, Any]:
        """Sizes of the index and its graph, and ``warnings``: what makes the graph useless.

        A graph without edges (a small corpus under the default ``theta_co=3``) gives
        every concept the same PageRank and nothing to expand along, so that is said,
        with the knob and value that would give edges.
        """
        import scipy.sparse as sp

        from .graph.edges import cooccurrence, pair_cosines

        state = self._state
        graph, corpus, cfg = state.graph, state.corpus, state.config
        n_concepts = len(graph.concepts)
        degree = np.diff(graph.adjacency.indptr)
        warnings: list[str] = []
        if n_concepts >= 2 and graph.edge_count == 0:
            # every pair sharing a chunk, whatever its cosine: which threshold removed them
            shared = sp.triu(cooccurrence(graph.links), k=1).tocoo()
            cosine = pair_cosines(graph.vectors, shared.row, shared.col)
            close = cosine >= cfg.theta_sem
            strong = shared.data >= cfg.theta_co
            if not len(cosine):
                fix = "no two concepts share a chunk: raise concepts_per_chunk"
            elif close.any():
                fix = (f"lower theta_co: theta_co=1 gives {int(close.sum())} edges "
                       "(index.reconfigured(theta_co=1), or conceptgraph build --set "
                       "theta_co=1)")
            else:
                best = float(cosine[strong].max() if strong.any() else cosine.max())
                sem = f"--set theta_sem={np.floor(best * 100) / 100:g}"
                fix = (f"lower theta_sem: the closest concepts sharing a chunk have cosine "
                       f"{best:.2f} (conceptgraph build {sem})" if strong.any() else
                       f"lower theta_co and theta_sem: the closest concepts sharing a chunk "
                       f"have cosine {best:.2f} (conceptgraph build --set theta_co=1 {sem})")
            warnings.append(
                f"the concept graph has no edges: no two of its {n_concepts} concepts share "
                f"theta_co={cfg.theta_co} chunks with cosine >= theta_sem={cfg.theta_sem:g}, "
                "so every concept has the same PageRank, core-chunk selection uses no graph "
                f"structure and retrieval cannot expand along edges; {fix}")
        rows = len(corpus.sentence_spans) if graph.unit_vectors is None else len(graph.unit_tokens)
        if graph.ann is None and cfg.vector_index == "auto" and rows >= ANN_MIN_ROWS:
            warnings.append(f"{rows} vectors are scanned in full for every query: install "
                            "the ann extra (pip install 'conceptgraph[ann]') for HNSW "
                            "candidate search")
        numba_missing = sums_missing()
        if rows >= ANN_MIN_ROWS and cfg.ranking == "fused" and numba_missing is not None:
            warnings.append(f"a query's posting sums and an update's graph passes run in "
                            f"numpy: {numba_missing} for the same results sooner (about "
                            "6 ms of a query at a million passages, a fifth of an update "
                            "at 10,000)")
        failed = failed_self_recall(graph)
        concept_search = concept_search_used(cfg, graph)
        scanned = ("the byte codes of " if concept_search == "codes" else "") + (
            f"{n_concepts} concept vectors are scanned in full for every query")
        if failed is not None and cfg.concept_search == "auto":
            warnings.append(
                f"{scanned}: the "
                f"concept graph found only {failed:.1%} of the scan's direct "
                "concepts for its own concepts, as on random-like vectors (the hashing "
                "embedder's); concept_search='hnsw' searches it anyway")
        elif wants_concept_graph(cfg, graph) and concept_search != "hnsw":
            warnings.append(f"{scanned}: install the ann extra (pip install "
                            "'conceptgraph[ann]') to find the direct concepts through HNSW")
        return {
            "chunks": len(corpus),
            "tokens": int(corpus.tokens.sum()),
            "sentences": len(corpus.sentence_spans),
            "terms": len(corpus.terms),
            "concepts": n_concepts,
            "edges": graph.edge_count,
            "isolated_concepts": int((degree == 0).sum()),
            "mean_degree": float(degree.mean()) if n_concepts else 0.0,
            "embedding_model": self._embedder.model_id,
            "embedding_dim": self._embedder.dim,
            "vector_index": ("exact" if graph.ann is None else
                             "hnsw" if isinstance(graph.ann, HnswSegments) else
                             f"store:{type(state.vector_store).__name__}"
                             + ("+terms" if keeps_terms(state.vector_store) else "")),
            "concept_search": concept_search,
            "posting_sums": "numba" if sums_compiled() else "numpy",
            "warnings": warnings,
        }

    # ------------------------------------------------------------ selection
    def chunk_scores(self) -> dict[str, float]:
        """Each chunk's importance from its concepts' PageRank (``config.chunk_score``)."""
        state = self._state
        scores = chunk_scores(state.graph.links, state.graph.rank, state.config.chunk_score)
        return dict(zip(state.corpus.ids, scores.tolist(), strict=True))

    def select(
        self,
        kappa: float | None = None,
        *,
        method: SelectionMethod = "concept",
        by: SelectBy | None = None,
        prompt_tokens_per_chunk: int = 0,
        seed: int = 0,
    ) -> Selection:
        """The core chunks: the top ``kappa`` share by chunk score, with the cost report.

        ``method="concept"`` is G2ConS (PageRank of the chunk's concepts);
        ``"coverage"`` is greedy weighted max-coverage of concept PageRank per token
        (or per chunk), which skips chunks whose concepts are already covered
        (``select.coverage``); ``"knn"`` is KET-RAG's PageRank over a KNN chunk
        graph (K=2, one lexical and one semantic neighbour per chunk) built from
        this index's terms and sentence vectors, so it costs no embedding;
        ``"random"`` is the baseline (each chunk's draw comes from its id and
        ``seed``, not its position).
        ``by`` (default ``config.select_by``) makes ``kappa`` a share of chunks or
        of tokens; by tokens, concept and KNN scores are divided by the chunk's
        tokens (value per token), and random stays a uniform order. At least one
        chunk is always kept; the report's ``exceeds_kappa`` says when that one
        chunk alone is over ``kappa``.
        """
        state = self._state
        cfg, corpus = state.config, state.corpus
        kappa = cfg.kappa if kappa is None else kappa
        by = cfg.select_by if by is None else by
        ConceptGraphConfig(kappa=kappa, select_by=by)  # validates with the knob's name
        if method == "concept":
            scores = chunk_scores(state.graph.links, state.graph.rank, cfg.chunk_score)
        elif method == "knn":
            if self.vectors_in_store:
                raise ValueError("method='knn' compares every chunk's mean vector, which this "
                                 "index would read whole from the vector store; select on an "
                                 "index that holds its vectors")
            scores = _knn_scores(corpus, cfg.pagerank_damping)
        elif method == "random":
            scores = id_random_scores(corpus.ids, seed)
        elif method == "coverage":
            cost = corpus.tokens if by == "tokens" else np.ones(len(corpus))
            scores = order_scores(coverage_order(state.graph.links, state.graph.rank, cost))
        else:
            raise ValueError(f"method must be concept, coverage, knn or random, got {method!r}")
        if by == "tokens" and method in ("concept", "knn"):
            scores = value_per_token(scores, corpus.tokens)
        selection = select_by_scores(list(corpus.ids), scores, corpus.tokens, kappa,
                                     prompt_tokens_per_chunk, by=by)
        if method not in ("concept", "coverage"):
            return selection
        # the concept ranking came from this graph: a graph with no edges is worth a warning
        report = replace(selection.report, graph_edges=state.graph.edge_count)
        return replace(selection, report=report)

    # ------------------------------------------------------------ retrieval
    def embed_query(self, query: str) -> np.ndarray:
        """The unit query vector: the model's query embedding where it has one."""
        check_query(query)
        return embed_query(self._embedder, query)

    def retrieve(
        self,
        query: str,
        *,
        top_k: int | None = None,
        hops: int | None = None,
        budget: int | None = None,
        min_score: float | None = None,
    ) -> RetrievalResult:
        """Retrieve for ``query`` with the config's ``ranking``; each chunk has its provenance."""
        check_query(query)
        q = self.embed_query(query)
        return self._searched(lambda state: _search(
            state, self._analyzer, q, query, _overrides(state.config, top_k, hops, budget,
                                                        min_score)))

    async def aretrieve(
        self,
        query: str,
        *,
        top_k: int | None = None,
        hops: int | None = None,
        budget: int | None = None,
        min_score: float | None = None,
    ) -> RetrievalResult:
        """:meth:`retrieve` in a worker thread, so an event loop is never blocked."""
        return await asyncio.to_thread(self.retrieve, query, top_k=top_k, hops=hops,
                                       budget=budget, min_score=min_score)

    def retrieve_by_vector(
        self,
        query_vector: np.ndarray,
        *,
        query: str = "",
        top_k: int | None = None,
        hops: int | None = None,
        budget: int | None = None,
        min_score: float | None = None,
    ) -> RetrievalResult:
        """Retrieve for a query vector (normalised here); ``query`` feeds the lexical views."""
        state = self._state
        q = np.asarray(query_vector, dtype=np.float32)
        dim = self._embedder.dim
        if q.shape != (dim,):
            raise ValueError(f"query vector has shape {q.shape}, expected ({dim},)")
        if not np.isfinite(q).all():
            raise ValueError("query vector has non-finite values (NaN or inf)")
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            raise ValueError("query vector is all zeros: it is similar to nothing")
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        return self._searched(lambda state: _search(
            state, self._analyzer, q / norm, query, _overrides(state.config, top_k, hops,
                                                               budget, min_score)), state)

    def warm(self, *, batch_size: int = WARM_BATCH, read_vector_index: bool = True) -> int:
        """Do now what a first query would: recount every token count a load took as read,
        make what the configured query path builds on first use, and (``read_vector_index``)
        read the HNSW index's mapped files into the page cache; returns how many counts
        were recounted.

        A loaded index confirms a unit's saved count against its text the first time a
        query returns it (see :meth:`load`): about 4.5 ms of a 30 ms query at 80,000
        passages whose units were never returned (``benchmarks/results/NOTES.md``). The
        walk's degrees, postings and unit starts, the concept codes or graph the
        query's ``concept_search`` reads where a save did not hold them, and the query's
        second thread (``query_threads``) are made by the first query that needs them:
        about 0.13 s of a first query at a million passages. With numba installed, so
        are the compiled loops that sum a query's postings (``search.summing``): about
        2 s in a new process, loaded from numba's cache. A server calls this once
        after ``load`` or an update, before it takes queries, or on a thread beside them
        (at about 3.5 M tokens a second a core). It warms the state current when it
        starts; an update carries the confirmed counts over. Raises
        :class:`~shared_core.store.CorruptIndexError` where a count differs, as the
        query that returned that unit would, before confirming any count of that batch.

        With ``rescore_from="codes"`` it codes the rows queries rescore (about 20 s at
        a million passages). A loaded HNSW index is searched from its mapped file one
        node after another, so a first query waits for each page it visits in turn;
        reading the file once, in order, costs about a second a gigabyte here and is
        done last, after the codes have been read from the vectors' file.
        """
        _check_batch_size(batch_size)
        state = self._state
        recounted = 0
        if state.graph.unit_tokens_unconfirmed is not None:
            pending = np.flatnonzero(state.graph.unit_tokens_unconfirmed)
            recounted = sum(_confirm_token_counts(state.corpus, state.graph,
                                                  pending[start:start + batch_size])
                            for start in range(0, len(pending), batch_size))
        _make_query_path(state)
        if read_vector_index and isinstance(state.graph.ann, HnswSegments):
            state.graph.ann.read_into_cache()
        return recounted

    def _searched(self, search: Callable[[IndexState], RetrievalResult],
                  state: IndexState | None = None) -> RetrievalResult:
        """``search`` on the current state. Where this index writes rows it reads from
        its store, a save deletes the rows that updates dropped; a query begun on an older
        state may then miss them, and runs again on the state that replaced it."""
        state = self._state if state is None else state
        while True:
            try:
                return search(state)
            except MissingRowsError:
                current = self._state
                if not self._writes_store_rows or current is state:
                    raise
                state = current

    # ---------------------------------------------------------- persistence
    def save(self, path: str) -> None:
        """Write the index to a directory (JSON + .npy, never pickle); see :mod:`.store`.

        At every instant the path holds a complete index, the old one or the new.
        """
        self._check_writable("save")
        if not self._writes_store_rows:
            state = self._state
            self._write_save(path, state, state.store_generation)
            return
        with self._write_lock:
            self._save_in_store(path)

    def _write_save(self, path: str, state: IndexState, generation: str | None) -> None:
        """Write ``state`` under ``path``, naming the store ``generation`` that holds its rows."""
        from .store import save_corpus

        graph = state.graph
        ann = (VectorSearch(graph.ann, graph.ann_rows) if isinstance(graph.ann, HnswSegments)
               and graph.ann_rows is not None else None)
        cfg = state.config
        save_corpus(path, state.corpus, cfg, self._embedder.model_id, ann,
                    saved_parts(graph, walk=_walks_sentences(cfg, graph),
                                concept_graph=wants_concept_graph(cfg, graph),
                                codes=concept_search_used(cfg, graph) == "codes"),
                    store_generation=generation)

    def _save_in_store(self, path: str) -> None:
        """Save an index whose rows are its store's: the save holds no vector and names
        a new store generation; then the rows updates dropped are deleted from the store,
        and the store takes that generation. A process killed at any point leaves the
        store holding every row of the latest save, and maybe more, which the next
        ``load(..., writer=True)`` deletes."""
        state = self._state
        store = cast(VectorStoreBackend, state.vector_store)
        generation = state.store_generation or secrets.token_hex(16)
        self._write_save(path, state, generation)
        if state.store_generation is not None and not self._pending_deletes:
            return  # the store holds exactly these rows
        store.write_marker("")
        if self._pending_deletes:
            store.delete(sorted(self._pending_deletes))
        store.flush()
        store.write_marker(generation)
        self._pending_deletes = set()
        self._state = _with_store_surplus(replace(state, store_generation=generation), 0)

    @classmethod
    def load(cls, path: str, embedder: Embedder, *, verify: bool = False,
             vector_store: VectorStoreBackend | None = None,
             vector_spill: VectorSpill | None = DEFAULT_SPILL,
             vectors_in_store: bool = False,
             scores_in_store: bool = False,
             writer: bool = False) -> ConceptGraphIndex:
        """Read an index saved by :meth:`save`; ``embedder`` must be the one it was built with.

        Every file is checked against its checksum and the rules an index obeys
        before any of it is used; a violation raises
        :class:`~shared_core.store.CorruptIndexError`. What the save derived of
        the graph (concepts, concept vectors, cosine decisions) and the token
        counts are taken as read after those rules; a retrieval recounts a unit's
        text the first time it returns it, so a wrong count raises there instead
        of overrunning a budget. ``verify=True`` derives and recounts everything
        from the chunks and refuses a save that differs, for an index from a
        source you do not trust.

        ``vector_store``: the outside store the index was used with (a save holds
        no store). It is reconciled with the saved chunks, so rows written or
        deleted after the last save (a process killed between the store's write
        and the save) are repaired; ``vector_store_repair`` says how many.
        ``vector_spill``: where later updates put large arrays of vectors (the
        loaded ones stay mapped from ``path``).

        ``vectors_in_store=True`` opens a read-only replica: the sentence vectors are
        read from ``vector_store`` (Milvus or Qdrant, which return them by key), row
        by row as queries need them, so the save's file of them is neither read nor
        needed, and this process holds no vector. The store must hold exactly this
        save's rows: its generation must be the save's, else ``ValueError`` (a replica
        never writes to the store, so it cannot repair it). ``add``, ``delete`` and
        ``save`` raise; a query that needs rows the writer has since deleted raises
        ``MissingRowsError``. Needs the default ``chunk_similarity="max"``.

        ``writer=True`` (with ``vectors_in_store``) opens the index's one writer that
        holds no vector either: ``add``, ``delete`` and ``save`` work, each update reading
        from the store the rows it needs (those of the chunks it adds or deletes, about
        as many as it writes). The new chunks' rows go to the store before the update is
        published; the rows of deleted chunks stay in the store, unused, until the next
        ``save``, which writes no vector and then deletes them. So a process killed
        anywhere leaves the store holding every row of the latest save: the next
        ``load(..., writer=True)`` of that save lists the store and deletes the rows no
        save lists. Replicas follow the writer's saves as before. A save made this way
        holds no vector file: it loads only with its store and ``vectors_in_store``.

        ``scores_in_store=True`` (with ``vectors_in_store``) has the store score the
        rows a query needs instead of returning them (``scores_of``: Milvus, Qdrant),
        which moves floats instead of vectors: a replica's query on a Milvus server
        reads no row it scores. The store's float32 sums may differ from this
        process's in the last bits, so its answers equal the writer's up to near-ties
        rather than to the bit. They are exact only where the store's index holds the
        vectors as written (Milvus FLAT or HNSW, Qdrant without quantization). Under a
        quantizing index they are approximate (Milvus IVF_SQ8 kept 0.904 of the context
        at 1 M passages), so a store that reports ``scores_from_codes`` (a Milvus
        collection indexed IVF_SQ8, IVF_PQ, HNSW_SQ, HNSW_PQ or HNSW_PRQ) is refused
        with a ValueError.
        """
        from .store import index_folder, load_corpus

        vectors_from = None
        if vectors_in_store:
            if vector_store is None:
                raise ValueError("vectors_in_store=True reads the vectors from vector_store: "
                                 "give the store the index was saved with")
            if not returns_vectors(vector_store):
                raise TypeError(f"{type(vector_store).__name__} does not return the vectors "
                                "it holds (vectors_of): MilvusVectorStore and QdrantStore do")
            if verify:
                raise ValueError("verify=True derives the concept vectors from every sentence "
                                 "vector; a replica reads none of them whole")
            if not isinstance(scores_in_store, bool):
                raise TypeError(f"scores_in_store must be a bool, got "
                                f"{type(scores_in_store).__name__}")
            if scores_in_store:
                check_store_scores(vector_store)
            vectors_from = cast(VectorRowsBackend, vector_store)
        elif scores_in_store:
            raise ValueError("scores_in_store=True is for a replica: pass vectors_in_store=True")
        if not isinstance(writer, bool):
            raise TypeError(f"writer must be a bool, got {type(writer).__name__}")
        if writer and not vectors_in_store:
            raise ValueError("writer=True is for an index whose vectors are in its store: pass "
                             "vectors_in_store=True (an index that holds its vectors writes "
                             "anyway)")
        if writer and scores_in_store:
            raise ValueError("scores_in_store=True is for a read-only replica, not a writer, "
                             "whose updates need the rows themselves")
        with ThreadPoolExecutor(1, thread_name_prefix="conceptgraph-tokenizer") as beside:
            # a retrieval recounts the saved counts of what it returns: read the tokenizer
            # while the save is read, not in the first query (0.12 of its 0.17 s at 80 K)
            tokenizer = beside.submit(load_tokenizer)
            saved = load_corpus(path, embedder.model_id, embedder.dim, verify=verify,
                                vectors_from=vectors_from)
            tokenizer.result()
        generation = saved.store_generation
        if saved.store_keys_outdated:
            if vectors_in_store:
                raise ValueError(
                    f"{path} was saved by an older conceptgraph, whose vector store keys do not "
                    "cover chunk metadata, and some of its chunks have metadata: a replica "
                    "would not find their rows. Load it once with its vectors (without "
                    "vectors_in_store) and the same store, which rewrites those rows, then "
                    "save it, and open replicas of that save")
            generation = None  # the store is listed: those chunks' rows get their new keys
        if scores_in_store:
            cast(EngineRows, saved.corpus.sentence_vectors).scores_in_store = True
        index = cls.from_state(embedder, saved.config, saved.corpus, ann=saved.ann,
                               saved=saved.graph, verify=verify, vector_store=vector_store,
                               store_generation=generation,
                               vector_spill=vector_spill, source=str(index_folder(path)),
                               writer=writer)
        del saved
        give_back_free_heap()  # what the load parsed and let go (see ``heap``)
        return index


# ---------------------------------------------------------------- helpers on one state
def _store_rows_attached(corpus: CorpusState, store: VectorStoreBackend | None) -> CorpusState:
    """``corpus``, taken or merged from a state whose rows are its store's (so its rows
    are a ``state.rows.RowsToAttach``), reading them from that store by key again."""
    return replaced(corpus, sentence_vectors=EngineRows(
        cast(VectorRowsBackend, store), corpus.ids, corpus.texts, corpus.metadata,
        corpus.sentence_offsets, corpus.dim))


def _vectors_in_store_checked(vectors_in_store: object, store: VectorStoreBackend | None,
                              config: ConceptGraphConfig | None) -> bool:
    """``vectors_in_store`` for a new index, checked against its store and config."""
    if not isinstance(vectors_in_store, bool):
        raise TypeError(f"vectors_in_store must be a bool, got {type(vectors_in_store).__name__}")
    if not vectors_in_store:
        return False
    if store is None:
        raise ValueError("vectors_in_store=True keeps the vectors in vector_store: give one")
    if not returns_vectors(store):
        raise TypeError(f"{type(store).__name__} does not return the vectors it holds "
                        "(vectors_of): MilvusVectorStore and QdrantStore do")
    if config is not None and config.chunk_similarity != "max":
        raise ValueError("vectors_in_store=True needs chunk_similarity='max' (the default): "
                         "a unit is then as similar as its best sentence, whose row the "
                         "store holds")
    return True


def _rows_left_in_store(state: IndexState) -> IndexState:
    """``state`` reading its sentence rows from its store by key (which holds them under
    its chunks' keys), not from the arrays or keys it was derived with: its store search
    too."""
    corpus = _store_rows_attached(state.corpus, state.vector_store)
    graph = state.graph
    if isinstance(graph.ann, EngineVectorIndex):
        graph = replace(graph, ann=replace(graph.ann, rows=StoredRows.of(corpus, None)))
    return replace(state, corpus=corpus, graph=graph)


def _with_store_surplus(state: IndexState, surplus: int) -> IndexState:
    """``state`` whose store searches ask for ``surplus`` rows more: the rows its store
    holds that it does not (``EngineVectorIndex.surplus``)."""
    ann = state.graph.ann
    if not isinstance(ann, EngineVectorIndex) or ann.surplus == surplus:
        return state
    return replace(state, graph=replace(state.graph, ann=replace(ann, surplus=surplus)))


def _check_vector_store(vector_store: object) -> None:
    if not isinstance(vector_store, VectorStoreBackend):
        raise TypeError("vector_store must implement the VectorStoreBackend protocol (upsert, "
                        f"delete, list_keys, search), got {type(vector_store).__name__}")


def _with_resolved_segmenter(config: ConceptGraphConfig) -> ConceptGraphConfig:
    """``cjk_segmenter="auto"`` settled once, at creation, and recorded in the config,
    so an index's analysis never depends on the machine that loads it."""
    segmenter = cast(CjkSegmenter, resolve_cjk_segmenter(config.cjk_segmenter))
    return replace(config, cjk_segmenter=segmenter)


class _Shards:
    """New chunks split, embedded and counted batch by batch: here, or in an executor's
    workers with at most ``SHARDS_IN_FLIGHT`` batches submitted and not yet collected."""

    def __init__(self, executor: Executor | None, embedder: Embedder, analyzer: Analyzer,
                 config: ConceptGraphConfig, bar: Any, spill: VectorSpill | None) -> None:
        if executor is not None and not isinstance(executor, Executor):
            raise TypeError("executor must be a concurrent.futures.Executor (e.g. a "
                            "ProcessPoolExecutor, or a Dask client's get_executor()), got "
                            f"{type(executor).__name__}")
        self._executor = executor
        self._embedder, self._analyzer, self._bar = embedder, analyzer, bar
        self._analysis = (config.ngram_max, config.min_term_chars, config.cjk_segmenter,
                          config.entity_terms)
        self._units = (config.unit_tokens, config.chunk_similarity == "direct")
        self._done: list[CorpusState] = []
        # every batch's vectors, spilled to a file once together they are large
        self._logs = None if spill is None else (spill.log(), spill.log())
        self._pending: collections.deque[tuple[Future[CorpusState], int]] = collections.deque()

    def put(self, ids: list[str], texts: list[str], metadata: list[str], seen: int) -> None:
        """Prepare these new chunks (``seen``: the batch's chunks, new or not)."""
        if not ids or self._executor is None:
            if ids:
                self._keep(prepare_chunks(
                    ids, texts, metadata, embedder=self._embedder, analyzer=self._analyzer,
                    unit_tokens=self._units[0], direct_units=self._units[1]))
            self._advance(seen)
            return
        while len(self._pending) >= SHARDS_IN_FLIGHT:
            self._collect_one()
        self._pending.append((self._executor.submit(
            prepare_shard, ids, texts, metadata, self._embedder, self._analysis,
            *self._units), seen))

    def _collect_one(self) -> None:
        future, seen = self._pending.popleft()
        self._keep(future.result())
        self._advance(seen)

    def _keep(self, part: CorpusState) -> None:
        if self._logs is not None:  # the log alone holds the rows until results()
            assert isinstance(part.sentence_vectors, np.ndarray), "a batch's rows are one array"
            self._logs[0].append(part.sentence_vectors)
            units = None
            if part.unit_vectors is not None:
                self._logs[1].append(part.unit_vectors)
                units = rows_placeholder(len(part.unit_vectors), part.dim)
            part = replaced(part, sentence_vectors=rows_placeholder(
                len(part.sentence_vectors), part.dim), unit_vectors=units)
        self._done.append(part)

    def _advance(self, seen: int) -> None:
        if self._bar is not None:
            self._bar.update(seen)

    def results(self) -> list[CorpusState]:
        """Every batch's new chunks, in the order they were put."""
        while self._pending:
            self._collect_one()
        if self._logs is None:
            return list(self._done)  # close() empties the shards' own list
        sentence_rows, unit_rows = (log.views() for log in self._logs)
        units: list[np.ndarray | None] = [*unit_rows] or [None] * len(self._done)
        return [replaced(part, sentence_vectors=rows, unit_vectors=unit)
                for part, rows, unit in zip(self._done, sentence_rows, units, strict=True)]

    def close(self) -> None:
        """Cancel what is still queued (after an error, nothing of it is used)."""
        for future, _ in self._pending:
            future.cancel()
        self._pending.clear()
        self._done.clear()  # the spilled views (if any) are taken or dropped with these
        if self._logs is not None:
            for log in self._logs:
                log.close()


@dataclass(frozen=True)
class _Batch:
    """Checked chunks of one add, from position ``start`` of the caller's input."""

    start: int
    texts: list[str]
    ids: list[str]
    metadata: list[str] | None


def _slices(texts: list[str], ids: list[str], metadata: list[str] | None,
            size: int) -> Iterator[_Batch]:
    for start in range(0, len(texts), size):
        end = start + size
        yield _Batch(start, texts[start:end], ids[start:end],
                     None if metadata is None else metadata[start:end])


def _as_sequence(values: Iterable[Any], name: str) -> Sequence[Any]:
    """``ids``/``metadatas`` next to a list of texts: any iterable, held as a list."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence, got {type(values).__name__}")
    return values if isinstance(values, Sequence) else list(values)


def _metadata_json(texts: list[str], metadatas: Sequence[Mapping[str, Any]],
                   start: int = 0) -> list[str]:
    """Each metadata mapping as JSON text; the check that it can be saved happens here."""
    if isinstance(metadatas, Mapping) or not isinstance(metadatas, Sequence):
        raise TypeError(f"metadatas must be a sequence of mappings, got "
                        f"{type(metadatas).__name__}")
    out = list(metadatas)
    if len(out) != len(texts):
        raise ValueError(f"got {len(out)} metadata entries for {len(texts)} texts")
    encoded = []
    for i, meta in enumerate(out, start=start):
        if not isinstance(meta, Mapping):
            raise TypeError(f"metadatas[{i}] must be a mapping, got {type(meta).__name__}")
        try:
            text = json.dumps(dict(meta), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"metadatas[{i}] is not JSON-serialisable: {exc}") from exc
        bad = invalid_character(text)
        if bad is not None:
            raise ValueError(f"metadatas[{i}] contains {bad[1]}")
        encoded.append(text)
    return encoded


def _chunk(corpus: CorpusState, pos: int) -> Chunk:
    return Chunk(corpus.ids[pos], corpus.texts[pos], int(corpus.tokens[pos]),
                 corpus.metadata_of(pos))


def _concept_position(graph: DerivedGraph, concept: str) -> int:
    pos = graph.concept_position.get(concept)
    if pos is None:
        raise KeyError(f"unknown concept {concept!r}")
    return pos


def _knn_scores(corpus: CorpusState, damping: float) -> np.ndarray:
    from .select.knn import knn_chunk_graph

    if len(corpus) < 2:
        return np.ones(len(corpus))
    vectors = segment_means(corpus.sentence_offsets, corpus.sentence_vectors)
    return knn_chunk_graph(chunk_term_counts(corpus), vectors, 2, damping=damping).scores


def _overrides(config: ConceptGraphConfig, top_k: int | None, hops: int | None,
               budget: int | None, min_score: float | None) -> ConceptGraphConfig:
    given: dict[str, Any] = {"top_k": top_k, "hops": hops, "budget": budget,
                             "min_score": min_score}
    changes = {k: v for k, v in given.items() if v is not None}
    return replace(config, **changes) if changes else config


def _walk_hops(cfg: ConceptGraphConfig, graph: DerivedGraph) -> int:
    """The walk's steps in a query with ``cfg`` on ``graph`` (0: the query does not walk)."""
    return walk_hops_for(cfg.walk_hops, graph.mean_unit_tokens) if cfg.ranking == "fused" else 0


def _search(state: IndexState, analyzer: Analyzer, q: np.ndarray, query: str,
            cfg: ConceptGraphConfig) -> RetrievalResult:
    """One retrieval, on one state: nothing here reads the index object."""
    corpus, graph = state.corpus, state.graph
    hits: list[Hit]
    walk_hops = _walk_hops(cfg, graph)
    hops = expansion_hops_for(cfg.hops, walk_hops)
    walks_from_terms = bool(walk_hops) and cfg.walk_seeds == "exact"
    query_concepts = (_exact_seeds(graph, analyzer, query)
                      if cfg.exact_match_seeds or walks_from_terms else None)
    exact = query_concepts if cfg.exact_match_seeds else None
    if not len(corpus):
        hits, trace = [], SearchTrace((), 0, 0, False)
    elif cfg.ranking == "fused":
        unit_similarity = _unit_similarity(corpus, graph, q, cfg.rescore_from == "codes")
        term_ids = _term_ids(corpus, analyzer, query) if cfg.lexical else None
        with (similarity_beside(unit_similarity, cfg.candidates,
                                _lexical_beside(graph, term_ids))
              if isinstance(unit_similarity, CandidateSimilarity)
              and _similarity_beside(cfg, graph)
              else nullcontext((unit_similarity, None))) as (similarity, lexical):
            hits, trace = _fused_hits(state, q, cfg, similarity, hops,
                                      exact, query_concepts if walks_from_terms else None,
                                      walk_hops, term_ids, lexical)
    else:
        hits, trace = local_search(
            scan_scores(graph.vectors, q),
            graph.unit_links_csc,
            graph.adjacency,
            _unit_scorer(corpus, graph, q),
            graph.unit_tokens,
            top_k=cfg.top_k,
            hops=hops,
            budget=cfg.budget,
            overflow=cfg.overflow,
            seeds=exact,
            min_similarity=cfg.min_score,
        )
    chunks = tuple(
        RetrievedChunk(
            _unit(corpus, graph, h.chunk),
            h.score,
            Provenance(graph.concepts[h.concept], h.concept_similarity, h.stage, h.hop)
            if h.concept >= 0 else Provenance(None, None, h.stage, 0),
        )
        for h in hits
    )
    _confirm_token_counts(corpus, graph,
                          np.fromiter((h.chunk for h in hits), dtype=np.int64, count=len(hits)),
                          [c.chunk.text for c in chunks])
    return RetrievalResult(
        query=query,
        chunks=chunks,
        direct_concepts=tuple(graph.concepts[c] for c in trace.direct_concepts),
        expanded_concepts=trace.expanded_concepts,
        stopped_by_budget=trace.stopped_by_budget,
        budget=cfg.budget,
    )


def _make_query_path(state: IndexState) -> None:
    """Build what a query with ``state.config`` builds on first use and keeps with the
    state (:meth:`ConceptGraphIndex.warm`)."""
    cfg, graph = state.config, state.graph
    if not len(state.corpus) or cfg.ranking != "fused":
        return
    if graph.walk is not None and _walks_sentences(cfg, graph):
        graph.walk.make_query_parts()
    prepare_sums(graph.unit_links_csc, graph.unit_bm25.weights)
    concept_search = concept_search_used(cfg, graph)
    if concept_search != "exact":
        _searched_concepts(graph, concept_search)
    if graph.ann is not None and _similarity_beside(cfg, graph):
        prepare_side_thread()
    if graph.ann is not None and cfg.rescore_from == "codes":
        _check_own_rows(state.corpus, graph)
        make_codes(_rescored_rows(state.corpus, graph))


def _walks_sentences(cfg: ConceptGraphConfig, graph: DerivedGraph) -> bool:
    """Whether a query with ``cfg`` walks ``graph``'s sentences."""
    return _walk_hops(cfg, graph) > 0 and cfg.walk_nodes == "sentences"


def _searched_concepts(graph: DerivedGraph, concept_search: str) -> ConceptHnsw | CodedScan:
    """What a query searches for its direct concepts where it does not scan every
    concept vector: the concept graph, or the concept codes (either made on first use)."""
    return graph.concept_hnsw if concept_search == "hnsw" else graph.concept_codes


def _fused_hits(state: IndexState, q: np.ndarray,
                cfg: ConceptGraphConfig, similarity: np.ndarray | UnitSimilarity, hops: int,
                exact: np.ndarray | None, walk_seeds: np.ndarray | None, walk_hops: int,
                term_ids: list[int] | None, lexical_beside: UnitView | None
                ) -> tuple[list[Hit], SearchTrace]:
    """The fused ranking's hits for one query, its units' cosines given
    (:func:`_unit_similarity`), and its BM25 view where that was made beside
    (``lexical_beside``, :func:`_lexical_beside`)."""
    graph = state.graph
    weighting: ConceptWeighting | None = None
    concept_similarity: np.ndarray | None = None
    concept_search = concept_search_used(cfg, graph)
    if concept_search != "exact":
        weighting = searched_weighting(
            _searched_concepts(graph, concept_search), graph.vectors, graph.adjacency, q,
            top_k=cfg.top_k, hops=hops, decay=cfg.expansion_decay, exact=exact)
    else:
        concept_similarity = scan_scores(graph.vectors, q)
    found = _found_by_engine(graph, cfg, concept_similarity, hops, exact, term_ids,
                             weighting)
    lexical: UnitView | None = lexical_beside
    if found is not None:
        lexical = found.lexical
    elif lexical is None and term_ids is not None:
        lexical = graph.unit_bm25.view(term_ids)
    return fused_search(
        concept_similarity,
        graph.unit_links_csr,
        graph.adjacency,
        similarity,
        graph.unit_tokens,
        graph.unit_idf,
        lexical=lexical,
        top_k=cfg.top_k,
        hops=hops,
        decay=cfg.expansion_decay,
        rrf_k=cfg.rrf_k,
        budget=cfg.budget,
        overflow=cfg.overflow,
        exact=exact,
        usable=graph.unit_linked_concepts,
        min_similarity=cfg.min_score,
        candidates=None if graph.ann is None else cfg.candidates,
        unit_links_csc=graph.unit_links_csc,
        walk=graph.walk if cfg.walk_nodes == "sentences" else None,
        walk_seeds=walk_seeds,
        walk_hops=walk_hops,
        walk_postings=None if graph.ann is None else cfg.walk_postings,  # candidates only
        weighting=weighting if found is None else found.weighting,
        evidence_found=None if found is None else found.evidence,
        ranks_beside=isinstance(similarity, StartedSimilarity),
    )


def _confirm_token_counts(corpus: CorpusState, graph: DerivedGraph, units: np.ndarray,
                          texts: Sequence[str] | None = None) -> int:
    """Recount those of ``units`` whose counts were read from a save and not yet recounted,
    and clear their marks; returns how many. ``texts``: the units' texts, where the caller
    has them already.

    A load takes saved counts as read (recounting a large corpus is most of a
    load); the budget rests on them, so none reaches a caller unconfirmed.
    """
    unconfirmed = graph.unit_tokens_unconfirmed
    if unconfirmed is None or not len(units):
        return 0
    todo = np.flatnonzero(unconfirmed[units])
    if not len(todo):
        return 0
    counted = count_tokens_batch([_unit_text(corpus, graph, int(units[i])) if texts is None
                                  else texts[i] for i in todo.tolist()])
    wrong = np.flatnonzero(counted != graph.unit_tokens[units[todo]])
    if len(wrong):
        from .store import CorruptIndexError

        chunk = _unit(corpus, graph, int(units[todo[wrong[0]]]))
        raise CorruptIndexError(
            f"the saved token count of {chunk.id!r} is {chunk.tokens}, but its text has "
            f"{int(counted[wrong[0]])} tokens: the index was edited after it was saved. "
            "Rebuild it, or load it with verify=True to check every count before use")
    unconfirmed[units[todo]] = False
    return len(todo)


def _check_batch_size(batch_size: object) -> None:
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")


def _term_ids(corpus: CorpusState, analyzer: Analyzer, query: str) -> list[int]:
    """The query's terms (the concept analyzer's words) that occur in the corpus."""
    return [corpus.term_position[t] for t in analyzer(query) if t in corpus.term_position]


def _exact_seeds(graph: DerivedGraph, analyzer: Analyzer, query: str) -> np.ndarray:
    """The query's own terms that are concepts, rarest (fewest chunks) first."""
    found = {graph.concept_position[t] for t in analyzer(query) if t in graph.concept_position}
    return np.asarray(sorted(found, key=lambda c: (graph.concept_chunk_counts[c], c)),
                      dtype=np.int64)


def _unit(corpus: CorpusState, graph: DerivedGraph, pos: int) -> Chunk:
    """A retrieval unit: the chunk itself, or a sentence run tagged with its chunk."""
    if not corpus.has_units:
        return _chunk(corpus, pos)
    parent = int(graph.unit_chunk[pos])
    k = pos - int(np.searchsorted(graph.unit_chunk, parent))
    chunk_id = corpus.ids[parent]
    return Chunk(f"{chunk_id}#u{k}", _unit_text(corpus, graph, pos), int(graph.unit_tokens[pos]),
                 {**corpus.metadata_of(parent), "parent_chunk_id": chunk_id, "unit": k})


def _unit_text(corpus: CorpusState, graph: DerivedGraph, pos: int) -> str:
    """A retrieval unit's text: its chunk's, or its sentences' run (no metadata parsed)."""
    if not corpus.has_units:
        return corpus.texts[pos]
    parent = int(graph.unit_chunk[pos])
    first, end = int(graph.unit_offsets[pos]), int(graph.unit_offsets[pos + 1])
    spans = corpus.sentence_spans
    return corpus.texts[parent][int(spans[first][0]):int(spans[end - 1][1])]


def _unit_scorer(corpus: CorpusState, graph: DerivedGraph, q: np.ndarray,
                 kept: GatheredUnits | None = None, from_codes: bool = False
                 ) -> Callable[[np.ndarray], np.ndarray]:
    """cos(query, unit) for given unit positions only: their best sentence, or their vector.

    ``kept`` holds the rows of unit sets scored before, gathered: a set asked for
    again (the rank sample, the same units for every query) is not gathered again.
    ``from_codes`` reads the rows' codes instead of the rows (``search.row_codes``).
    """
    unit_vectors, offsets = graph.unit_vectors, graph.unit_offsets
    sentences = corpus.sentence_vectors
    read_rows = coded_rows_at if from_codes else rows_at

    def sentence_rows(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = concatenated_ranges(offsets[units], offsets[units + 1])
        first = np.concatenate([[0], np.cumsum(offsets[units + 1] - offsets[units])[:-1]])
        return rows, first

    def gathered(units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if unit_vectors is not None:
            return read_rows(unit_vectors, units), np.arange(len(units))
        rows, first = sentence_rows(units)
        return read_rows(sentences, rows), first

    def score(units: np.ndarray) -> np.ndarray:
        if not len(units):
            return np.zeros(0, dtype=np.float32)
        if kept is None and unit_vectors is None and not from_codes:
            # rows in a store may score themselves
            positions, first = sentence_rows(units)
            return np.maximum.reduceat(row_scores(sentences, positions, q), first)
        rows, first = gathered(units) if kept is None else kept.rows(units, gathered)
        scores = scan_scores(rows, q)
        return scores if unit_vectors is not None else np.maximum.reduceat(scores, first)

    return score


@dataclass(frozen=True)
class _EngineFound:
    """What an engine that keeps term postings found for one query (:func:`_found_by_engine`)."""

    weighting: ConceptWeighting
    evidence: np.ndarray  # units with concept evidence
    lexical: UnitView | None  # the BM25 view over the units found for the query's words


def _found_by_engine(graph: DerivedGraph, cfg: ConceptGraphConfig,
                     concept_similarity: np.ndarray | None, hops: int,
                     exact: np.ndarray | None, term_ids: list[int] | None,
                     weighting: ConceptWeighting | None = None
                     ) -> _EngineFound | None:
    """Where the vector engine keeps term postings, the units it finds, in one request,
    for the query's concepts (their terms weighted by the concepts' values) and (with
    ``term_ids``) its words (weighted by idf); the views then score them exactly here.
    None otherwise. The concept values are made here, before the ranking, so that both
    searches go together: ``fused_search`` is given them as its ``weighting``.

    One row of each unit holds its terms; ``ROWS_PER_UNIT_SEARCHED`` units are asked
    per unit wanted, as the views keep the best by exact score: the engine's order is
    BM25's only roughly (terms present, weighted by idf), and its ties are not broken
    as the views' are."""
    engine = graph.ann
    if not isinstance(engine, EngineVectorIndex) or not engine.keeps_terms:
        return None
    if weighting is None:  # else made from the concept graph's candidates already
        assert concept_similarity is not None, "a scan's cosines or a searched weighting"
        weighting = concept_weights(concept_similarity, graph.adjacency, top_k=cfg.top_k,
                                    hops=hops, decay=cfg.expansion_decay, exact=exact,
                                    usable=graph.unit_linked_concepts)
    valued = weighting.values(graph.unit_idf)
    used = valued.where(valued.values > 0)
    queries = [dict(zip(graph.concept_terms[used.positions].tolist(), used.values.tolist(),
                        strict=True))]
    columns = np.unique(np.asarray(term_ids or [], dtype=np.int64))
    if term_ids is not None:
        queries.append(dict(zip(columns.tolist(), graph.unit_bm25.idf(columns).tolist(),
                                strict=True)))
    row_unit = graph.ann_row_unit
    found = []
    for rows in engine.search_terms(queries, ROWS_PER_UNIT_SEARCHED * cfg.candidates):
        units = rows if row_unit is None else row_unit[rows]
        found.append(np.unique(units[units >= 0]))
    lexical = None if term_ids is None else graph.unit_bm25.found_view(found[1], columns)
    return _EngineFound(weighting, found[0], lexical)


def _unit_similarity(corpus: CorpusState, graph: DerivedGraph, q: np.ndarray,
                     from_codes: bool = False) -> np.ndarray | CandidateSimilarity:
    """cos(query, unit) for the fused ranking: every unit's on the exact path, else the
    units its vector index finds, rescored exactly (``from_codes``: from the rows' codes,
    ``rescore_from="codes"``)."""
    if graph.ann is None:
        return _all_unit_similarity(corpus, graph, q)
    if from_codes:
        _check_own_rows(corpus, graph)
    kept = graph.coded_units if from_codes else graph.gathered_units
    return CandidateSimilarity(graph.ann, graph.ann_row_unit,
                               _unit_scorer(corpus, graph, q, from_codes=from_codes),
                               q, len(graph.unit_tokens),
                               _unit_scorer(corpus, graph, q, kept, from_codes))


def _rescored_rows(corpus: CorpusState, graph: DerivedGraph) -> object:
    """The rows the candidate path rescores: the units' vectors, or their sentences'."""
    return graph.unit_vectors if graph.unit_vectors is not None else corpus.sentence_vectors


def _check_own_rows(corpus: CorpusState, graph: DerivedGraph) -> None:
    """``rescore_from="codes"`` codes the index's own rows: not rows a store scores."""
    if isinstance(_rescored_rows(corpus, graph), ScoredRows):
        raise ValueError("rescore_from='codes' codes the index's own vectors; this "
                         "index's rows are in a vector store, which scores them: use "
                         "rescore_from='vectors'")


# a BM25 view that reads at least this many posting entries is made on the query's
# second thread after the units' search; a smaller one on the caller's, where the
# units' search is the longer part. Measured on the scale corpus (benchmarks/results/
# NOTES.md, fifty-second round): at a million passages, where a query's terms read
# 226,000 entries (median), queries took 26.2-26.5 ms p50 against 28.1-29.1; at 80,000,
# where this bound leaves nearly every view on the caller, a tie. Moving every view
# there cost 0.4-0.9 ms at 80,000, within that save's spread between processes
LEXICAL_BESIDE_ENTRIES = 100_000


def _lexical_beside(graph: DerivedGraph, term_ids: list[int] | None
                    ) -> Callable[[], UnitView] | None:
    """The BM25 view as a part for the query's second thread, None where the caller's
    thread makes it (no terms, or postings too short to pay for the move)."""
    if term_ids is None or graph.unit_bm25.entries(term_ids) < LEXICAL_BESIDE_ENTRIES:
        return None
    return partial(graph.unit_bm25.view, term_ids)


def _similarity_beside(cfg: ConceptGraphConfig, graph: DerivedGraph) -> bool:
    """Whether the candidate path's vector search runs on the query's second thread
    (``search.side_thread``): over this process's own index, not over an engine's, whose
    client is not known to be safe on another thread."""
    return cfg.query_threads == 2 and not isinstance(graph.ann, EngineVectorIndex)


def _all_unit_similarity(corpus: CorpusState, graph: DerivedGraph, q: np.ndarray) -> np.ndarray:
    """cos(query, unit) for every unit: one pass over the sentence vectors, no copies."""
    if graph.unit_vectors is not None:
        return scan_scores(graph.unit_vectors, q)
    if not len(corpus):
        return np.zeros(0, dtype=np.float32)
    return np.maximum.reduceat(scan_scores(corpus.sentence_vectors, q), graph.unit_offsets[:-1])
