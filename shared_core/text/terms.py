"""Terms: the analyzer that cuts text into terms, and sentence x term counts.

Terms are counted per sentence once, into a sparse sentence x term matrix with a
vocabulary that only grows (:func:`count_terms`), so adding chunks only
tokenizes the new text.

Chinese, Japanese and Korean are written without spaces between words, so a
``\\w+`` word there is a whole clause, and a query shares no term with the text
that answers it. Runs of CJK characters are therefore cut out and segmented:
into words by jieba (the ``rjieba`` binding, dictionary included, offline) or
into overlapping character bigrams (Lucene's CJKAnalyzer), see ``term_analyzer``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Literal, cast

import numpy as np
import scipy.sparse as sp

from .stop_words import ENGLISH_STOP_WORDS

Analyzer = Callable[[str], list[str]]


# what ConceptGraphConfig.cjk_segmenter may hold once "auto" is settled
ResolvedCjkSegmenter = Literal["jieba", "bigram", "none"]


CJK_SEGMENTERS = ("auto", "jieba", "bigram", "none")


# Han ideographs: CJK Unified Ideographs (U+4E00-9FFF), Extension A (U+3400-4DBF),
# Compatibility Ideographs (U+F900-FAFF), Extensions B-H and the Compatibility
# Supplement (U+20000-2FA1F, U+30000-323AF), and the ideographic iteration mark and
# zero (々 U+3005, 〆 U+3006, 〇 U+3007). These go to jieba in "jieba" mode.
_HAN = ("\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
        "\U00020000-\U0002fa1f\U00030000-\U000323af")


# Kana and Hangul syllables: Hiragana (U+3041-3096, U+309D-309F), Katakana (U+30A1-30FA,
# U+30FC-30FF: the middle dot U+30FB is punctuation), Katakana Phonetic Extensions
# (U+31F0-31FF), halfwidth Katakana (U+FF66-FF9F) and Hangul Syllables (U+AC00-D7A3).
# Combining sound marks (U+3099-309C) are left out, as ``\w`` leaves them out.
_KANA_HANGUL = ("\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff"
                "\uff66-\uff9f\uac00-\ud7a3")


_CJK = _HAN + _KANA_HANGUL


_CJK_CHAR = re.compile(f"[{_CJK}]")


# a CJK run, or a maximal run of the other word characters
_CJK_OR_WORD = re.compile(f"([{_CJK}]+)|[^\\W{_CJK}]+")


_HAN_OR_OTHER = re.compile(f"([{_HAN}]+)|[{_KANA_HANGUL}]+")


def resolve_cjk_segmenter(value: str) -> ResolvedCjkSegmenter:
    """The concrete segmenter for a ``cjk_segmenter`` setting: ``"auto"`` becomes
    ``"jieba"`` if ``rjieba`` imports, else ``"bigram"``.

    An index resolves "auto" once, when it is created, and stores the result, so
    its analysis never depends on what the machine that loads it has installed.
    """
    if value not in CJK_SEGMENTERS:
        raise ValueError(f"cjk_segmenter must be one of {', '.join(CJK_SEGMENTERS)}; "
                         f"got {value!r}")
    if value != "auto":
        return cast(ResolvedCjkSegmenter, value)
    try:
        import rjieba  # noqa: F401
    except ImportError:
        return "bigram"
    return "jieba"


def term_analyzer(ngram_max: int = 1, min_chars: int = 2,
                  cjk_segmenter: str = "bigram", entities: bool = False) -> Analyzer:
    """Lowercased word n-grams without English stop words (scikit-learn's list).

    N-grams are built over the stop-word-free token stream, as scikit-learn's
    ``TfidfVectorizer`` does. Words are maximal runs of ``\\w`` of at least
    ``min_chars`` characters, except runs of CJK characters (Han, kana, Hangul),
    which ``cjk_segmenter`` cuts into words, in place, so n-grams still follow the
    text:

    - ``"jieba"``: Han runs by jieba's accurate mode (``rjieba.cut``); kana and
      Hangul runs, which jieba's Chinese dictionary cannot cut, as bigrams;
    - ``"bigram"``: overlapping character bigrams of each run (``日本的`` gives
      ``日本, 本的``), a one-character run gives that character;
    - ``"none"``: no segmentation, a CJK run is a word like any other (the
      analysis of indexes saved before segmentation existed).

    A CJK character carries a syllable's worth of meaning, so a CJK word needs
    ``min(min_chars, 2)`` characters: single characters (jieba's particle ``的``)
    go unless ``min_chars`` is 1, and a ``min_chars`` above 2 never drops every
    bigram of a Chinese corpus. ``"auto"`` is not accepted here: resolve it with
    ``resolve_cjk_segmenter`` first, so the choice is made, and recorded, once.

    ``entities`` adds each multi-word proper name as one more term
    (:func:`entity_phrases`), after the words, so "Ermengarde of Tours" is a
    term of its own as well as ``ermengarde`` and ``tours``.
    """
    if cjk_segmenter not in ("jieba", "bigram", "none"):
        raise ValueError(
            f"term_analyzer needs cjk_segmenter jieba, bigram or none, got {cjk_segmenter!r}"
            + ("; resolve 'auto' with resolve_cjk_segmenter first"
               if cjk_segmenter == "auto" else "")
        )
    pattern = re.compile(rf"\b\w{{{min_chars},}}\b")
    stop = ENGLISH_STOP_WORDS
    cjk_min = min(min_chars, 2)
    cut: Callable[[str], list[str]] | None = None
    if cjk_segmenter == "jieba":
        try:
            import rjieba
        except ImportError as exc:
            raise ImportError(
                "cjk_segmenter='jieba' needs the rjieba package: "
                "pip install 'conceptgraph[cjk]' (or use cjk_segmenter='bigram')"
            ) from exc
        cut = rjieba.cut

    def segment(run: str) -> Iterator[str]:
        if cut is None:
            yield from _bigrams(run)
            return
        for piece in _HAN_OR_OTHER.finditer(run):
            yield from (cut(piece.group()) if piece.group(1) else _bigrams(piece.group()))

    def words(text: str) -> list[str]:
        # isascii() is O(1) in CPython: most English text skips the CJK scan entirely
        if cjk_segmenter == "none" or text.isascii() or _CJK_CHAR.search(text) is None:
            return [t for t in pattern.findall(text) if t not in stop]
        tokens: list[str] = []
        for match in _CJK_OR_WORD.finditer(text):
            word = match.group()
            if match.group(1):
                tokens.extend(w for w in segment(word) if len(w) >= cjk_min)
            elif len(word) >= min_chars and word not in stop:
                tokens.append(word)
        return tokens

    def analyze(text: str) -> list[str]:
        tokens = words(text.lower())
        names = entity_phrases(text) if entities else []
        if ngram_max == 1:
            return tokens + names if names else tokens
        grams = list(tokens)
        for n in range(2, ngram_max + 1):
            grams.extend(" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
        return grams + names

    return analyze


# Lower-case words that may join the capitalised words of one name ("Ermengarde of
# Tours", "Leonardo da Vinci", "Harrison and Barrison"), never start or end it.
NAME_CONNECTORS = frozenset({"of", "the", "and", "de", "la", "le", "du", "des", "von", "van",
                             "der", "den", "di", "da", "del", "y", "el", "al", "bin", "ibn"})
MAX_NAME_WORDS = 6
_NAME_WORD = re.compile(r"\w+(?:['’]\w+)*")


# Capitalised words that open sentences rather than names ("In Paris", "The Beatles").
NAME_OPENERS = frozenset({
    "a", "an", "the", "in", "on", "at", "of", "for", "from", "by", "with", "to", "into", "he",
    "she", "it", "they", "we", "i", "you", "his", "her", "its", "their", "our", "this", "that",
    "these", "those", "there", "here", "when", "after", "before", "during", "while", "as",
    "but", "and", "or", "if", "since", "although", "however", "which", "who", "whom", "whose",
    "what", "where", "why", "how", "then", "also",
})


def entity_phrases(text: str) -> list[str]:
    """Multi-word proper names in ``text``, lowercased, in order of appearance.

    A name is a run of at least two capitalised words (first letter upper case),
    possibly joined by :data:`NAME_CONNECTORS`, inside one stretch of text
    without punctuation, of at most ``MAX_NAME_WORDS`` words. A capitalised
    sentence opener (:data:`NAME_OPENERS`: "In Paris", "The Beatles") does not
    start a name. A run joined by "and" also gives its parts, so "John Lennon and
    Paul McCartney" names both, and "Harrison and Barrison" stays one title. No
    model, no gazetteer: names are what the text's own capitals say, as titles
    and entity mentions are written in English Wikipedia-style corpora.
    """
    names: list[str] = []
    for stretch in re.split(r"[^\w\s'’]+", text):
        run: list[str] = []  # capitalised words and the connectors between them
        for word in [*_NAME_WORD.findall(stretch), ""]:
            capital = word[:1].isupper()
            opens = capital and (bool(run) or word.lower() not in NAME_OPENERS)
            if opens or (run and word in NAME_CONNECTORS):
                run.append(word)
            else:
                names.extend(_names_in_run(run))
                run = [word] if capital and word.lower() not in NAME_OPENERS else []
    return names


def _names_in_run(run: list[str]) -> list[str]:
    """The name a run of capitalised words and connectors spells, and its "and" parts."""
    while run and not run[-1][:1].isupper():
        run = run[:-1]
    if sum(w[:1].isupper() for w in run) < 2:
        return []
    too_long = len(run) > MAX_NAME_WORDS
    out = [] if too_long else [" ".join(run).lower()]
    # parts joined by "and" are names too; a run too long to be one name is cut at connectors
    cuts = [i for i, w in enumerate(run) if w == "and"] or (
        [i for i, w in enumerate(run) if w in NAME_CONNECTORS] if too_long else [])
    for start, end in zip([-1, *cuts], [*cuts, len(run)], strict=True):
        part = run[start + 1:end]
        if 0 < len(part) < len(run):
            out.extend(_names_in_run(part))
    return out


def _bigrams(run: str) -> list[str]:
    """Overlapping character bigrams; a single character stands for itself."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def count_terms(
    texts: Sequence[str], vocabulary: dict[str, int], analyzer: Analyzer
) -> sp.csr_matrix:
    """Term counts of ``texts`` as CSR; unseen terms are appended to ``vocabulary``."""
    indptr = [0]
    indices: list[int] = []
    for text in texts:
        for term in analyzer(text):
            idx = vocabulary.get(term)
            if idx is None:
                idx = len(vocabulary)
                vocabulary[term] = idx
            indices.append(idx)
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.int32)
    matrix = sp.csr_matrix(
        (data, np.asarray(indices, dtype=np.int64), np.asarray(indptr, dtype=np.int64)),
        shape=(len(texts), len(vocabulary)),
    )
    matrix.sum_duplicates()
    return matrix
