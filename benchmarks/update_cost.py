"""Heap and time of updating a saved index: add a share of its size, then delete it again.

    python -m benchmarks.update_cost /tmp/idx1000000 --share 0.01 --set candidates=500 \
        --out benchmarks/results/update_cost.json

Each ``PATH`` is an index saved by ``benchmarks.scale --save``, loaded with the embedder
it was built with (``query_cost.saved_embedder``). The added passages are the scale
benchmark's (seed 2, the same generator); ``--fresh-names MEAN`` gives them new names,
numbered past any save's own, as a real add brings new concepts. The process holds
only the loaded index, the pool the passages are drawn from and the questions: the heap
figures are the update's, not a build's beside it (``benchmarks.scale`` runs its
updates after its build).
Queries are timed before the add, after it and after the delete, two passes each
(the second's p50/p95), asked with their text as in ``benchmarks.query_cost``; the first
question of each state is also timed alone, as it pays for what the state makes on first
use (the concept codes, where an update did not carry them). What the concept graph and
the concept codes hold is reported after each update, and whether it kept them; after
the add, the seconds that coding every concept afresh takes, which the first query paid
before updates carried the codes.

``--cycles N`` then adds and deletes the same passages N more times, timing each
update alone (no queries between): at 10 K passages one update's spread between
fresh processes is as large as a change worth measuring, and this spread is smaller.

    python -m benchmarks.scale --sizes 10000 --save /tmp/q    # /tmp/q/idx10000
    python -m benchmarks.update_cost /tmp/q/idx10000 --cycles 8
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.query_cost import loaded_with, parse_sweep, saved_embedder
from benchmarks.scale import (
    DATA,
    HeapSampler,
    Queries,
    passages,
    scale_questions,
    sentence_pool,
    warm_latency,
)

# the added passages' fresh names are numbered from here: past any save's own (a 1 M
# save with a mean of one a passage names about a million)
ADDED_NAMES = 100_000_000


def segment_sizes(index: Any) -> list[int] | None:
    """The row counts of the index's HNSW segments (None on the exact path)."""
    ann = index.state.graph.ann
    return ann.sizes() if hasattr(ann, "sizes") else None


def concept_graph(index: Any, before: Any = None) -> dict[str, Any] | None:
    """What the concept HNSW (``concept_search="hnsw"``) holds, and whether the last update
    built it again (``before``: the one held before it); None where none is held."""
    held = index.state.graph.held_concept_index()
    if held is None:
        return None
    out = {"rows": len(held.row_concept), "live_rows": held.live_rows,
           "beside": len(held.beside), "beside_share": round(held.beside_share(), 4),
           "dead_share": round(held.dead_share(), 4), "segments": held.graph.sizes()}
    if before is not None:  # built again: its first segment is new
        out["rebuilt"] = held.graph.segments[0] is not before.graph.segments[0]
    return out


def concept_codes(index: Any, before: Any = None) -> dict[str, Any] | None:
    """What the concept codes (``concept_search="codes"``) hold, and whether the last
    update carried them (``before``: the ones held before it); None where none are held."""
    held = index.state.graph.held_concept_codes()
    if held is None:
        return None
    out: dict[str, Any] = {"coded": len(held.rows), "beside": len(held.beside)}
    if before is not None:  # carried codes keep the ranges they were trained on
        out["carried"] = index.state.graph.coded_concepts is held
        out["trained_again"] = held.low is not before.low
    return out


def first_query_ms(index: Any, asked: Queries) -> float:
    """The first question's milliseconds: what a state's first query pays (codes it
    makes, pages it reads), which the passes' p50 leaves out."""
    start = time.perf_counter()
    index.retrieve_by_vector(asked.vectors[0], query=asked.texts[0])
    return round((time.perf_counter() - start) * 1000, 1)


def timed(heap: HeapSampler, update: Any) -> dict[str, Any]:
    """Seconds, heap peak (and where the main thread was then) and heap after one update."""
    heap.phase()
    start = time.perf_counter()
    update()
    seconds = time.perf_counter() - start
    peak = heap.phase()  # counts the level it ends at, which is the heap after
    # the level rounded as the phase's peak is (to 0.1 MB, then to 1): rounded once, a
    # level of 460.51 MB read 461 against a peak of 460 (460.5, rounded half to even)
    return {"s": round(seconds, 2), "heap_peak_mb": round(peak["peak_mb"]),
            "heap_peak_where": peak["where"], "heap_after_mb": round(round(heap.level_mb, 1))}


