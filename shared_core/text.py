"""Token counting, sentence splitting and token-window chunking, all offline.

The tokenizer (tiktoken cl100k_base) and the sentence model (NLTK punkt) are
read from the files llama-index-core ships under ``llama_index/core/_static``:
locating them does not import llama_index, and nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tiktoken
    from nltk.tokenize.punkt import PunktSentenceTokenizer

ENCODING_NAME = "cl100k_base"
# Sentence enders of Chinese and Japanese (ideographic full stop, its halfwidth
# form, fullwidth ! and ?), which punkt does not know; a run of them, and the
# closing quotes or brackets after it (」』”’）】〕〉》 and ASCII ) ], not the ambiguous
# ASCII quotes), stay with the sentence they end.
_CJK_SENTENCE_END = re.compile("[\u3002\uff61\uff01\uff1f]+"
                               "[\u300d\u300f\u201d\u2019\uff09\u3011\u3015\u3009\u300b)\\]]*")


def invalid_character(text: str) -> tuple[int, str] | None:
    """The first character no text may hold, as (offset, description), else None.

    Lone surrogates (``"\\ud800"``, which JSON can carry and Python strings can
    hold, but UTF-8 cannot encode) break hashing, saving and every embedding API;
    NUL characters are cut off or rejected by C libraries and SQLite text. Such
    text is rejected, never cleaned: a cleaned text would no longer be the one the
    caller holds, so its offsets, hashes and ids would silently stop matching.
    Both checks run in C (``str.encode``, ``str.find``), as every chunk passes here.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        nul = text.find("\x00", 0, exc.start)
        if nul >= 0:
            return nul, "a NUL character"
        return exc.start, f"a lone surrogate (U+{ord(text[exc.start]):04X})"
    nul = text.find("\x00")
    return (nul, "a NUL character") if nul >= 0 else None


def check_query(query: object) -> str:
    """A query as a usable str, or an error that says what is wrong with it, in words."""
    if not isinstance(query, str):
        raise TypeError(f"the query must be a str, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("the query is empty or blank: pass the question to retrieve for")
    bad = invalid_character(query)
    if bad is not None:
        raise ValueError(f"the query contains {bad[1]} at character {bad[0]}")
    return query


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


@lru_cache(maxsize=1)
def _sentence_tokenizer() -> PunktSentenceTokenizer:
    import nltk.data
    from nltk.tokenize.punkt import PunktTokenizer

    nltk_dir = static_data_dir() / "nltk_cache"
    if not (nltk_dir / "tokenizers" / "punkt_tab" / "english").is_dir():
        raise RuntimeError(f"offline NLTK punkt_tab model not found in {nltk_dir}")
    if str(nltk_dir) not in nltk.data.path:
        nltk.data.path.append(str(nltk_dir))
    return PunktTokenizer("english")


def count_tokens(text: str) -> int:
    """cl100k_base tokens in ``text`` (special-token strings count as plain text)."""
    return len(_encoding().encode_ordinary(text))


def count_tokens_batch(texts: Sequence[str]) -> np.ndarray:
    """Token counts for many texts at once, as an int64 array."""
    # a plain loop: tiktoken's threaded batch API is slower for many short texts
    encode = _encoding().encode_ordinary
    return np.fromiter((len(encode(t)) for t in texts), dtype=np.int64, count=len(texts))


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text``; they cover every non-space character.

    Spans rather than strings, so a sentence can always be traced back to its
    place in the chunk (and persisted as two integers).
    """
    spans = list(_sentence_tokenizer().span_tokenize(text))
    if not spans and text.strip():
        start = len(text) - len(text.lstrip())
        spans = [(start, len(text.rstrip()))]
    if _CJK_SENTENCE_END.search(text) is None:
        return spans
    return [piece for span in spans for piece in _split_after_cjk_enders(text, *span)]


def _split_after_cjk_enders(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Cut ``text[start:end]`` after each run of CJK sentence enders.

    A piece after a cut starts at its first non-space character; a piece ends
    right after an ender, so no piece gains leading or trailing whitespace.
    """
    pieces: list[tuple[int, int]] = []
    for match in _CJK_SENTENCE_END.finditer(text, start, end):
        if match.end() >= end:
            break
        pieces.append((start, match.end()))
        start = match.end()
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        pieces.append((start, end))
    return pieces


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
