"""Chinese, Japanese and Korean text: segmentation into terms, and retrieval that needs it."""

from __future__ import annotations

import re
import sys
import unicodedata

import numpy as np
import pytest

from shared_core import ConceptGraphIndex
from shared_core.config import ConceptGraphConfig
from shared_core.embeddings import FunctionEmbedder, HashingEmbedder
from shared_core.text import resolve_cjk_segmenter, term_analyzer

bigram = term_analyzer(cjk_segmenter="bigram")
jieba = term_analyzer(cjk_segmenter="jieba")


# ------------------------------------------------------------------ bigrams
def test_bigram_mode_cuts_a_run_into_overlapping_pairs() -> None:
    # 日本的首都 (five characters) -> its four adjacent pairs
    assert bigram("日本的首都") == ["日本", "本的", "的首", "首都"]
    # two runs split at the comma: 3 characters give 2 pairs, 2 characters give 1
    assert bigram("东京都，大阪") == ["东京", "京都", "大阪"]


def test_bigram_mode_single_character_runs_need_min_chars_1() -> None:
    # "水" and "火" stand alone: kept only when min_chars allows one character
    assert bigram("水 火山") == ["火山"]
    assert term_analyzer(min_chars=1, cjk_segmenter="bigram")("x 水 火山") == ["x", "水", "火山"]


def test_bigram_mode_min_chars_above_two_keeps_the_bigrams() -> None:
    # min_chars 3 drops the 2-letter English word "ab", but a CJK word needs only
    # min(3, 2) = 2 characters, so the bigrams stay
    assert term_analyzer(min_chars=3, cjk_segmenter="bigram")("ab abc 首都") == ["abc", "首都"]


def test_bigram_mode_japanese_and_korean() -> None:
    # kana and kanji form one run: 東京は日本の首都です -> nine pairs
    assert bigram("東京は日本の首都です") == [
        "東京", "京は", "は日", "日本", "本の", "の首", "首都", "都で", "です"]
    # Korean: space-separated words, each cut into pairs
    assert bigram("서울은 한국의 수도") == ["서울", "울은", "한국", "국의", "수도"]
    # the long-vowel mark ー is part of a katakana word, the middle dot ・ separates words
    assert bigram("コーヒー") == ["コー", "ーヒ", "ヒー"]
    assert bigram("ジョン・スミス") == ["ジョ", "ョン", "スミ", "ミス"]


def test_bigram_mode_covers_the_documented_blocks() -> None:
    # one character from each block, paired with 人 (U+4EBA) so each gives one bigram:
    # Extension A U+3400, Compatibility U+F900, Extension B U+20000, iteration mark
    # U+3005, halfwidth katakana U+FF71
    for ch in ("\u3400", "\uf900", "\U00020000", "\u3005", "\uff71"):
        assert bigram("人" + ch) == ["人" + ch], hex(ord(ch))


def test_every_assigned_cjk_character_is_a_word_character() -> None:
    """No character the segmenter treats as CJK is punctuation to the old ``\\w`` rule."""
    one = term_analyzer(min_chars=1, cjk_segmenter="bigram")
    blocks = [(0x3041, 0x3096), (0x309D, 0x309F), (0x30A1, 0x30FA), (0x30FC, 0x30FF),
              (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0xF900, 0xFAFF), (0xFF66, 0xFF9F)]
    for low, high in blocks:
        for code in range(low, high + 1):
            ch = chr(code)
            if unicodedata.category(ch) == "Cn":  # unassigned in this Python's Unicode
                continue
            assert re.fullmatch(r"\w", ch), hex(code)
            assert one(ch) == [ch], hex(code)
    # CJK punctuation separates runs: 、 。 ， ・ 「 」
    assert bigram("日本、中国。韩国，美国・英国「法国」") == [
        "日本", "中国", "韩国", "美国", "英国", "法国"]


