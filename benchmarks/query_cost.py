"""Query latency of saved indexes, with query knobs swept, against the exact path.

    python -m benchmarks.query_cost /tmp/idx100000 /tmp/idx1000000 --queries 200 \
        --set candidates=500 --sweep walk_postings=none,50000,200000 \
        --sweep candidates=1000 --out benchmarks/results/query_cost.json

Each ``PATH`` is an index saved with the hashing embedder (``benchmarks.scale``
builds its corpora with it). The queries are the scale benchmark's: real pool
sentences, each asked with its text (the lexical view) and its vector (no
embedding timed). Every setting runs two passes, the first warming the pages,
and reports the second's p50 and p95. The exact path (``vector_index="exact"``,
the reference) runs one pass per index for the context each setting keeps of it;
``--no-exact`` skips it (a million-passage exact pass takes minutes).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.scale import (
    DATA,
    Queries,
    context_recall,
    scale_questions,
    sentence_pool,
    warm_latency,
)


def parse_sweep(spec: str) -> tuple[str, list[int | str | None]]:
    """``walk_postings=none,50000`` -> ("walk_postings", [None, 50000]); a value that is
    not a number stays a word (``concept_search=hnsw``)."""
    knob, sep, raw = spec.partition("=")
    if not sep or not knob or not raw:
        raise argparse.ArgumentTypeError(f"bad sweep {spec!r}; use knob=value,value")
    return knob, [None if v.lower() == "none" else int(v) if v.lstrip("-").isdigit() else v
                  for v in raw.split(",")]


def saved_embedder(path: Path) -> Any:
    """The embedder a save was built with: the hashing one as it is (nothing to cache, so
    an update's time is its own), any other through the benchmarks' embedding cache."""
    from shared_core import HashingEmbedder
    from shared_core.embeddings.cache import embedder_for_model_id
    from shared_core.store import read_manifest

    from .run import CACHE_PATH

    model = str(read_manifest(str(path))["embedding_model"])
    if model.startswith("hashing-bow-"):
        return HashingEmbedder(int(model.removeprefix("hashing-bow-")))
    return embedder_for_model_id(model, CACHE_PATH)


def loaded_with(path: Path, settled: dict[str, int | str | None]) -> tuple[Any, float]:
    """A saved index (with the embedder it was built with) with ``settled`` knobs
    replacing its saved ones, and the seconds that took."""
    from shared_core import ConceptGraphIndex

    embedder = saved_embedder(path)
    start = time.perf_counter()
    index = ConceptGraphIndex.load(str(path), embedder)
    if settled:  # a saved config keeps its knobs: these replace them first
        index = index.reconfigured(**settled)
    return index, time.perf_counter() - start


def measure_index(path: Path, asked: Queries, sweeps: list[tuple[str, list[int | str | None]]],
                  exact: bool, settled: dict[str, int | str | None]) -> dict[str, Any]:
    index, load = loaded_with(path, settled)
    row: dict[str, Any] = {"index": str(path), "units": len(index.state.graph.unit_tokens),
                           "load_s": round(load, 2),
                           "config": {k: v for k, v in index.config.to_dict().items()
                                      if k in ("vector_index", "candidates", "walk_postings")},
                           "set": settled}
    default, contexts = warm_latency(index, asked)
    settings: list[tuple[dict[str, Any], dict[str, float], list[dict[str, int]]]] = [
        ({}, default, contexts)]
    for knob, values in sweeps:
        for value in values:
            latency, found = warm_latency(index.reconfigured(**{knob: value}), asked)
            settings.append(({knob: value}, latency, found))
    reference = None
    if exact:
        # one pass: the exact path scans every sentence, its pages stay warm in one
        exact_index = index.reconfigured(vector_index="exact")
        reference_latency, reference = warm_latency(exact_index, asked, passes=1)
        row["exact"] = reference_latency
    row["settings"] = [
        {"changed": changed, **latency,
         **({} if reference is None else
            {"context_recall_vs_exact": round(context_recall(found, reference), 4)}),
         "context_recall_vs_default": round(context_recall(found, contexts), 4)}
        for changed, latency, found in settings]
    del index
    gc.collect()
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", type=Path, nargs="+")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sweep", type=parse_sweep, action="append", default=[],
                        help="a query knob and values to query with, e.g. "
                             "walk_postings=none,50000 (repeatable)")
    parser.add_argument("--set", type=parse_sweep, action="append", default=[],
                        help="a query knob set before anything is timed, e.g. candidates=500 "
                             "(a saved index keeps the config it was saved with)")
    parser.add_argument("--no-exact", dest="exact", action="store_false")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    pool = sentence_pool(args.data)
    report = {"command": "python -m benchmarks.query_cost " +
              " ".join(sys.argv[1:] if argv is None else argv),
              "rows": []}
    for path in args.paths:
        settled = {knob: values[0] for knob, values in args.set}
        # the questions in the save's own embedding
        asked = scale_questions(pool, args.queries, saved_embedder(path))
        row = measure_index(path, asked, args.sweep, args.exact, settled)
        print(json.dumps(row), flush=True)
        report["rows"].append(row)  # type: ignore[attr-defined]
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
