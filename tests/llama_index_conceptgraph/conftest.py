"""Offline fixtures: a corpus with its true triples, a table-driven LLM, hashing embeddings."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core import Document, PropertyGraphIndex, Settings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.indices.property_graph import SimpleLLMPathExtractor
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from llama_index.core.node_parser import SentenceSplitter

from llama_index_conceptgraph import CoreChunkSelector, CoreEmbedding
from shared_core import HashingEmbedder

Triple = tuple[str, str, str]

# (text, the triples a careful reader extracts from it). "Marie Curie" is the subject in
# three chunks, so the stock PropertyGraphIndex retrievers credit all her facts to the last.
CORPUS: list[tuple[str, str, list[Triple]]] = [
    ("curie-polonium", "Marie Curie discovered polonium in 1898 while studying pitchblende ore.",
     [("Marie Curie", "discovered", "Polonium")]),
    ("pierre", "Pierre Curie married Marie Curie in 1895. Pierre Curie studied magnetism.",
     [("Pierre Curie", "married", "Marie Curie"), ("Pierre Curie", "studied", "Magnetism")]),
    ("warsaw", "Marie Curie was born in Warsaw. Warsaw is the capital city of Poland.",
     [("Marie Curie", "born in", "Warsaw"), ("Warsaw", "capital of", "Poland")]),
    ("einstein", "Albert Einstein developed the theory of relativity. Einstein worked in Bern.",
     [("Albert Einstein", "developed", "Theory of relativity"),
      ("Albert Einstein", "worked in", "Bern")]),
    ("bohr", "Niels Bohr founded an institute in Copenhagen. Bohr proposed a model of the atom.",
     [("Niels Bohr", "founded institute in", "Copenhagen"),
      ("Niels Bohr", "proposed", "Bohr model")]),
    ("rutherford", "Ernest Rutherford discovered the atomic nucleus. Rutherford taught in "
     "Manchester.", [("Ernest Rutherford", "discovered", "Atomic nucleus")]),
    ("meitner", "Lise Meitner explained nuclear fission. Meitner worked in Berlin with Otto Hahn.",
     [("Lise Meitner", "explained", "Nuclear fission"), ("Lise Meitner", "worked with",
                                                          "Otto Hahn")]),
    ("fermi", "Enrico Fermi built the first nuclear reactor in Chicago in 1942.",
     [("Enrico Fermi", "built", "First nuclear reactor")]),
    ("mendeleev", "Dmitri Mendeleev created the periodic table of the chemical elements.",
     [("Dmitri Mendeleev", "created", "Periodic table")]),
    ("nobel", "Marie Curie won the Nobel Prize in Physics in 1903. The prize is given in "
     "Stockholm.", [("Marie Curie", "won", "Nobel Prize in Physics"),
                    ("Nobel Prize in Physics", "given in", "Stockholm")]),
]
TEXTS = [text for _, text, _ in CORPUS]


class TableLLM(CustomLLM):
    """A deterministic LLM for offline tests, recording every prompt it is sent.

    Extraction prompts get the true triples of whichever corpus text the chunk holds,
    in the ``(subject, predicate, object)`` lines SimpleLLMPathExtractor parses;
    synonym prompts get the known entities named in the query; anything else gets
    the first line of its context.
    """

    table: dict[str, list[Triple]] = Field(default_factory=dict)
    prompts: list[str] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="table-llm")

    def extraction_prompts(self) -> list[str]:
        return [p for p in self.prompts if "Triplets:" in p]

    @staticmethod
    def chunk_text(prompt: str) -> str:
        return prompt.rsplit("Text: ", 1)[1].split("\nTriplets:", 1)[0]

    def _answer(self, prompt: str) -> str:
        if "Triplets:" in prompt:
            text = self.chunk_text(prompt)
            triples = [t for key, ts in self.table.items() if key in text for t in ts]
            return "\n".join(f"({s}, {p}, {o})" for s, p, o in triples)
        if "KEYWORDS:" in prompt:
            query = set(re.findall(r"\w+", prompt.split("QUERY: ", 1)[1].split("\n")[0].lower()))
            names = {e for ts in self.table.values() for s, _, o in ts for e in (s, o)}
            return "^".join(sorted(n for n in names
                                   if set(re.findall(r"\w+", n.lower())) <= query))
        context = prompt.split("---------------------\n", 2)
        return context[1].strip().splitlines()[0] if len(context) > 1 else "no context"

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        with self._lock:
            self.prompts.append(prompt)
        return CompletionResponse(text=self._answer(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        yield self.complete(prompt, formatted=formatted, **kwargs)


class CountingEmbedding(BaseEmbedding):
    """A plain BaseEmbedding (not CoreEmbedding) over hashing vectors, counting texts embedded."""

    texts: list[str] = Field(default_factory=list)
    queries: list[str] = Field(default_factory=list)
    _inner: HashingEmbedder = PrivateAttr(default_factory=lambda: HashingEmbedder(128))

    def _get_text_embedding(self, text: str) -> list[float]:
        self.texts.append(text)
        return self._inner.embed([text])[0].tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        self.queries.append(query)
        return self._inner.embed([query])[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


@pytest.fixture
def table_llm() -> TableLLM:
    return TableLLM(table={text: triples for _, text, triples in CORPUS})


@pytest.fixture
def embed_model() -> CoreEmbedding:
    return CoreEmbedding(HashingEmbedder(256))


@pytest.fixture
def documents() -> list[Document]:
    return [Document(text=text, id_=f"doc-{key}") for key, text, _ in CORPUS]


@pytest.fixture
def settings_embed_model() -> Iterator[CoreEmbedding]:
    """Set ``Settings.embed_model`` for one test and restore it afterwards."""
    previous = Settings._embed_model
    model = CoreEmbedding(HashingEmbedder(128))
    Settings.embed_model = model
    yield model
    Settings._embed_model = previous


def build_pg_index(
    documents: list[Document], llm: TableLLM, embed_model: BaseEmbedding | None, kappa: float,
    prompt_tokens_per_chunk: int = 0, **kwargs: Any,
) -> tuple[PropertyGraphIndex, CoreChunkSelector]:
    """The issue's recipe: splitter, then the selector, then the LLM extractor."""
    selector = CoreChunkSelector(kappa=kappa, prompt_tokens_per_chunk=prompt_tokens_per_chunk)
    index = PropertyGraphIndex.from_documents(
        documents,
        transformations=[SentenceSplitter(chunk_size=128, chunk_overlap=0), selector],
        kg_extractors=[SimpleLLMPathExtractor(llm=llm)],
        llm=llm, embed_model=embed_model, embed_kg_nodes=False, **kwargs)
    return index, selector


def chunk_ids_by_key(selector: CoreChunkSelector) -> dict[str, str]:
    """Corpus key -> the chunk id the splitter gave its (single) chunk."""
    by_text = {selector.index.get(cid).text: cid for cid in selector.index.chunk_ids}
    return {key: by_text[text] for key, text, _ in CORPUS}
