"""``CoreChunkSelector``: prune chunks before LLM KG extraction, as a LlamaIndex transformation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, TransformComponent

from shared_core.config import ConceptGraphConfig
from shared_core.index import ConceptGraphIndex
from shared_core.pipeline import select_core_chunks
from shared_core.selection import CostReport, Selection

from ._nodes import nodes_to_records
from .embeddings import resolve_embed_model, to_core_embedder
from .retriever import ConceptGraphRetriever


class CoreChunkSelector(TransformComponent):
    """Keep only the G2ConS core chunks (concept PageRank per token) for KG extraction.

    The best chunks within ``kappa`` of the tokens are kept, so KG extraction costs about
    ``kappa`` of extracting everything (``ConceptGraphConfig(select_by="chunks")`` makes
    kappa a share of chunks, as in the paper).

    Put it after the splitter: only the kept nodes reach ``kg_extractors``. Every node
    (kept or not) goes into one concept graph, which :meth:`as_retriever` reuses, so
    nothing is embedded twice. The cost report is logged on the ``conceptgraph``
    logger and kept in :attr:`report`. The embedding model is, in order: the one
    given here, the ``embed_model`` the index was given, ``Settings.embed_model`` if
    the app has set it, else the offline MiniLM default (``default_embed_model``),
    never LlamaIndex's unset default (OpenAI, which needs a package and a key).
    Selection ranks chunks against one shared graph, so run ``IngestionPipeline`` with
    the default ``num_workers=None``: worker processes would each see only their batch.

    >>> from llama_index.core import Document
    >>> from llama_index.core.ingestion import IngestionPipeline
    >>> from llama_index.core.node_parser import SentenceSplitter
    >>> from shared_core import HashingEmbedder
    >>> from llama_index_conceptgraph import CoreChunkSelector, CoreEmbedding
    >>> selector = CoreChunkSelector(kappa=0.5, embed_model=CoreEmbedding(HashingEmbedder()))
    >>> docs = [Document(text="Ada Lovelace wrote the first program for the engine."),
    ...         Document(text="Charles Babbage designed the engine; Lovelace programmed it.")]
    >>> nodes = IngestionPipeline(transformations=[SentenceSplitter(), selector]).run(
    ...     documents=docs)
    >>> len(nodes), selector.report.chunks_total
    (1, 2)

    In a ``PropertyGraphIndex``: ``PropertyGraphIndex.from_documents(docs,
    transformations=[SentenceSplitter(), selector], kg_extractors=[...])``.
    """

    kappa: float = Field(default=0.8, gt=0.0, le=1.0,
                         description="Share of tokens (of chunks with select_by='chunks') "
                                     "kept for KG extraction.")
    prompt_tokens_per_chunk: int = Field(
        default=0, ge=0, description="Extractor prompt tokens per chunk, for the cost report.")

    _embed_model: BaseEmbedding | None = PrivateAttr(default=None)
    _config: ConceptGraphConfig | None = PrivateAttr(default=None)
    _index: ConceptGraphIndex | None = PrivateAttr(default=None)
    _selection: Selection | None = PrivateAttr(default=None)

    def __init__(
        self,
        kappa: float = 0.8,
        *,
        embed_model: BaseEmbedding | None = None,
        config: ConceptGraphConfig | None = None,
        index: ConceptGraphIndex | None = None,
        prompt_tokens_per_chunk: int = 0,
        **kwargs: Any,
    ) -> None:
        """``index`` continues an existing concept graph instead of starting a new one."""
        fields: dict[str, Any] = {"kappa": kappa,
                                  "prompt_tokens_per_chunk": prompt_tokens_per_chunk}
        super().__init__(**fields, **kwargs)
        if embed_model is not None and not isinstance(embed_model, BaseEmbedding):
            raise TypeError(
                f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}"
            )
        if config is not None and not isinstance(config, ConceptGraphConfig):
            raise TypeError(f"config must be a ConceptGraphConfig, got {type(config).__name__}")
        if index is not None and not isinstance(index, ConceptGraphIndex):
            raise TypeError(f"index must be a ConceptGraphIndex, got {type(index).__name__}")
        self._embed_model = embed_model
        self._config = config
        self._index = index

    @classmethod
    def from_defaults(
        cls,
        kappa: float = 0.8,
        embed_model: BaseEmbedding | None = None,
        config: ConceptGraphConfig | None = None,
        prompt_tokens_per_chunk: int = 0,
    ) -> CoreChunkSelector:
        return cls(kappa, embed_model=embed_model, config=config,
                   prompt_tokens_per_chunk=prompt_tokens_per_chunk)

    @classmethod
    def class_name(cls) -> str:
        return "CoreChunkSelector"

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        """Index ``nodes`` in the concept graph and return only the core ones, in input order.

        ``kwargs`` are whatever the caller passes to every transformation
        (``PropertyGraphIndex.from_documents`` forwards its own keyword arguments).
        """
        texts, ids, metadatas = nodes_to_records(nodes)
        if not texts:
            return []
        embedder = None
        if self._index is None:
            passed = kwargs.get("embed_model")
            if self._embed_model is None and isinstance(passed, BaseEmbedding):
                self._embed_model = passed
            self._embed_model = resolve_embed_model(self._embed_model)
            embedder = to_core_embedder(self._embed_model)
        core = select_core_chunks(
            texts, ids, metadatas, kappa=self.kappa, index=self._index, embedder=embedder,
            config=self._config, prompt_tokens_per_chunk=self.prompt_tokens_per_chunk,
            show_progress=bool(kwargs.get("show_progress", False)),
        )
        self._index, self._selection = core.index, core.selection
        return [node for node in nodes if core.keeps(node.node_id)]

    # ----------------------------------------------------------------- results
    @property
    def selection(self) -> Selection:
        """The latest selection: kept/dropped ids, scores and the cost report."""
        if self._selection is None:
            raise RuntimeError("CoreChunkSelector has not run yet: no selection to report")
        return self._selection

    @property
    def report(self) -> CostReport:
        return self.selection.report

    @property
    def index(self) -> ConceptGraphIndex:
        """The concept graph over every chunk seen so far (kept or not)."""
        if self._index is None:
            raise RuntimeError("CoreChunkSelector has not run yet: no concept graph built")
        return self._index

    def as_retriever(self, **kwargs: Any) -> ConceptGraphRetriever:
        """A retriever over the concept graph this selector built: no second embedding pass."""
        return ConceptGraphRetriever(self.index, self._embed_model, **kwargs)
