"""How much memory Milvus Lite holds per row of an index, and so whether a corpus fits.

    python -m benchmarks.milvus_memory --rows 100000 200000 \
        --out benchmarks/results/milvus_lite_memory.json

Milvus Lite runs inside the Python process that opens it, so its rows are part of
that process's anonymous memory (``RssAnon``), beside the index's own. For each row
count this writes random unit vectors under keys and metadata of the form the index
writes (``MilvusVectorStore``, ``FLAT``, no term postings), seals them, and reads
``RssAnon`` after the writes, after the flush, and in a fresh process that reopens the
collection and searches it (what a loaded index holds). The growth per row is
projected to ``--project`` rows (the 1 M scale corpus has 4,426,000 sentence rows).
It also records whether this Milvus Lite accepts half-precision vectors, which would
halve the rows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .scale import HeapSampler, folder_size

DIM = 384
BATCH = 8192
ROWS_AT_1M = 4_426_000  # sentence rows of the scale benchmark's 1 M corpus


def write_rows(uri: str, rows: int, dim: int) -> dict[str, float]:
    """Write ``rows`` random rows into a new collection at ``uri``; ``RssAnon`` (MB)
    when opened, after the writes and after the flush, and the seconds each took."""
    import pymilvus  # noqa: F401  (imported before the reading the writes are measured from)

    from shared_core.search.milvus import MilvusVectorStore

    rng = np.random.default_rng(0)
    store = MilvusVectorStore(uri, "conceptgraph", index_type="FLAT")
    store.write_marker("")  # starts Milvus Lite, so that its own start is not counted
    out = {"opened_mb": HeapSampler.anonymous_mb()}
    start = time.perf_counter()
    for first in range(0, rows, BATCH):
        count = min(BATCH, rows - first)
        vectors = rng.standard_normal((count, dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        chunks = [f"s1-{first + i:08d}" for i in range(count)]
        store.upsert([f"{c}#0123456789ab.s0" for c in chunks], vectors, [""] * count,
                     [{"chunk_id": c, "part": 0} for c in chunks])
    out["write_s"] = time.perf_counter() - start
    out["written_mb"] = HeapSampler.anonymous_mb()
    start = time.perf_counter()
    store.flush()
    out["flush_s"] = time.perf_counter() - start
    out["flushed_mb"] = HeapSampler.anonymous_mb()
    return out


def reopened(uri: str, dim: int) -> dict[str, float]:
    """In this process (run it fresh): ``RssAnon`` before and after opening the
    collection, after three searches for 2,000 rows, and the last search's seconds."""
    import pymilvus  # noqa: F401  (imported before the reading that opening is measured from)

    from shared_core.search.milvus import MilvusVectorStore

    imported = HeapSampler.anonymous_mb()
    store = MilvusVectorStore(uri, "conceptgraph")
    opened = HeapSampler.anonymous_mb()
    query = np.random.default_rng(1).standard_normal(dim).astype(np.float32)
    query /= np.linalg.norm(query)
    seconds = 0.0
    for _ in range(3):
        start = time.perf_counter()
        found = store.search(query, 2000)
        seconds = time.perf_counter() - start
    if len(found) != 2000:
        raise RuntimeError(f"the reopened collection returned {len(found)} rows, not 2000")
    return {"imported_mb": imported, "opened_mb": opened,
            "searched_mb": HeapSampler.anonymous_mb(), "search_s": seconds}


def half_precision_refusal(folder: Path, dim: int) -> str | None:
    """Milvus's answer to a collection of FLOAT16 vectors: None if it accepts one."""
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(str(folder / "float16.db"))
    schema = client.create_schema(auto_id=False)
    schema.add_field("key", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("vector", DataType.FLOAT16_VECTOR, dim=dim)
    try:
        client.create_collection("half", schema=schema)
    except Exception as exc:  # pymilvus raises MilvusException; its text is the answer
        return str(exc)
    finally:
        client.close()
    return None


def in_child(*args: str) -> dict[str, float]:
    """This module's ``args`` step in a fresh process (Milvus Lite keeps its file until
    the process that opened it ends), and the JSON it printed last."""
    child = subprocess.run([sys.executable, "-m", "benchmarks.milvus_memory", *args],
                           capture_output=True, text=True)
    if child.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{child.stderr[-3000:]}")
    return dict(json.loads(child.stdout.strip().splitlines()[-1]))


def measure(rows: int, dim: int, folder: Path) -> dict[str, Any]:
    uri = str(folder / f"rows{rows}.db")
    written = in_child("--write", uri, "--rows", str(rows), "--dim", str(dim))
    loaded = in_child("--reopen", uri, "--dim", str(dim))
    held = loaded["opened_mb"] - loaded["imported_mb"]
    return {
        "rows": rows,
        "raw_float32_mb": round(rows * dim * 4 / 2**20, 1),
        "writes_s": round(written["write_s"], 1),
        "flush_s": round(written["flush_s"], 2),
        "rss_anon_grown_by_writes_mb": round(written["written_mb"] - written["opened_mb"], 1),
        "rss_anon_grown_by_flush_mb": round(written["flushed_mb"] - written["opened_mb"], 1),
        "reopened_collection_mb": round(held, 1),
        "reopened_after_searches_mb": round(loaded["searched_mb"] - loaded["imported_mb"], 1),
        "search_2000_s": round(loaded["search_s"], 3),
        "bytes_per_row_reopened": round(held * 2**20 / rows),
        "file_mb": round((folder_size(Path(uri)) if Path(uri).is_dir()
                          else Path(uri).stat().st_size) / 2**20, 1),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 200_000])
    parser.add_argument("--dim", type=int, default=DIM)
    parser.add_argument("--project", type=int, default=ROWS_AT_1M,
                        help="rows to project the per-row memory to")
    parser.add_argument("--write", help=argparse.SUPPRESS)  # measure()'s children
    parser.add_argument("--reopen", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.write:
        print(json.dumps(write_rows(args.write, args.rows[0], args.dim)))
        return
    if args.reopen:
        print(json.dumps(reopened(args.reopen, args.dim)))
        return
    report: dict[str, Any] = {"command": "python -m benchmarks.milvus_memory " +
                              " ".join(sys.argv[1:] if argv is None else argv)}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        report["rows"] = [measure(n, args.dim, folder) for n in args.rows]
        report["float16_vectors"] = half_precision_refusal(folder, args.dim) or "accepted"
    measured = report["rows"]
    per_row = float(measured[-1]["bytes_per_row_reopened"])
    if len(measured) > 1:  # the slope between the two largest: fixed costs cancel out
        a, b = measured[-2], measured[-1]
        per_row = ((b["reopened_collection_mb"] - a["reopened_collection_mb"]) * 2**20
                   / (b["rows"] - a["rows"]))
        report["bytes_per_row_slope"] = round(per_row)
    report["projected_rows"] = args.project
    report["projected_reopened_gb"] = round(per_row * args.project / 1e9, 1)
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
