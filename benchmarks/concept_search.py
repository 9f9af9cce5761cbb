"""How well a query's direct concepts can be found without scanning every concept vector.

    python -m benchmarks.concept_search --save SAVE --queries 200 \
        --out benchmarks/results/concept_search_100k.json
    python -m benchmarks.concept_search --dataset musique --embedder minilm \
        --out benchmarks/results/concept_search_musique.json

Every query multiplies its vector by every concept vector to pick its ``top_k`` direct
concepts (``index._search``; ``search.fused.concept_weights``). A real corpus's
vocabulary keeps growing (``benchmarks.vocabulary``), so that scan is the part of a query
that grows with it. This measures, against the exact scan, the recall of the direct
concepts and the time of two ways to find them:

- an inverted-file index: spherical k-means over the concepts a unit links, each
  concept in its nearest centroid's list (stored contiguously), a query scanning the
  lists of its ``nprobe`` nearest centroids exactly;
- faiss HNSW (flat vectors, inner product) at several search beams.

The queries are the scale benchmark's (``--save``: pool sentences) or a dev set's
questions (``--dataset``, over an index built from its passages). It also asks the
index itself with ``concept_search="hnsw"`` and reports the share of the exact scan's
context it keeps (``context_kept_by_concept_hnsw``). ``--per-direct`` and
``--index-beam`` time the index's own path; ``--index-ef-construction`` builds its
concept graph afresh with each construction beam and reports both for each
(``built_graphs``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .scale import (
    DATA,
    Queries,
    context_recall,
    query_latencies,
    scale_questions,
    sentence_pool,
)

SEED = 0
KMEANS_ITERATIONS = 10


def spherical_kmeans(vectors: np.ndarray, lists: int, iterations: int = KMEANS_ITERATIONS,
                     seed: int = SEED) -> np.ndarray:
    """``lists`` unit centroids of unit ``vectors``: each step assigns every vector to its
    most similar centroid and renormalises the lists' sums; an empty list keeps its centroid."""
    rng = np.random.default_rng(seed)
    centroids = vectors[rng.choice(len(vectors), size=lists, replace=False)].copy()
    for _ in range(iterations):
        nearest = assigned(vectors, centroids)
        sums = np.zeros_like(centroids, dtype=np.float64)
        np.add.at(sums, nearest, vectors)
        norms = np.linalg.norm(sums, axis=1)
        filled = norms > 0
        centroids[filled] = (sums[filled] / norms[filled, None]).astype(np.float32)
    return centroids


def assigned(vectors: np.ndarray, centroids: np.ndarray, block: int = 16_384) -> np.ndarray:
    """Each vector's most similar centroid, a block of vectors at a time."""
    out = np.empty(len(vectors), dtype=np.int64)
    for start in range(0, len(vectors), block):
        out[start:start + block] = np.argmax(vectors[start:start + block] @ centroids.T, axis=1)
    return out


class InvertedLists:
    """Concept vectors grouped by nearest centroid, each list's rows contiguous."""

    def __init__(self, vectors: np.ndarray, ids: np.ndarray, centroids: np.ndarray) -> None:
        nearest = assigned(vectors, centroids)
        order = np.argsort(nearest, kind="stable")
        self.centroids = centroids
        self.rows = np.ascontiguousarray(vectors[order])
        self.ids = ids[order]
        self.bounds = np.searchsorted(nearest[order], np.arange(len(centroids) + 1))

    def search(self, query: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, int]:
        """The ``k`` best concept ids among the ``nprobe`` nearest lists, best first, and
        how many concepts were scored."""
        probed = np.argpartition(-(self.centroids @ query), min(nprobe, len(self.centroids)) - 1
                                 )[:nprobe]
        spans = [(int(self.bounds[c]), int(self.bounds[c + 1])) for c in probed]
        rows = np.concatenate([np.arange(a, b) for a, b in spans])
        scores = np.concatenate([self.rows[a:b] @ query for a, b in spans])
        best = np.lexsort((self.ids[rows], -scores))[:k]
        return self.ids[rows[best]], len(rows)


def exact_direct(vectors: np.ndarray, usable: np.ndarray, query: np.ndarray, k: int
                 ) -> np.ndarray:
    """The direct concepts as the index picks them: the ``k`` most similar usable ones."""
    return most_similar(vectors @ query, usable, k)


