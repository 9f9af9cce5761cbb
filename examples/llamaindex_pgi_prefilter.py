"""A LlamaIndex GraphRAG app on conceptgraph: pre-filter -> PropertyGraphIndex -> fused retrieval.

1. ``CoreChunkSelector`` sits after the splitter in ``PropertyGraphIndex.from_documents``:
   only the G2ConS core chunks of the MuSiQue sample reach the LLM triple extractor.
2. ``FusedConceptKGRetriever`` fuses concept-graph context (all chunks, reusing the
   selector's graph) with the index's own KG retrieval, facts tied to their source chunks.
3. A ``RetrieverQueryEngine`` answers the sample questions from the fused context.

Install, from the repository root (pip install torch==2.13.0, the CPU build, first):

    pip install -e '.[llamaindex]'          # offline, the default, and the real-LLM option

Offline (default, no API key): embeddings are all-MiniLM-L6-v2 (``--embedder hashing``
for a model-free run) and the "LLM" is a deterministic stand-in written below, not a
language model: a rule-based triple extractor (links the proper names and years of each
sentence) and an extractive answerer (returns the context sentence sharing most words
with the question). With ``OPENAI_API_KEY`` set, extraction and answers go to
``gpt-4o-mini`` (``--chat-model``) and embeddings to text-embedding-3-small, through the
``openai`` client (a core dependency: no other extra). ``OPENAI_BASE_URL`` sends both to
any OpenAI-compatible server instead (vLLM, Ollama, a proxy; a local server takes any
key, e.g. ``OPENAI_API_KEY=EMPTY``): name its model with ``--chat-model`` and keep
``--embedder minilm`` unless it serves text-embedding-3-small. The output says which
was used.

    python examples/llamaindex_pgi_prefilter.py [--embedder minilm|hashing|openai]
        [--chat-model gpt-4o-mini] [--passages 300] [--questions 3] [--kappa 0.5]
        [--budget 3000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_index.core import Document, PropertyGraphIndex
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.indices.property_graph import SimpleLLMPathExtractor
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.prompts.default_prompts import DEFAULT_KG_TRIPLET_EXTRACT_PROMPT
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import BaseNode

from llama_index_conceptgraph import (
    CoreChunkSelector,
    CoreEmbedding,
    FusedConceptKGRetriever,
    run_outside_event_loop,
)
from shared_core import Embedder, HashingEmbedder, OpenAIEmbedder, count_tokens, minilm_embedder

DATA = Path(__file__).parent / "data" / "musique_sample"
OPENAI_CHAT_MODEL = "gpt-4o-mini"
NAME = re.compile(r"(?:[A-Z][\w'.-]*|\d{3,4})(?:\s+(?:of\s+|the\s+|de\s+)?[A-Z][\w'.-]*)*")
WORD = re.compile(r"[a-z0-9]+")
STOP = frozenset(re.findall(r"\w+", "a an the of in on at to for by with and or is was were be "
                            "been who what which when where how many much did does do that "
                            "this it its as from"))


class CountingLLM(CustomLLM):
    """Counts what is sent for KG extraction, so the saving is measured, not estimated."""

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _calls: int = PrivateAttr(default=0)
    _tokens: int = PrivateAttr(default=0)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.describe())

    def describe(self) -> str:
        raise NotImplementedError

    def extraction_usage(self) -> tuple[int, int]:
        return self._calls, self._tokens

    def answer(self, prompt: str) -> str:
        raise NotImplementedError

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if "Triplets:" in prompt:
            with self._lock:
                self._calls += 1
                self._tokens += count_tokens(prompt)
        return CompletionResponse(text=self.answer(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        yield self.complete(prompt, formatted=formatted, **kwargs)


class RuleBasedLLM(CountingLLM):
    """Deterministic stand-in for an LLM: rules, not a model (see the module docstring)."""

    def describe(self) -> str:
        return "deterministic rule-based stand-in (no language model, offline)"

    def answer(self, prompt: str) -> str:
        if "Triplets:" in prompt:  # SimpleLLMPathExtractor: "(subject, predicate, object)" lines
            text = prompt.rsplit("Text: ", 1)[1].split("\nTriplets:", 1)[0]
            return "\n".join(f"({s}, {p}, {o})" for s, p, o in self._triples(text)[:10])
        if "KEYWORDS:" in prompt:  # LLMSynonymRetriever: the query's names, '^'-separated
            query = prompt.split("QUERY: ", 1)[1].split("\n", 1)[0]
            return "^".join(dict.fromkeys(m.group().replace(",", "") for m in NAME.finditer(query)))
        query = prompt.rsplit("Query: ", 1)[-1].split("\n", 1)[0]
        context = prompt.split("---------------------\n")[1] if "-----" in prompt else prompt
        return self._best_sentence(context, query)

    @staticmethod
    def _triples(text: str) -> list[tuple[str, str, str]]:
        triples = []
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            names = [m for m in NAME.finditer(sentence) if m.group().lower() not in STOP]
            for subject, obj in itertools.pairwise(names):
                between = WORD.findall(sentence[subject.end():obj.start()].lower())
                predicate = " ".join(w for w in between if w not in STOP)[:40].strip()
                if predicate:
                    triples.append((subject.group().replace(",", ""), predicate,
                                    obj.group().replace(",", "")))
        return triples

    @staticmethod
    def _best_sentence(context: str, query: str) -> str:
        wanted = set(WORD.findall(query.lower())) - STOP
        sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", context) if len(s) > 20]
        if not sentences:
            return "The context holds no answer."
        return max(sentences, key=lambda s: len(wanted & set(WORD.findall(s.lower()))))


class OpenAIChatLLM(CountingLLM):
    """A chat model through the openai client (llama-index-llms-openai is not required).

    The client reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` itself, so any
    OpenAI-compatible server works.
    """

    model: str = OPENAI_CHAT_MODEL
    _client: Any = PrivateAttr(default=None)

    def describe(self) -> str:
        server = os.environ.get("OPENAI_BASE_URL")
        return f"{self.model} at {server}" if server else f"OpenAI {self.model}"

    def answer(self, prompt: str) -> str:
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI()
        reply = self._client.chat.completions.create(
            model=self.model, temperature=0, messages=[{"role": "user", "content": prompt}])
        return reply.choices[0].message.content or ""


def chunk_id(i: int, doc: BaseNode) -> str:
    """Stable chunk ids (passage id + chunk number) instead of random UUIDs."""
    return f"{doc.node_id}#{i}"


def load_documents(limit: int) -> list[Document]:
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh][:limit]
    return [Document(id_=r["id"], text=r["text"],
                     metadata={"title": r["title"]} if r["title"] else {}) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    use_openai = bool(os.environ.get("OPENAI_API_KEY"))
    parser.add_argument("--embedder", choices=["minilm", "hashing", "openai"],
                        default="openai" if use_openai else "minilm")
    parser.add_argument("--chat-model", default=OPENAI_CHAT_MODEL,
                        help="the chat model, when OPENAI_API_KEY is set")
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--kappa", type=float, default=0.5)
    parser.add_argument("--lam", type=float, default=0.6)
    parser.add_argument("--budget", type=int, default=3000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("conceptgraph").setLevel(logging.INFO)

    llm: CountingLLM = OpenAIChatLLM(model=args.chat_model) if use_openai else RuleBasedLLM()
    core: dict[str, Callable[[], Embedder]] = {
        "minilm": minilm_embedder, "hashing": HashingEmbedder, "openai": OpenAIEmbedder}
    embed_model = CoreEmbedding(core[args.embedder]())
    print(f"LLM (KG extraction, synonym keywords, answers): {llm.describe()}")
    print(f"Embeddings: {embed_model.model_name}\n")

    documents = load_documents(args.passages)
    template_tokens = count_tokens(DEFAULT_KG_TRIPLET_EXTRACT_PROMPT.format(
        text="", max_knowledge_triplets=10))
    selector = CoreChunkSelector(kappa=args.kappa, prompt_tokens_per_chunk=template_tokens)
    start = time.perf_counter()
    pg_index = run_outside_event_loop(
        PropertyGraphIndex.from_documents, documents,
        transformations=[SentenceSplitter(chunk_size=512, chunk_overlap=32,
                                          id_func=chunk_id), selector],
        kg_extractors=[SimpleLLMPathExtractor(llm=llm, max_paths_per_chunk=10)],
        llm=llm, embed_model=embed_model)
    calls, tokens = llm.extraction_usage()
    report = selector.report
    print(f"\nPropertyGraphIndex built in {time.perf_counter() - start:.1f}s")
    print(f"  {report.summary()}")
    print(f"  extractor actually called {calls} times with {tokens:,} prompt tokens "
          f"(all {report.chunks_total} chunks would be ~{report.extraction_input_tokens_all:,})")
    in_kg = pg_index.property_graph_store.get_llama_nodes(selector.index.chunk_ids)
    print(f"  concept graph: {selector.index.stats()['concepts']} concepts over all "
          f"{len(selector.index)} chunks; KG built from {len(in_kg)} core chunks\n")

    fused = FusedConceptKGRetriever.from_defaults(
        pg_index, selector=selector, lam=args.lam, budget=args.budget)
    engine = RetrieverQueryEngine.from_args(fused, llm=llm)
    with (DATA / "questions.jsonl").open(encoding="utf-8") as fh:
        questions = [json.loads(line) for line in fh][: args.questions]
    for q in questions:
        context = fused.fuse(q["question"])
        text = " ".join(f.item.text for f in context.items).lower()
        found = any(a.lower() in text for a in q["answers"])
        response = engine.query(q["question"])
        print(f"Q: {q['question']}")
        print(f"   gold: {' | '.join(q['answers'])} "
              f"(in fused context: {'yes' if found else 'no'})")
        print(f"   context: {len(context.items)} chunks, {context.tokens} tokens "
              f"by path {context.tokens_by_path()}")
        print(f"   answer: {str(response).strip()[:300]}\n")


if __name__ == "__main__":
    main()
