"""faiss-cpu or usearch for the index's cosine search over unit 384-d vectors, by measurement.

    python -m benchmarks.ann_compare --out benchmarks/results/ann_compare.json
    python -m benchmarks.ann_compare --sources synthetic --sizes 1000000 --out /tmp/ann_1m.json

The index will keep its sentence vectors as float16 and rescore ANN candidates
exactly, so what is measured is how much of the true top-k (k = 100 and 1000)
an ANN library's candidates hold, at what cost. Two vector sources:

- ``real``: MiniLM vectors of the unique sentences of ``../shared/data``'s corpora
  (``--real-datasets``, capped by ``--real-limit``), through the benchmarks'
  persistent embedding cache; queries are the first ``--queries`` questions of
  the first dataset.
- ``synthetic``: ``HashingEmbedder(384)`` vectors of ``benchmarks.scale`` passages
  (real sentences recombined) at each of ``--sizes`` rows; queries are other pool
  sentences. Hashing vectors share a large common component (random pairs have
  cosine ~0.45) and near-tied scores, a much harder case for graph indexes than
  MiniLM: read them for speed and memory at size, the real source for recall.

Per source and configuration: build seconds (``--threads`` threads), bytes on
disk (and usearch's own memory count), single-threaded query latency p50/p95
for each k including the float16 rescoring, recall@k against exact float32
search, save / load / memory-mapped load seconds with the resident-memory
growth each load caused, and whether ids can be removed. Each configuration's
search knob (HNSW ``efSearch`` / usearch ``expansion_search``, IVF ``nprobe``) is
raised through a grid until recall@k reaches ``--target-recall``. Recall is
tie-aware: a returned row counts when its exact score is at least the k-th
best score. ``crossover`` times exact float32 top-1000 alone on random vectors
at ``--crossover-sizes`` rows, to find where one exact query passes 5 ms.

Timings are wall-clock on whatever else the machine is running; the report
records the load average at the start.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from threadpoolctl import threadpool_limits

from benchmarks.scale import DATA, sentence_pool
from shared_core.search.ann import coded_queries, coded_rows, row_scale

if TYPE_CHECKING:
    from usearch.index import Index

DIM = 384
KS = (100, 1000)
TIE_EPS = 1e-6  # exact scores from gemv and gemm differ in the last bits
HNSW_EF = (64, 128, 256, 512)
NPROBES = (8, 16, 32, 64, 128, 256)
BUDGET_MS = 5.0
VECTOR_CACHE = Path(tempfile.gettempdir()) / "conceptgraph_ann_compare"

Vectors = np.ndarray  # float32 (rows, DIM), unit rows


def passive_openmp() -> None:
    """OpenMP threads sleep rather than spin while they wait: set before faiss or usearch loads.

    Both bring an OpenMP runtime (usearch through numkong); with the default
    spin-waiting, a busy 2-core machine turned a 3 s faiss PQ training into 25 s.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def faiss_lib() -> Any:
    passive_openmp()
    import faiss

    return faiss


def usearch_index() -> type[Index]:
    passive_openmp()
    from usearch.index import Index

    return Index


def hnsw_grid(k: int) -> list[int]:
    """Search-width values to try for top-k: the usual ones for small k, 1-4x k for large."""
    if k >= 256:
        return [k, 2 * k, 4 * k]
    return sorted({max(k, ef) for ef in HNSW_EF})


class Backend(ABC):
    """One ANN configuration: build, tune one search knob, search, save and reload."""

    library: str
    knob: str
    index: Any = None  # the library's index object, None until built or loaded

    def __init__(self, name: str, params: dict[str, Any], rerank: int = 1) -> None:
        self.name = name
        self.params = params
        self.rerank = rerank  # candidates fetched per query = rerank * k, then rescored

    @abstractmethod
    def build(self, vectors: Vectors, threads: int) -> None: ...

    @abstractmethod
    def grid(self, k: int) -> list[int]: ...

    @abstractmethod
    def set_knob(self, value: int) -> None: ...

    @abstractmethod
    def search(self, queries: Vectors, count: int, threads: int) -> np.ndarray:
        """Row ids, ``(len(queries), count)`` int64, -1 where fewer were found."""

    @abstractmethod
    def save(self, path: Path) -> None: ...

    @abstractmethod
    def load(self, path: Path, mmap: bool) -> None:
        """Replace the in-memory index with the saved one (memory-mapped if ``mmap``)."""

    @abstractmethod
    def remove(self, ids: np.ndarray) -> None: ...

    def memory_bytes(self) -> int | None:
        return None


