"""The main job on the embedded defaults, end to end, offline.

Builds a concept graph over the shipped MuSiQue sample with the offline
all-MiniLM-L6-v2 model, shows which chunks core-chunk selection would send to
a KG extractor and what that saves, then answers the sample questions from the
concept graph with provenance. No LLM is involved anywhere: "answer found"
means the gold answer string occurs in the retrieved context.

    make demo                    # or: python examples/quickstart.py [--embedder hashing]

Install, from the repository root (``make demo`` does it: pip install torch==2.13.0,
the CPU build, first):

    pip install -e '.[local]'
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from shared_core import ConceptGraphIndex
from shared_core.cli import cost_report_table, format_table, retrieval_table
from shared_core.corpus import read_corpus
from shared_core.embeddings import resolve_embedder

SAMPLE = Path(__file__).parent / "data" / "musique_sample"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hashing"))
    parser.add_argument("--budget", type=int, default=1500, help="context tokens per question")
    parser.add_argument("--questions", type=int, default=4, help="how many to show in full")
    args = parser.parse_args()

    records = read_corpus(SAMPLE / "corpus.jsonl")
    questions = [json.loads(line) for line in (SAMPLE / "questions.jsonl").open()]
    embedder = resolve_embedder(args.embedder)
    print(f"== 1. Concept graph over {len(records)} MuSiQue passages "
          f"(CC BY 4.0), embedder {embedder.model_id}")
    start = time.perf_counter()
    index = ConceptGraphIndex.from_texts(
        [r.text for r in records], ids=[r.id for r in records],
        metadatas=[r.metadata for r in records], embedder=embedder, show_progress=True)
    stats = index.stats()
    print(f"built in {time.perf_counter() - start:.1f}s: {stats['sentences']:,} sentences "
          f"({embedder.embedded_texts:,} newly embedded), {stats['concepts']:,} concepts, "
          f"{stats['edges']:,} edges")
    for warning in stats["warnings"]:  # e.g. a corpus too small for theta_co=3 to give edges
        print(f"warning: {warning}")

    print("\n== 2. Core-chunk selection: what would go to the LLM KG extractor")
    for kappa in (0.8, 0.5, 0.2):
        print(f"\n{cost_report_table(index.select(kappa).report)}")
    top = index.select(0.2).ranked_ids[:3]
    print("\nhighest-ranked chunks (their concepts' PageRank per token):")
    for cid in top:
        print(f"  {cid}: {' '.join(index.get(cid).text.split())[:100]}…")

    print(f"\n== 3. Concept-graph retrieval, budget {args.budget} tokens, with provenance")
    summary = []
    for n, q in enumerate(questions):
        result = index.retrieve(q["question"], budget=args.budget)
        answer = q["answers"][0]
        where = next((i for i, h in enumerate(result.chunks, 1)
                      if answer.lower() in h.text.lower()), None)
        summary.append((q["question"][:70], answer, "yes" if where else "no",
                        where or "-", result.tokens))
        if n < args.questions:
            print(f"\nQ: {q['question']}\ngold answer: {answer}")
            print(retrieval_table(result, width=70))
            if where:
                hit = result.chunks[where - 1]
                p = hit.provenance
                why = ("by its own similarity to the query (no query concept in it)"
                       if p.concept is None else
                       f"with evidence from concept '{p.concept}' ({p.stage}, hop {p.hop})")
                print(f"-> answer found in chunk #{where} ({hit.id}), ranked {why}")
            else:
                print("-> gold answer not in the retrieved context")
    print(f"\n== 4. All {len(questions)} sample questions")
    print(format_table(("question", "gold answer", "found", "at #", "tokens"), summary))
    found = sum(1 for row in summary if row[2] == "yes")
    print(f"answer in context for {found}/{len(questions)} questions "
          f"(context recall at {args.budget} tokens)")


if __name__ == "__main__":
    main()
