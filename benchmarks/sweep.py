"""Ablations of G2ConS's open choices: one corpus view, many ConceptGraphConfig variants.

    python -m benchmarks.sweep --data ../shared/data/musique --protocol chunk1200 \\
        --variant '{}' --variant '{"unit_tokens": 150, "concepts_per_chunk": 80}' \\
        --out benchmarks/results/sweep_musique_chunk1200.json

The concept graph is built over the protocol's selection chunks; with
``unit_tokens`` it returns sentence units of those chunks, so CR is scored on
the retrieved texts themselves (the answer, SQuAD-normalised, inside the
joined context), the same test ``benchmarks run`` applies. Embeddings come
from the harness's cache, so a sweep only pays for graph builds and queries.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from shared_core import ConceptGraphConfig, ConceptGraphIndex
from shared_core.embeddings import resolve_embedder

from .data import corpus_for, load_dataset
from .metrics import answer_in_context, normalize_answer
from .run import CACHE_PATH, git_commit

# knobs that change the built graph; the others only change the search
BUILD_KNOBS = ("unit_tokens", "concept_links", "concepts_per_chunk", "ngram_max", "theta_co",
               "theta_sem", "chunk_similarity", "min_term_chars", "pagerank_weighted")


def sweep(data: Path, protocol: str, variants: list[dict[str, Any]], budget: int,
          embedder_name: str, cache: Path = CACHE_PATH) -> list[dict[str, Any]]:
    dataset = load_dataset(data)
    corpus = corpus_for(dataset, protocol)
    embedder = resolve_embedder(embedder_name, str(cache))
    vectors = embedder.embed([q.question for q in dataset.questions])
    built: dict[str, ConceptGraphIndex] = {}
    rows = []
    for variant in variants:
        config = ConceptGraphConfig.from_dict({**variant, "budget": budget})
        key = json.dumps({k: variant[k] for k in BUILD_KNOBS if k in variant}, sort_keys=True)
        start = time.perf_counter()
        if key not in built:
            built[key] = ConceptGraphIndex.from_texts(
                corpus.chunks.texts, ids=corpus.chunks.ids, embedder=embedder, config=config)
        # search-only knobs apply without a rebuild
        index = built[key].reconfigured(**config.to_dict())
        hits, tokens, expanded = 0, 0, 0
        for question, vector in zip(dataset.questions, vectors, strict=True):
            result = index.retrieve_by_vector(vector, query=question.question)
            context = normalize_answer(" ".join(c.text for c in result.chunks))
            hits += answer_in_context(question.answers, context)
            tokens += result.tokens
            expanded += result.tokens_by_stage()["expanded"]
        n = len(dataset.questions)
        row = {"variant": variant, "config": config.to_dict(), "cr": hits / n,
               "tokens_mean": tokens / n,
               "expanded_share": expanded / max(tokens, 1), "stats": index.stats(),
               "seconds": round(time.perf_counter() - start, 1)}
        print(f"{protocol} {json.dumps(variant)}: CR {100 * row['cr']:.1f}, "
              f"{row['tokens_mean']:.0f} tokens, expanded {row['expanded_share']:.3f}",
              flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--protocol", default="chunk1200")
    parser.add_argument("--variant", action="append", required=True,
                        help="a JSON object of ConceptGraphConfig knobs; repeatable")
    parser.add_argument("--budget", type=int, default=12000)
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hashing", "openai"))
    parser.add_argument("--cache", type=Path, default=CACHE_PATH, help="SQLite embedding cache")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = sweep(args.data, args.protocol, [json.loads(v) for v in args.variant], args.budget,
                 args.embedder, args.cache)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "dataset": args.data.name, "protocol": args.protocol, "budget": args.budget,
            "embedder": args.embedder,
            "command": "python -m benchmarks.sweep " + shlex.join(
                sys.argv[1:] if argv is None else argv),
            "git_commit": git_commit(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