# ------------------------------------------------------------------ jieba
def test_jieba_mode_cuts_words_and_drops_single_characters() -> None:
    # jieba: 日本 / 的 / 首都 / 是 / 哪里; the particles 的 and 是 are one character
    assert jieba("日本的首都是哪里") == ["日本", "首都", "哪里"]
    assert term_analyzer(min_chars=1, cjk_segmenter="jieba")("日本的首都") == [
        "日本", "的", "首都"]


def test_jieba_mode_bigrams_kana_and_hangul() -> None:
    # Han runs 東京, 日本, 首都 go to jieba (one word each); the kana runs は and の
    # are single characters (dropped) and です is one bigram
    assert jieba("東京は日本の首都です") == ["東京", "日本", "首都", "です"]
    assert jieba("서울은 한국의 수도") == ["서울", "울은", "한국", "국의", "수도"]


# ------------------------------------------------------------------ mixed and "none"
def test_mixed_english_and_chinese_keep_text_order() -> None:
    text = "Python是一种编程语言 by NASA"
    # English as always ("by" is a stop word); the CJK run 是一种编程语言 in place
    assert bigram(text) == ["python", "是一", "一种", "种编", "编程", "程语", "语言", "nasa"]
    # jieba's dictionary: 是 / 一种 / 编程语言
    assert jieba(text) == ["python", "一种", "编程语言", "nasa"]
    # a CJK run inside a word splits it: abc / 日本 / def
    assert bigram("abc日本def") == ["abc", "日本", "def"]


def test_ngrams_run_over_the_mixed_token_stream() -> None:
    analyze = term_analyzer(ngram_max=2, cjk_segmenter="jieba")
    # stream: 东京, tokyo, 首都 (的 dropped) -> unigrams then adjacent pairs
    assert analyze("东京 Tokyo 的首都") == ["东京", "tokyo", "首都", "东京 tokyo", "tokyo 首都"]


def test_none_mode_is_the_old_regex() -> None:
    none = term_analyzer(cjk_segmenter="none")
    # a CJK run is one word, glued to adjacent Latin letters, as before segmentation
    assert none("日本的首都 is the Capital") == ["日本的首都", "capital"]
    assert none("abc日本def 水") == ["abc日本def"]
    assert term_analyzer(min_chars=1, cjk_segmenter="none")("水") == ["水"]


# ------------------------------------------------------------------ choosing a segmenter
def test_auto_resolves_to_jieba_when_rjieba_imports() -> None:
    assert resolve_cjk_segmenter("auto") == "jieba"  # rjieba is a dev dependency
    for concrete in ("jieba", "bigram", "none"):
        assert resolve_cjk_segmenter(concrete) == concrete
    with pytest.raises(ValueError, match="cjk_segmenter must be one of"):
        resolve_cjk_segmenter("mecab")


def test_without_rjieba_auto_is_bigram_and_jieba_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rjieba", None)  # makes `import rjieba` fail
    assert resolve_cjk_segmenter("auto") == "bigram"
    with pytest.raises(ImportError, match=re.escape("pip install 'conceptgraph[cjk]'")):
        term_analyzer(cjk_segmenter="jieba")
    assert term_analyzer(cjk_segmenter="bigram")("首都") == ["首都"]


def test_term_analyzer_takes_only_concrete_segmenters() -> None:
    with pytest.raises(ValueError, match="resolve 'auto' with resolve_cjk_segmenter"):
        term_analyzer(cjk_segmenter="auto")
    with pytest.raises(ValueError, match="jieba, bigram or none, got 'mecab'"):
        term_analyzer(cjk_segmenter="mecab")


def test_config_knob_is_validated() -> None:
    assert ConceptGraphConfig().cjk_segmenter == "auto"
    assert ConceptGraphConfig(cjk_segmenter="bigram").cjk_segmenter == "bigram"
    with pytest.raises(ValueError, match="cjk_segmenter must be one of auto, jieba, bigram, none"):
        ConceptGraphConfig(cjk_segmenter="mecab")  # type: ignore[arg-type]


