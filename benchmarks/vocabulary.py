"""How many concepts a real corpus makes as it grows, against the scale benchmark's corpus.

    python -m benchmarks.vocabulary --data ../shared/data \
        --out benchmarks/results/vocabulary.json

``benchmarks.scale`` recombines the dev sets' sentences into passages, so its
vocabulary stops growing: 65 K concepts from 100 K passages on. A real corpus keeps
meeting new names, and every query scans every concept vector (the query x concept
product), so the scale benchmark understates that part of a query at 1 M passages.

This builds indexes over growing prefixes of the real passages (MuSiQue and HotpotQA,
deduplicated by text, shuffled; 2wiki's corpus lines are sentences, not passages) and
over as many synthetic passages (``benchmarks.scale.passages``), and counts concepts
and terms; concepts do not depend on the embedder, so the hashing embedder is used.
It fits concepts = a * n ** beta (Heaps' law) on the real prefixes from ``--fit-from``
passages, takes the slope between the two largest prefixes too, projects both to
1 M and 100 M passages, and times the float32 query x concept product on random
matrices of the synthetic corpus's largest count and of the projected 1 M counts.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .scale import DATA, passages, sentence_pool

DIM = 384
PASSAGE_SETS = ("musique", "hotpotqa")  # corpora whose lines are passages
SEED = 0
PROJECTED = (1_000_000, 100_000_000)


def real_passages(data: Path) -> list[str]:
    """The passages of :data:`PASSAGE_SETS`, each text once, in a fixed shuffled order."""
    from shared_core.corpus import iter_corpus

    texts = dict.fromkeys(record.text for name in PASSAGE_SETS
                          for record in iter_corpus(data / name / "corpus.jsonl"))
    ordered = list(texts)
    random.Random(SEED).shuffle(ordered)
    return ordered


def counted(texts: Sequence[str]) -> dict[str, int]:
    """Passages, concepts and terms of an index built over ``texts``."""
    from shared_core import ConceptGraphIndex, HashingEmbedder

    index = ConceptGraphIndex.from_texts(list(texts), ids=[f"p{i}" for i in range(len(texts))],
                                         embedder=HashingEmbedder(16))
    stats = index.stats()
    return {"passages": len(texts), "concepts": int(stats["concepts"]),
            "terms": int(stats["terms"])}


def power_fit(sizes: Sequence[int], counts: Sequence[int]) -> tuple[float, float]:
    """``(a, beta)`` of counts = a * sizes ** beta, by least squares on the logs."""
    beta, log_a = np.polyfit(np.log(sizes), np.log(counts), 1)
    return float(np.exp(log_a)), float(beta)


def product_ms(rows: int, dim: int, repeats: int = 15) -> float:
    """Median milliseconds of ``matrix @ query`` over a random float32 (rows x dim) matrix."""
    rng = np.random.default_rng(SEED)
    matrix = rng.standard_normal((rows, dim), dtype=np.float32)
    query = rng.standard_normal(dim, dtype=np.float32)
    matrix @ query  # the first product faults the pages in
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matrix @ query
        times.append(time.perf_counter() - start)
    return round(float(np.median(times)) * 1000, 2)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 8000],
                        help="real passage prefixes; every real passage is counted too")
    parser.add_argument("--synthetic", type=int, nargs="*", default=[50_000],
                        help="synthetic corpora beyond the real sizes")
    parser.add_argument("--fit-from", type=int, default=2000,
                        help="the smallest real prefix the fit uses")
    parser.add_argument("--dim", type=int, default=DIM)
    parser.add_argument("--no-timing", action="store_true", help="skip the product timings")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    texts = real_passages(args.data)
    sizes = sorted({n for n in args.sizes if n < len(texts)} | {len(texts)})
    real = [counted(texts[:n]) for n in sizes]
    pool = sentence_pool(args.data)
    synthetic = [counted(passages(pool, n, SEED)[1]) for n in
                 sorted({*sizes, *args.synthetic})]
    fitted = [r for r in real if r["passages"] >= args.fit_from]
    if len(fitted) < 2:
        raise SystemExit(f"the fit needs two real prefixes of at least {args.fit_from} "
                         f"passages; there are {len(fitted)} of {len(texts)} passages")
    a, beta = power_fit([r["passages"] for r in fitted], [r["concepts"] for r in fitted])
    last, before = real[-1], real[-2]
    beta_last = float(np.log(last["concepts"] / before["concepts"])
                      / np.log(last["passages"] / before["passages"]))
    projections = []
    for n in PROJECTED:
        by_fit = a * n ** beta
        by_last = last["concepts"] * (n / last["passages"]) ** beta_last
        projections.append({
            "passages": n, "concepts_fit": round(by_fit), "concepts_last_slope": round(by_last),
            "concept_vectors_gb_fit": round(by_fit * args.dim * 4 / 1e9, 2),
            "concept_vectors_gb_last_slope": round(by_last * args.dim * 4 / 1e9, 2)})
    report: dict[str, Any] = {
        "command": "python -m benchmarks.vocabulary " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "real": real, "synthetic": synthetic,
        "fit": {"from_passages": args.fit_from, "a": round(a, 3), "beta": round(beta, 4),
                "beta_between_the_two_largest": round(beta_last, 4)},
        "projections": projections,
    }
    if not args.no_timing:
        at_1m = projections[0]
        rows = {"synthetic_largest": synthetic[-1]["concepts"],
                "projected_1m_last_slope": at_1m["concepts_last_slope"],
                "projected_1m_fit": at_1m["concepts_fit"]}
        report["product_ms"] = {name: {"concepts": n, "ms": product_ms(n, args.dim)}
                                for name, n in rows.items()}
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
