"""Offline token counting, sentence spans and token-window chunking."""

from __future__ import annotations

import itertools

import pytest

from shared_core.text import (
    chunk_by_tokens,
    count_tokens,
    count_tokens_batch,
    invalid_character,
    split_sentences,
)
from shared_core.text.tokens import _encoding

# Thirteen colour words; each is one cl100k_base token with or without a leading space.
WORDS = ["red", "green", "blue", "yellow", "orange", "purple", "black", "white", "brown",
         "pink", "gray", "silver", "gold"]


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("hello world", [15339, 1917]),         # "hello" + " world"
        ("Hello, world!", [9906, 11, 1917, 0]),  # "Hello" "," " world" "!"
        ("", []),
    ],
)
def test_count_tokens_matches_known_cl100k_ids(text: str, ids: list[int]) -> None:
    assert count_tokens(text) == len(ids)
    assert _encoding().encode_ordinary(text) == ids
    assert _encoding().name == "cl100k_base"


def test_special_token_strings_count_as_plain_text() -> None:
    # encode_ordinary: "<|endoftext|>" is several ordinary tokens, never one special token,
    # and never an error
    n = count_tokens("<|endoftext|>")
    assert n > 1
    assert n == len(_encoding().encode("<|endoftext|>", disallowed_special=()))


def test_count_tokens_batch_agrees_with_single() -> None:
    texts = ["hello world", "Hello, world!", "a", "red green blue"]
    counts = count_tokens_batch(texts)
    assert counts.dtype.kind == "i"
    assert counts.tolist() == [2, 4, 1, 3]  # red/ green/ blue: one token each


def test_count_tokens_batch_in_parallel_keeps_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enough texts for a pool: each count lands at its own text's position."""
    import shared_core.text.tokens as tokens

    monkeypatch.setattr(tokens, "PARALLEL_TEXTS_PER_WORKER", 3)
    monkeypatch.setattr(tokens.os, "cpu_count", lambda: 4)
    texts = ["a", "hello world", "Hello, world!", "red green blue"] * 5 + ["a"]
    assert count_tokens_batch(texts).tolist() == [1, 2, 4, 3] * 5 + [1]


def test_split_sentences_spans_of_three_sentences() -> None:
    text = "The cat sat. The dog ran. A bird flew."
    # "The cat sat." is chars 0..12, a space, "The dog ran." 13..25, a space, then 26..38
    assert split_sentences(text) == [(0, 12), (13, 25), (26, 38)]


def test_split_sentences_without_terminal_punctuation_is_one_span() -> None:
    text = "  no full stop here  "
    spans = split_sentences(text)
    # one sentence; punkt may keep the leading blanks, but no non-space char is lost
    assert len(spans) == 1
    assert text[spans[0][0]:spans[0][1]].strip() == "no full stop here"


def test_split_sentences_of_blank_text_is_empty() -> None:
    assert split_sentences("   ") == []
    assert split_sentences("") == []


def test_split_sentences_cuts_after_cjk_enders() -> None:
    text = "东京是日本的首都。大阪是第二大城市！"
    # 东京是日本的首都 is 8 characters, 。 the 9th: (0, 9); then 8 more and ！: (9, 18)
    assert split_sentences(text) == [(0, 9), (9, 18)]
    # halfwidth ｡ and fullwidth ？ end sentences too
    assert split_sentences("はい｡いいえ？") == [(0, 3), (3, 7)]
    # a run of enders stays together: 什么？！？ (0, 5), 真的。 (5, 8)
    assert split_sentences("什么？！？真的。") == [(0, 5), (5, 8)]


def test_split_sentences_cjk_quotes_spaces_and_english() -> None:
    text = "他说：“你好。” 然后走了？！ The end."
    # 他说：“你好。” is 0..8 (the closing quote stays with its sentence), a space at 8,
    # 然后走了？！ is 9..15, a space at 15, then punkt's "The end." 16..24
    assert split_sentences(text) == [(0, 8), (9, 15), (16, 24)]
    assert split_sentences("你好。  ") == [(0, 3)]  # an ender at the end cuts nothing
    # punkt's span (0, 11) keeps the leading blanks; the cuts skip the blanks after
    # each 。 (at 2, 4, 7) and ？ (at 10): (0, 3), (4, 5), (6, 8), (9, 11)
    assert split_sentences("  。 。 a。\tb？  ") == [(0, 3), (4, 5), (6, 8), (9, 11)]


