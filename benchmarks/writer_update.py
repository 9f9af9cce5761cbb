"""A large update by the writer that holds no vector, against the index that holds them.

    python -m benchmarks.writer_update --data ../shared/data --passages 10000 100000 \
        --share 0.3 --out benchmarks/results/writer_large_update.json

For each size, the scale benchmark's passages (seed 1) are built into a Milvus Lite
collection (``FLAT``: every row compared) and saved. The save is opened first as the
index that holds its vectors and mirrors its rows to the store, then as the writer
whose vectors are in the store alone (``vectors_in_store=True, writer=True``). Each
adds ``--share`` of the size in new passages (seed 2), answers the scale questions, and
deletes them again. Reported: each update's seconds, the rows the writer read back from
the store, and the writer's context against the other index's.

``benchmarks.scale`` measures the writer at 1 %; past about a quarter of the chunks an
update relinks most sentences, and the writer reads their rows back.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.scale import (
    DATA,
    Queries,
    TimedStore,
    context_recall,
    open_store,
    passages,
    query_latencies,
    scale_questions,
    sentence_pool,
)


def large_update_figures(path: Path, embedder: Any, store: TimedStore, asked: Queries,
                         texts: list[str], ids: list[str]) -> dict[str, Any]:
    """The save at ``path`` (whose rows ``store`` holds) opened by each kind of index in
    turn: ``texts`` added under ``ids``, the questions asked, and the chunks deleted."""
    from shared_core import ConceptGraphIndex

    figures: dict[str, Any] = {}
    contexts: dict[str, list[dict[str, int]]] = {}
    for name, kinds in (("holds", {}), ("writer", {"vectors_in_store": True, "writer": True})):
        index = ConceptGraphIndex.load(str(path), embedder, vector_store=store, **kinds)
        read = store.rows_read
        start = time.perf_counter()
        index.add(texts, ids=ids)
        add = time.perf_counter() - start
        read_by_add = store.rows_read - read
        _, contexts[name] = query_latencies(index, asked)
        read = store.rows_read
        start = time.perf_counter()
        index.delete(ids)
        delete = time.perf_counter() - start
        figures[name] = {"add_s": round(add, 2), "delete_s": round(delete, 2),
                         "rows_read_add": read_by_add,
                         "rows_read_delete": store.rows_read - read}
        if name == "writer":  # its deletes leave the store at its save
            index.save(str(path.parent / "writer"))
    figures["writer_context_vs_holds"] = round(
        context_recall(contexts["writer"], contexts["holds"]), 4)
    return figures


def measure(size: int, share: float, pool: list[str], asked: Queries, embedder: Any,
            folder: Path) -> dict[str, Any]:
    """One size: the build into Milvus Lite, its save, and both indexes' updates."""
    from shared_core import ConceptGraphIndex

    ids, texts = passages(pool, size, seed=1)
    extra_ids, extra_texts = passages(pool, max(1, round(size * share)), seed=2)
    store = open_store("milvus-lite", folder, embedder, milvus_index="FLAT")
    start = time.perf_counter()
    built = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder, vector_store=store)
    build = time.perf_counter() - start
    built.save(str(folder / "idx"))
    del built
    row: dict[str, Any] = {"passages": size, "changed": len(extra_ids),
                           "build_s": round(build, 2)}
    row.update(large_update_figures(folder / "idx", embedder, store, asked, extra_texts,
                                    extra_ids))
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--passages", type=int, nargs="+", default=[10_000])
    parser.add_argument("--share", type=float, default=0.3,
                        help="passages added and deleted, as a share of the size")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--embedding-dim", type=int, default=384)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not 0 < args.share <= 1:
        parser.error(f"--share must be in (0, 1], got {args.share}")
    from shared_core import HashingEmbedder

    embedder = HashingEmbedder(args.embedding_dim)
    pool = sentence_pool(args.data)
    asked = scale_questions(pool, args.queries, embedder)
    report: dict[str, Any] = {"command": "python -m benchmarks.writer_update " +
                              " ".join(sys.argv[1:] if argv is None else argv), "rows": []}
    for size in args.passages:
        with tempfile.TemporaryDirectory(prefix="writer-update-") as folder:
            row = measure(size, args.share, pool, asked, embedder, Path(folder))
        print(json.dumps(row), flush=True)
        report["rows"].append(row)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