def most_similar(similarity: np.ndarray, usable: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` usable concepts of highest ``similarity`` (ties to the lower position)."""
    from shared_core.search.vector_index import top_k_indices

    return usable[top_k_indices(similarity[usable], k)]


def timed(run: Callable[[np.ndarray], np.ndarray], queries: np.ndarray
          ) -> tuple[list[np.ndarray], float]:
    """Each query's answer, and the median milliseconds of one."""
    answers, seconds = [], []
    for query in queries:
        start = time.perf_counter()
        answers.append(run(query))
        seconds.append(time.perf_counter() - start)
    return answers, round(float(np.median(seconds)) * 1000, 3)


def recall(found: Sequence[np.ndarray], exact: Sequence[np.ndarray]) -> float:
    """The share of the exact direct concepts found, over all queries."""
    hits = sum(len(np.intersect1d(f, e)) for f, e in zip(found, exact, strict=True))
    return round(hits / max(1, sum(len(e) for e in exact)), 4)


def measure(vectors: np.ndarray, usable: np.ndarray, queries: np.ndarray, k: int,
            lists: Sequence[int], nprobes: Sequence[int], beams: Sequence[int],
            hnsw_m: int = 32) -> dict[str, Any]:
    """Recall of the exact direct concepts and median ms per query, for every method."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    exact, exact_ms = timed(lambda q: exact_direct(vectors, usable, q, k), queries)
    report: dict[str, Any] = {"concepts": len(vectors), "usable": len(usable),
                              "queries": len(queries), "top_k": k,
                              "exact": {"ms": exact_ms}, "ivf": [], "hnsw": []}
    candidates = vectors[usable]
    for count in lists:
        start = time.perf_counter()
        inverted = InvertedLists(candidates, usable,
                                 spherical_kmeans(candidates, min(count, len(candidates))))
        build_s = round(time.perf_counter() - start, 2)
        for nprobe in nprobes:
            scanned: list[int] = []

            def probe(q: np.ndarray, nprobe: int = nprobe, inverted: InvertedLists = inverted,
                      scanned: list[int] = scanned) -> np.ndarray:
                ids, n = inverted.search(q, k, nprobe)
                scanned.append(n)
                return ids

            found, ms = timed(probe, queries)
            report["ivf"].append({"lists": count, "nprobe": nprobe, "build_s": build_s,
                                  "recall": recall(found, exact), "ms": ms,
                                  "scanned_share": round(float(np.mean(scanned))
                                                         / len(candidates), 4)})
    if beams:
        import faiss

        start = time.perf_counter()
        hnsw = faiss.IndexHNSWFlat(vectors.shape[1], hnsw_m, faiss.METRIC_INNER_PRODUCT)
        hnsw.add(candidates)
        build_s = round(time.perf_counter() - start, 2)
        for beam in beams:
            hnsw.hnsw.efSearch = max(beam, k)

            def graph(q: np.ndarray) -> np.ndarray:
                _, rows = hnsw.search(q[None, :], k)
                return np.asarray(usable[rows[0][rows[0] >= 0]])

            found, ms = timed(graph, queries)
            report["hnsw"].append({"m": hnsw_m, "ef": beam, "build_s": build_s,
                                   "recall": recall(found, exact), "ms": ms})
    return report


def tied_recall(found: Sequence[np.ndarray], exact: Sequence[np.ndarray],
                similarities: Sequence[np.ndarray]) -> float:
    """:func:`recall`, with a found concept outside the exact ones counted when it is as
    similar (within 1e-6) as the least similar exact one: the scan breaks such ties by
    position, which no search can know."""
    hits = 0
    for f, e, sims in zip(found, exact, similarities, strict=True):
        others = np.setdiff1d(f, e)
        hits += len(np.intersect1d(f, e)) + int(np.count_nonzero(
            sims[others] >= sims[e].min(initial=np.inf) - 1e-6))
    return round(hits / max(1, sum(len(e) for e in exact)), 4)


def index_path(graph: Any, queries: np.ndarray, k: int, per_direct: Sequence[int],
               beams: Sequence[int], held: Any = None) -> list[dict[str, Any]]:
    """The index's own path (``search.concepts.direct_concepts``: the concept graph's
    8-bit search for ``per_direct * k`` candidates, scored exactly) against the scan, for
    each pair of ``per_direct`` and beam: the recall of the direct concepts, the recall
    counting a concept tied with the scan's last as found (the scan breaks such ties
    by position, which no search can know), and the median ms of one query. ``held`` is
    the concept graph searched (default: the save's, or built as a query would)."""
    from shared_core.search.concepts import direct_concepts

    vectors, usable = graph.vectors, np.asarray(graph.unit_linked_concepts)
    held = graph.concept_hnsw if held is None else held
    dense = np.ascontiguousarray(vectors, dtype=np.float32)
    similarities = [dense @ q for q in queries]
    exact = [most_similar(sims, usable, k) for sims in similarities]
    rows = []
    for per in per_direct:
        for beam in beams:
            found, ms = timed(lambda q, per=per, beam=beam: direct_concepts(
                held, vectors, q, k, per, beam)[0], queries)
            rows.append({"per_direct": per, "beam": beam, "candidates": per * k,
                         "recall": recall(found, exact),
                         "recall_ties_found": tied_recall(found, exact, similarities),
                         "ms": ms})
    return rows


def dataset_index(name: str, data: Path, embedder: Any) -> tuple[Any, Queries]:
    """An index over a dev set's passages with the default config, and its questions;
    ``name`` may join several sets with ``+`` (one index over all their passages, each
    text once, ids prefixed by the set, asked all their questions)."""
    from shared_core import ConceptGraphIndex

    from .data import load_dataset, passage_text

    texts: dict[str, str] = {}  # text -> id: a passage two sets share is indexed once
    questions: list[str] = []
    for part in name.split("+"):
        dataset = load_dataset(data / part)
        for p in dataset.passages:
            texts.setdefault(passage_text(p), f"{part}:{p.id}")
        questions += [q.question for q in dataset.questions]
    index = ConceptGraphIndex.from_texts(list(texts), ids=list(texts.values()),
                                         embedder=embedder)
    return index, Queries(questions, embedder.embed(questions))


def context_kept(index: Any, asked: Queries, held: Any = None) -> float:
    """The share of each exact-scan context's tokens that ``concept_search="hnsw"`` keeps
    (the whole ranking, each question asked with its text), searching ``held`` (default:
    the index's own concept graph)."""
    _, scanned = query_latencies(index.reconfigured(concept_search="exact"), asked)
    searching = index.reconfigured(concept_search="hnsw")
    if held is not None:
        # where a query keeps the graph it built (``DerivedGraph.concept_hnsw``)
        searching.state.graph.__dict__["concept_hnsw"] = held
    _, searched = query_latencies(searching, asked)
    return round(context_recall(searched, scanned), 4)


def built_graphs(index: Any, queries: np.ndarray, asked: Queries,
                 ef_constructions: Sequence[int], per_direct: Sequence[int],
                 beams: Sequence[int]) -> list[dict[str, Any]]:
    """For each construction beam, the concept graph built afresh with it (its build
    seconds, of them its self check's, and the check's recall), the index path's rows
    over it and the context it keeps at ``BEAM``."""
    from shared_core.search.concepts import ConceptHnsw, self_check_rows

    graph = index.state.graph
    report = []
    for ef_construction in ef_constructions:
        start = time.perf_counter()
        held = ConceptHnsw.build(graph.vectors, graph.unit_linked_concepts, ef_construction)
        build_s = time.perf_counter() - start
        start = time.perf_counter()  # the check again, timed alone
        held.measured_self_recall(graph.vectors, self_check_rows(graph.unit_linked_concepts))
        report.append({"ef_construction": ef_construction, "build_s": round(build_s, 1),
                       "self_check_s": round(time.perf_counter() - start, 2),
                       "self_recall": held.self_recall,
                       "index_path": index_path(graph, queries, index.config.top_k,
                                                per_direct, beams, held),
                       "context_kept": context_kept(index, asked, held)})
    return report


def main(argv: Sequence[str] | None = None) -> None:
    from shared_core.embeddings.cache import embedder_for_model_id, resolve_embedder

    from .run import CACHE_PATH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--save", type=Path, help="a saved index, asked the scale questions")
    source.add_argument("--dataset", help="a dev set under --data, asked its questions "
                        "(several joined by +: musique+hotpotqa)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--embedder", default="minilm",
                        help="minilm or hashing (--dataset; a save uses its own)")
    parser.add_argument("--cache", type=Path, default=CACHE_PATH, help="SQLite embedding cache")
    parser.add_argument("--queries", type=int, default=200, help="scale questions (--save)")
    parser.add_argument("--lists", type=int, nargs="*", default=[256, 1024])
    parser.add_argument("--nprobe", type=int, nargs="*", default=[8, 16, 32, 64])
    parser.add_argument("--ef", type=int, nargs="*", default=[32, 64, 128, 256])
    parser.add_argument("--per-direct", type=int, nargs="*", default=[2],
                        help="the index's own path: candidates asked per direct concept")
    parser.add_argument("--index-beam", type=int, nargs="*", default=[256],
                        help="the index's own path: the concept graph's search beams")
    parser.add_argument("--index-ef-construction", type=int, nargs="*", default=[],
                        help="the index's own path over concept graphs built afresh "
                        "with these construction beams")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.save is not None:
        from shared_core import ConceptGraphIndex
        from shared_core.store import read_manifest

        # the save's own embedder, as the CLI loads one
        model = read_manifest(str(args.save))["embedding_model"]
        embedder = embedder_for_model_id(model, args.cache)
        index = ConceptGraphIndex.load(str(args.save), embedder)
        asked = scale_questions(sentence_pool(args.data), args.queries, embedder)
    else:
        embedder = resolve_embedder(args.embedder, args.cache)
        index, asked = dataset_index(args.dataset, args.data, embedder)
    queries = np.asarray(asked.vectors, dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    graph = index.state.graph
    report = {"command": "python -m benchmarks.concept_search " + " ".join(
                  sys.argv[1:] if argv is None else argv),
              "embedder": embedder.model_id,
              **measure(np.asarray(graph.vectors), np.asarray(graph.unit_linked_concepts),
                        queries, index.config.top_k, args.lists, args.nprobe, args.ef),
              "index_path": index_path(graph, queries, index.config.top_k, args.per_direct,
                                       args.index_beam),
              "context_kept_by_concept_hnsw": context_kept(index, asked),
              "built_graphs": built_graphs(index, queries, asked, args.index_ef_construction,
                                           args.per_direct, args.index_beam)}
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
