"""Cut passages at chunk1200 (sixty-third round): does a passage split across two chunks
cost G2ConS context?

Two reports over the dataset's chunk1200 view, for each method named:
- with ``--questions 203,230``: where each supporting passage lies (its chunks) and the rank
  each method gives those chunks, to see whether a missing passage is a cut one;
- without: of the open-answer questions the method misses, how many have their answer in a
  passage the context partly holds (which a view adding a cut passage's next chunk could
  fix), and how many in a chunk next to a retrieved one.

    PYTHONPATH=. python benchmarks/results/archive/chunk1200_cut_passages/cut_passages.py \
        musique g2cons,bm25 [--questions 203,230] [--cache CACHE]
"""

import argparse

import numpy as np

from benchmarks.data import DATA_ROOT, corpus_for, load_dataset
from benchmarks.methods import BuildInputs, build_method
from benchmarks.metrics import answer_in_context, is_yes_no, normalize_answer
from benchmarks.run import CACHE_PATH, embed_batched, resolve_embedder

parser = argparse.ArgumentParser()
parser.add_argument("dataset")
parser.add_argument("methods")
parser.add_argument("--questions", default="")
parser.add_argument("--cache", default=str(CACHE_PATH))
args = parser.parse_args()

ds = load_dataset(DATA_ROOT / args.dataset)
corpus = corpus_for(ds, "chunk1200")
embedder = resolve_embedder("minilm", args.cache)
inputs = BuildInputs(corpus, embedder, 0, llm=None, dataset=ds.name)
spans = corpus.units.spans
position = corpus.passage_index()


def chunks_of(passage: int) -> list[int]:
    start, end = corpus.passage_spans[passage]
    return np.flatnonzero((spans[:, 0] < end) & (spans[:, 1] > start)).tolist()


retrievers = {m: build_method(m, inputs) for m in args.methods.split(",")}
if args.questions:
    picked = [ds.questions[int(i)] for i in args.questions.split(",")]
    vectors = embed_batched(embedder, [q.question for q in picked])
    for q, v in zip(picked, vectors, strict=True):
        print("Q", q.question, q.answers)
        for name, retriever in retrievers.items():
            ranked = retriever.retrieve(q.question, v, 10 * 12000)
            context = retriever.retrieve(q.question, v, 12000)
            ranks = {pid: [ranked.index(c) + 1 if c in ranked else None
                           for c in chunks_of(position[pid])] for pid in q.supporting_ids}
            print(f"  {name}: context {context}; supporting passages' chunks by rank {ranks}")
else:
    vectors = embed_batched(embedder, [q.question for q in ds.questions])
    texts = [normalize_answer(t) for t in corpus.units.texts]
    passages = [normalize_answer(p.text) for p in ds.passages]
    for name, retriever in retrievers.items():
        misses = partly_held = next_door = 0
        for q, v in zip(ds.questions, vectors, strict=True):
            if is_yes_no(q.answers):
                continue
            context = retriever.retrieve(q.question, v, 12000)
            if answer_in_context(q.answers, " ".join(texts[i] for i in context)):
                continue
            misses += 1
            held = set(context)
            partly_held += any(answer_in_context(q.answers, passages[i])
                               and not held.isdisjoint(chunks_of(i))
                               for i in (position[p.id] for p in ds.passages))
            around = {i + d for i in context for d in (-1, 1)} - set(context)
            next_door += any(0 <= a < len(texts) and answer_in_context(q.answers, texts[a])
                             for a in around)
        print(f"{name}: {misses} open-answer misses; answer in a passage the context partly "
              f"holds: {partly_held}; answer in a chunk next to a retrieved one: {next_door}")
