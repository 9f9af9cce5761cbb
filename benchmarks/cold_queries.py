"""A fresh process's queries on a save whose pages are not cached, pass by pass.

    sudo python -m benchmarks.capped --limit-gib 8 --drop-caches --out capped.json -- \
        python -m benchmarks.cold_queries /tmp/q/idx1000000 --passes 5 --out cold.json

A process that loads a save answers its first questions from disk: the rows a query
rescores and the HNSW pages its search visits are read as it touches them. Where the
save does not fit in the page cache (a 1 M save is 14.5 GB; ``benchmarks.capped`` gives
the command a machine's worth of memory) they are read again and again. Each pass asks
the same questions (the scale benchmark's: real pool sentences, their vectors given, no
embedding timed) and reports its p50 and p95, and the major page faults and megabytes
read from disk per question (Linux's ``/proc``). ``--no-read-ahead`` sets
``shared_core.paging.READ_AHEAD_PROBES`` to 0, which turns off asking the kernel for a
query's rows before they are gathered: what that asking saves is the difference.
``--rescore-from codes`` rescores from the rows' byte codes (``ConceptGraphConfig.
rescore_from``), which ``warm()`` makes; ``--compare`` then also answers the questions
once from the float32 rows after the passes and reports the share of their context the
codes' answers kept (``benchmarks.scale.context_recall``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.query_cost import saved_embedder
from benchmarks.scale import (
    DATA,
    context_recall,
    query_latencies,
    scale_questions,
    sentence_pool,
)


def read_counters() -> tuple[int, int]:
    """This process's major page faults and bytes read from storage so far."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("read_bytes:"):
            return faults, int(line.split()[1])
    raise RuntimeError("/proc/self/io has no read_bytes: this needs Linux")


def pass_figures(latencies_ms: list[float], before: tuple[int, int],
                 after: tuple[int, int]) -> dict[str, float]:
    """One pass's p50 and p95 (ms), and its faults and MB read per question."""
    asked = len(latencies_ms)
    return {"p50_ms": round(float(np.percentile(latencies_ms, 50)), 2),
            "p95_ms": round(float(np.percentile(latencies_ms, 95)), 2),
            "major_faults_per_query": round((after[0] - before[0]) / asked, 1),
            "mb_read_per_query": round((after[1] - before[1]) / 2**20 / asked, 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path, help="a save (benchmarks.scale --save DIR)")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--no-read-ahead", dest="read_ahead", action="store_false")
    parser.add_argument("--no-read-index", dest="read_index", action="store_false",
                        help="warm() without reading the HNSW index's files into the cache")
    parser.add_argument("--rescore-from", choices=("vectors", "codes"), default="vectors")
    parser.add_argument("--compare", action="store_true",
                        help="after the passes, the context kept against rescoring from "
                             "the float32 rows")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from shared_core import ConceptGraphIndex, HashingEmbedder, paging

    if not args.read_ahead:
        paging.READ_AHEAD_PROBES = 0
    asked = scale_questions(sentence_pool(args.data), args.queries, HashingEmbedder(384))
    start = time.perf_counter()
    index = ConceptGraphIndex.load(str(args.path), saved_embedder(args.path))
    load_s = time.perf_counter() - start
    index = index.reconfigured(rescore_from=args.rescore_from)
    start = time.perf_counter()
    index.warm(read_vector_index=args.read_index)  # with --rescore-from codes, the codes
    warm_s = time.perf_counter() - start
    passes = []
    contexts: list[dict[str, int]] = []
    for number in range(args.passes):
        before = read_counters()
        latencies, contexts = query_latencies(index, asked)
        passes.append(pass_figures(latencies, before, read_counters()))
        print(f"pass {number}: {passes[-1]}", flush=True)
    kept = None
    if args.compare:
        _, from_vectors = query_latencies(index.reconfigured(rescore_from="vectors"), asked)
        kept = round(context_recall(contexts, from_vectors), 4)
        print(f"context kept against the float32 rows: {kept}", flush=True)
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    result = {"command": "python -m benchmarks.cold_queries " + " ".join(sys.argv[1:]),
              "code": code, "save": str(args.path), "read_ahead": args.read_ahead,
              "read_index": args.read_index,
              "rescore_from": args.rescore_from, "context_kept_against_vectors": kept,
              "queries": args.queries, "load_s": round(load_s, 1), "warm_s": round(warm_s, 1),
              "passes": passes}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
