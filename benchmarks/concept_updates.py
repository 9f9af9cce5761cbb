"""How the concept HNSW (``concept_search="hnsw"``) holds up through a run of updates.

    python -m benchmarks.concept_updates --dataset musique --embedder minilm \
        --out benchmarks/results/concept_updates_musique.json

An update moves the vectors of the concepts whose sentences changed and adds and
removes concepts; the index keeps the concept graph through it
(``shared_core.search.concepts.ConceptHnsw.refreshed``) rather than building it again,
writing the concepts that wait beside it into segments of their own, until too many of
its rows are dropped. This builds an index with ``concept_search="hnsw"`` over
the first ``--start`` share of a dev set's passages (shuffled), then runs ``--steps``
updates, each adding the next ``--share`` of the passages and deleting half as many of
the oldest. After each it reports, over the dev set's questions:

- the recall of the exact direct concepts (the ``top_k`` most similar concepts that
  link a unit) by the kept graph, and by a graph built afresh over the same vectors;
- what the kept graph holds: live rows, concepts beside it and their share, the dropped
  rows' share, its segments, and whether the update built it again (a new first
  segment) or wrote a later segment;
- the update's seconds, against the same update of an index that holds no concept
  graph (``concept_search="exact"``), and the seconds a fresh build of the graph takes.

``--max-drift``, ``--max-beside`` and ``--max-dead`` run the whole sequence once per
combination of values of ``search.concepts.MAX_ROW_DRIFT`` (how far a concept may move
and keep its row), ``MAX_BESIDE`` (how many concepts may wait beside the graph before
an update writes them into it) and ``MAX_DEAD_SHARE`` (the share of dropped rows past
which an update builds it again).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .concept_search import exact_direct, recall
from .scale import DATA, Queries, context_recall, query_latencies

SEED = 0


def graph_recall(index: Any, queries: np.ndarray, exact: list[np.ndarray],
                 held: Any) -> float:
    """Recall of the ``exact`` direct concepts of each query by the concept graph ``held``."""
    from shared_core.search.concepts import direct_concepts

    graph = index.state.graph
    return recall([direct_concepts(held, graph.vectors, q, index.config.top_k)[0]
                   for q in queries], exact)


def exact_directs(index: Any, queries: np.ndarray) -> list[np.ndarray]:
    """Each query's direct concepts as the scan finds them."""
    graph = index.state.graph
    vectors = np.ascontiguousarray(np.asarray(graph.vectors), dtype=np.float32)
    usable = np.asarray(graph.unit_linked_concepts)
    return [exact_direct(vectors, usable, q, index.config.top_k) for q in queries]


def timed(update: Any) -> float:
    start = time.perf_counter()
    update()
    return round(time.perf_counter() - start, 3)


