"""Token counting and token-window chunking, all offline.

The tokenizer (tiktoken cl100k_base) is read from the files llama-index-core
ships under ``llama_index/core/_static`` (:func:`static_data_dir`, shared with
the sentence model in :mod:`shared_core.text.sentences`): locating them does not
import llama_index, and nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tiktoken


ENCODING_NAME = "cl100k_base"
# below this many texts per core, one loop: a pool costs more than it saves
PARALLEL_TEXTS_PER_WORKER = 2000


def static_data_dir() -> Path:
    """The directory of tokenizer files bundled with llama-index-core."""
    override = os.environ.get("CONCEPTGRAPH_STATIC_DIR")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("llama_index.core")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "llama-index-core is not installed; it ships the offline tiktoken and NLTK "
            "files conceptgraph needs (or set CONCEPTGRAPH_STATIC_DIR)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "_static"


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    cache_dir = static_data_dir() / "tiktoken_cache"
    if not cache_dir.is_dir():
        raise RuntimeError(f"offline tiktoken files not found in {cache_dir}")
    # tiktoken reads this variable on every load; setting it only when unset
    # respects a user's own cache.
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache_dir))
    import tiktoken

    return tiktoken.get_encoding(ENCODING_NAME)


def load_tokenizer() -> None:
    """Read the tokenizer's files now (about 0.12 s, once a process) rather than at the
    first count: a load calls this beside its reads, so its first query does not."""
    _encoding()


def count_tokens(text: str) -> int:
    """cl100k_base tokens in ``text`` (special-token strings count as plain text)."""
    return len(_encoding().encode_ordinary(text))


def count_tokens_batch(texts: Sequence[str]) -> np.ndarray:
    """Token counts for many texts at once, as an int64 array.

    tiktoken's threaded batch API hands each text to the pool, which is slower than
    a plain loop for many short texts; here each core loops over a contiguous slice
    instead (tiktoken releases the GIL while it encodes). A load recounts every
    chunk, so this is most of what a load of many short chunks spends on tokens.
    """
    encode = _encoding().encode_ordinary

    def count(piece: Sequence[str]) -> np.ndarray:
        return np.fromiter((len(encode(t)) for t in piece), dtype=np.int64, count=len(piece))

    workers = min(os.cpu_count() or 1, len(texts) // PARALLEL_TEXTS_PER_WORKER)
    if workers < 2:
        return count(texts)
    bounds = np.linspace(0, len(texts), workers + 1).astype(int)
    with ThreadPoolExecutor(workers) as pool:
        return np.concatenate(list(pool.map(
            count, [texts[bounds[i]:bounds[i + 1]] for i in range(workers)])))


def chunk_by_tokens(text: str, size: int, overlap: int) -> list[str]:
    """Split ``text`` into windows of ``size`` tokens, consecutive windows sharing ``overlap``.

    This is the papers' preprocessing (1200-token chunks, 100-token overlap).
    """
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    if not isinstance(overlap, int) or not 0 <= overlap < size:
        raise ValueError(f"overlap must be an int in [0, size), got {overlap!r}")
    enc = _encoding()
    tokens = enc.encode_ordinary(text)
    if not tokens:
        return []
    step = size - overlap
    windows: list[str] = []
    for start in range(0, len(tokens), step):
        windows.append(enc.decode(tokens[start : start + size]))
        if start + size >= len(tokens):
            break
    return windows
