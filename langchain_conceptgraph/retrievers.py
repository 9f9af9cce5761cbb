"""LangChain retrievers over the concept graph, alone or fused with a KG retriever."""

from __future__ import annotations

import asyncio
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, ValidationInfo, field_validator
from typing_extensions import Self

from shared_core import (
    Chunk,
    ConceptGraphConfig,
    ConceptGraphIndex,
    ContextItem,
    Provenance,
    RetrievalResult,
    RetrievedChunk,
    count_tokens,
)
from shared_core.fusion import FusedContext, KGFact, kg_context_items
from shared_core.pipeline import afuse_paths, fuse_paths, fused_metadata, provenance_metadata
from shared_core.records import add_records, delete_chunks
from shared_core.search.external import VectorStoreBackend

from ._documents import check_documents, chunk_id, to_records
from .embeddings import to_core_embedder
from .vector_store import to_backend


def _check_optional_int(name: str, value: object, minimum: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum} or None, got {value!r}")
    return value


def _check_query(query: object) -> str:
    """Name the query itself in the error, not the core's list of texts to embed."""
    if not isinstance(query, str):
        raise TypeError(f"the query must be a str, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("the query is empty or blank: invoke the retriever with the "
                         "question to retrieve documents for")
    return query


def check_invoke_kwargs(owner: object, kwargs: dict[str, Any], accepted: str) -> None:
    """A misspelt option would otherwise be silently ignored by ``invoke``."""
    if kwargs:
        names = ", ".join(repr(name) for name in kwargs)
        raise TypeError(f"{type(owner).__name__}.invoke() got unexpected keyword "
                        f"argument(s) {names}; it accepts {accepted}")


