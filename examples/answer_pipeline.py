"""HuixiangDou2's answer pipeline on the shipped sample: logic form, pre-check, fallback, streamed.

Builds the concept graph over the MuSiQue sample, extracts a KG from the best
core chunks with your LLM (``--kg-chunks``, 0 for none), then answers sample
questions: the answer streams as the model writes it, followed by the route it
took (logic form, or dual-level retrieval and why), the evidence with who found
each piece, and every stage's tokens and time.

    python examples/answer_pipeline.py --base-url http://127.0.0.1:8080/v1 --model my-model
    OPENAI_API_KEY=... python examples/answer_pipeline.py --model gpt-4o-mini
    python examples/answer_pipeline.py --model gpt-4o-mini --question "Who founded Motown?"

Any OpenAI-compatible server works (llama.cpp, vLLM, Ollama, a proxy): ``--base-url``,
``--model`` and ``--api-key`` default to ``OPENAI_BASE_URL``, ``OPENAI_MODEL`` and
``OPENAI_API_KEY``. Without a model it says how to give one and exits with status 2.
Install with ``pip install -e '.[local]'`` (or pass ``--embedder hashing``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from shared_core import ConceptGraphIndex
from shared_core.answer import AnswerConfig, AnswerPipeline
from shared_core.corpus import read_corpus
from shared_core.embeddings import resolve_embedder
from shared_core.kg import ExtractionStopped, KnowledgeGraph, extract_kg
from shared_core.llm import LLMRunner, OpenAIChat

SAMPLE = Path(__file__).parent / "data" / "musique_sample"
NO_LLM = ("answer_pipeline.py needs an LLM: pass --model (and --base-url for a server of "
          "your own, e.g. llama.cpp at http://127.0.0.1:8080/v1), or set OPENAI_MODEL "
          "(and OPENAI_BASE_URL / OPENAI_API_KEY).")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL"))
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hashing"))
    parser.add_argument("--question", action="append", default=None,
                        help="a question to answer (repeatable); default: sample questions")
    parser.add_argument("--questions", type=int, default=2,
                        help="how many sample questions when --question is not given")
    parser.add_argument("--kg-chunks", type=int, default=6,
                        help="extract a KG from this many top core chunks (0: no KG)")
    parser.add_argument("--budget", type=int, default=1500, help="context tokens")
    return parser.parse_args(argv)


def build_kg(index: ConceptGraphIndex, runner: LLMRunner, chunks: int,
             store: Path) -> KnowledgeGraph | None:
    """The KG from the ``chunks`` best core chunks; None when asked for none, or when the
    model's replies never follow the extraction format (then the answers use no KG)."""
    if chunks <= 0:
        return None
    top = index.select(0.5).ranked_ids[:chunks]
    try:
        result = extract_kg([(cid, index.get(cid).text) for cid in top], runner, store)
    except ExtractionStopped as stopped:
        print(f"{stopped}\n-> answering without a KG", file=sys.stderr)
        return None
    print(result.summary())
    return result.graph


def answer(pipeline: AnswerPipeline, question: str) -> None:
    """Stream one answer, then show its route, evidence and trace."""
    print(f"\nQ: {question}\nA: ", end="", flush=True)
    stream = pipeline.stream(question)
    for delta in stream:
        print(delta, end="", flush=True)
    done = stream.result()
    print(f"\n\nroute: {done.route}")
    if done.trace.fallback_reason:
        print(f"fallback: {done.trace.fallback_reason}")
    if done.logic is not None:
        print(f"steps:\n{done.logic.history()}")
    print(f"evidence ({len(done.evidence)} pieces):")
    for piece in done.evidence[:6]:
        print(f"  [{piece.chunk_id}] {piece.label()}: {' '.join(piece.text.split())[:80]}")
    print(f"\n{done.trace.table()}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.model:
        print(NO_LLM, file=sys.stderr)
        return 2
    chat = OpenAIChat(args.model, base_url=args.base_url, api_key=args.api_key)
    runner = LLMRunner(chat)
    print(f"LLM: {args.model} at {args.base_url or 'api.openai.com'}")

    records = read_corpus(SAMPLE / "corpus.jsonl")
    start = time.perf_counter()
    index = ConceptGraphIndex.from_texts([r.text for r in records], ids=[r.id for r in records],
                                         metadatas=[r.metadata for r in records],
                                         embedder=resolve_embedder(args.embedder))
    print(f"concept graph over {len(records)} passages in {time.perf_counter() - start:.1f}s")

    questions = args.question or [
        json.loads(line)["question"]
        for line in (SAMPLE / "questions.jsonl").read_text().splitlines()[:args.questions]]
    with tempfile.TemporaryDirectory() as store:
        kg = build_kg(index, runner, args.kg_chunks, Path(store))
    pipeline = AnswerPipeline(runner, index, kg, config=AnswerConfig(budget=args.budget))
    for question in questions:
        answer(pipeline, question)
    print(f"\nall LLM calls, by stage:\n{runner.ledger.table()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
