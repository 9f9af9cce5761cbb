"""One small shim per framework, so that one parity suite drives both adapters alike.

A shim only translates: rows ``(id, text, metadata)`` into the framework's objects,
and its results back into plain tuples. Nothing here decides behaviour.
"""

from __future__ import annotations

from typing import Any, Protocol

from langchain_core.documents import Document
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

import langchain_conceptgraph as lc
import llama_index_conceptgraph as li
from shared_core import ConceptGraphConfig, ConceptGraphIndex, Embedder, HashingEmbedder, Selection
from shared_core.llm import ChatModel

Row = tuple[str, str, dict[str, Any]]  # (id, text, metadata)
Hit = tuple[str, str, float, dict[str, Any]]  # (id, text, score, metadata)
# (text, route, sources, stage names) of one answer
Answered = tuple[str, str | None, list[Hit], list[str]]


class Shim(Protocol):
    name: str
    what: str  # how the adapter names its input in errors

    def retriever(self, rows: list[Row], config: ConceptGraphConfig,
                  min_score: float | None = None) -> Any: ...
    def retrieve(self, retriever: Any, query: str) -> list[Hit]: ...
    async def aretrieve(self, retriever: Any, query: str) -> list[Hit]: ...
    def selector(self, config: ConceptGraphConfig, kappa: float, method: str,
                 embedder: Embedder | None = None) -> Any: ...
    def select(self, selector: Any, rows: list[Row]) -> list[str]: ...
    async def aselect(self, selector: Any, rows: list[Row]) -> list[str]: ...
    def last_selection(self, selector: Any) -> Selection: ...
    def add(self, target: Any, rows: list[Row]) -> None: ...
    async def aadd(self, target: Any, rows: list[Row]) -> None: ...
    def delete(self, target: Any, ids: Any) -> None: ...
    async def adelete(self, target: Any, ids: Any) -> None: ...
    def graph(self, target: Any) -> ConceptGraphIndex: ...
    def answer(self, retriever: Any, chat: ChatModel, query: str) -> Answered: ...
    def stream(self, retriever: Any, chat: ChatModel, query: str) -> list[str]: ...
    async def astream(self, retriever: Any, chat: ChatModel, query: str) -> list[str]: ...


class LangChainShim:
    name = "langchain"
    what = "documents"

    @staticmethod
    def _docs(rows: list[Row]) -> list[Document]:
        return [Document(page_content=text, id=cid, metadata=meta) for cid, text, meta in rows]

    @staticmethod
    def _hits(docs: list[Document]) -> list[Hit]:
        return [(str(d.id), d.page_content, d.metadata["score"], d.metadata) for d in docs]

    def retriever(self, rows: list[Row], config: ConceptGraphConfig,
                  min_score: float | None = None) -> lc.ConceptGraphRetriever:
        return lc.ConceptGraphRetriever.from_documents(
            self._docs(rows), lc.CoreEmbeddings(HashingEmbedder()), config=config,
            min_score=min_score)

    def retrieve(self, retriever: lc.ConceptGraphRetriever, query: str) -> list[Hit]:
        return self._hits(retriever.invoke(query))

    async def aretrieve(self, retriever: lc.ConceptGraphRetriever, query: str) -> list[Hit]:
        return self._hits(await retriever.ainvoke(query))

    def selector(self, config: ConceptGraphConfig, kappa: float, method: str,
                 embedder: Embedder | None = None) -> lc.CoreChunkSelector:
        return lc.CoreChunkSelector(lc.CoreEmbeddings(embedder or HashingEmbedder()),
                                    kappa=kappa, method=method,  # type: ignore[arg-type]
                                    config=config)

    def select(self, selector: lc.CoreChunkSelector, rows: list[Row]) -> list[str]:
        return [str(d.id) for d in selector.transform_documents(self._docs(rows))]

    async def aselect(self, selector: lc.CoreChunkSelector, rows: list[Row]) -> list[str]:
        return [str(d.id) for d in await selector.atransform_documents(self._docs(rows))]

    def last_selection(self, selector: lc.CoreChunkSelector) -> Selection:
        assert selector.last_selection is not None
        return selector.last_selection

    def add(self, target: Any, rows: list[Row]) -> None:
        assert target.add_documents(self._docs(rows)) == [cid for cid, _, _ in rows]

    async def aadd(self, target: Any, rows: list[Row]) -> None:
        assert await target.aadd_documents(self._docs(rows)) == [cid for cid, _, _ in rows]

    def delete(self, target: Any, ids: Any) -> None:
        assert target.delete(ids) is True

    async def adelete(self, target: Any, ids: Any) -> None:
        assert await target.adelete(ids) is True

    def graph(self, target: Any) -> ConceptGraphIndex:
        index: ConceptGraphIndex = target.index
        return index

    def answer(self, retriever: Any, chat: ChatModel, query: str) -> Answered:
        out = lc.ConceptGraphAnswerer.from_llm(chat, retriever).answer_with_sources(query)
        return (out["answer"], out["route"], self._hits(out["sources"]),
                [s["name"] for s in out["trace"]["stages"]])

    def stream(self, retriever: Any, chat: ChatModel, query: str) -> list[str]:
        return list(lc.ConceptGraphAnswerer.from_llm(chat, retriever).stream(query))

    async def astream(self, retriever: Any, chat: ChatModel, query: str) -> list[str]:
        answerer = lc.ConceptGraphAnswerer.from_llm(chat, retriever)
        return [part async for part in answerer.astream(query)]


