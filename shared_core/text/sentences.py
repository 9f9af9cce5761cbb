"""Sentence splitting, offline: NLTK punkt plus the CJK sentence enders.

The punkt model is read from the files llama-index-core ships under
``llama_index/core/_static`` (:func:`shared_core.text.tokens.static_data_dir`);
nothing is ever downloaded. :func:`segment_matrix` maps sentence ranges (chunks,
units) to their sentences.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from .tokens import static_data_dir

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

# Sentence enders of Chinese and Japanese (ideographic full stop, its halfwidth
# form, fullwidth ! and ?), which punkt does not know; a run of them, and the
# closing quotes or brackets after it (」』”’）】〕〉》 and ASCII ) ], not the ambiguous
# ASCII quotes), stay with the sentence they end.
_CJK_SENTENCE_END = re.compile("[\u3002\uff61\uff01\uff1f]+"
                               "[\u300d\u300f\u201d\u2019\uff09\u3011\u3015\u3009\u300b)\\]]*")


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


def concatenated_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(s, e)`` for every pair, without a Python loop."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(ends, dtype=np.int64) - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    segment = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.arange(total, dtype=np.int64) - np.repeat(segment - starts, lengths)


def segment_matrix(offsets: np.ndarray, n_sentences: int) -> sp.csr_matrix:
    """0/1 (segments x sentences) matrix of consecutive sentence ranges given by offsets."""
    return sp.csr_matrix(
        (np.ones(n_sentences, dtype=np.int32), np.arange(n_sentences), offsets),
        shape=(len(offsets) - 1, n_sentences),
    )