class ConceptGraphRetriever(BaseRetriever):
    """G2ConS concept-graph retrieval as a LangChain retriever.

    Chunks come back in context order (the config's ``ranking``: fused concept
    evidence and similarity by default), filling ``budget`` tokens (cl100k_base; the
    index config's ``budget`` when unset) and at most ``k`` documents. Each
    ``Document.metadata`` carries the chunk's own metadata plus ``chunk_id``,
    ``score`` and ``provenance`` (the concept that brought the chunk, its
    similarity to the query, the stage (direct, expanded or similarity only) and
    the BFS hop). ``min_score`` is a relevance floor: a chunk whose similarity to
    the query is below it is never returned, so an off-topic query gets nothing.

    A document's chunk id is its ``id``, else the hash of its text. A document
    passed twice is one chunk; the same id with different text or metadata raises
    ``ValueError`` naming both positions, and so does adding an id the graph holds
    with new text (delete it first), since one of the two would be silently lost.
    The graph updates in place, as a vector store does: ``add_documents`` returns
    the chunk ids, ``delete`` skips ids the graph does not hold.

    Setup:
        ```bash
        pip install conceptgraph            # MiniLM needs 'conceptgraph[local]'
        ```

    Instantiate:
        ```python
        from langchain_core.documents import Document
        from shared_core import HashingEmbedder
        from langchain_conceptgraph import ConceptGraphRetriever, CoreEmbeddings

        docs = [
            Document(page_content="Ada Lovelace wrote the first computer program.", id="ada"),
            Document(page_content="Charles Babbage designed the Analytical Engine.", id="babbage"),
            Document(page_content="Ada Lovelace described the Analytical Engine.", id="notes"),
        ]
        retriever = ConceptGraphRetriever.from_documents(
            docs, CoreEmbeddings(HashingEmbedder()), k=2, budget=2000
        )
        ```

    Invoke:
        ```python
        hits = retriever.invoke("Who wrote the first program?")
        assert hits[0].id == "ada"
        print(hits[0].metadata["provenance"])  # concept, concept_similarity, stage, hop
        one = retriever.invoke("Analytical Engine", k=1)  # k per call
        ```

    Async:
        ```python
        hits = await retriever.ainvoke("Who designed the Analytical Engine?")
        ```

    Add and delete:
        ```python
        linux = Document(page_content="Linus Torvalds created the Linux kernel.", id="linux")
        assert retriever.add_documents([linux]) == ["linux"]
        assert retriever.invoke("Who created the Linux kernel?")[0].id == "linux"
        retriever.delete(["linux", "never-added"])  # ids it does not hold are skipped
        assert await retriever.aadd_documents([linux]) == ["linux"]
        await retriever.adelete(["linux"])
        ```

    Use within a chain:
        ```python
        from langchain_core.language_models import FakeListChatModel
        from langchain_core.output_parsers import StrOutputParser
        from langchain_core.prompts import ChatPromptTemplate
        from langchain_core.runnables import RunnablePassthrough

        prompt = ChatPromptTemplate.from_template(
            "Answer from the context.\\n\\n{context}\\n\\nQuestion: {question}"
        )
        llm = FakeListChatModel(responses=["Ada Lovelace"])  # any chat model

        def format_docs(docs):
            return "\\n\\n".join(doc.page_content for doc in docs)

        chain = (
            {"context": retriever | format_docs, "question": RunnablePassthrough()}
            | prompt
            | llm
            | StrOutputParser()
        )
        assert chain.invoke("Who wrote the first program?") == "Ada Lovelace"
        ```

    Persist:
        ```python
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            retriever.save(tmp)
            again = ConceptGraphRetriever.from_persist_dir(
                tmp, CoreEmbeddings(HashingEmbedder()), k=2
            )
            assert again.invoke("first program")[0].id == "ada"
        ```
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: ConceptGraphIndex
    """The concept graph; build it with ``from_documents`` or load it with ``from_persist_dir``."""
    k: int | None = None
    """Most documents returned; ``None``: as many as ``budget`` holds."""
    budget: int | None = None
    """Context token budget; ``None``: ``index.config.budget`` (12000)."""
    top_k: int | None = None
    """Directly associated concepts; ``None``: ``index.config.top_k``."""
    hops: int | None = None
    """BFS depth of concept expansion; ``None``: ``index.config.hops``."""
    min_score: float | None = None
    """Relevance floor on a chunk's similarity to the query; ``None``: the config's."""

    @field_validator("k", "budget", "top_k", mode="before")
    @classmethod
    def _positive(cls, value: int | None, info: ValidationInfo) -> int | None:
        return _check_optional_int(str(info.field_name), value, 1)

    @field_validator("hops", mode="before")
    @classmethod
    def _non_negative(cls, value: int | None) -> int | None:
        return _check_optional_int("hops", value, 0)

    @field_validator("min_score", mode="before")
    @classmethod
    def _floor(cls, value: float | None) -> float | None:
        if value is not None:
            ConceptGraphConfig(min_score=value)  # raises naming min_score and its range
        return value

    # ------------------------------------------------------------- building
    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        embeddings: Embeddings,
        *,
        config: ConceptGraphConfig | None = None,
        model_id: str | None = None,
        show_progress: bool = False,
        vector_store: VectorStore | VectorStoreBackend | None = None,
        vectors_in_store: bool = False,
        **kwargs: Any,
    ) -> Self:
        """Build the concept graph over ``documents`` (each one chunk) and wrap it.

        A document's chunk id is its ``id``, else the hash of its text; its
        metadata must be JSON-serialisable (it is saved with the index).
        ``vector_store``: a LangChain ``VectorStore`` of the index's own that holds
        its sentence vectors and finds each query's candidates
        (:class:`~langchain_conceptgraph.LangChainVectorStore`).
        ``vectors_in_store=True`` (a ``MilvusVectorStore`` or ``QdrantStore``): the
        vectors stay in the store only, and updates read back the rows they need
        (see ``ConceptGraphIndex``).
        """
        records = to_records(check_documents(documents))
        index = ConceptGraphIndex(to_core_embedder(embeddings, model_id=model_id), config,
                                  vector_store=None if vector_store is None
                                  else to_backend(vector_store),
                                  vectors_in_store=vectors_in_store)
        add_records(index, records, show_progress=show_progress)
        return cls(index=index, **kwargs)

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | Path,
        embeddings: Embeddings,
        *,
        model_id: str | None = None,
        verify: bool = False,
        vector_store: VectorStore | VectorStoreBackend | None = None,
        vectors_in_store: bool = False,
        scores_in_store: bool = False,
        writer: bool = False,
        **kwargs: Any,
    ) -> Self:
        """Load an index written by :meth:`save` (or the CLI); the embeddings must match it.

        ``verify=True`` derives the saved graph again and refuses a save that differs
        (for a directory from a source you do not trust; see ``ConceptGraphIndex.load``).
        ``vector_store``: the store the index was built with; it is reconciled with
        the saved chunks (rows added or deleted after the last save are repaired).
        ``vectors_in_store=True``: a read-only replica that reads its vectors from
        ``vector_store`` (a ``MilvusVectorStore`` or ``QdrantStore``) and holds none;
        with ``scores_in_store=True`` the store scores the rows a query needs instead
        of returning them; with ``writer=True`` the index's one writer, which holds no
        vector either: ``add_documents``, ``delete`` and ``save`` read and write the
        store (see ``ConceptGraphIndex.load``).
        """
        embedder = to_core_embedder(embeddings, model_id=model_id)
        backend = None if vector_store is None else to_backend(vector_store)
        return cls(index=ConceptGraphIndex.load(str(persist_dir), embedder, verify=verify,
                                                vector_store=backend,
                                                vectors_in_store=vectors_in_store,
                                                scores_in_store=scores_in_store,
                                                writer=writer), **kwargs)

    def save(self, persist_dir: str | Path) -> None:
        """Write the index as versioned JSON + .npy (atomic; never pickle)."""
        self.index.save(str(persist_dir))

    def add_documents(self, documents: Sequence[Document]) -> list[str]:
        """Add chunks to the graph (all or nothing); returns each document's chunk id.

        Re-adding a chunk the graph holds embeds nothing and takes the new metadata.
        """
        return add_records(self.index, to_records(check_documents(documents)))

    async def aadd_documents(self, documents: Sequence[Document]) -> list[str]:
        """:meth:`add_documents` in a worker thread (embedding is blocking work)."""
        return await asyncio.to_thread(self.add_documents, documents)

    def delete(self, ids: Sequence[str] | None = None) -> bool:
        """Remove chunks from the graph; ids it does not hold are skipped. Returns ``True``.

        The graph becomes the one that never held them. ``ids=None`` (a vector
        store's "delete everything") raises ``ValueError``: build a new retriever.
        """
        delete_chunks(self.index, ids)
        return True

    async def adelete(self, ids: Sequence[str] | None = None) -> bool:
        """:meth:`delete` in a worker thread (rebuilding the graph is blocking work)."""
        return await asyncio.to_thread(self.delete, ids)

    # ------------------------------------------------------------ retrieval
    def _search_args(self, k: int | None, budget: int | None) -> tuple[int | None, int | None]:
        return (_check_optional_int("k", k, 1) or self.k,
                _check_optional_int("budget", budget, 1) or self.budget)

    def _to_documents(self, result: RetrievalResult, k: int | None) -> list[Document]:
        hits = result.chunks if k is None else result.chunks[:k]
        return [Document(page_content=hit.text, metadata=provenance_metadata(hit), id=hit.id)
                for hit in hits]

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        budget: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        check_invoke_kwargs(self, kwargs, "k and budget")
        query = _check_query(query)
        k, budget = self._search_args(k, budget)
        result = self.index.retrieve(query, top_k=self.top_k, hops=self.hops, budget=budget,
                                     min_score=self.min_score)
        return self._to_documents(result, k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        budget: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        check_invoke_kwargs(self, kwargs, "k and budget")
        query = _check_query(query)
        k, budget = self._search_args(k, budget)
        result = await self.index.aretrieve(query, top_k=self.top_k, hops=self.hops,
                                            budget=budget, min_score=self.min_score)
        return self._to_documents(result, k)


class FusedRetriever(BaseRetriever):
    """Concept-graph context fused with any KG retriever's (G2ConS §3.2.1 ensemble).

    Both paths run concurrently (threads for ``invoke``, ``asyncio`` for
    ``ainvoke``). Chunks both paths found come first (votes), then the concept
    path fills at most (1−``lam``) and the KG path at most ``lam`` of what the
    votes left of ``budget``. A KG document votes for the chunk named by its
    ``metadata[source_key]`` (else its ``id``): point it at the chunk the fact
    was extracted from, as :func:`graph_facts` does. Each returned document's
    ``metadata["fusion"]`` says which path found it and at which rank.

    The concept path fills its share of ``budget``; the concept retriever's
    ``k`` does not apply here, this retriever's ``k`` caps the fused documents.
    Both paths are child runs of the fused run, so callbacks and tracing see
    the concept retriever's and the KG retriever's own runs.

    Setup:
        ```bash
        pip install conceptgraph langchain-experimental
        ```

    Instantiate:
        ```python
        from langchain_core.documents import Document
        from langchain_core.vectorstores import InMemoryVectorStore
        from shared_core import HashingEmbedder
        from langchain_conceptgraph import ConceptGraphRetriever, CoreEmbeddings, FusedRetriever

        embeddings = CoreEmbeddings(HashingEmbedder())
        docs = [
            Document(page_content="Ada Lovelace wrote the first computer program.", id="ada"),
            Document(page_content="Charles Babbage designed the Analytical Engine.", id="babbage"),
        ]
        concept = ConceptGraphRetriever.from_documents(docs, embeddings)
        # KG facts, each tied to its source chunk (graph_facts() builds these from
        # LLMGraphTransformer graph documents)
        facts = [Document(page_content="Ada Lovelace WROTE first program",
                          metadata={"chunk_id": "ada"})]
        kg = InMemoryVectorStore.from_documents(facts, embeddings).as_retriever()
        retriever = FusedRetriever(concept_retriever=concept, kg_retriever=kg,
                                   lam=0.6, budget=1000)
        ```

    Invoke:
        ```python
        docs = retriever.invoke("Who wrote the first program?")
        assert docs[0].id == "ada" and docs[0].metadata["fusion"]["path"] == "both"
        top = retriever.invoke("Who wrote the first program?", k=1)  # k per call
        ```

    Async:
        ```python
        docs = await retriever.ainvoke("Who wrote the first program?")
        ```

    Use within a chain:
        ```python
        from langchain_core.language_models import FakeListChatModel
        from langchain_core.output_parsers import StrOutputParser
        from langchain_core.prompts import ChatPromptTemplate
        from langchain_core.runnables import RunnablePassthrough

        prompt = ChatPromptTemplate.from_template("{context}\\n\\nQuestion: {question}")
        chain = (
            {"context": retriever | (lambda ds: "\\n\\n".join(d.page_content for d in ds)),
             "question": RunnablePassthrough()}
            | prompt
            | FakeListChatModel(responses=["Ada Lovelace"])
            | StrOutputParser()
        )
        chain.invoke("Who wrote the first program?")
        ```
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    concept_retriever: ConceptGraphRetriever
    """The concept path; its index, ``top_k`` and ``hops`` are used."""
    kg_retriever: BaseRetriever
    """Any retriever over the KG whose documents name their source chunk."""
    k: int | None = None
    """Most documents returned, in fused order; ``None``: as many as ``budget`` holds."""
    lam: float | None = None
    """KG share of the context, in [0, 1]; ``None``: the index config's ``lam`` (0.6)."""
    budget: int | None = None
    """Total context tokens; ``None``: the concept retriever's budget, else the config's."""
    source_key: str = "chunk_id"
    """Metadata key of a KG document holding its source chunk id."""
    share_unused: bool = False
    """Let a path that cannot fill its share leave the rest to the other (the paper: no)."""

    @field_validator("lam", mode="before")
    @classmethod
    def _check_lam(cls, value: float | None) -> float | None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)
                                  or not 0.0 <= value <= 1.0):
            raise ValueError(f"lam must be a number in [0, 1] or None, got {value!r}")
        return value

    @field_validator("k", "budget", mode="before")
    @classmethod
    def _positive(cls, value: int | None, info: ValidationInfo) -> int | None:
        return _check_optional_int(str(info.field_name), value, 1)

    # ------------------------------------------------------------ settings
    def _settings(self) -> tuple[int, float]:
        config = self.concept_retriever.index.config
        budget = self.budget or self.concept_retriever.budget or config.budget
        lam = config.lam if self.lam is None else float(self.lam)
        return budget, lam

    def _kg_fact(self, document: Document) -> KGFact:
        source = document.metadata.get(self.source_key)
        score = document.metadata.get("score")
        return KGFact(document.page_content,
                      source if isinstance(source, str) and source else chunk_id(document),
                      float(score) if isinstance(score, numbers.Real) else 0.0,
                      document.metadata)

    def _kg_items(self, documents: Sequence[Document]) -> list[ContextItem]:
        return kg_context_items(self._kg_fact(doc) for doc in documents)

    @staticmethod
    def _concept_items(documents: Sequence[Document]) -> list[ContextItem]:
        """The concept retriever's documents back as fusion input.

        The concept path runs through ``invoke`` so that it is a traced run of its
        own, which returns documents; the core turns each back into its hit.
        """
        items = []
        for doc in documents:
            meta = doc.metadata
            chunk = Chunk(chunk_id(doc), doc.page_content, count_tokens(doc.page_content),
                          dict(meta))
            hit = RetrievedChunk(chunk, float(meta["score"]), Provenance(**meta["provenance"]))
            items.append(hit.to_context_item())
        return items

    def _concept_runnable(self) -> ConceptGraphRetriever:
        """The concept retriever without its ``k``: the concept path fills its budget share."""
        return self.concept_retriever.model_copy(update={"k": None})

    @staticmethod
    def _to_documents(fused: FusedContext, k: int | None) -> list[Document]:
        items = fused.items if k is None else fused.items[:k]
        return [Document(page_content=f.item.text, metadata=fused_metadata(f), id=f.item.chunk_id)
                for f in items]

    # ------------------------------------------------------------ retrieval
    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        check_invoke_kwargs(self, kwargs, "k")
        query = _check_query(query)
        k = _check_optional_int("k", k, 1) or self.k
        budget, lam = self._settings()
        concept = self._concept_runnable()
        config: RunnableConfig = {"callbacks": run_manager.get_child()}

        def concept_path() -> list[ContextItem]:
            return self._concept_items(concept.invoke(query, config, budget=budget))

        def kg_path() -> list[ContextItem]:
            return self._kg_items(self.kg_retriever.invoke(query, config))

        fused = fuse_paths(concept_path, kg_path, budget=budget, lam=lam,
                           share_unused=self.share_unused)
        return self._to_documents(fused, k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        check_invoke_kwargs(self, kwargs, "k")
        query = _check_query(query)
        k = _check_optional_int("k", k, 1) or self.k
        budget, lam = self._settings()
        concept = self._concept_runnable()
        config: RunnableConfig = {"callbacks": run_manager.get_child()}

        async def concept_path() -> list[ContextItem]:
            return self._concept_items(await concept.ainvoke(query, config, budget=budget))

        async def kg_path() -> list[ContextItem]:
            return self._kg_items(await self.kg_retriever.ainvoke(query, config))

        fused = await afuse_paths(concept_path(), kg_path(), budget=budget, lam=lam,
                                  share_unused=self.share_unused)
        return self._to_documents(fused, k)