class LlamaIndexShim:
    name = "llama_index"
    what = "nodes"

    @staticmethod
    def _nodes(rows: list[Row]) -> list[TextNode]:
        return [TextNode(id_=cid, text=text, metadata=meta) for cid, text, meta in rows]

    @staticmethod
    def _hits(nodes: list[NodeWithScore]) -> list[Hit]:
        return [(n.node.node_id, n.node.get_content(metadata_mode=MetadataMode.NONE),
                 float(n.score or 0.0), n.node.metadata) for n in nodes]

    def retriever(self, rows: list[Row], config: ConceptGraphConfig,
                  min_score: float | None = None) -> li.ConceptGraphRetriever:
        return li.ConceptGraphRetriever.from_defaults(
            nodes=self._nodes(rows), embed_model=li.CoreEmbedding(HashingEmbedder()),
            config=config, min_score=min_score)

    def retrieve(self, retriever: li.ConceptGraphRetriever, query: str) -> list[Hit]:
        return self._hits(retriever.retrieve(query))

    async def aretrieve(self, retriever: li.ConceptGraphRetriever, query: str) -> list[Hit]:
        return self._hits(await retriever.aretrieve(query))

    def selector(self, config: ConceptGraphConfig, kappa: float, method: str,
                 embedder: Embedder | None = None) -> li.CoreChunkSelector:
        return li.CoreChunkSelector(kappa, method=method,  # type: ignore[arg-type]
                                    embed_model=li.CoreEmbedding(embedder or HashingEmbedder()),
                                    config=config)

    def select(self, selector: li.CoreChunkSelector, rows: list[Row]) -> list[str]:
        return [n.node_id for n in selector(self._nodes(rows))]

    async def aselect(self, selector: li.CoreChunkSelector, rows: list[Row]) -> list[str]:
        return [n.node_id for n in await selector.acall(self._nodes(rows))]

    def last_selection(self, selector: li.CoreChunkSelector) -> Selection:
        return selector.selection

    def add(self, target: Any, rows: list[Row]) -> None:
        assert target.insert_nodes(self._nodes(rows)) is None

    async def aadd(self, target: Any, rows: list[Row]) -> None:
        assert await target.ainsert_nodes(self._nodes(rows)) is None

    def delete(self, target: Any, ids: Any) -> None:
        assert target.delete_nodes(ids) is None

    async def adelete(self, target: Any, ids: Any) -> None:
        assert await target.adelete_nodes(ids) is None

    def graph(self, target: Any) -> ConceptGraphIndex:
        index: ConceptGraphIndex = target.index
        return index

    def answer(self, retriever: Any, chat: ChatModel, query: str) -> Answered:
        response = li.ConceptGraphQueryEngine.from_defaults(retriever, chat).query(query)
        assert isinstance(response, Response) and response.metadata is not None
        return (str(response.response), response.metadata["route"],
                self._hits(response.source_nodes), response.metadata["trace"].names)

    def stream(self, retriever: Any, chat: ChatModel, query: str) -> list[str]:
        engine = li.ConceptGraphQueryEngine.from_defaults(retriever, chat, streaming=True)
        response = engine.query(query)
        assert isinstance(response, StreamingResponse)
        return list(response.response_gen)

    async def astream(self, retriever: Any, chat: ChatModel, query: str) -> list[str]:
        engine = li.ConceptGraphQueryEngine.from_defaults(retriever, chat, streaming=True)
        response = await engine.aquery(query)
        assert isinstance(response, AsyncStreamingResponse)
        return [part async for part in response.async_response_gen()]


SHIMS: list[Shim] = [LangChainShim(), LlamaIndexShim()]