def measure_index(path: Path, pool: list[str], asked: Queries, share: float,
                  settled: dict[str, int | None], cycles: int = 0,
                  fresh_names: float = 0.0) -> dict[str, Any]:
    index, load = loaded_with(path, settled)
    ids, texts = passages(pool, max(1, round(len(index) * share)), seed=2,
                          fresh_names=fresh_names, first_name=ADDED_NAMES)
    heap = HeapSampler()
    row: dict[str, Any] = {"index": str(path), "chunks": len(index), "added": len(ids),
                           "load_s": round(load, 2), "heap_loaded_mb": round(heap.anonymous_mb()),
                           "segments_loaded": segment_sizes(index)}
    from shared_core.state.derived import uses_concept_graph

    graph = index.state.graph
    if uses_concept_graph(index.config, graph) and graph.held_concept_index() is None:
        # the save holds no concept graph: built here, not inside the first query's time
        row["concept_graph_build"] = timed(heap, lambda: graph.concept_hnsw)
    row["first_query_loaded_ms"] = first_query_ms(index, asked)
    row["query_loaded"], _ = warm_latency(index, asked)
    row["heap_queried_mb"] = round(heap.anonymous_mb())  # what queries keep: the base of an add
    held, codes = index.state.graph.held_concept_index(), index.state.graph.held_concept_codes()
    row["concept_graph_loaded"] = concept_graph(index)
    row["concept_codes_loaded"] = concept_codes(index)
    row["add"] = timed(heap, partial(index.add, texts, ids=ids))
    row["segments_after_add"] = segment_sizes(index)
    row["concept_graph_after_add"] = concept_graph(index, held)
    row["concept_codes_after_add"] = concept_codes(index, codes)
    if row["concept_codes_after_add"] is not None:  # what coding them afresh would take
        from shared_core.search.coded_scan import CodedScan

        graph = index.state.graph
        start = time.perf_counter()
        CodedScan.build(graph.vectors, graph.unit_linked_concepts)
        row["concept_codes_after_add"]["afresh_s"] = round(time.perf_counter() - start, 2)
    row["first_query_after_add_ms"] = first_query_ms(index, asked)
    held, codes = index.state.graph.held_concept_index(), index.state.graph.held_concept_codes()
    row["query_after_add"], _ = warm_latency(index, asked)
    row["delete"] = timed(heap, partial(index.delete, ids))
    row["segments_after_delete"] = segment_sizes(index)
    row["concept_graph_after_delete"] = concept_graph(index, held)
    row["concept_codes_after_delete"] = concept_codes(index, codes)
    row["first_query_after_delete_ms"] = first_query_ms(index, asked)
    row["query_after_delete"], _ = warm_latency(index, asked)
    if cycles:
        row["cycles"] = {"add_s": [], "delete_s": []}
        for _ in range(cycles):
            for name, update in (("add_s", partial(index.add, texts, ids=ids)),
                                 ("delete_s", partial(index.delete, ids))):
                start = time.perf_counter()
                update()
                row["cycles"][name].append(round(time.perf_counter() - start, 3))
    heap.stop()
    del index
    gc.collect()
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", type=Path, nargs="+")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--share", type=float, default=0.01,
                        help="passages added, as a share of the index's chunks")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--set", type=parse_sweep, action="append", default=[],
                        help="a query knob set before anything is timed, e.g. candidates=500")
    parser.add_argument("--cycles", type=int, default=0,
                        help="then add and delete the same passages this many times more, "
                             "each update timed alone")
    parser.add_argument("--fresh-names", type=float, default=0.0, metavar="MEAN",
                        help="the added passages' new names each (benchmarks.scale "
                             "passages()): a real add brings new concepts")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not 0 < args.share <= 1:
        parser.error(f"--share must be in (0, 1], got {args.share}")
    if args.cycles < 0:
        parser.error(f"--cycles must be at least 0, got {args.cycles}")
    if args.fresh_names < 0:
        parser.error(f"--fresh-names is a mean count per passage: 0 or more, got "
                     f"{args.fresh_names}")
    pool = sentence_pool(args.data)
    report: dict[str, Any] = {"command": "python -m benchmarks.update_cost " +
                              " ".join(sys.argv[1:] if argv is None else argv), "rows": []}
    settled = {knob: values[0] for knob, values in args.set}
    for path in args.paths:
        asked = scale_questions(pool, args.queries, saved_embedder(path))
        row = measure_index(path, pool, asked, args.share, settled, args.cycles,
                            args.fresh_names)
        print(json.dumps(row), flush=True)
        report["rows"].append(row)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
