"""Build the small MuSiQue sample shipped in examples/data/musique_sample (run once, by hand).

For a fixed set of 2-hop questions, take every passage that contains the gold
answer plus each question's 12 best BM25 passages (the evidence and its
distractors), then fill to 300 passages with a seeded random draw. MuSiQue is
CC BY 4.0 (Trivedi et al., 2022); the sample is redistributed under it.

    python benchmarks/make_sample.py ../shared/data/musique examples/data/musique_sample
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import bm25s

N_QUESTIONS = 12
PER_QUESTION = 12
TARGET = 300
SEED = 7


def main(src: Path, dst: Path) -> None:
    corpus = [json.loads(line) for line in (src / "corpus.jsonl").open()]
    questions = [json.loads(line) for line in (src / "questions.jsonl").open()]
    retriever = bm25s.BM25()
    tokens = bm25s.tokenize([p["text"] for p in corpus], stopwords="en", show_progress=False)
    retriever.index(tokens, show_progress=False)
    chosen: list[dict[str, object]] = []
    keep: dict[int, None] = {}
    for q in questions:
        if q["hops"] != 2 or len(chosen) == N_QUESTIONS:
            continue
        answer = q["answers"][0].lower()
        holders = [i for i, p in enumerate(corpus) if answer in p["text"].lower()]
        if not 1 <= len(holders) <= 3 or len(answer) < 4:
            continue
        hits, _ = retriever.retrieve(bm25s.tokenize([q["question"]], stopwords="en",
                                                    show_progress=False),
                                     k=PER_QUESTION, show_progress=False)
        for i in [*holders, *hits[0].tolist()]:
            keep[int(i)] = None
        chosen.append(q)
    rng = random.Random(SEED)
    rest = [i for i in range(len(corpus)) if i not in keep]
    for i in rng.sample(rest, max(0, TARGET - len(keep))):
        keep[i] = None
    dst.mkdir(parents=True, exist_ok=True)
    with (dst / "corpus.jsonl").open("w") as out:
        for i in sorted(keep):
            out.write(json.dumps(corpus[i], ensure_ascii=False) + "\n")
    with (dst / "questions.jsonl").open("w") as out:
        for q in chosen:
            out.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{len(keep)} passages, {len(chosen)} questions -> {dst}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
