"""A LangChain GraphRAG chain on conceptgraph: core chunks -> KG -> fused retrieval -> answer.

1. CoreChunkSelector keeps the core chunks of the MuSiQue sample (G2ConS, no LLM).
2. LLMGraphTransformer extracts a knowledge graph from those core chunks only.
3. FusedRetriever merges concept-graph context with a retriever over the KG facts.
4. An LCEL chain answers the sample questions from that context.

Install, from the repository root (pip install torch==2.13.0, the CPU build, first):

    pip install -e '.[langchain]'           # offline, the default
    pip install -e '.[langchain,openai]'    # and the real-LLM option

Offline (default, no API key): embeddings are all-MiniLM-L6-v2 (``--embedder
hashing`` for a model-free run), and both "LLMs" are deterministic stand-ins
written below, not language models: a rule-based KG extractor (links the proper
names of a chunk) and an extractive answerer (returns the context sentence sharing
most words with the question). With ``OPENAI_API_KEY`` set, both roles go to
``gpt-4o-mini`` (``--chat-model``) and embeddings to text-embedding-3-small.
``OPENAI_BASE_URL`` sends both to any OpenAI-compatible server instead (vLLM,
Ollama, a proxy; a local server takes any key, e.g. ``OPENAI_API_KEY=EMPTY``):
name its model with ``--chat-model`` and keep ``--embedder minilm`` unless it
serves text-embedding-3-small. The output says which was used.

    python examples/langchain_rag_chain.py [--embedder minilm|hashing|openai]
        [--chat-model gpt-4o-mini] [--passages 300] [--questions 4] [--kappa 0.8]
        [--budget 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_conceptgraph import CoreChunkSelector, CoreEmbeddings, FusedRetriever, graph_facts
from shared_core.corpus import read_corpus
from shared_core.embeddings import resolve_embedder
from shared_core.text import split_sentences
from shared_core.text.stop_words import ENGLISH_STOP_WORDS

INSTALL = "pip install -e '.[langchain]'"
try:
    with warnings.catch_warnings():  # langchain-experimental announces its sunset on import
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_experimental.graph_transformers import LLMGraphTransformer
except ImportError as exc:  # the extra is missing: say which, not just the module
    raise SystemExit(f"this example needs the 'langchain' extra: {INSTALL} ({exc})") from exc

SAMPLE = Path(__file__).parent / "data" / "musique_sample"
PROMPT = ChatPromptTemplate.from_template(
    "Answer the question from the context only, in a few words.\n\n"
    "Context:\n{context}\n\nQuestion: {question}"
)
OPENAI_CHAT_MODEL = "gpt-4o-mini"

# --------------------------------------------------------------- offline stand-ins
_NAME = re.compile(r"\b[A-Z][\w'-]*(?: (?:of |de |von |the )?[A-Z][\w'-]*)*")
_WORD = re.compile(r"[a-z0-9]+")


def _proper_names(text: str) -> list[str]:
    names = (m.group(0).removeprefix("The ") for m in _NAME.finditer(text))
    return list(dict.fromkeys(n for n in names if n not in {"The", "A", "In", "It"}))


class RuleBasedGraphExtractor(BaseChatModel):
    """NOT an LLM: answers LLMGraphTransformer's tool call by linking a chunk's proper names.

    Each sentence's first proper name is linked to the later ones (``MENTIONS``),
    so the offline run builds a real, if crude, KG through the real transformer.
    """

    @property
    def _llm_type(self) -> str:
        return "rule-based-graph-extractor"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tool_name=convert_to_openai_tool(tools[0])["function"]["name"])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = str(messages[-1].content).split("following input: ", 1)[-1]
        nodes: dict[str, dict[str, str]] = {}
        relationships = []
        for start, end in split_sentences(text):
            names = _proper_names(text[start:end])
            for name in names:
                nodes.setdefault(name, {"id": name, "type": "Entity"})
            relationships += [
                {"source_node_id": names[0], "source_node_type": "Entity",
                 "target_node_id": other, "target_node_type": "Entity", "type": "MENTIONS"}
                for other in names[1:]
            ]
        call = {"name": kwargs["tool_name"], "id": "call_0", "type": "tool_call",
                "args": {"nodes": list(nodes.values()), "relationships": relationships}}
        return ChatResult(generations=[ChatGeneration(
            message=AIMessage(content="", tool_calls=[call]))])


class ExtractiveAnswerer(BaseChatModel):
    """NOT an LLM: returns the context sentence sharing most content words with the question."""

    @property
    def _llm_type(self) -> str:
        return "extractive-answerer"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        prompt = str(messages[-1].content)
        context, _, question = prompt.partition("\n\nQuestion: ")
        context = context.partition("Context:\n")[2]
        wanted = set(_WORD.findall(question.lower())) - ENGLISH_STOP_WORDS
        best, best_score = "(no context)", 0
        for start, end in split_sentences(context) if context.strip() else []:
            sentence = " ".join(context[start:end].split())
            score = len(wanted & set(_WORD.findall(sentence.lower())))
            if score > best_score:
                best, best_score = sentence, score
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=best))])


# ------------------------------------------------------------------------ the app
def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(doc.page_content for doc in docs)


def models(use_openai: bool, chat_model: str = OPENAI_CHAT_MODEL
           ) -> tuple[BaseChatModel, BaseChatModel, str]:
    """(KG extractor, answerer, a plain description of which models these are)."""
    if not use_openai:
        return (RuleBasedGraphExtractor(), ExtractiveAnswerer(),
                "offline stand-ins, no language model: a rule-based KG extractor "
                "(links proper names) and an extractive answerer (best-overlap sentence); "
                "set OPENAI_API_KEY to use " + chat_model)
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:
        raise SystemExit("OPENAI_API_KEY is set: the real-LLM run needs the 'openai' extra: "
                         "pip install -e '.[langchain,openai]'") from exc
    llm = ChatOpenAI(model=chat_model, temperature=0)
    server = os.environ.get("OPENAI_BASE_URL")
    where = f"{chat_model} at {server}" if server else f"OpenAI {chat_model}"
    return llm, llm, f"{where} (KG extraction and answers)"


def main(argv: Sequence[str] | None = None) -> None:
    use_openai = bool(os.environ.get("OPENAI_API_KEY"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", choices=("minilm", "hashing", "openai"),
                        default="openai" if use_openai else "minilm")
    parser.add_argument("--chat-model", default=OPENAI_CHAT_MODEL,
                        help="the chat model, when OPENAI_API_KEY is set")
    parser.add_argument("--passages", type=int, default=300, help="corpus passages to use")
    parser.add_argument("--questions", type=int, default=4, help="sample questions to answer")
    parser.add_argument("--kappa", type=float, default=0.8, help="share of tokens kept")
    parser.add_argument("--budget", type=int, default=3000, help="context tokens per question")
    args = parser.parse_args(argv)

    extractor, answerer, llm_note = models(use_openai, args.chat_model)
    print(f"LLM: {llm_note}")
    embeddings = CoreEmbeddings(resolve_embedder(args.embedder))
    print(f"embeddings: {embeddings.embedder.model_id}")

    records = read_corpus(SAMPLE / "corpus.jsonl")[: args.passages]
    docs = [Document(page_content=r.text, id=r.id, metadata=r.metadata) for r in records]
    questions = [json.loads(line) for line in (SAMPLE / "questions.jsonl").open()]

    print(f"\n== 1. Core chunks of {len(docs)} MuSiQue passages (kappa={args.kappa})")
    start = time.perf_counter()
    selector = CoreChunkSelector(embeddings, kappa=args.kappa)
    core = selector.transform_documents(docs)
    assert selector.last_report is not None
    print(f"{selector.last_report.summary()}  [{time.perf_counter() - start:.1f}s]")

    print(f"\n== 2. LLMGraphTransformer on the {len(core)} core chunks only")
    start = time.perf_counter()
    transformer = LLMGraphTransformer(llm=extractor)
    graph_docs = asyncio.run(transformer.aconvert_to_graph_documents(core))
    facts = graph_facts(graph_docs)
    print(f"{len(facts):,} facts from {len(graph_docs)} extractor calls "
          f"({len(docs) - len(core)} calls saved)  [{time.perf_counter() - start:.1f}s]")
    kg = InMemoryVectorStore.from_documents(facts, embeddings).as_retriever(
        search_kwargs={"k": 30})

    print(f"\n== 3. Fused retrieval (concept graph + KG facts, lam=0.6) in an LCEL chain, "
          f"budget {args.budget} tokens")
    retriever = FusedRetriever(concept_retriever=selector.as_retriever(), kg_retriever=kg,
                               budget=args.budget)
    context_docs: list[Document] = []

    def keep(docs: list[Document]) -> list[Document]:
        context_docs[:] = docs
        return docs

    chain = (
        {"context": retriever | keep | format_docs, "question": RunnablePassthrough()}
        | PROMPT
        | answerer
        | StrOutputParser()
    )
    found = 0
    for q in questions[: args.questions]:
        answer = chain.invoke(q["question"])
        context = format_docs(context_docs).lower()
        hit = any(a.lower() in context for a in q["answers"])
        found += hit
        paths: dict[str, int] = {}
        for d in context_docs:
            path = d.metadata["fusion"]["path"]
            paths[path] = paths.get(path, 0) + 1
        print(f"\nQ: {q['question']}\n   gold: {' | '.join(q['answers'])}"
              f"  (in context: {'yes' if hit else 'no'})\n   answer: {answer}"
              f"\n   context items by path: {paths}")
    print(f"\ngold answer in the fused context for {found}/{min(args.questions, len(questions))}"
          f" questions. LLM: {llm_note}.")


if __name__ == "__main__":
    main()
