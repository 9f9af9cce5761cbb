"""Core-chunk selection as a LangChain document transformer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import BaseDocumentTransformer, Document
from langchain_core.embeddings import Embeddings

from shared_core import ConceptGraphConfig, ConceptGraphIndex, CostReport, Selection
from shared_core.index import SelectionMethod
from shared_core.pipeline import IncrementalSelector, check_selection_method

from ._documents import check_documents, to_records
from .embeddings import to_core_embedder
from .retrievers import ConceptGraphRetriever


class CoreChunkSelector(BaseDocumentTransformer):
    """Keep only the core chunks worth sending to an LLM knowledge-graph extractor.

    G2ConS core-chunk selection without any LLM: the documents (each one chunk)
    join a concept graph, chunks are ranked by their concepts' PageRank per token,
    and the best ones within ``kappa`` of the tokens are kept, in input order
    (``ConceptGraphConfig(select_by="chunks")`` makes kappa a share of chunks). Put
    it in front of ``LLMGraphTransformer.convert_to_graph_documents`` to cut
    KG-extraction cost by about ``1 - kappa``. ``method="knn"`` ranks by KET-RAG's
    KNN chunk-graph PageRank instead, ``"random"`` is the baseline. The cost report
    is logged at INFO on the ``conceptgraph`` logger and kept in :attr:`last_report`
    (the latest finished call's, when several threads transform at once). The same
    graph then serves retrieval: :meth:`as_retriever`.

    Kept documents are returned unchanged, except that one without an ``id``
    gets its chunk id (the hash of its text), so KG facts extracted from it can
    name their source chunk. A document passed twice is one chunk, kept or dropped
    once; the same id with different text or metadata raises ``ValueError`` naming
    both positions. ``add_documents`` puts chunks in the graph without selecting
    (they shape later rankings); ``delete`` removes them, skipping unknown ids.

    Setup:
        ```bash
        pip install conceptgraph langchain-experimental
        ```

    Instantiate:
        ```python
        from langchain_core.documents import Document
        from shared_core import HashingEmbedder
        from langchain_conceptgraph import CoreChunkSelector, CoreEmbeddings

        selector = CoreChunkSelector(CoreEmbeddings(HashingEmbedder()), kappa=0.5)
        docs = [
            Document(page_content="Ada Lovelace wrote the first computer program."),
            Document(page_content="Ada Lovelace studied the Analytical Engine of Babbage."),
            Document(page_content="Charles Babbage designed the Analytical Engine."),
            Document(page_content="The weather was mild that spring."),
        ]
        ```

    Transform:
        ```python
        core = selector.transform_documents(docs)
        assert len(core) == 2
        print(selector.last_report.summary())  # kept 2/4 chunks, tokens, cost saved
        ```

    Async:
        ```python
        core = await selector.atransform_documents(docs)
        ```

    Add and delete:
        ```python
        extra = Document(page_content="Babbage built the Difference Engine.", id="b")
        assert selector.add_documents([extra]) == ["b"]  # in the graph, not selected
        selector.delete(["b", "never-added"])  # ids the graph does not hold are skipped
        ```

    Before KG extraction:
        ```python
        from langchain_experimental.graph_transformers import LLMGraphTransformer

        # transformer = LLMGraphTransformer(llm=your_chat_model)
        # graph_documents = transformer.convert_to_graph_documents(core)
        retriever = selector.as_retriever(k=2)  # the same concept graph, for retrieval
        ```
    """

    def __init__(
        self,
        embeddings: Embeddings | None = None,
        *,
        kappa: float | None = None,
        method: SelectionMethod = "concept",
        prompt_tokens_per_chunk: int = 0,
        config: ConceptGraphConfig | None = None,
        index: ConceptGraphIndex | None = None,
        model_id: str | None = None,
        show_progress: bool = False,
    ) -> None:
        """``embeddings`` builds a new concept graph; ``index`` extends an existing one.

        ``prompt_tokens_per_chunk`` is the extractor's prompt size, so the cost
        report estimates the extractor's real input; ``kappa`` defaults to the
        config's (0.8); ``method`` is ``"concept"`` (G2ConS), ``"coverage"``, ``"knn"``
        or ``"random"``.
        """
        if (embeddings is None) == (index is None):
            raise ValueError("CoreChunkSelector needs exactly one of embeddings or index")
        if index is not None:
            if not isinstance(index, ConceptGraphIndex):
                raise TypeError(f"index must be a ConceptGraphIndex, got {type(index).__name__}")
            if config is not None:
                raise ValueError("config applies to a new index; the given index has its own")
        else:
            assert embeddings is not None
            index = ConceptGraphIndex(to_core_embedder(embeddings, model_id=model_id), config)
        self._selector = IncrementalSelector(index)  # the graph, the lock, the latest selection
        self._index = index
        self.kappa = self._check_kappa(index.config.kappa if kappa is None else kappa)
        self.method = check_selection_method(method)
        tokens = prompt_tokens_per_chunk
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise ValueError(
                f"prompt_tokens_per_chunk must be an int >= 0, got {prompt_tokens_per_chunk!r}"
            )
        self.prompt_tokens_per_chunk = prompt_tokens_per_chunk
        self.show_progress = show_progress

    @staticmethod
    def _check_kappa(kappa: float) -> float:
        ConceptGraphConfig(kappa=kappa)  # raises ValueError naming kappa
        return kappa

    @property
    def index(self) -> ConceptGraphIndex:
        """The concept graph over every chunk seen so far (kept or not)."""
        return self._index

    @property
    def last_selection(self) -> Selection | None:
        """The latest transform's selection (``None`` before the first)."""
        return self._selector.last_selection

    @property
    def last_report(self) -> CostReport | None:
        """The cost report of the latest transform (``None`` before the first)."""
        return None if self.last_selection is None else self.last_selection.report

    def transform_documents(
        self, documents: Sequence[Document], **kwargs: Any
    ) -> list[Document]:
        """The core chunks among ``documents``, in input order.

        ``kappa=`` and ``method=`` override the selector's for this call.
        """
        kappa = self._check_kappa(kwargs.pop("kappa", self.kappa))
        method = check_selection_method(kwargs.pop("method", self.method))
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(kwargs))}")
        documents = check_documents(documents)
        if not documents:
            return []
        records = to_records(documents)
        core = self._selector.select(
            records, kappa=kappa, method=method,
            prompt_tokens_per_chunk=self.prompt_tokens_per_chunk,
            show_progress=self.show_progress)
        return [doc if doc.id else doc.model_copy(update={"id": cid})
                for doc, cid in zip(documents, records.input_ids, strict=True) if core.keeps(cid)]

    async def atransform_documents(
        self, documents: Sequence[Document], **kwargs: Any
    ) -> list[Document]:
        """:meth:`transform_documents` in a worker thread (embedding is blocking work)."""
        return await asyncio.to_thread(self.transform_documents, documents, **kwargs)

    def add_documents(self, documents: Sequence[Document]) -> list[str]:
        """Put chunks in the graph without selecting; returns each document's chunk id."""
        return self._selector.add(to_records(check_documents(documents)),
                                  show_progress=self.show_progress)

    async def aadd_documents(self, documents: Sequence[Document]) -> list[str]:
        """:meth:`add_documents` in a worker thread (embedding is blocking work)."""
        return await asyncio.to_thread(self.add_documents, documents)

    def delete(self, ids: Sequence[str] | None = None) -> bool:
        """Remove chunks from the graph; ids it does not hold are skipped. Returns ``True``."""
        self._selector.delete(ids)
        return True

    async def adelete(self, ids: Sequence[str] | None = None) -> bool:
        """:meth:`delete` in a worker thread (rebuilding the graph is blocking work)."""
        return await asyncio.to_thread(self.delete, ids)

    def as_retriever(self, **kwargs: Any) -> ConceptGraphRetriever:
        """A retriever over the concept graph this selector built (no second build)."""
        return ConceptGraphRetriever(index=self.index, **kwargs)

    def save(self, persist_dir: str | Path) -> None:
        """Write the concept graph (JSON + .npy, atomic, never pickle)."""
        self.index.save(str(persist_dir))

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | Path,
        embeddings: Embeddings,
        *,
        model_id: str | None = None,
        verify: bool = False,
        **kwargs: Any,
    ) -> CoreChunkSelector:
        """Continue selecting over a saved concept graph; the embeddings must match it.

        ``verify=True`` derives the saved graph again and refuses a save that differs
        (for a directory from a source you do not trust; see ``ConceptGraphIndex.load``).
        """
        embedder = to_core_embedder(embeddings, model_id=model_id)
        return cls(index=ConceptGraphIndex.load(str(persist_dir), embedder, verify=verify),
                   **kwargs)