# ------------------------------------------------------------------ retrieval
# Each distractor shares a term with the query 日本的首都是哪里 ("where is the capital
# of Japan"): 北京/首尔 passages say 首都 (capital), 大阪/富士山 passages say 日本 (Japan).
# Only the first passage holds both.
CHINESE = [
    "东京是日本的首都，也是日本最大的城市。",
    "北京是中国的首都，有三千多年的历史。",
    "大阪是日本的第二大城市，以美食闻名。",
    "富士山是日本最高的山峰，海拔三千七百多米。",
    "首尔是韩国的首都，位于汉江边。",
    "长城是中国古代的军事防御工程。",
    "熊猫主要生活在中国四川的山区。",
]
IDS = ["tokyo", "beijing", "osaka", "fuji", "seoul", "wall", "panda"]


def char_bigram_embedder(dim: int = 4096) -> FunctionEmbedder:
    """HashingEmbedder over the character bigrams of each ``\\w+`` run.

    HashingEmbedder itself hashes whole ``\\w+`` runs, so to it a Chinese clause is
    one word and every query-sentence cosine here is 0; retrieval would then be
    decided by id order. This stands in for a multilingual model, and cuts text
    the same way whatever the index's ``cjk_segmenter``; 4096 buckets keep hash
    collisions among the corpus's ~70 bigrams rare.
    """
    hashing = HashingEmbedder(dim)

    def embed(texts: list[str]) -> np.ndarray:
        grams = [" ".join(run[i : i + 2] for run in re.findall(r"\w+", t)
                          for i in range(max(1, len(run) - 1))) for t in texts]
        return hashing.embed(grams)

    return FunctionEmbedder(embed, f"hashing-char-bigrams-{dim}", dim)


@pytest.mark.parametrize(("segmenter", "words"), [
    ("jieba", {"日本", "首都"}),
    ("bigram", {"日本", "本的", "的首", "首都"}),
])
def test_chinese_query_retrieves_the_passage_that_answers_it(segmenter: str,
                                                              words: set[str]) -> None:
    for exact in (False, True):
        index = ConceptGraphIndex.from_texts(
            CHINESE, ids=IDS, embedder=char_bigram_embedder(),
            config=ConceptGraphConfig(cjk_segmenter=segmenter,  # type: ignore[arg-type]
                                      exact_match_seeds=exact, concepts_per_chunk=20),
        )
        assert index.config.cjk_segmenter == segmenter
        result = index.retrieve("日本的首都是哪里")
        # the query's bigrams 日本 本的 的首 首都 都是 是哪 哪里: 东京是日本的首都 shares
        # four, more than any other sentence (北京/首尔 two, 大阪 two), and the tokyo
        # passage alone holds both query words (BM25)
        assert result.chunks[0].id == "tokyo", exact
    # exact matching seeds with the query's terms that are concepts (with 20 per chunk,
    # every term: the longest passage, 富士山..., has 10 + 7 = 17 distinct bigrams), so
    # the query and the chunks were cut into the same words; and no concept is a clause
    assert words <= set(result.direct_concepts)
    assert not any(len(c) > 4 for c in result.direct_concepts)


def test_without_segmentation_concepts_are_whole_clauses() -> None:
    index = ConceptGraphIndex.from_texts(
        CHINESE, ids=IDS, embedder=char_bigram_embedder(),
        config=ConceptGraphConfig(cjk_segmenter="none", exact_match_seeds=True))
    result = index.retrieve("日本的首都是哪里")
    # "none" keeps the old analysis: a clause between punctuation is one term, and the
    # query, one clause found nowhere in the corpus, seeds nothing exactly
    assert "东京是日本的首都" in result.direct_concepts
    assert not {"日本", "首都", "日本的首都是哪里"} & set(result.direct_concepts)


def test_an_index_records_the_resolved_segmenter() -> None:
    index = ConceptGraphIndex.from_texts(CHINESE, ids=IDS, embedder=HashingEmbedder())
    assert index.config.cjk_segmenter == "jieba"  # "auto", settled when the index is made