@pytest.mark.parametrize("text", [
    "东京是日本的首都。大阪是第二大城市！",
    "他说：“你好。”\n\n  然后走了？！ The end. Next one。 ",
    "  。 。 a。\tb？  ",  # punkt: (0, 11), leading blanks included
    "First sentence. 第二句。Third one!",
])
def test_split_sentences_spans_cover_every_non_space_character(text: str) -> None:
    spans = split_sentences(text)
    covered = [False] * len(text)
    for start, end in spans:
        assert start < end
        # punkt keeps the text's own leading blanks in its first span; no other span
        # starts, and none ends, with whitespace
        assert not text[start].isspace() or (start, text[:start]) == (0, "")
        assert not text[end - 1].isspace()
        covered[start:end] = [True] * (end - start)
    assert all(covered[i] for i, ch in enumerate(text) if not ch.isspace())
    assert spans == sorted(spans)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


@pytest.mark.parametrize(("text", "found"), [
    ("plain text", None),
    ("emoji \U0001F600 and é", None),  # non-BMP characters are one valid code point
    ("ab\ud800c", (2, "a lone surrogate (U+D800)")),
    ("x\udfff", (1, "a lone surrogate (U+DFFF)")),
    # a surrogate pair written as two code points is still two lone surrogates to Python
    ("\ud83d\ude00", (0, "a lone surrogate (U+D83D)")),
    ("a\x00b", (1, "a NUL character")),
    ("a\x00b\ud800", (1, "a NUL character")),  # the first offender wins
    ("\ud800\x00", (0, "a lone surrogate (U+D800)")),
    ("", None),
])
def test_invalid_character(text: str, found: tuple[int, str] | None) -> None:
    assert invalid_character(text) == found


def test_precondition_each_word_is_one_token() -> None:
    for w in WORDS:
        assert count_tokens(w) == 1 and count_tokens(" " + w) == 1, w


def test_chunk_by_tokens_window_sizes_and_overlap() -> None:
    words = WORDS + WORDS[:7]  # 20 one-token words
    text = " ".join(words)
    assert count_tokens(text) == 20
    windows = chunk_by_tokens(text, 8, 3)
    # step 8-3 = 5; starts 0, 5, 10; the window at 10 ends at 18 < 20 so one more at 15,
    # which reaches the end (15+8 >= 20) and is the last
    starts = [0, 5, 10, 15]
    expected = [
        ("" if s == 0 else " ") + " ".join(words[s : s + 8]) for s in starts
    ]
    assert windows == expected
    enc = _encoding()
    tokens = enc.encode_ordinary(text)
    for s, w in zip(starts, windows, strict=True):
        assert enc.encode_ordinary(w) == tokens[s : s + 8]
    # consecutive windows share exactly 3 tokens
    for a, b in itertools.pairwise(windows):
        assert enc.encode_ordinary(a)[-3:] == enc.encode_ordinary(b)[:3]
    assert [count_tokens(w) for w in windows] == [8, 8, 8, 5]


def test_chunk_by_tokens_no_overlap_and_short_text() -> None:
    text = " ".join(WORDS[:10])
    # size 4, overlap 0: 4 + 4 + 2 tokens
    assert [count_tokens(w) for w in chunk_by_tokens(text, 4, 0)] == [4, 4, 2]
    assert "".join(chunk_by_tokens(text, 4, 0)) == text
    assert chunk_by_tokens(text, 100, 10) == [text]  # fits in one window
    assert chunk_by_tokens("", 4, 1) == []


@pytest.mark.parametrize(
    ("size", "overlap", "knob"),
    [(0, 0, "size"), (-3, 0, "size"), (2.5, 0, "size"), (4, 4, "overlap"),
     (4, -1, "overlap"), (4, 5, "overlap"), (4, 1.0, "overlap")],
)
def test_chunk_by_tokens_rejects_bad_size_or_overlap(size: object, overlap: object,
                                                      knob: str) -> None:
    with pytest.raises(ValueError, match=knob):
        chunk_by_tokens("red green blue", size, overlap)  # type: ignore[arg-type]
