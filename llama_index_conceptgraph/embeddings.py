"""LlamaIndex embeddings and the core's ``Embedder`` protocol, in both directions.

The concept graph embeds sentences with whatever model the LlamaIndex app already
uses (any ``BaseEmbedding``, or one the app set as ``Settings.embed_model``), else
with the offline MiniLM default; conversely conceptgraph's own embedders (offline
MiniLM, the hashing embedder, cached OpenAI) can serve as a LlamaIndex embedding,
so one model embeds both the concept graph and the KG.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.settings import Settings

from shared_core.embeddings import Embedder, framework_model_id, minilm_embedder
from shared_core.pipeline import function_embedder

_DEFAULT_LOCK = threading.Lock()
_default_embedder: Embedder | None = None


def default_embed_model() -> CoreEmbedding:
    """The offline default: MiniLM (``shared_core.minilm_embedder``) as a ``CoreEmbedding``.

    The model is loaded once per process and shared (it takes seconds and ~90 MB);
    each call returns a fresh wrapper, so no LlamaIndex state is shared.
    """
    global _default_embedder
    with _DEFAULT_LOCK:
        if _default_embedder is None:
            try:
                _default_embedder = minilm_embedder()
            except ImportError as exc:
                raise ImportError(
                    f"no embed_model was given and Settings.embed_model is not set, so the "
                    f"offline default (MiniLM) is used, but it cannot load: {exc}"
                ) from exc
        return CoreEmbedding(_default_embedder)


def resolve_embed_model(embed_model: BaseEmbedding | None) -> BaseEmbedding:
    """The given embedding, else one the app set as ``Settings.embed_model``, else offline MiniLM.

    Reading ``Settings.embed_model`` when nothing was set would resolve LlamaIndex's
    default, OpenAI, which needs ``llama-index-embeddings-openai`` and a key, so it is
    read only when set. LlamaIndex has no public "is it set" check: ``_embed_model`` it is.
    """
    if embed_model is None:
        if Settings._embed_model is None:
            return default_embed_model()
        embed_model = Settings.embed_model  # set by the app: the getter only adds callbacks
    if not isinstance(embed_model, BaseEmbedding):
        raise TypeError(
            f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}"
        )
    return embed_model


def to_core_embedder(embed_model: BaseEmbedding, dim: int | None = None) -> Embedder:
    """Wrap a LlamaIndex embedding as the core's ``Embedder`` (unwrapping ``CoreEmbedding``).

    The model id recorded in a saved index is ``llama-index:<class>:<model_name>``,
    so loading with a different model is refused instead of silently mixing spaces.
    Without ``dim`` the width comes from ``embed_dim`` if the model states it, else
    from one probe embedding.
    """
    if isinstance(embed_model, CoreEmbedding):
        return embed_model.embedder
    if not isinstance(embed_model, BaseEmbedding):
        raise TypeError(
            f"embed_model must be a llama_index BaseEmbedding, got {type(embed_model).__name__}"
        )
    if dim is None:
        stated = getattr(embed_model, "embed_dim", None)
        dim = stated if isinstance(stated, int) and not isinstance(stated, bool) else None
    model_id = framework_model_id("llama-index", embed_model)
    return function_embedder(embed_model.get_text_embedding_batch, model_id, dim)


class CoreEmbedding(BaseEmbedding):
    """A conceptgraph ``Embedder`` as a LlamaIndex ``BaseEmbedding``.

    >>> from shared_core import HashingEmbedder
    >>> embed_model = CoreEmbedding(HashingEmbedder(64))
    >>> len(embed_model.get_text_embedding("Ada Lovelace"))
    64
    """

    _embedder: Embedder = PrivateAttr()

    def __init__(self, embedder: Embedder, **kwargs: Any) -> None:
        if not isinstance(embedder, Embedder):
            raise TypeError(
                f"embedder must implement the conceptgraph Embedder protocol, "
                f"got {type(embedder).__name__}"
            )
        kwargs.setdefault("model_name", embedder.model_id)
        super().__init__(**kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "ConceptGraphCoreEmbedding"

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return [[float(x) for x in row] for row in self._embedder.embed(texts)]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._get_text_embedding(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        # one batch in one thread: the default gathers a coroutine (and thread) per text
        return await asyncio.to_thread(self._get_text_embeddings, texts)
