"""Embedders: the protocols, the models, and the content-hash cache."""

from ..openai_endpoint import OPENAI_PLACEHOLDER_KEY
from .base import (
    EMBED_BATCH,
    Embedder,
    QueryEmbedder,
    check_texts,
    embed_query,
    framework_model_id,
    normalise_rows,
    same_model,
    unit_norm_rows,
)
from .cache import (
    CachedEmbedder,
    EmbeddingCache,
    default_cache_path,
    embedder_for_model_id,
    resolve_embedder,
)
from .models import (
    MINILM_MODEL_ID,
    OPENAI_DEFAULT_MODEL,
    FunctionEmbedder,
    HashingEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    minilm_embedder,
)

__all__ = [
    "EMBED_BATCH",
    "MINILM_MODEL_ID",
    "OPENAI_DEFAULT_MODEL",
    "OPENAI_PLACEHOLDER_KEY",
    "CachedEmbedder",
    "Embedder",
    "EmbeddingCache",
    "FunctionEmbedder",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "QueryEmbedder",
    "SentenceTransformerEmbedder",
    "check_texts",
    "default_cache_path",
    "embed_query",
    "embedder_for_model_id",
    "framework_model_id",
    "minilm_embedder",
    "normalise_rows",
    "resolve_embedder",
    "same_model",
    "unit_norm_rows",
]
