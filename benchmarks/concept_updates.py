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

``--codes`` runs the same updates on an index that scans byte codes instead
(``concept_search="codes"``), which an update carries (``CodedScan.refreshed``): after
each, whether the codes were carried or trained again, how many rows wait beside them
(outside the trained ranges, scored exactly by every query), the share of questions the
first ask answered with the carried codes and with codes made afresh, the share whose
direct concepts are the scan's (by both), and the update's seconds against the same
update of an index that holds no codes, next to the seconds coding them all afresh takes
(what the first query after an update paid before updates carried the codes).

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


class UpdateRun:
    """Two indexes over the first ``start_share`` of ``texts``, one searching its direct
    concepts as ``concept_search``, one scanning the floats, taken through the same
    updates: each adds the next ``share`` of the texts and deletes half as many of the
    oldest."""

    def __init__(self, texts: list[str], ids: list[str], embedder: Any, start_share: float,
                 share: float, concept_search: str) -> None:
        from shared_core import ConceptGraphConfig, ConceptGraphIndex

        self.texts, self.ids = texts, ids
        first = int(start_share * len(texts))
        self.step = max(1, int(share * len(texts)))
        self.searched = ConceptGraphIndex.from_texts(
            texts[:first], ids=ids[:first], embedder=embedder,
            config=ConceptGraphConfig(concept_search=concept_search))  # type: ignore[arg-type]
        self.scanned = ConceptGraphIndex.from_texts(
            texts[:first], ids=ids[:first], embedder=embedder,
            config=ConceptGraphConfig(concept_search="exact"))
        self.oldest, self.end = 0, first

    def update(self) -> tuple[float, float]:
        """The next update on both indexes: its seconds on each (searched, scanned)."""
        added = slice(self.end, min(self.end + self.step, len(self.texts)))
        doomed = self.ids[self.oldest:self.oldest + self.step // 2]

        def update(index: Any) -> None:
            index.add(self.texts[added], ids=self.ids[added])
            index.delete(doomed)

        seconds = timed(lambda: update(self.searched)), timed(lambda: update(self.scanned))
        self.end, self.oldest = added.stop, self.oldest + len(doomed)
        return seconds


def unit_queries(asked: Queries) -> np.ndarray:
    queries = np.asarray(asked.vectors, dtype=np.float32)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


def run_updates(texts: list[str], ids: list[str], asked: Queries, embedder: Any,
                start_share: float, share: float, steps: int) -> dict[str, Any]:
    """One run of ``steps`` updates; the figures after the build and after each update."""
    from shared_core.search.concepts import ConceptHnsw

    queries = unit_queries(asked)
    run = UpdateRun(texts, ids, embedder, start_share, share, "hnsw")
    kept = run.searched
    rows: list[dict[str, Any]] = []
    for number in range(steps + 1):
        if number:
            previous = kept.state.graph.concept_index
            update_s, exact_update_s = run.update()
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


def code_answers(codes: Any, vectors: Any, queries: np.ndarray, exact: list[np.ndarray],
                 k: int) -> tuple[float, float]:
    """Over ``queries``: the share whose ``k`` best ``codes`` answered on the first ask
    (which scores the best ``FIRST_ASK * k`` codes and the rows beside them), and the
    share whose direct concepts are the scan's (``exact``)."""
    from shared_core.search.coded_scan import FIRST_ASK

    first = FIRST_ASK * k + len(codes.beside)
    answers = [codes.top(vectors, q, k) for q in queries]
    first_ask = np.mean([len(scored) <= first for _, scored, _ in answers])
    same = np.mean([set(best.tolist()) == set(e.tolist())
                    for (best, _, _), e in zip(answers, exact, strict=True)])
    return round(float(first_ask), 4), round(float(same), 4)


def run_code_updates(texts: list[str], ids: list[str], asked: Queries, embedder: Any,
                     start_share: float, share: float, steps: int) -> dict[str, Any]:
    """``--codes``: the same updates on an index that scans byte codes, which the first
    query codes and each update carries; the figures after the build and each update."""
    from shared_core.search.coded_scan import CodedScan

    queries = unit_queries(asked)
    run = UpdateRun(texts, ids, embedder, start_share, share, "codes")
    coded = run.searched
    rows: list[dict[str, Any]] = []
    for number in range(steps + 1):
        previous = coded.state.graph.concept_codes  # coded by the build's first query
        if number:
            update_s, exact_update_s = run.update()
        graph = coded.state.graph
        held = graph.concept_codes
        start = time.perf_counter()
        fresh = CodedScan.build(graph.vectors, graph.unit_linked_concepts)
        build_s = round(time.perf_counter() - start, 3)
        k = coded.config.top_k
        exact = exact_directs(coded, queries)
        first_ask, same = code_answers(held, graph.vectors, queries, exact, k)
        first_ask_fresh, same_fresh = code_answers(fresh, graph.vectors, queries, exact, k)
        row = {"step": number, "chunks": len(coded), "usable": len(held),
               "carried": graph.coded_concepts is not None,
               "trained_again": held.low is not previous.low,  # carried codes share it
               "beside": len(held.beside),
               "first_ask_carried": first_ask, "first_ask_fresh": first_ask_fresh,
               "same_as_scan": same, "same_as_scan_fresh": same_fresh,
               "fresh_codes_s": build_s}
        if number:
            row.update({"update_s": update_s, "update_s_without_codes": exact_update_s})
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return {"steps": rows}


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
    parser.add_argument("--codes", action="store_true",
                        help="the byte codes (concept_search='codes') through the updates")
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
    if args.codes:
        report["runs"].append(run_code_updates(texts, ids, asked, embedder, args.start,
                                               args.share, args.steps))
        args.max_drift = args.max_beside = args.max_dead = []  # no concept HNSW to sweep
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
