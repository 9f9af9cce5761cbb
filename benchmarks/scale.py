"""How the index's costs grow with the corpus: build, memory, disk, load, query, add and delete.

    python -m benchmarks.scale --sizes 10000 100000 --out benchmarks/results/scale.json
    python -m benchmarks.scale --plot benchmarks/results/scale.json --plot-out scale.png
    python -m benchmarks.scale --backend milvus-lite --sizes 10000 100000
    python -m benchmarks.scale --backend milvus-lite-terms --sizes 10000 100000
    python -m benchmarks.scale --backend milvus --milvus-uri http://127.0.0.1:19530 \
        --engine-pid "$(pgrep -f 'milvus run standalone')" --sizes 10000 100000
    python -m benchmarks.scale --sizes 1000000 --save /tmp/q   # /tmp/q/idx1000000, nothing measured

``--save DIR`` only builds each size's corpus and saves the index to ``DIR/idx<size>``:
the saved indexes ``benchmarks.query_cost`` and ``benchmarks.update_cost`` measure.

``--backend`` puts the vectors in an outside store (Milvus Lite in a temporary
folder, or Chroma's embedded client through the LangChain wrapper) instead of the
in-process exact scan or HNSW; the store's own share of each query is reported,
and the context is compared with the local exact search's. ``milvus-lite-terms``
also keeps each unit's term postings in Milvus, which then finds the units of the
concept-evidence and BM25 views as well as the nearest vectors.

``milvus`` and ``milvus-terms`` do the same against a running Milvus server
(``--milvus-uri``), in a collection of their own that each size drops when it ends;
``--engine-pid`` names the server's process, whose resident memory is then reported
(``engine_rss_mb_*``). A standalone server runs on one machine with no container:
``pip install milvus==2.3.5 && python -m benchmarks.milvus_server --data DIR`` (Milvus
2.3, which has no sparse vectors, so ``milvus-terms`` needs a 2.4 or later server).
After the build the run waits until the server has indexed every row
(``engine_index_wait_s``): it indexes sealed segments in the background and searches
the rest by brute force, so queries timed before that would measure a server still
building.

Corpora are synthetic but made of real text: the sentences of ``../shared/data``'s
corpora, shuffled and recombined into passages of 3–6 sentences with unique ids,
so term statistics and sentence lengths are realistic at any size. The hashing
embedder stands in for the model so that sizes beyond what MiniLM can embed here
are measurable; the MiniLM embedding time is projected from its sentences per
second measured on a sample (``--minilm-sample``, 0 to skip). Each size runs in a
process of its own, so peak RSS is that size's. With the local backend each size's save
is also loaded and asked the same questions in a fresh process (``fresh_query_ms_*``): a
server that loads a saved index has not built one first, and the process that built it
answers the same save slower.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.build_speed import TimedEmbedder
from benchmarks.data import DATA_ROOT, DATASETS

if TYPE_CHECKING:
    from shared_core.embeddings import Embedder

DATA = DATA_ROOT


def sentence_pool(data: Path, limit: int = 400_000) -> list[str]:
    """Every sentence of the dev corpora, in a fixed order."""
    from shared_core.corpus import read_corpus
    from shared_core.text import split_sentences

    pool: list[str] = []
    for name in DATASETS:
        corpus = data / name / "corpus.jsonl"
        if corpus.is_file():
            for record in read_corpus(corpus):
                pool.extend(record.text[s:e] for s, e in split_sentences(record.text))
    return pool[:limit]


def passages(pool: list[str], n: int, seed: int, fresh_names: float = 0.0,
             first_name: int = 0) -> tuple[list[str], list[str]]:
    """``n`` passages of 3–6 pool sentences each, with unique ids.

    Recombined sentences bring no new words, so the vocabulary stops growing (about
    65 K concepts from 100 K passages on). ``fresh_names`` (a mean per passage) puts
    names no other passage has in place of capitalised words, as a real corpus keeps
    meeting new names: each passage renames a Poisson-drawn number of its distinct
    capitalised words (not a sentence's first), at every occurrence, drawn by their
    own generator so that the sentences are those of ``fresh_names=0``. The names are
    numbered from ``first_name`` (:func:`fresh_name`): passages added to a save give
    a start past the save's own names.
    """
    rng = random.Random(seed)
    texts = [" ".join(rng.choices(pool, k=rng.randint(3, 6))) for _ in range(n)]
    if fresh_names:
        texts = renamed(texts, fresh_names, np.random.default_rng(seed), first_name)
    return [f"s{seed}-{i:08d}" for i in range(n)], texts


CAPITALISED = re.compile(r"(?<=[^.!?]\s)[A-Z][a-z]{2,}\b")


FRESH_LETTERS = 6  # 26 ** 6 = 308 M names


def fresh_name(i: int) -> str:
    """The ``i``-th made-up name (Qxaaaaaa, Qxaaaaab, ...): letters only, like no word."""
    if not 0 <= i < 26 ** FRESH_LETTERS:
        raise ValueError(f"fresh name {i} is past the {26 ** FRESH_LETTERS:,} there are")
    letters = ""
    for _ in range(FRESH_LETTERS):
        i, digit = divmod(i, 26)
        letters = chr(97 + digit) + letters
    return "Qx" + letters


def renamed(texts: list[str], mean: float, rng: np.random.Generator,
            first_name: int = 0) -> list[str]:
    """``texts`` with a Poisson(``mean``) number of capitalised words each renamed to a
    name of its own (fewer where a text has fewer such words), numbered from
    ``first_name``."""
    counts = rng.poisson(mean, size=len(texts))
    out, named = [], first_name
    for text, count in zip(texts, counts.tolist(), strict=True):
        words = sorted(set(CAPITALISED.findall(text)))
        if count and words:
            chosen = rng.choice(len(words), size=min(count, len(words)), replace=False)
            names = {words[w]: fresh_name(named + k) for k, w in enumerate(sorted(chosen))}
            named += len(names)
            text = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\b",
                          lambda m, names=names: names[m.group(1)], text)
        out.append(text)
    return out


class HeapSampler:
    """The peak of this process's anonymous (heap) memory, sampled every 50 ms.

    ``ru_maxrss`` also counts the pages of mapped files (a saved index's vectors,
    a build's spilled ones) while they are cached, which the kernel drops under
    pressure; anonymous memory is what a machine must really hold.
    """

    def __init__(self) -> None:
        import threading

        self.peak_mb = 0.0
        self.level_mb = 0.0  # the reading the last reset took: where the next phase starts
        # the main thread's innermost frames when the peak was sampled: where it falls
        self.peak_where: list[str] = []
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def anonymous_mb() -> float:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def _run(self) -> None:
        import sys
        import traceback

        while not self._stop.is_set():
            now = self.anonymous_mb()
            if now > self.peak_mb:
                self.peak_mb = now
                frame = sys._current_frames().get(self._main)  # type: ignore[arg-type]
                self.peak_where = [f"{Path(f.filename).name}:{f.lineno} {f.name}"
                                   for f in traceback.extract_stack(frame)[-6:]]
                # a frame held here would keep its locals (and its callers') alive
                del frame
            self._stop.wait(0.05)

    def reset(self) -> float:
        """The peak so far, counting the current level (``level_mb``), from which
        sampling goes on."""
        self.level_mb = self.anonymous_mb()
        peak, self.peak_mb = self.peak_mb, self.level_mb
        return max(peak, self.level_mb)

    def phase(self) -> dict[str, Any]:
        """The peak since the last phase or reset and where it fell (empty when the heap
        never rose past where the phase began); the next phase starts from here."""
        where, self.peak_where = self.peak_where, []
        return {"peak_mb": round(self.reset(), 1), "where": where}

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.reset()


@dataclass(frozen=True)
class DiskReads:
    """This process's major page faults and bytes read from the block device so far: a
    query pass that faults pages back in (the page cache evicted under a build's memory)
    shows here, where its latency alone cannot say why it was slow."""

    major_faults: int
    read_bytes: int | None  # None where the kernel keeps no /proc/self/io

    def since(self, before: DiskReads) -> dict[str, float | int | None]:
        read = (None if self.read_bytes is None or before.read_bytes is None
                else round((self.read_bytes - before.read_bytes) / 2**20, 1))
        return {"major_faults": self.major_faults - before.major_faults, "disk_read_mb": read}


def disk_reads() -> DiskReads:
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    try:
        lines = Path("/proc/self/io").read_text().splitlines()
    except OSError:
        return DiskReads(faults, None)
    fields = dict(line.split(": ", 1) for line in lines if ": " in line)
    return DiskReads(faults, int(fields["read_bytes"]) if "read_bytes" in fields else None)


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class TimedStore:
    """A vector store with the seconds its searches took (the engine's share of a query),
    and the rows read back from it."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.search_seconds = 0.0
        self.rows_read = 0

    def upsert(self, keys: Any, vectors: Any, texts: Any, metadatas: Any) -> None:
        self.store.upsert(keys, vectors, texts, metadatas)

    def delete(self, keys: Any) -> None:
        self.store.delete(keys)

    def list_keys(self) -> Any:
        return self.store.list_keys()

    def flush(self) -> None:
        self.store.flush()

    def read_marker(self) -> str | None:
        marker: str | None = self.store.read_marker()
        return marker

    def write_marker(self, value: str) -> None:
        self.store.write_marker(value)

    def search(self, query: np.ndarray, k: int) -> list[str]:
        found: list[str] = self._timed(self.store.search, query, k)
        return found

    def _timed(self, search: Any, asked: Any, k: Any) -> Any:
        """``search(asked, k)``, its seconds added to ``search_seconds``."""
        start = time.perf_counter()
        try:
            return search(asked, k)
        finally:
            self.search_seconds += time.perf_counter() - start

    # a store that keeps term postings (``TermPostingsBackend``): its term searches are
    # the engine's share of a query too
    @property
    def keeps_terms(self) -> bool:
        from shared_core.search.external import keeps_terms

        return keeps_terms(self.store)

    def upsert_with_terms(self, keys: Any, vectors: Any, texts: Any, metadatas: Any,
                          terms: Any) -> None:
        self.store.upsert_with_terms(keys, vectors, texts, metadatas, terms)

    def search_terms(self, queries: Any, k: int) -> list[list[str]]:
        found: list[list[str]] = self._timed(self.store.search_terms, queries, k)
        return found

    # a store that returns its rows (``VectorRowsBackend``): a replica's reads of them
    # are the engine's share of its queries too
    def vectors_of(self, keys: Any) -> np.ndarray:
        rows: np.ndarray = self._timed(lambda asked, _: self.store.vectors_of(asked), keys, 0)
        self.rows_read += len(rows)
        return rows

    # a store that scores its rows (``VectorScoresBackend``): a replica with
    # ``scores_in_store`` asks it for them, unless its index scores from codes
    @property
    def scores_from_codes(self) -> bool:
        return bool(getattr(self.store, "scores_from_codes", False))

    def scores_of(self, keys: Any, query: Any) -> np.ndarray:
        scores: np.ndarray = self._timed(self.store.scores_of, keys, query)
        return scores

    def search_scored(self, query: Any, k: int) -> list[tuple[str, float]]:
        found: list[tuple[str, float]] = self._timed(self.store.search_scored, query, k)
        return found


SERVER_BACKENDS = ("milvus", "milvus-terms")  # a running server at ``--milvus-uri``


def open_store(backend: str, folder: Path, embedder: Any, milvus_index: str = "AUTOINDEX",
               milvus_uri: str | None = None, milvus_index_params: dict[str, Any] | None = None,
               milvus_search_params: dict[str, Any] | None = None) -> Any:
    """The outside vector store ``--backend`` names, in ``folder`` (or, for a server
    backend, in a new collection of a random name); None for ``local``.

    Chroma goes through the LangChain wrapper, which embeds with ``embedder`` (the
    index's model, so the wrapper's same-model check passes)."""
    if backend == "local":
        return None
    if backend in SERVER_BACKENDS:
        from shared_core.search.milvus import MilvusVectorStore

        milvus_uri = milvus_uri or os.environ.get("MILVUS_URI")
        if not milvus_uri:
            raise ValueError(f"--backend {backend} needs --milvus-uri (or MILVUS_URI), the "
                             "server's address")
        return TimedStore(MilvusVectorStore(milvus_uri, f"scale_{uuid.uuid4().hex[:16]}",
                                            index_type=milvus_index,
                                            term_postings=backend == "milvus-terms",
                                            index_params=milvus_index_params,
                                            search_params=milvus_search_params))
    if backend in ("milvus-lite", "milvus-lite-terms"):
        from shared_core.search.milvus import MilvusVectorStore

        return TimedStore(MilvusVectorStore(str(folder / "milvus.db"), "conceptgraph",
                                            index_type=milvus_index,
                                            term_postings=backend == "milvus-lite-terms",
                                            index_params=milvus_index_params,
                                            search_params=milvus_search_params))
    if backend in ("qdrant-local", "qdrant-local-terms"):
        from shared_core.search.qdrant import QdrantStore

        return TimedStore(QdrantStore(str(folder / "qdrant"), "conceptgraph",
                                      term_postings=backend == "qdrant-local-terms"))
    if backend == "chroma":
        import chromadb
        from langchain_chroma import Chroma

        from langchain_conceptgraph import CoreEmbeddings, LangChainVectorStore

        client = chromadb.PersistentClient(
            str(folder / "chroma"), settings=chromadb.Settings(anonymized_telemetry=False))
        chroma = Chroma("conceptgraph", embedding_function=CoreEmbeddings(embedder),
                        client=client, collection_metadata={"hnsw:space": "ip"})
        return TimedStore(LangChainVectorStore(chroma))
    raise ValueError(f"unknown backend {backend!r}")


INDEX_POLL_S = 10.0
PASS_POLL_S = 2.0  # before a timed pass: the waits are seconds to minutes


def wait_for_index(store: TimedStore, poll_s: float = INDEX_POLL_S) -> float:
    """Seconds until a Milvus server reports every row of the vector field indexed
    (``pending_index_rows`` 0). A server indexes sealed segments in the background, and
    searches the rest by brute force: queries timed before it is done measure a server
    still building, not one serving."""
    client, collection = store.store.client, store.store.collection
    start = time.perf_counter()
    while client.describe_index(collection, "vector")["pending_index_rows"]:
        time.sleep(poll_s)
    return time.perf_counter() - start


def settled(store: TimedStore | None, engine: Engine,
            poll_s: float = PASS_POLL_S) -> dict[str, float] | None:
    """Wait, before a timed pass, until a server has indexed every row, and say how many
    rows were waiting and for how long. Minutes after a build (and maybe after an update)
    a server compacts its segments and indexes the merged ones again, searching their rows by
    brute force meanwhile (NOTES, sixty-second round): a pass timed then measures the
    compaction, not the index. None for a backend that is not a server."""
    if store is None or engine.backend not in SERVER_BACKENDS:
        return None
    client, collection = store.store.client, store.store.collection
    pending = int(client.describe_index(collection, "vector")["pending_index_rows"])
    return {"pending_index_rows": pending,
            "waited_s": round(wait_for_index(store, poll_s) if pending else 0.0, 1)}


def drop_collections(store: TimedStore) -> None:
    """Drop a server backend's collections (its rows and its generation marker)."""
    client = store.store.client
    for name in (store.store.collection, store.store.marker_collection):
        if client.has_collection(name):
            client.drop_collection(name)


@dataclass(frozen=True)
class Engine:
    """Where ``--backend`` puts the vectors: its name, Milvus's index type and its
    build and search parameters, and for a server backend its address and (optionally)
    its process, whose memory is read."""

    backend: str = "local"
    milvus_index: str = "AUTOINDEX"
    milvus_uri: str | None = None
    pid: int | None = None
    milvus_index_params: dict[str, Any] = field(default_factory=dict)
    milvus_search_params: dict[str, Any] = field(default_factory=dict)

    def rss_mb(self) -> float | None:
        """The server process's resident memory now (``VmRSS``), or None without a pid."""
        if self.pid is None:
            return None
        status = Path(f"/proc/{self.pid}/status").read_text(encoding="utf-8")
        line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
        return round(int(line.split()[1]) / 1024, 1)


def measure_size(n: int, data: Path, queries: int, vector_index: str,
                 engine: Engine = Engine(), lean: bool = False, spill: bool = True,
                 beams: Sequence[int] = (),
                 sweeps: dict[str, Sequence[int]] | None = None,
                 exact: bool = True) -> dict[str, Any]:
    """One corpus size, in this process: every cost the issue asks for. ``sweeps`` maps
    query knobs (``SWEPT_KNOBS``) to values each queried with, against exact; without
    ``exact`` the approximate path is not compared with exact search at all."""
    from shared_core import HashingEmbedder

    embedder = HashingEmbedder(384)
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(engine.backend, Path(folder), embedder, engine.milvus_index,
                           engine.milvus_uri, engine.milvus_index_params,
                           engine.milvus_search_params)
        try:
            return _measure_size(n, data, queries, vector_index, engine, embedder, store,
                                 lean, spill, beams, sweeps or {}, exact)
        finally:  # a server outlives the run: leave it as it was
            if engine.backend in SERVER_BACKENDS:
                drop_collections(store)


WARM_UP_PASSAGES = 200


def warm_up_build(pool: list[str], embedder: Any, config: Any) -> float:
    """Seconds of a small build (``WARM_UP_PASSAGES``) before the timed one, let go: it
    loads what a process loads once (numba and the compiled loops, about 0.3-0.7 s in a
    new process), which a build of 10 K passages would otherwise count as its own, and
    a 1 % add after it would not."""
    from shared_core import ConceptGraphIndex

    ids, texts = passages(pool, WARM_UP_PASSAGES, seed=3)
    start = time.perf_counter()
    ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder,
                                 config=config)
    return time.perf_counter() - start


def save_built(n: int, data: Path, folder: Path, fresh_names: float = 0.0,
               embedder: Embedder | None = None) -> dict[str, Any]:
    """Build the size-``n`` corpus as :func:`measure_size` does (with ``fresh_names``, see
    :func:`passages`) and save it to ``folder/idx<n>``: the index the saved-index
    benchmarks load. ``embedder`` is the hashing one unless given (MiniLM, to measure
    what depends on real vectors: its time is in the build's)."""
    from shared_core import ConceptGraphIndex, HashingEmbedder
    from shared_core.state.spill import DEFAULT_SPILL

    ids, texts = passages(sentence_pool(data), n, seed=1, fresh_names=fresh_names)
    start = time.perf_counter()
    index = ConceptGraphIndex.from_texts(texts, ids=ids,
                                         embedder=embedder or HashingEmbedder(384),
                                         vector_spill=DEFAULT_SPILL)
    build = time.perf_counter() - start
    path = folder / f"idx{n}"
    index.save(str(path))
    stats = index.stats()
    return {"passages": n, "fresh_names": fresh_names, "embedder": index.embedder.model_id,
            "concepts": int(stats["concepts"]),
            "edges": int(stats["edges"]), "path": str(path), "build_s": round(build, 1),
            "disk_mb": round(folder_size(path) / 1e6, 1)}


def _measure_size(n: int, data: Path, queries: int, vector_index: str, engine: Engine,
                  embedder: Any, store: TimedStore | None, lean: bool, spill: bool,
                  beams: Sequence[int], sweeps: dict[str, Sequence[int]],
                  exact: bool) -> dict[str, Any]:
    from dataclasses import replace

    from shared_core import ConceptGraphConfig, ConceptGraphIndex
    from shared_core.search.external import returns_vectors
    from shared_core.state.derived import derive_graph
    from shared_core.state.saved import saved_parts
    from shared_core.state.spill import DEFAULT_SPILL

    pool = sentence_pool(data)
    ids, texts = passages(pool, n, seed=1)
    extra_ids, extra_texts = passages(pool, max(1, n // 100), seed=2)
    timed = TimedEmbedder(embedder)
    config = ConceptGraphConfig(vector_index=vector_index)  # type: ignore[arg-type]
    warm_up = warm_up_build(pool, embedder, config)
    backend = engine.backend
    engine_rss = {"before_build": engine.rss_mb()}
    heap = HeapSampler()
    heap_before_build = heap.anonymous_mb()
    start = time.perf_counter()

    def reached(step: str) -> None:
        """A step done, on stderr as it happens: a run killed for memory (a capped one)
        still says how far it got and how much anonymous memory it held there."""
        print(f"scale {n}: {step} at {time.perf_counter() - start:.0f} s, "
              f"{heap.anonymous_mb():,.0f} MB anonymous", file=sys.stderr, flush=True)

    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=timed, config=config,
                                         vector_store=store,
                                         vector_spill=DEFAULT_SPILL if spill else None)
    build = time.perf_counter() - start
    # the build's own embedding: the updates below embed through ``timed`` too
    build_embedding, build_sentences = timed.seconds, timed.texts
    non_embedding_build = build - build_embedding
    del texts, ids  # the index holds its own copy: the corpus lists would only add to later peaks
    # the peak so far: the build's own (later steps hold a second index beside this one)
    build_peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    engine_rss["after_build"] = engine.rss_mb()
    build_peak_where = heap.peak_where
    build_peak_heap = heap.reset()
    heap_after_build = heap.level_mb
    reached("built")
    index_wait = None
    if store is not None and engine.backend in SERVER_BACKENDS:
        index_wait = wait_for_index(store)
        engine_rss["after_index"] = engine.rss_mb()
        reached(f"the server indexed every row ({index_wait:.0f} s after the build)")
    refresh = add = delete = load_verified = None
    if not lean:  # the graph alone, derived again from the built chunks
        refresh_start = time.perf_counter()
        derive_graph(index.state.corpus, index.config)
        refresh = time.perf_counter() - refresh_start
    pagerank_cold, pagerank_warm = pagerank_seconds(index)
    reached("PageRank timed again, cold and warm")
    asked = scale_questions(pool, queries, embedder)
    if store is not None:
        store.search_seconds = 0.0
    local: list[float] = []
    reads_before = disk_reads()
    settled_before = {"built": settled(store, engine)}
    latencies, contexts = query_latencies(index, asked, store, local)
    built_query_reads = disk_reads().since(reads_before)
    reached(f"queried the built index ({np.percentile(latencies, 50):.1f} ms p50, "
            f"{built_query_reads['major_faults']} major faults)")
    engine_rss["after_queries"] = engine.rss_mb()
    row: dict[str, Any] = {}
    if engine.pid is not None:
        row.update({f"engine_rss_mb_{when}": mb for when, mb in engine_rss.items()})
    if index_wait is not None:
        row["engine_index_wait_s"] = round(index_wait, 1)
        # the rows each timed pass found waiting for the index, and the wait (the
        # passes below add theirs)
        row["engine_settled_before_pass"] = settled_before
    if store is not None:
        row["store_search_ms_mean"] = round(store.search_seconds * 1000 / queries, 2)
        row.update(percentile_fields("local_query_ms", local))
    if exact and index.state.graph.ann is not None:  # the approximate path against exact
        exact_index = (index.reconfigured(vector_index="exact") if store is None else
                 ConceptGraphIndex.from_state(  # the same graph, scanned in this process
                     embedder, replace(index.config, vector_index="exact"),
                     index.state.corpus, saved=saved_parts(index.state.graph)))
        exact_latencies, exact_contexts = query_latencies(exact_index, asked)
        row["exact_query_ms_p50"] = round(float(np.percentile(exact_latencies, 50)), 2)
        row["context_recall_vs_exact"] = round(context_recall(contexts, exact_contexts), 4)
        del exact_index
        if beams and store is None:
            row["beams"] = beam_sweep(index, asked, exact_contexts, beams)
        for knob, values in sweeps.items():
            if values:
                row[SWEPT_KNOBS[knob]] = knob_sweep(index, asked, exact_contexts, knob, values)
    if not lean:
        add, delete = timed_updates(index, extra_texts, extra_ids)
    # each later step's heap peak and where it fell: the run's peak is one of them
    phases = {"queries and updates on the built index" if not lean else
              "queries on the built index": heap.phase()}

    def time_repeated_updates(updated: Any) -> None:
        repeated = repeated_updates(updated, extra_texts, extra_ids)
        row.update(repeated)
        row["add_median_share_of_build"] = round(
            repeated["add_1pct_median_s"] / max(non_embedding_build, 1e-9), 3)
        phases["repeated updates"] = heap.phase()

    # each update gives an engine's rows a new generation, and a replica loads only the
    # save of the store's latest one: with a store the repeated updates come first
    repeat_before_save = not lean and store is not None
    if repeat_before_save:
        time_repeated_updates(index)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index"
        save_start = time.perf_counter()
        index.save(str(path))
        save = time.perf_counter() - save_start
        phases["save"] = heap.phase()
        reached("saved")
        disk = folder_size(path)
        stats = index.stats()
        if not lean and not repeat_before_save:  # the save holds one add and delete
            time_repeated_updates(index)
        del index  # the load below is measured on its own, not beside the built index
        import gc

        gc.collect()
        load_start = time.perf_counter()
        loaded = ConceptGraphIndex.load(str(path), embedder, vector_store=store)
        load = time.perf_counter() - load_start
        # a loaded index recounts each unit's text the first time it returns it
        # (saved token counts are confirmed, not trusted): the first pass pays that
        settled_before["loaded_first"] = settled(store, engine)
        first_pass, _ = query_latencies(loaded, asked)
        loaded_local: list[float] = []
        settled_before["loaded"] = settled(store, engine)
        second_pass, loaded_contexts = query_latencies(loaded, asked, store, loaded_local)
        row.update(percentile_fields("loaded_local_query_ms", loaded_local))
        if store is not None and returns_vectors(store.store):
            settled_before["replica"] = settled(store, engine)
            row.update(replica_figures(path, embedder, store, asked, loaded_contexts))
            row.update(writer_figures(path, embedder, store, asked, loaded_contexts,
                                      extra_texts, extra_ids))
        row.update(percentile_fields("loaded_first_query_ms", first_pass))
        row["loaded_query_ms_p50"] = round(float(np.percentile(second_pass, 50)), 2)
        # what a server pays once so that no first-seen unit is recounted in a query: the
        # counts the passes did not confirm (nearly all), recounted at once
        warm_start = time.perf_counter()
        row["warm_units"] = loaded.warm()
        row["warm_s"] = round(time.perf_counter() - warm_start, 2)
        # a third pass after warm(), as a server asks: fresh processes on a save, warmed,
        # answered faster than the second pass here, which this compares within the run
        settled_before["loaded_warm"] = settled(store, engine)
        warm_local: list[float] = []
        third_pass, _ = query_latencies(loaded, asked, store, warm_local)
        row["loaded_warm_query_ms_p50"] = round(float(np.percentile(third_pass, 50)), 2)
        row.update(percentile_fields("loaded_warm_local_query_ms", warm_local))
        phases["load and queries"] = heap.phase()
        reached(f"loaded and queried ({row['loaded_query_ms_p50']:.1f} ms p50)")
        if lean:  # the updates on the loaded index, the built one gone: half the memory
            add, delete = timed_updates(loaded, extra_texts, extra_ids)
            reached(f"added and deleted 1 % ({add:.1f} s, {delete:.1f} s)")
            phases["updates on the loaded index"] = heap.phase()
        del loaded
        if store is None:  # a server's process: it loads the save and nothing before
            row.update(fresh_process_figures(path, asked, loaded_contexts))
        if not lean:
            verified_start = time.perf_counter()
            ConceptGraphIndex.load(str(path), embedder, verify=True)
            load_verified = time.perf_counter() - verified_start
            phases["verified load"] = heap.phase()
    seconds = {"add_1pct_s": add, "delete_1pct_s": delete, "load_verified_s": load_verified}
    return {
        "passages": n,
        "sentences": stats["sentences"],
        "concepts": stats["concepts"],
        "edges": stats["edges"],
        "vector_index": stats["vector_index"],
        "backend": backend,
        "vector_spill": spill,
        "build_s": round(build, 2),
        "embedding_s_hashing": round(build_embedding, 2),
        "sentences_embedded": build_sentences,
        "non_embedding_build_s": round(non_embedding_build, 2),
        "warm_up_build_s": round(warm_up, 2),
        "graph_refresh_s": None if refresh is None else round(refresh, 2),
        **percentile_fields("query_ms", latencies),
        **{f"query_{name}": value for name, value in built_query_reads.items()},
        **row,
        **{k: None if v is None else round(v, 2) for k, v in seconds.items()
           if k != "load_verified_s"},
        "updates_on": "the loaded index" if lean else "the built index",
        "add_share_of_build": None if add is None else round(add / max(non_embedding_build,
                                                                       1e-9), 3),
        "pagerank_cold_s": round(pagerank_cold, 3),
        "pagerank_warm_s": round(pagerank_warm, 3),
        "save_s": round(save, 2),
        "load_s": round(load, 2),
        "load_verified_s": (None if load_verified is None else round(load_verified, 2)),
        "disk_mb": round(disk / 2**20, 1),
        "build_peak_rss_mb": round(build_peak_rss, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        # anonymous memory only: the corpus's texts (held by the benchmark too) before
        # the build, the built index after it, the peaks of the build and of the rest
        "heap_before_build_mb": round(heap_before_build, 1),
        "heap_after_build_mb": round(heap_after_build, 1),
        "build_peak_heap_mb": round(build_peak_heap, 1),
        "build_peak_where": build_peak_where,
        "run_peak_heap_mb": round(heap.stop(), 1),
        "heap_phase_peaks": phases,
    }


def beam_sweep(index: Any, asked: Queries, exact_contexts: list[dict[str, int]],
               beams: Sequence[int]) -> list[dict[str, float]]:
    """Query p50 and context kept against exact with HNSW's search beam at least each of
    ``beams`` (``ann.EF_SEARCH``; the beam is never narrower than the rows asked for)."""
    from shared_core.search import ann

    default = ann.EF_SEARCH
    out = []
    try:
        for beam in beams:
            ann.EF_SEARCH = beam
            out.append({"ef_search_floor": beam, **against_exact(index, asked, exact_contexts)})
    finally:
        ann.EF_SEARCH = default
    return out


# query knobs a run can sweep, and the row field each sweep's results go to
SWEPT_KNOBS = {"candidates": "candidate_pools", "walk_postings": "walk_postings_sweep"}


def knob_sweep(index: Any, asked: Queries, exact_contexts: list[dict[str, int]],
               knob: str, values: Sequence[int]) -> list[dict[str, float]]:
    """Query p50 and context kept against exact with the query knob ``knob`` set to each
    of ``values`` (``candidates``: units per view in the ranked pool; ``walk_postings``:
    posting entries a walk step reads): the same graph is reused."""
    return [{knob: value, **against_exact(index.reconfigured(**{knob: value}), asked,
                                          exact_contexts)} for value in values]


def against_exact(index: Any, asked: Queries,
                  exact_contexts: list[dict[str, int]]) -> dict[str, float]:
    """A second pass's query p50 (the first warms the pages) and the first pass's context
    kept against the exact path's."""
    latency, contexts = warm_latency(index, asked)
    return {"query_ms_p50": latency["query_ms_p50"],
            "context_recall_vs_exact": round(context_recall(contexts, exact_contexts), 4)}


# passes a fresh process times on a save; its figure is their p50s' median
FRESH_PASSES = 3
# more adds and deletes of 1 % after the first, whose median is an update's steady cost
REPEATED_UPDATES = 5


def fresh_process_figures(path: Path, asked: Queries,
                          loaded_contexts: list[dict[str, int]]) -> dict[str, Any]:
    """Query p50 in a fresh process that loads the save, calls ``warm()`` and answers the
    same questions (:func:`query_save`), as a server that loads a saved index does; and
    its contexts against the loaded index's here, which must be the same.

    The loaded index here answers in the process that built the index first: at 100 K
    passages that process spent about 2 ms more a query on the same save, and at 1 M
    more still (``benchmarks/results/NOTES.md``, fifty-fourth round)."""
    with tempfile.TemporaryDirectory() as tmp:
        questions = Path(tmp)
        (questions / "texts.json").write_text(json.dumps(list(asked.texts)), encoding="utf-8")
        np.save(questions / "vectors.npy", np.asarray(asked.vectors), allow_pickle=False)
        try:
            found = child_row(["--query-save", str(path), "--questions", str(questions)])
        except ChildFailed as failed:
            raise RuntimeError(f"the fresh process on {path} failed "
                               f"(exit {failed.returncode})") from None
    contexts = found.pop("contexts")
    return {**found, "fresh_context_recall_vs_loaded": round(
        context_recall(contexts, loaded_contexts), 4)}


def query_save(path: Path, questions: Path) -> dict[str, Any]:
    """The save at ``path`` loaded in this process, warmed, and asked the questions
    written to ``questions`` (:func:`fresh_process_figures`) ``FRESH_PASSES`` times: the
    load's seconds, each pass's p50, their median, and the first pass's contexts."""
    from shared_core import ConceptGraphIndex

    from .query_cost import saved_embedder

    texts = json.loads((questions / "texts.json").read_text(encoding="utf-8"))
    asked = Queries(texts, np.load(questions / "vectors.npy", allow_pickle=False))
    start = time.perf_counter()
    index = ConceptGraphIndex.load(str(path), saved_embedder(path))
    load = time.perf_counter() - start
    index.warm()
    runs = [query_latencies(index, asked) for _ in range(FRESH_PASSES)]
    p50s = [round(float(np.percentile(latencies, 50)), 2) for latencies, _ in runs]
    return {"fresh_load_s": round(load, 2), "fresh_query_ms_passes": p50s,
            "fresh_query_ms_p50": round(float(np.median(p50s)), 2),
            "contexts": runs[0][1]}


class ChildFailed(RuntimeError):
    """A benchmark process of its own exited with an error (its traceback is on stderr)."""

    def __init__(self, returncode: int) -> None:
        super().__init__(f"exit {returncode}")
        self.returncode = returncode


def child_row(arguments: list[str]) -> dict[str, Any]:
    """``python -m benchmarks.scale <arguments>`` in a process of its own, on this one's
    path, and the JSON of its last line; ``ChildFailed`` where it fails, after writing its
    stderr here (its traceback, not only the parent's)."""
    child = subprocess.run([sys.executable, "-m", "benchmarks.scale", *arguments],
                           capture_output=True, text=True, check=False,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if child.returncode:
        sys.stderr.write(child.stderr)
        raise ChildFailed(child.returncode)
    row: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return row


def timed_updates(index: Any, texts: list[str], ids: list[str]) -> tuple[float, float]:
    """Seconds to add these chunks, then to delete them again."""
    start = time.perf_counter()
    index.add(texts, ids=ids)
    add = time.perf_counter() - start
    start = time.perf_counter()
    index.delete(ids)
    return add, time.perf_counter() - start


def repeated_updates(index: Any, texts: list[str], ids: list[str],
                     times: int = REPEATED_UPDATES) -> dict[str, float]:
    """The median seconds of ``times`` more adds of these chunks, each deleted again: an
    update's steady cost. The first add after a build fills memory the process never held
    before, slow on this machine under numpy's huge-page advice; later updates reuse it
    (NOTES, fifty-sixth round)."""
    timed = np.array([timed_updates(index, texts, ids) for _ in range(times)])
    return {"add_1pct_median_s": round(float(np.median(timed[:, 0])), 3),
            "delete_1pct_median_s": round(float(np.median(timed[:, 1])), 3)}


def pagerank_seconds(index: Any) -> tuple[float, float]:
    """PageRank from the uniform start, and from its own fixed point (a warm start's best case)."""
    from shared_core.graph import adjacency, pagerank

    graph, cfg = index.state.graph, index.config
    adj = graph.adjacency if cfg.pagerank_weighted else adjacency(
        graph.edges, len(graph.concepts), weighted=False)
    start = time.perf_counter()
    pagerank(adj, cfg.pagerank_damping)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    pagerank(adj, cfg.pagerank_damping, start=graph.rank)
    return cold, time.perf_counter() - start


@dataclass(frozen=True)
class Queries:
    """Questions and their vectors. A query's text feeds the lexical view (BM25), as a
    user's question does: timing the vector alone would leave that view out."""

    texts: list[str]
    vectors: np.ndarray


def scale_questions(pool: list[str], count: int, embedder: Any) -> Queries:
    """The scale benchmarks' questions: ``count`` pool sentences drawn with seed 3, and
    their vectors, so every command times the same queries."""
    rng = random.Random(3)
    texts = [rng.choice(pool) for _ in range(count)]
    return Queries(texts, embedder.embed(texts))


def warm_latency(index: Any, asked: Queries, passes: int = 2
                 ) -> tuple[dict[str, float], list[dict[str, int]]]:
    """The last of ``passes`` passes' p50/p95 in ms (the first warms the pages), and the
    first pass's contexts."""
    latencies, contexts = query_latencies(index, asked)
    for _ in range(passes - 1):
        latencies, _ = query_latencies(index, asked)
    return percentile_fields("query_ms", latencies), contexts


def replica_figures(path: Path, embedder: Any, store: TimedStore, asked: Queries,
                    loaded_contexts: list[dict[str, int]]) -> dict[str, Any]:
    """The save opened as a read-only replica (``vectors_in_store=True``): its sentence
    vectors read from the store, never from the save's file. Its load time, its second
    pass's latency (and the part outside the store's searches and reads), its context
    against the loaded index's (the same rows, so the same bits are expected), and the
    save's size without the file it does not need. Where the store scores rows
    (``scores_of``), the same for a replica opened with ``scores_in_store=True``."""
    from shared_core import ConceptGraphIndex
    from shared_core.search.external import ENGINE_ROWS_CACHED, scores_rows
    from shared_core.store import index_folder

    start = time.perf_counter()
    replica = ConceptGraphIndex.load(str(path), embedder, vector_store=store,
                                     vectors_in_store=True)
    load = time.perf_counter() - start
    query_latencies(replica, asked)  # its first pass gathers the rank samples' rows
    local: list[float] = []
    latencies, contexts = query_latencies(replica, asked, store, local)
    # again with no rows kept: every row a query reads comes from the store
    rows = replica.state.corpus.sentence_vectors
    rows.cached_rows = 0
    uncached_local: list[float] = []
    uncached, uncached_contexts = query_latencies(replica, asked, store, uncached_local)
    scored_fields: dict[str, Any] = {}
    if scores_rows(store.store) and store.scores_from_codes:  # refused by the index
        scored_fields["replica_scored"] = "refused: the store's index scores from codes"
    elif scores_rows(store.store):  # and one whose store scores the rows it needs
        scored = ConceptGraphIndex.load(str(path), embedder, vector_store=store,
                                        vectors_in_store=True, scores_in_store=True)
        query_latencies(scored, asked)
        scored_local: list[float] = []
        scored_latencies, scored_contexts = query_latencies(scored, asked, store, scored_local)
        scored_fields = {**percentile_fields("replica_scored_query_ms", scored_latencies),
                         **percentile_fields("replica_scored_local_query_ms", scored_local),
                         "replica_scored_context_vs_loaded": round(
                             context_recall(scored_contexts, loaded_contexts), 4)}
    vectors_file = index_folder(path) / "sentence_embeddings.npy"
    return {**scored_fields,
            "replica_load_s": round(load, 2),
            **percentile_fields("replica_query_ms", latencies),
            **percentile_fields("replica_local_query_ms", local),
            "replica_context_vs_loaded": round(context_recall(contexts, loaded_contexts), 4),
            "replica_rows_cached": ENGINE_ROWS_CACHED,
            "replica_rows_total": len(rows),
            **percentile_fields("replica_uncached_query_ms", uncached),
            **percentile_fields("replica_uncached_local_query_ms", uncached_local),
            "replica_uncached_context_vs_loaded": round(
                context_recall(uncached_contexts, loaded_contexts), 4),
            "replica_disk_mb": round((folder_size(path) - vectors_file.stat().st_size) / 2**20,
                                     1)}


def writer_figures(path: Path, embedder: Any, store: TimedStore, asked: Queries,
                   loaded_contexts: list[dict[str, int]], texts: list[str],
                   ids: list[str]) -> dict[str, Any]:
    """The save opened as the writer that holds no vector (``vectors_in_store=True,
    writer=True``): its load, the 1 % add and delete (their rows read from the store),
    its queries' context against the loaded index's once the chunks are back to the
    saved ones (the deleted rows still in the store until the save), and its save,
    which holds no vector file (written beside ``path``: the loaded index's save is
    left as it is). The rows the updates read back from the store, and the process's
    anonymous memory after the load and after the updates (the loaded index that holds
    its vectors is still alive beside it: not the writer's own)."""
    from shared_core import ConceptGraphIndex

    start = time.perf_counter()
    writer = ConceptGraphIndex.load(str(path), embedder, vector_store=store,
                                    vectors_in_store=True, writer=True)
    load = time.perf_counter() - start
    heap_loaded = HeapSampler.anonymous_mb()
    read_before = store.rows_read
    add, delete = timed_updates(writer, texts, ids)
    rows_read = store.rows_read - read_before
    heap_updated = HeapSampler.anonymous_mb()
    _, contexts = query_latencies(writer, asked)
    saved = path.parent / "writer"
    start = time.perf_counter()
    writer.save(str(saved))
    save = time.perf_counter() - start
    return {"writer_load_s": round(load, 2),
            "writer_add_1pct_s": round(add, 2),
            "writer_delete_1pct_s": round(delete, 2),
            "writer_update_rows_read": rows_read,
            "writer_context_vs_loaded": round(context_recall(contexts, loaded_contexts), 4),
            "writer_save_s": round(save, 2),
            "writer_disk_mb": round(folder_size(saved) / 2**20, 1),
            "writer_heap_after_load_mb": round(heap_loaded, 1),
            "writer_heap_after_updates_mb": round(heap_updated, 1)}


def query_latencies(index: Any, asked: Queries, store: TimedStore | None = None,
                    local: list[float] | None = None
                    ) -> tuple[list[float], list[dict[str, int]]]:
    """Milliseconds per query (the vector given: no embedding) and each context's units.

    With ``store`` (the index's outside store) and a ``local`` list, each query's
    milliseconds outside the store's searches are appended to ``local``: the part of
    a query this process does, beside the engine's."""
    latencies, contexts = [], []
    for text, vector in zip(asked.texts, asked.vectors, strict=True):
        in_store = store.search_seconds if store is not None else 0.0
        t0 = time.perf_counter()
        result = index.retrieve_by_vector(vector, query=text)
        seconds = time.perf_counter() - t0
        latencies.append(seconds * 1000)
        if store is not None and local is not None:
            local.append((seconds - (store.search_seconds - in_store)) * 1000)
        contexts.append({hit.id: hit.chunk.tokens for hit in result.chunks})
    return latencies, contexts


def percentile_fields(prefix: str, values: Sequence[float]) -> dict[str, float]:
    """``<prefix>_p50`` and ``<prefix>_p95`` of ``values``, rounded; nothing if empty."""
    if not values:
        return {}
    return {f"{prefix}_p{q}": round(float(np.percentile(values, q)), 2) for q in (50, 95)}


def context_recall(found: list[dict[str, int]], reference: list[dict[str, int]]) -> float:
    """Mean share of each reference context's tokens that the other context holds too."""
    shares = [sum(t for u, t in ref.items() if u in got) / max(1, sum(ref.values()))
              for got, ref in zip(found, reference, strict=True)]
    return float(np.mean(shares)) if shares else 1.0


def minilm_rate(data: Path, sample: int) -> float | None:
    """MiniLM sentences per second on this machine, from ``sample`` pool sentences."""
    if sample <= 0:
        return None
    from shared_core.embeddings import minilm_embedder

    sentences = random.Random(4).sample(sentence_pool(data), sample)
    model = minilm_embedder()
    model.embed(sentences[:32])  # warm-up
    start = time.perf_counter()
    model.embed(sentences)
    return sample / (time.perf_counter() - start)


# what the log-log plot draws: (row key, label, unit)
PLOTTED_COSTS = (
    ("non_embedding_build_s", "build, non-embedding", "s"),
    ("add_1pct_s", "add 1 %", "s"),
    ("delete_1pct_s", "delete 1 %", "s"),
    ("load_s", "load", "s"),
    ("query_ms_p50", "query p50, built index's first pass", "ms"),
    ("loaded_query_ms_p50", "query p50, loaded index's second pass", "ms"),
    ("disk_mb", "disk", "MB"),
    ("peak_rss_mb", "peak RSS (with mapped files)", "MB"),
    ("build_peak_heap_mb", "build's peak heap", "MB"),
)


def rows_by_size(reports: Sequence[Path]) -> list[dict[str, Any]]:
    """The rows of several ``--out`` files, one per corpus size (a later file wins), by size."""
    by_size: dict[int, dict[str, Any]] = {}
    for report in reports:
        for row in json.loads(report.read_text(encoding="utf-8"))["rows"]:
            by_size[int(row["passages"])] = row
    return [by_size[n] for n in sorted(by_size)]


def plot_costs(rows: Sequence[dict[str, Any]], out: Path) -> None:
    """Each cost against corpus size, log-log, one panel per unit; a line per cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    units = list(dict.fromkeys(unit for _, _, unit in PLOTTED_COSTS))
    fig, axes = plt.subplots(1, len(units), figsize=(5 * len(units), 4))
    sizes = [row["passages"] for row in rows]
    for ax, unit in zip(axes, units, strict=True):
        for key, label, of_unit in PLOTTED_COSTS:
            measured = [(n, row[key]) for n, row in zip(sizes, rows, strict=True)
                        if row.get(key) is not None]  # older runs lack some costs
            if of_unit == unit and measured:
                ax.plot(*zip(*measured, strict=True), marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("passages")
        ax.set_ylabel(unit)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    paths = ", ".join(row.get("vector_index", "?") for row in rows)
    fig.suptitle(f"index costs against corpus size (search path by size: {paths})")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


BACKENDS = ("local", "milvus-lite", "milvus-lite-terms", "qdrant-local", "qdrant-local-terms",
            "chroma", *SERVER_BACKENDS)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--minilm-sample", type=int, default=2000)
    parser.add_argument("--vector-index", default="auto", choices=("auto", "exact", "hnsw"))
    parser.add_argument("--backend", default="local", choices=BACKENDS,
                        help="where the vectors live: this process (local), Milvus Lite "
                             "(milvus-lite-terms: with the units' term postings, which find "
                             "the evidence and BM25 views' units), a Milvus server "
                             "(milvus, milvus-terms; --milvus-uri), Qdrant's local mode, or "
                             "Chroma's embedded client")
    parser.add_argument("--milvus-index", default="AUTOINDEX",
                        help="the Milvus index type (AUTOINDEX, FLAT, HNSW, ...)")
    parser.add_argument("--milvus-index-params", type=json.loads, default={}, metavar="JSON",
                        help='the index\'s build parameters, e.g. \'{"M": 32, '
                             '"efConstruction": 200}\' for HNSW')
    parser.add_argument("--milvus-search-params", type=json.loads, default={},
                        metavar="JSON",
                        help='the vector search\'s parameters, e.g. \'{"ef": 1000}\'')
    parser.add_argument("--milvus-uri",
                        help="the running Milvus server of --backend milvus / milvus-terms")
    parser.add_argument("--engine-pid", type=int,
                        help="the server's process id: its resident memory is reported")
    parser.add_argument("--lean", action="store_true",
                        help="for the largest sizes: no second derivation of the graph alone "
                             "and no verifying load (each as long as a build), and the add and "
                             "delete timed on the loaded index once the built one is freed")
    parser.add_argument("--beams", type=int, nargs="+", default=[],
                        help="also query with HNSW's search beam at least each of these "
                             "(efSearch floors), against exact: p50 and context kept")
    parser.add_argument("--candidates", type=int, nargs="+", default=[],
                        help="also query with the config's candidates (units per view in the "
                             "ranked pool) at each of these, against exact")
    parser.add_argument("--walk-postings", type=int, nargs="+", default=[],
                        help="also query with the config's walk_postings (posting entries "
                             "a walk step reads) at each of these, against exact")
    parser.add_argument("--no-exact", dest="exact", action="store_false",
                        help="do not compare the approximate path with exact search: at 1 M "
                             "passages in a memory cap, each exact query reads every row "
                             "from disk")
    parser.add_argument("--no-spill", dest="spill", action="store_false",
                        help="keep every vector on the heap (vector_spill=None)")
    parser.add_argument("--save", type=Path, metavar="DIR",
                        help="only build each size and save it to DIR/idx<size>; measures "
                             "nothing")
    parser.add_argument("--fresh-names", type=float, default=0.0, metavar="MEAN",
                        help="with --save: new names per passage, for a growing vocabulary "
                             "(see passages())")
    parser.add_argument("--embedder", choices=("hashing", "minilm"), default="hashing",
                        help="with --save: the saved index's embedder (minilm through the "
                             "benchmarks' embedding cache)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process's size
    # a fresh process's queries on a save (fresh_process_figures)
    parser.add_argument("--query-save", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--questions", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, nargs="+", metavar="REPORT",
                        help="draw the rows of these --out files, log-log, to --plot-out; "
                             "measures nothing")
    parser.add_argument("--plot-out", type=Path, default=Path("benchmarks/results/scale.png"))
    args = parser.parse_args(argv)
    if not args.exact and (args.beams or args.candidates or args.walk_postings):
        parser.error("--beams, --candidates and --walk-postings compare with exact search: "
                     "drop --no-exact")
    if args.plot:
        plot_costs(rows_by_size(args.plot), args.plot_out)
        return
    if args.fresh_names and not args.save:
        parser.error("--fresh-names is for --save: measure its saves with benchmarks.query_cost")
    if args.fresh_names < 0:
        parser.error("--fresh-names is a mean count per passage: 0 or more")
    if args.embedder != "hashing" and not args.save:
        parser.error("--embedder is for --save; the measured runs use the hashing embedder")
    if args.save:
        embedder = None
        if args.embedder == "minilm":
            from shared_core.embeddings.cache import resolve_embedder

            from .run import CACHE_PATH
            embedder = resolve_embedder("minilm", CACHE_PATH)
        for n in args.sizes:
            print(json.dumps(save_built(n, args.data, args.save, args.fresh_names, embedder)),
                  flush=True)
        return
    if args.query_save:
        print(json.dumps(query_save(args.query_save, args.questions)))
        return
    if args.one:
        engine = Engine(args.backend, args.milvus_index, args.milvus_uri, args.engine_pid,
                        args.milvus_index_params, args.milvus_search_params)
        print(json.dumps(measure_size(args.one, args.data, args.queries, args.vector_index,
                                      engine, args.lean, args.spill, args.beams,
                                      {"candidates": args.candidates,
                                       "walk_postings": args.walk_postings},
                                      args.exact)))
        return
    rows = []
    for n in args.sizes:
        try:
            row = child_row(
                ["--one", str(n), "--data", str(args.data),
                 "--queries", str(args.queries), "--vector-index", args.vector_index,
                 "--backend", args.backend, "--milvus-index", args.milvus_index,
                 "--milvus-index-params", json.dumps(args.milvus_index_params),
                 "--milvus-search-params", json.dumps(args.milvus_search_params),
                 *(("--milvus-uri", args.milvus_uri) if args.milvus_uri else ()),
                 *(("--engine-pid", str(args.engine_pid)) if args.engine_pid else ()),
                 *(("--lean",) if args.lean else ()),
                 *(("--beams", *map(str, args.beams)) if args.beams else ()),
                 *(("--candidates", *map(str, args.candidates)) if args.candidates else ()),
                 *(("--walk-postings", *map(str, args.walk_postings))
                   if args.walk_postings else ()),
                 *(() if args.spill else ("--no-spill",)),
                 *(() if args.exact else ("--no-exact",))])
        except ChildFailed as failed:
            raise SystemExit(f"the {n}-passage run failed (exit {failed.returncode})") from None
        print(json.dumps(row), flush=True)
        rows.append(row)
    rate = minilm_rate(args.data, args.minilm_sample)
    for row in rows:
        if rate:
            projected = row["sentences_embedded"] / rate
            row["minilm_embedding_s_projected"] = round(projected, 1)
            share = row["non_embedding_build_s"] / projected
            row["non_embedding_share_of_minilm"] = round(share, 3)
    from shared_core.search import summing

    report = {"command": "python -m benchmarks.scale " + " ".join(
                  f"--{k.replace('_', '-')} {v}" for k, v in
                  (("sizes", " ".join(map(str, args.sizes))), ("queries", args.queries),
                   ("minilm_sample", args.minilm_sample), ("backend", args.backend),
                   ("vector_index", args.vector_index),
                   *((("lean", ""),) if args.lean else ()),
                   *((("beams", " ".join(map(str, args.beams))),) if args.beams else ()),
                   *((("candidates", " ".join(map(str, args.candidates))),)
                     if args.candidates else ()),
                   *((("walk_postings", " ".join(map(str, args.walk_postings))),)
                     if args.walk_postings else ()),
                   *((("no_spill", ""),) if not args.spill else ()),
                   *((("no_exact", ""),) if not args.exact else ()),
                   *((("milvus_index", args.milvus_index),) if args.backend.startswith("milvus")
                     else ()),
                   *(((knob, shlex.quote(json.dumps(params))) for knob, params in
                      (("milvus_index_params", args.milvus_index_params),
                       ("milvus_search_params", args.milvus_search_params)) if params)),
                   *((("milvus_uri", args.milvus_uri),) if args.milvus_uri else ()))),
              "minilm_sentences_per_s": None if rate is None else round(rate, 1),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                         f"{platform.python_version()}",
              # the posting sums in numba's loops (search.summing) or in numpy
              "compiled_sums": summing.compiled(),
              "rows": rows}
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