def run_updates(texts: list[str], ids: list[str], asked: Queries, embedder: Any,
                start_share: float, share: float, steps: int) -> dict[str, Any]:
    """One run of ``steps`` updates; the figures after the build and after each update."""
    from shared_core import ConceptGraphConfig, ConceptGraphIndex
    from shared_core.search.concepts import ConceptHnsw

    queries = np.asarray(asked.vectors, dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    first = int(start_share * len(texts))
    step = max(1, int(share * len(texts)))
    kept = ConceptGraphIndex.from_texts(texts[:first], ids=ids[:first], embedder=embedder,
                                        config=ConceptGraphConfig(concept_search="hnsw"))
    scanned = ConceptGraphIndex.from_texts(texts[:first], ids=ids[:first], embedder=embedder,
                                           config=ConceptGraphConfig(concept_search="exact"))
    rows: list[dict[str, Any]] = []
    oldest, end = 0, first
    for number in range(steps + 1):
        if number:
            added = slice(end, min(end + step, len(texts)))
            doomed = ids[oldest:oldest + step // 2]
            previous = kept.state.graph.concept_index

            def update(index: Any, added: slice = added, doomed: list[str] = doomed) -> None:
                index.add(texts[added], ids=ids[added])
                index.delete(doomed)

            update_s = timed(lambda: update(kept))
            exact_update_s = timed(lambda: update(scanned))
            end, oldest = added.stop, oldest + len(doomed)
            now = kept.state.graph.concept_index.graph
            rebuilt = now.segments[0] is not previous.graph.segments[0]
            written = not rebuilt and now is not previous.graph
        graph = kept.state.graph
        held = graph.concept_index
        start = time.perf_counter()
        fresh = ConceptHnsw.build(graph.vectors, graph.unit_linked_concepts)
        build_s = round(time.perf_counter() - start, 3)
        exact = exact_directs(kept, queries)
        row = {"step": number, "chunks": len(kept), "concepts": len(graph.concepts),
               "usable": len(graph.unit_linked_concepts), "live_rows": held.live_rows,
               "graph_rows": len(held.row_concept), "beside": len(held.beside),
               "beside_share": round(held.beside_share(), 4),
               "dead_share": round(held.dead_share(), 4), "segments": held.graph.sizes(),
               "recall_kept": graph_recall(kept, queries, exact, held),
               "recall_fresh": graph_recall(kept, queries, exact, fresh),
               "fresh_build_s": build_s}
        if number:
            row.update({"rebuilt": rebuilt, "segment_written": written, "update_s": update_s,
                        "update_s_without_graph": exact_update_s})
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    _, kept_contexts = query_latencies(kept, asked)
    _, scan_contexts = query_latencies(kept.reconfigured(concept_search="exact"), asked)
    return {"steps": rows, "context_kept_against_the_scan": round(
        context_recall(kept_contexts, scan_contexts), 4)}


def main(argv: Sequence[str] | None = None) -> None:
    from shared_core.embeddings.cache import resolve_embedder
    from shared_core.search import concepts

    from .data import load_dataset, passage_text
    from .run import CACHE_PATH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique", help="a dev set under --data")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--embedder", default="minilm", help="minilm or hashing")
    parser.add_argument("--cache", type=Path, default=CACHE_PATH, help="SQLite embedding cache")
    parser.add_argument("--start", type=float, default=0.8, help="share of passages built")
    parser.add_argument("--share", type=float, default=0.01, help="share added per update")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--max-drift", type=float, nargs="*", default=[concepts.MAX_ROW_DRIFT])
    parser.add_argument("--max-beside", type=int, nargs="*", default=[concepts.MAX_BESIDE])
    parser.add_argument("--max-dead", type=float, nargs="*", default=[concepts.MAX_DEAD_SHARE])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    embedder = resolve_embedder(args.embedder, args.cache)
    dataset = load_dataset(args.data / args.dataset)
    order = np.random.default_rng(SEED).permutation(len(dataset.passages))
    texts = [passage_text(dataset.passages[i]) for i in order]
    ids = [dataset.passages[i].id for i in order]
    questions = [q.question for q in dataset.questions]
    asked = Queries(questions, embedder.embed(questions))
    report: dict[str, Any] = {
        "command": "python -m benchmarks.concept_updates " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "embedder": embedder.model_id, "dataset": args.dataset, "passages": len(texts),
        "questions": len(questions), "runs": []}
    defaults = concepts.MAX_ROW_DRIFT, concepts.MAX_BESIDE, concepts.MAX_DEAD_SHARE
    try:
        for drift, beside, dead in itertools.product(args.max_drift, args.max_beside,
                                                     args.max_dead):
            concepts.MAX_ROW_DRIFT, concepts.MAX_BESIDE = drift, beside
            concepts.MAX_DEAD_SHARE = dead
            run = run_updates(texts, ids, asked, embedder, args.start, args.share, args.steps)
            report["runs"].append({"max_row_drift": drift, "max_beside": beside,
                                   "max_dead_share": dead, **run})
    finally:
        concepts.MAX_ROW_DRIFT, concepts.MAX_BESIDE, concepts.MAX_DEAD_SHARE = defaults
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
