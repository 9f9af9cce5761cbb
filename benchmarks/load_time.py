"""How long a saved index takes to load, and then to answer its first query, several
times in one process.

    python -m benchmarks.load_time PATH --embedding-dim 384 --loads 3 \
        --out benchmarks/results/load_time_1m.json

``PATH`` is an index saved with the hashing embedder (``benchmarks.scale`` builds its
corpora with it; ``python -m benchmarks.scale --save DIR`` saves them). The first load
of a process also imports faiss and may find the files outside the page cache; the
later ones show a warm load. The first query after each load is timed too: whatever a
load leaves for later (a structure built on first use) shows there.
``--drop-caches`` empties the OS page cache before the first load (Linux, as root), so
that load reads every file from disk. ``--upgrade DIR`` first saves the loaded index to
``DIR`` with this code (a save from older code gains what this code keeps) and times
loads of that instead.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# the first query after a load (any question: what it times is what the load left)
FIRST_QUESTION = "Who was the director of the film that won the award in 1994?"


def timed_loads(path: Path, dim: int, loads: int) -> tuple[list[float], list[float]]:
    """Seconds of each load, and of the first query after it."""
    from shared_core import ConceptGraphIndex, HashingEmbedder

    seconds, first_query = [], []
    for _ in range(loads):
        start = time.perf_counter()
        index = ConceptGraphIndex.load(str(path), HashingEmbedder(dim))
        seconds.append(round(time.perf_counter() - start, 2))
        start = time.perf_counter()
        index.retrieve(FIRST_QUESTION)
        first_query.append(round(time.perf_counter() - start, 4))
        del index
        gc.collect()
    return seconds, first_query


def drop_page_cache() -> None:
    """Write dirty pages back, then empty the page cache (Linux; needs root)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n", encoding="ascii")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--embedding-dim", type=int, default=384)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--upgrade", type=Path, help="save to this folder first, then time it")
    parser.add_argument("--drop-caches", action="store_true",
                        help="empty the page cache before the first timed load (root)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    path = args.path
    report: dict[str, object] = {"command": "python -m benchmarks.load_time " +
                                 " ".join(sys.argv[1:] if argv is None else argv)}
    if args.upgrade is not None:
        from shared_core import ConceptGraphIndex, HashingEmbedder

        start = time.perf_counter()
        index = ConceptGraphIndex.load(str(path), HashingEmbedder(args.embedding_dim))
        report["load_before_upgrade_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        index.save(str(args.upgrade))
        report["save_s"] = round(time.perf_counter() - start, 2)
        del index
        gc.collect()
        path = args.upgrade
    if args.drop_caches:
        drop_page_cache()
    report["load_s"], report["first_query_s"] = timed_loads(path, args.embedding_dim,
                                                            args.loads)
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
