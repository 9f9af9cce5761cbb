"""A build's batches prepared in this process, a process pool, a Dask cluster or a Ray cluster.

    python -m benchmarks.sharded_build --passages 2000 --out benchmarks/results/sharded_build.json

The same synthetic passages (``benchmarks.scale``'s) are built with the MiniLM
embedder and no cache, so each run embeds every sentence, once per executor:

- ``local``: no executor; torch uses every core in this process;
- ``process``: a ``ProcessPoolExecutor`` of ``--workers`` spawned processes;
- ``dask``: a ``distributed.LocalCluster`` of ``--workers`` processes, one thread each;
- ``ray``: ``RayExecutor`` on a local Ray cluster of ``--workers`` CPUs.

Worker processes run torch on one thread each (``OMP_NUM_THREADS=1``), so that the
workers share the cores instead of oversubscribing them. Each row reports the wall
time, including the cluster's start and each worker's model load, and the time of a
second build on the warm cluster, which is what a long-lived cluster costs. It also
checks that the build equals the local one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.data import DATA_ROOT
from benchmarks.scale import passages, sentence_pool


@contextmanager
def process_pool(workers: int) -> Iterator[Executor]:
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@contextmanager
def dask_cluster(workers: int) -> Iterator[Executor]:
    import distributed

    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:  # type: ignore[no-untyped-call]
        yield client.get_executor()


@contextmanager
def ray_cluster(workers: int) -> Iterator[Executor]:
    from shared_core.ray_executor import RayExecutor

    with RayExecutor(num_cpus=workers, include_dashboard=False, log_to_driver=False) as pool:
        yield pool


EXECUTORS: dict[str, Callable[[int], AbstractContextManager[Executor]]] = {
    "process": process_pool, "dask": dask_cluster, "ray": ray_cluster}


def build(texts: list[str], ids: list[str], executor: Executor | None) -> Any:
    from shared_core import ConceptGraphIndex, minilm_embedder

    return ConceptGraphIndex.from_texts(texts, ids=ids, embedder=minilm_embedder(),
                                        batch_size=256, executor=executor)


def same_build(a: Any, b: Any) -> bool:
    return bool(a.chunk_ids == b.chunk_ids and a.concepts == b.concepts and a.edges == b.edges
                and np.allclose(a.state.graph.rank, b.state.graph.rank, rtol=0, atol=1e-6))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DATA_ROOT)
    parser.add_argument("--executors", nargs="+", default=["process", "dask", "ray"],
                        choices=sorted(EXECUTORS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    ids, texts = passages(sentence_pool(args.data), args.passages, seed=1)
    start = time.perf_counter()
    local = build(texts, ids, None)
    rows: list[dict[str, Any]] = [{"executor": "local", "build_s": round(
        time.perf_counter() - start, 2)}]
    print(json.dumps(rows[-1]), flush=True)
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by every worker started from here on
    for name in args.executors:
        start = time.perf_counter()
        with EXECUTORS[name](args.workers) as executor:
            first = build(texts, ids, executor)
            first_s = time.perf_counter() - start
            start = time.perf_counter()
            build(texts, ids, executor)
            warm_s = time.perf_counter() - start
        rows.append({"executor": name, "workers": args.workers,
                     "build_s_with_cluster_start": round(first_s, 2),
                     "build_s_warm": round(warm_s, 2), "equals_local": same_build(first, local)})
        print(json.dumps(rows[-1]), flush=True)
    report = {"command": "python -m benchmarks.sharded_build " + " ".join(
                  [f"--passages {args.passages}", f"--workers {args.workers}",
                   "--executors", *args.executors]),
              "sentences": len(local.state.corpus.sentence_spans),
              "embedder": local.embedder.model_id,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                         f"{platform.python_version()}",
              "rows": rows}
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