class FaissBackend(Backend):
    """What every faiss index here shares: search, save, mapped load, removal."""

    library = "faiss"
    mmap_flag = "IO_FLAG_MMAP_IFC"  # the faiss flag that maps this index kind's data

    def search(self, queries: Vectors, count: int, threads: int) -> np.ndarray:
        faiss = faiss_lib()
        faiss.omp_set_num_threads(threads)
        return np.asarray(self.index.search(queries, count)[1], dtype=np.int64)

    def save(self, path: Path) -> None:
        faiss = faiss_lib()
        faiss.write_index(self.index, str(path))

    def load(self, path: Path, mmap: bool) -> None:
        faiss = faiss_lib()
        self.index = faiss.read_index(str(path), getattr(faiss, self.mmap_flag) if mmap else 0)

    def remove(self, ids: np.ndarray) -> None:
        self.index.remove_ids(ids.astype(np.int64))


class FaissHnsw(FaissBackend):
    """faiss ``IndexHNSWFlat`` (float32) or ``IndexHNSWSQ`` (``sq8``/``sq8s``/``fp16``
    codes), IP.

    ``sq8`` codes each dimension by its trained range; ``sq8s`` codes rows and each query
    in signed bytes by one scale each (``shared_core.search.ann``, as the index builds
    HNSW since the forty-ninth round). A mapped load maps the codes only
    (``IO_FLAG_MMAP_IFC``); the graph is read.
    """

    knob = "efSearch"

    QTYPES: ClassVar[dict[str, str]] = {"sq8": "QT_8bit", "sq8s": "QT_8bit_direct_signed",
                                        "fp16": "QT_fp16"}

    def __init__(self, codes: str, m: int = 32, ef_construction: int = 200) -> None:
        if codes not in ("flat", *self.QTYPES):
            raise ValueError(f"codes must be flat, sq8, sq8s or fp16, got {codes!r}")
        super().__init__(f"faiss-hnsw-{codes}-m{m}-efc{ef_construction}",
                         {"index": f"IndexHNSWSQ({self.QTYPES[codes]})" if codes != "flat"
                          else "IndexHNSWFlat", "M": m, "efConstruction": ef_construction})
        self.codes = codes
        self.m = m
        self.ef_construction = ef_construction

    def build(self, vectors: Vectors, threads: int) -> None:
        faiss = faiss_lib()
        faiss.omp_set_num_threads(threads)
        dim = vectors.shape[1]
        if self.codes != "flat":
            qtype = getattr(faiss.ScalarQuantizer, self.QTYPES[self.codes])
            self.index = faiss.IndexHNSWSQ(dim, qtype, self.m, faiss.METRIC_INNER_PRODUCT)
            if self.codes == "sq8s":  # byte codes need no training: rows are scaled instead
                vectors = coded_rows(vectors, row_scale(vectors))
            else:
                self.index.train(training_sample(vectors, 100_000))
        else:
            self.index = faiss.IndexHNSWFlat(dim, self.m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = self.ef_construction
        self.index.add(vectors)

    def search(self, queries: Vectors, count: int, threads: int) -> np.ndarray:
        if self.codes == "sq8s":  # each query coded by a scale of its own, as rows are
            queries = coded_queries(queries)[0]
        return super().search(queries, count, threads)

    def grid(self, k: int) -> list[int]:
        return hnsw_grid(k)

    def set_knob(self, value: int) -> None:
        self.index.hnsw.efSearch = value



class FaissIvfPq(FaissBackend):
    """faiss ``IndexIVFPQ`` (inner product), ``rerank * k`` candidates rescored exactly."""

    knob = "nprobe"
    mmap_flag = "IO_FLAG_MMAP"  # maps the inverted lists

    def __init__(self, rows: int, m: int = 96, rerank: int = 4) -> None:
        self.nlist = max(1, round(4 * math.sqrt(rows)))
        self.m = m
        super().__init__(f"faiss-ivfpq-m{m}-x{rerank}",
                         {"index": "IndexIVFPQ", "nlist": self.nlist, "m": m, "nbits": 8,
                          "kmeans_niter": 10, "pq_niter": 10}, rerank)
        self.quantizer: Any = None

    def build(self, vectors: Vectors, threads: int) -> None:
        faiss = faiss_lib()
        faiss.omp_set_num_threads(threads)
        self.quantizer = faiss.IndexFlatIP(vectors.shape[1])
        self.index = faiss.IndexIVFPQ(self.quantizer, vectors.shape[1], self.nlist, self.m, 8,
                                      faiss.METRIC_INNER_PRODUCT)
        self.index.cp.niter = 10
        self.index.pq.cp.niter = 10
        self.index.train(training_sample(vectors, max(40 * self.nlist, 20_000)))
        self.index.add(vectors)

    def grid(self, k: int) -> list[int]:
        return [p for p in NPROBES if p < self.nlist] + [min(NPROBES[-1], self.nlist)]

    def set_knob(self, value: int) -> None:
        self.index.nprobe = value



class Usearch(Backend):
    """usearch HNSW ``Index`` (metric ``ip``, or ``cos``) storing ``f16`` or ``i8`` vectors."""

    library = "usearch"
    knob = "expansion_search"

    def __init__(self, dtype: str, connectivity: int = 16, expansion_add: int = 128,
                 metric: str = "ip", rerank: int = 1) -> None:
        suffix = ("" if metric == "ip" else metric) + ("" if rerank == 1 else f"-x{rerank}")
        super().__init__(f"usearch-{dtype}{suffix}-c{connectivity}-ea{expansion_add}",
                         {"dtype": dtype, "metric": metric, "connectivity": connectivity,
                          "expansion_add": expansion_add}, rerank)
        self.dtype = dtype
        self.metric = metric
        self.connectivity = connectivity
        self.expansion_add = expansion_add
        self.index: Index | None = None

    def _index(self) -> Index:
        assert self.index is not None, "build or load first"
        return self.index

    def build(self, vectors: Vectors, threads: int) -> None:
        self.index = usearch_index()(ndim=vectors.shape[1], metric=self.metric, dtype=self.dtype,
                                     connectivity=self.connectivity,
                                     expansion_add=self.expansion_add)
        self.index.add(np.arange(len(vectors), dtype=np.uint64), vectors, threads=threads)

    def grid(self, k: int) -> list[int]:
        return hnsw_grid(k)

    def set_knob(self, value: int) -> None:
        self._index().expansion_search = value  # type: ignore[misc]  # it has a setter

    def search(self, queries: Vectors, count: int, threads: int) -> np.ndarray:
        matches = self._index().search(queries, count, threads=threads)
        keys = np.asarray(matches.keys).reshape(len(queries), -1).astype(np.int64)
        counts = np.asarray(getattr(matches, "counts", [keys.shape[1]])).reshape(-1, 1)
        out = np.full((len(queries), count), -1, dtype=np.int64)
        width = min(count, keys.shape[1])
        valid = np.arange(width)[None, :] < counts
        out[:, :width] = np.where(valid, keys[:, :width], -1)
        return out

    def save(self, path: Path) -> None:
        self._index().save(str(path))

    def load(self, path: Path, mmap: bool) -> None:
        self.index = usearch_index().restore(str(path), view=mmap)
        if self.index is None:
            raise ValueError(f"{path} is not a usearch index")

    def remove(self, ids: np.ndarray) -> None:
        self._index().remove(ids.astype(np.uint64))

    def memory_bytes(self) -> int | None:
        return int(self._index().memory_usage)


CONFIGS: dict[str, Callable[[int, int], Backend]] = {
    # name -> (rows, ef_construction) -> backend; ef_construction also caps usearch expansion_add
    "faiss-hnsw-flat": lambda n, efc: FaissHnsw("flat", 32, efc),
    "faiss-hnsw-fp16": lambda n, efc: FaissHnsw("fp16", 32, efc),
    "faiss-hnsw-sq8": lambda n, efc: FaissHnsw("sq8", 32, efc),
    "faiss-hnsw-sq8s": lambda n, efc: FaissHnsw("sq8s", 32, efc),
    "faiss-ivfpq": lambda n, efc: FaissIvfPq(n, 96, 4),
    "usearch-f16-c16": lambda n, efc: Usearch("f16", 16, min(128, efc)),
    "usearch-f16-c32": lambda n, efc: Usearch("f16", 32, min(128, efc)),
    "usearch-i8-c16": lambda n, efc: Usearch("i8", 16, min(128, efc)),
    "usearch-i8-c32": lambda n, efc: Usearch("i8", 32, min(128, efc)),
    "usearch-i8cos-c16": lambda n, efc: Usearch("i8", 16, min(128, efc), "cos"),
    "usearch-i8-x2-c16": lambda n, efc: Usearch("i8", 16, min(128, efc), rerank=2),
}


def make_backends(names: Sequence[str], rows: int, ef_construction: int) -> list[Backend]:
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configs {unknown}; choose from {sorted(CONFIGS)}")
    return [CONFIGS[name](rows, ef_construction) for name in names]


def training_sample(vectors: Vectors, size: int) -> Vectors:
    if len(vectors) <= size:
        return vectors
    rows = np.sort(np.random.default_rng(0).choice(len(vectors), size, replace=False))
    return np.ascontiguousarray(vectors[rows])


def rss_bytes() -> int:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def exact_kth(vectors: Vectors, queries: Vectors, k: int, batch: int = 16) -> np.ndarray:
    """Each query's k-th best exact float32 score (multi-threaded, in query batches)."""
    out = np.empty(len(queries), dtype=np.float32)
    for start in range(0, len(queries), batch):
        scores = queries[start:start + batch] @ vectors.T
        out[start:start + batch] = -np.partition(-scores, k - 1, axis=1)[:, k - 1]
    return out


def exact_top(vectors: Vectors, query: np.ndarray, k: int) -> np.ndarray:
    """Exact top-k row ids for one query, best first: float32 matmul and argpartition."""
    scores = vectors @ query
    top = np.argpartition(-scores, k - 1)[:k]
    return top[np.argsort(-scores[top], kind="stable")]


def rescore(store: np.ndarray, query: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """The best k of ``candidates`` by exact score on the float16 store, best first."""
    found = candidates[candidates >= 0]
    scores = store[found].astype(np.float32) @ query
    if len(found) > k:
        keep = np.argpartition(-scores, k - 1)[:k]
        found, scores = found[keep], scores[keep]
    return found[np.argsort(-scores, kind="stable")]


def recall(vectors: Vectors, queries: Vectors, kth: np.ndarray, found: Sequence[np.ndarray],
           k: int) -> float:
    """Mean share of the true top-k returned; a row tied with the k-th best counts."""
    hits = []
    for query, bound, ids in zip(queries, kth, found, strict=True):
        ids = np.unique(ids[ids >= 0])
        hits.append(min(k, int((vectors[ids] @ query >= bound - TIE_EPS).sum())) / k)
    return round(float(np.mean(hits)), 4)


def percentiles(ms: Sequence[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(ms, 50)), 3),
            "p95": round(float(np.percentile(ms, 95)), 3)}


def timed(fn: Callable[[np.ndarray], object], queries: Vectors, warmup: int = 5) -> list[float]:
    """Milliseconds per single-query call, after a few warm-up calls."""
    for query in queries[:warmup]:
        fn(query)
    out = []
    for query in queries:
        start = time.perf_counter()
        fn(query)
        out.append((time.perf_counter() - start) * 1000)
    return out


def measure_exact(vectors: Vectors, queries: Vectors, kths: dict[int, np.ndarray],
                  workdir: Path) -> dict[str, Any]:
    """The baseline: float32 matrix, one query at a time on one thread."""
    result: dict[str, Any] = {"config": "exact-f32", "library": "numpy", "params": {},
                              "build_s": 0.0, "build_threads": 0, "rerank": 1,
                              "memory_bytes": int(vectors.nbytes), "k": {}}
    with threadpool_limits(1):
        for k, kth in kths.items():
            found = [exact_top(vectors, q, k) for q in queries]

            def one(query: np.ndarray, k: int = k) -> np.ndarray:
                return exact_top(vectors, query, k)

            ms = timed(one, queries)
            result["k"][str(k)] = {"knob": None, "value": None, "candidates": k,
                                   "recall": recall(vectors, queries, kth, found, k),
                                   "grid": {}, "ms": percentiles(ms), "search_ms": percentiles(ms)}
    path = workdir / "exact.npy"
    start = time.perf_counter()
    np.save(path, vectors)
    result["save_s"] = round(time.perf_counter() - start, 3)
    result["disk_bytes"] = path.stat().st_size
    for mmap, key in ((False, "load"), (True, "mmap_load")):
        before = rss_bytes()
        start = time.perf_counter()
        loaded = np.load(path, mmap_mode="r" if mmap else None)
        result[f"{key}_s"] = round(time.perf_counter() - start, 3)
        result[f"{key}_rss_bytes"] = rss_bytes() - before
        del loaded
    path.unlink()
    result["remove"] = "ok (np.delete, copies the matrix)"
    return result


def tune(backend: Backend, vectors: Vectors, store: np.ndarray, queries: Vectors,
         kth: np.ndarray, k: int, target: float, threads: int) -> tuple[int, dict[str, float]]:
    """The smallest knob value reaching ``target`` recall@k (else the best), and the grid."""
    grid: dict[str, float] = {}
    best = (-1.0, 0)
    count = min(backend.rerank * k, len(vectors))
    for value in backend.grid(k):
        backend.set_knob(value)
        candidates = backend.search(queries, count, threads)
        found = [rescore(store, q, c, k) for q, c in zip(queries, candidates, strict=True)]
        grid[str(value)] = recall(vectors, queries, kth, found, k)
        if grid[str(value)] > best[0]:
            best = (grid[str(value)], value)
        if grid[str(value)] >= target:
            return value, grid
    return best[1], grid


def measure_backend(backend: Backend, vectors: Vectors, store: np.ndarray, queries: Vectors,
                    kths: dict[int, np.ndarray], threads: int, target: float,
                    workdir: Path) -> dict[str, Any]:
    """Build, tune per k, time single-threaded queries, save, reload (plain and mmap), remove."""
    print(f"  {backend.name}: building", file=sys.stderr, flush=True)
    start = time.perf_counter()
    backend.build(vectors, threads)
    build = time.perf_counter() - start
    result: dict[str, Any] = {"config": backend.name, "library": backend.library,
                              "params": backend.params, "build_s": round(build, 2),
                              "build_threads": threads, "rerank": backend.rerank, "k": {}}
    chosen: dict[int, int] = {}
    for k, kth in kths.items():
        value, grid = tune(backend, vectors, store, queries, kth, k, target, threads)
        chosen[k] = value
        backend.set_knob(value)
        count = min(backend.rerank * k, len(vectors))

        def one(query: np.ndarray, count: int = count) -> np.ndarray:
            return backend.search(query[None, :], count, 1)[0]

        def full(query: np.ndarray, count: int = count, k: int = k) -> np.ndarray:
            return rescore(store, query, one(query, count), k)

        with threadpool_limits(1):  # the rescoring's matrix-vector product too
            ms, search_ms = timed(full, queries), timed(one, queries)
        result["k"][str(k)] = {"knob": backend.knob, "value": value, "candidates": count,
                               "recall": grid[str(value)], "grid": grid,
                               "ms": percentiles(ms), "search_ms": percentiles(search_ms)}
        print(f"    k={k}: {backend.knob}={value} recall={grid[str(value)]} "
              f"p50={result['k'][str(k)]['ms']['p50']}ms", file=sys.stderr, flush=True)
    result["memory_bytes"] = backend.memory_bytes()
    path = workdir / f"{backend.name}.index"
    k0 = min(kths)
    backend.set_knob(chosen[k0])
    reference = backend.search(queries[:20], k0, threads)
    start = time.perf_counter()
    backend.save(path)
    result["save_s"] = round(time.perf_counter() - start, 3)
    result["disk_bytes"] = path.stat().st_size
    for mmap, key in ((False, "load"), (True, "mmap_load")):
        backend.index = None
        before = rss_bytes()
        start = time.perf_counter()
        try:
            backend.load(path, mmap)
        except Exception as exc:  # a library that cannot map its index says so
            result[f"{key}_s"] = None
            result[f"{key}_error"] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        result[f"{key}_s"] = round(time.perf_counter() - start, 3)
        result[f"{key}_rss_bytes"] = rss_bytes() - before
        backend.set_knob(chosen[k0])
        again = backend.search(queries[:20], k0, threads)
        result[f"{key}_same_results"] = bool(np.array_equal(again, reference))
    # a mapped index is read-only, and writing to one is not always a Python error: faiss
    # aborts on a mapped IVF, usearch segfaults removing an array of keys from a view
    backend.index = None
    backend.load(path, False)
    backend.set_knob(chosen[k0])
    result["remove"] = try_remove(backend, queries[:1], k0, threads)
    path.unlink()
    return result


def try_remove(backend: Backend, query: Vectors, k: int, threads: int) -> str:
    """Remove a query's top rows and check they are gone from its results."""
    gone = backend.search(query, k, threads)[0][:5]
    gone = gone[gone >= 0]
    try:
        backend.remove(gone)
    except Exception as exc:
        return f"unsupported: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    after = backend.search(query, k, threads)[0]
    return "ok" if not set(gone.tolist()) & set(after.tolist()) else "removed rows still returned"


def compare(source: str, vectors: Vectors, queries: Vectors, backends: Sequence[Backend],
            ks: Sequence[int] = KS, threads: int = 2, target: float = 0.98) -> dict[str, Any]:
    """Exact baseline and every backend on one vector set."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    store = vectors.astype(np.float16)  # what the index keeps on disk and rescores from
    kths = {k: exact_kth(vectors, queries, k) for k in ks if k <= len(vectors)}
    print(f"[{source}] {len(vectors)} rows, {len(queries)} queries", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        configs = [measure_exact(vectors, queries, kths, Path(tmp))]
        for backend in backends:
            configs.append(measure_backend(backend, vectors, store, queries, kths, threads,
                                           target, Path(tmp)))
            backend.index = None  # free it before the next one is built
    return {"source": source, "rows": len(vectors), "dim": int(vectors.shape[1]),
            "queries": len(queries), "float16_store_bytes": int(store.nbytes),
            "target_recall": target, "configs": configs}


def embed_queries(embedder: Any, texts: Sequence[str]) -> Vectors:
    """Queries through ``embed_query`` when the embedder has one, else ``embed``."""
    from benchmarks.baselines import embed_batched

    one = getattr(embedder, "embed_query", None)
    if one is not None:
        return np.stack([np.asarray(one(t), dtype=np.float32) for t in texts])
    return embed_batched(embedder, texts)


def real_vectors(data: Path, datasets: Sequence[str], limit: int, n_queries: int,
                 cache: Path) -> tuple[Vectors, Vectors, dict[str, Any]]:
    """MiniLM vectors of the datasets' unique sentences, and of the first dataset's questions."""
    from benchmarks.baselines import embed_batched
    from benchmarks.data import load_dataset
    from shared_core.corpus import read_corpus
    from shared_core.embeddings import resolve_embedder
    from shared_core.text import split_sentences

    sentences: dict[str, None] = {}
    for name in datasets:
        for record in read_corpus(data / name / "corpus.jsonl"):
            sentences.update((record.text[s:e], None) for s, e in split_sentences(record.text))
    texts = list(sentences)[:limit]
    questions = [q.question for q in load_dataset(data / datasets[0]).questions[:n_queries]]
    embedder = resolve_embedder("minilm", cache)  # minilm_embedder() behind the benchmark cache
    start = time.perf_counter()
    vectors = embed_batched(embedder, texts)
    queries = embed_queries(embedder, questions)
    info = {"embedder": embedder.model_id, "datasets": list(datasets), "cache": str(cache),
            "embed_s": round(time.perf_counter() - start, 1),
            "cache_misses": embedder.embedded_texts}
    return vectors, queries, info


def _hash_embed(texts: list[str]) -> Vectors:
    from shared_core import HashingEmbedder

    return HashingEmbedder(DIM).embed(texts)


def synthetic_vectors(data: Path, rows: int, n_queries: int, threads: int,
                      cache_dir: Path | None) -> tuple[Vectors, Vectors, dict[str, Any]]:
    """Hashing vectors of ``rows`` scale-benchmark passages and of other pool sentences."""
    from benchmarks.scale import passages

    pool = sentence_pool(data)
    queries_text = random.Random(3).sample(pool, n_queries)
    path = None if cache_dir is None else cache_dir / f"hashing384_{rows}_{len(pool)}.npy"
    start = time.perf_counter()
    if path is not None and path.is_file():
        vectors = np.load(path)
    else:
        _, texts = passages(pool, rows, seed=1)
        chunks = [texts[s:s + 20_000] for s in range(0, len(texts), 20_000)]
        with ProcessPoolExecutor(max_workers=threads) as pool_exec:
            vectors = np.concatenate(list(pool_exec.map(_hash_embed, chunks)))
        del texts, chunks
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, vectors)
    info = {"embedder": f"hashing-bow-{DIM}", "unit": "scale.passages (3-6 pool sentences)",
            "queries": "pool sentences", "embed_s": round(time.perf_counter() - start, 1),
            "vector_cache": None if path is None else str(path)}
    return vectors, _hash_embed(queries_text), info


def exact_crossover(sizes: Sequence[int], k: int = 1000, n_queries: int = 30,
                    budget_ms: float = BUDGET_MS) -> dict[str, Any]:
    """Exact float32 top-k latency per row count (1 and all threads) and the 5 ms crossing."""
    rng = np.random.default_rng(7)
    biggest = max(sizes)
    matrix = rng.standard_normal((biggest, DIM), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    queries = matrix[rng.choice(biggest, n_queries, replace=False)] + 0.1
    points: list[dict[str, Any]] = []
    crossing: dict[str, int | None] = {}
    for threads in sorted({1, os.cpu_count() or 1}):
        line: list[tuple[int, float]] = []
        for n in sorted(sizes):
            block = matrix[:n]

            def one(query: np.ndarray, block: Vectors = block) -> np.ndarray:
                return exact_top(block, query, k)

            with threadpool_limits(threads):
                ms = percentiles(timed(one, queries))
            points.append({"rows": n, "threads": threads, "k": k, "ms": ms})
            line.append((n, ms["p50"]))
        crossing[str(threads)] = crossover_rows(line, budget_ms)
    return {"k": k, "budget_ms": budget_ms, "queries": n_queries, "points": points,
            "rows_at_budget_p50": crossing}


def crossover_rows(line: Sequence[tuple[int, float]], budget_ms: float) -> int | None:
    """Rows where latency crosses ``budget_ms``, log-log interpolated; None if it never does."""
    for (n0, t0), (n1, t1) in itertools.pairwise(line):
        if t0 <= budget_ms < t1:
            share = (math.log(budget_ms) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return round(math.exp(math.log(n0) + share * (math.log(n1) - math.log(n0))))
    return None


def table(report: dict[str, Any]) -> str:
    """The compact markdown table printed at the end."""
    lines = ["| source | rows | config | build s | disk MB | k=100 p50/p95 ms | R@100 "
             "| k=1000 p50/p95 ms | R@1000 | knob@100/1000 | save/load/mmap s |",
             "|" + "---|" * 11]
    for src in report["sources"]:
        for c in src["configs"]:
            cells = []
            for k in ("100", "1000"):
                row = c["k"].get(k)
                cells.append(("-", "-") if row is None else
                             (f"{row['ms']['p50']:.2f}/{row['ms']['p95']:.2f}",
                              f"{row['recall']:.3f}"))
            knobs = "/".join(str(c["k"].get(k, {}).get("value")) for k in ("100", "1000"))
            io = "/".join("-" if c.get(f) is None else f"{c[f]:.2f}"
                          for f in ("save_s", "load_s", "mmap_load_s"))
            lines.append(f"| {src['source']} | {src['rows']} | {c['config']} | {c['build_s']} "
                         f"| {c['disk_bytes'] / 2**20:.1f} | {cells[0][0]} | {cells[0][1]} "
                         f"| {cells[1][0]} | {cells[1][1]} | {knobs} | {io} |")
    cross = report.get("crossover")
    if cross:
        lines.append("")
        lines.append(f"exact float32 top-{cross['k']} p50 ms by rows: " + ", ".join(
            f"{p['rows']}@{p['threads']}t={p['ms']['p50']}" for p in cross["points"]))
        lines.append(f"rows where one exact query passes {cross['budget_ms']} ms (by threads): "
                     f"{cross['rows_at_budget_p50']}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    return {"platform": f"{platform.machine()}, {os.cpu_count()} cores, "
                        f"Python {platform.python_version()}",
            "faiss": faiss_lib().__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "usearch": __import__("usearch").__version__,
            "usearch_simd": usearch_index()(ndim=DIM, metric="ip",
                                            dtype="f16").hardware_acceleration,
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def merge_source(sources: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    """``sources`` with ``new`` in place of the same source and size, keeping configs it lacks."""
    same = [s for s in sources if (s["source"], s["rows"]) == (new["source"], new["rows"])]
    if same:
        measured = {c["config"] for c in new["configs"]}
        kept = [c for c in same[0]["configs"] if c["config"] not in measured]
        new = {**new, "configs": [new["configs"][0], *kept, *new["configs"][1:]]}
    return [s for s in sources if s not in same] + [new]


def write(report: dict[str, Any], out: Path | None) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks.run import CACHE_PATH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", nargs="+", default=["real", "synthetic"],
                        choices=("real", "synthetic"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--real-datasets", nargs="+", default=["musique", "hotpotqa"])
    parser.add_argument("--real-limit", type=int, default=60_000, help="real sentences at most")
    parser.add_argument("--cache", type=Path, default=CACHE_PATH, help="SQLite embedding cache")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--large-rows", type=int, default=500_000,
                        help="from this many rows use --large-configs and --large-ef-construction")
    # one config keeps 1M rows near 15 minutes on 2 busy cores; usearch-f16-c16 alone took 17
    parser.add_argument("--large-configs", nargs="+", choices=list(CONFIGS),
                        default=["faiss-hnsw-sq8"])
    parser.add_argument("--ef-construction", type=int, default=200)
    parser.add_argument("--large-ef-construction", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="build threads")
    parser.add_argument("--target-recall", type=float, default=0.98)
    parser.add_argument("--crossover-sizes", type=int, nargs="*",
                        default=[10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000])
    parser.add_argument("--vector-cache", type=Path, default=VECTOR_CACHE,
                        help="where synthetic vectors are kept between runs")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--append", action="store_true",
                        help="keep --out's earlier results (configs measured again are replaced)")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.ann_compare " + " ".join(
        sys.argv[1:] if argv is None else argv)
    report: dict[str, Any] = {
        "commands": [command], "machine": machine(), "threads": args.threads, "ks": list(KS),
        "note": "wall-clock timings on a shared machine: compare within a run",
        "sources": []}
    if args.append and args.out is not None and args.out.is_file():
        earlier = json.loads(args.out.read_text(encoding="utf-8"))
        report["commands"] = [*earlier.get("commands", []), command]
        report["machine_earlier"] = earlier.get("machine")
        report["sources"] = earlier.get("sources", [])
        if "crossover" in earlier:
            report["crossover"] = earlier["crossover"]
    jobs: list[tuple[str, int]] = []
    if "real" in args.sources:
        jobs.append(("real", args.real_limit))
    if "synthetic" in args.sources:
        jobs.extend(("synthetic", n) for n in args.sizes)
    for kind, rows in jobs:
        if kind == "real":
            vectors, queries, info = real_vectors(args.data, args.real_datasets, rows,
                                                  args.queries, args.cache)
            name = "minilm-" + "+".join(args.real_datasets)
        else:
            vectors, queries, info = synthetic_vectors(args.data, rows, args.queries,
                                                       args.threads, args.vector_cache)
            name = "hashing-passages"
        large = len(vectors) >= args.large_rows
        backends = make_backends(args.large_configs if large else args.configs, len(vectors),
                                 args.large_ef_construction if large else args.ef_construction)
        result = compare(name, vectors, queries, backends, KS, args.threads,
                         args.target_recall)
        result["vectors"] = info
        report["sources"] = merge_source(report["sources"], result)
        write(report, args.out)
        del vectors, queries
    if args.crossover_sizes:
        report["crossover"] = exact_crossover(args.crossover_sizes)
    write(report, args.out)
    print(table(report))


if __name__ == "__main__":
    main()
