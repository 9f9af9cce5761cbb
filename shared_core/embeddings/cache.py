"""A content-hash cache so no text is embedded twice, and embedders by name or model id.

``CachedEmbedder`` wraps any embedder with a persistent SQLite cache keyed by
(model id, sha256 of the text): a re-run, or a second index over overlapping
text, only pays for new text.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import Embedder, check_texts, normalise_rows
from .models import (
    _OPENAI_DIMS,
    BF16_SUFFIX,
    MINILM_MODEL_ID,
    OPENAI_DEFAULT_MODEL,
    HashingEmbedder,
    OpenAIEmbedder,
    Precision,
    minilm_embedder,
)


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

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Sent to another process as its file, reopened there (an in-memory cache
        travels empty: it has no file to share)."""
        return (EmbeddingCache, (self.path, self.timeout))

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


def resolve_embedder(name: str, cache_path: str | Path | None = None,
                     precision: Precision = "auto") -> CachedEmbedder:
    """An embedder by CLI name (``minilm``, ``openai``, ``hashing``) with the persistent cache.

    ``precision`` is MiniLM's (``auto``: bf16 where the hardware computes it natively);
    the other embedders have one precision, so anything but ``auto`` is refused for them.
    """
    ids = {"hashing": HashingEmbedder().model_id,
           "openai": f"openai/{OPENAI_DEFAULT_MODEL}@{_OPENAI_DIMS[OPENAI_DEFAULT_MODEL]}"}
    if name == "minilm":
        return CachedEmbedder(minilm_embedder(precision=precision),
                              EmbeddingCache(cache_path or default_cache_path()))
    if precision != "auto":
        raise ValueError(f"precision={precision!r} is MiniLM's; the {name} embedder has one")
    if name not in ids:
        raise ValueError(f"unknown embedder {name!r}; choose minilm, openai or hashing")
    return embedder_for_model_id(ids[name], cache_path)


def embedder_for_model_id(model_id: str, cache_path: str | Path | None = None) -> CachedEmbedder:
    """Recreate the embedder an index was built with, from the model id it recorded."""
    inner: Embedder
    if model_id == MINILM_MODEL_ID:
        inner = minilm_embedder(precision="fp32")
    elif model_id == MINILM_MODEL_ID + BF16_SUFFIX:
        inner = minilm_embedder(precision="bf16")
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
