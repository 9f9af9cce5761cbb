"""Sentence-packed retrieval units: size bound, coverage, order, parents, long sentences."""

from __future__ import annotations

import pytest

from shared_core.text import count_tokens, split_into_units, split_sentences

# Each sentence "Red green blue." is 4 tokens: Red, " green", " blue", "."
SENT = "Red green blue."


def _words(text: str) -> list[str]:
    return text.split()


def test_units_pack_whole_sentences_up_to_max_tokens() -> None:
    chunk = " ".join([SENT] * 5)
    assert count_tokens(SENT) == 4 and count_tokens(" " + SENT) == 4
    units = split_into_units(["a"], [chunk], max_tokens=9)
    # a unit packs sentences while size + 1 (joining space) fits: 4, then 4+4+1 = 9 fits,
    # a third would make 14 > 9 -> units of 2, 2, 1 sentences
    assert units.texts == [f"{SENT} {SENT}", f"{SENT} {SENT}", SENT]
    assert units.ids == ["a#u0", "a#u1", "a#u2"]
    assert units.parent.tolist() == [0, 0, 0]
    assert units.tokens.tolist() == [8, 8, 4]
    assert len(units) == 3


def test_units_cover_every_sentence_in_order_and_respect_the_bound() -> None:
    chunks = [
        "Alpha beta gamma delta. Epsilon zeta. Eta theta iota kappa lambda mu. Nu xi.",
        "One short one. Another, slightly longer sentence follows here. Last.",
    ]
    units = split_into_units(["x", "y"], chunks, max_tokens=10)
    for pos, chunk in enumerate(chunks):
        mine = [t for t, p in zip(units.texts, units.parent, strict=True) if p == pos]
        sentences = [chunk[s:e] for s, e in split_sentences(chunk)]
        # joining the units with a space rebuilds the chunk's sentences in order
        assert " ".join(mine) == " ".join(sentences)
    assert all(count_tokens(t) <= 10 for t in units.texts)
    assert units.tokens.tolist() == [count_tokens(t) for t in units.texts]
    assert [units.ids[i].split("#")[0] for i in range(len(units))] == [
        ["x", "y"][p] for p in units.parent
    ]


def test_parent_mapping_over_several_chunks() -> None:
    units = split_into_units(["a", "b", "c"], [SENT, f"{SENT} {SENT} {SENT}", SENT], 4)
    # max 4 tokens = exactly one sentence per unit: 1 + 3 + 1 units
    assert units.parent.tolist() == [0, 1, 1, 1, 2]
    assert units.ids == ["a#u0", "b#u0", "b#u1", "b#u2", "c#u0"]


def test_sentence_longer_than_max_tokens_is_cut() -> None:
    long_sentence = " ".join(["red"] * 25) + "."  # 25 word tokens + "." = 26 tokens
    assert count_tokens(long_sentence) == 26
    chunk = f"{SENT} {long_sentence} {SENT}"
    units = split_into_units(["a"], [chunk], max_tokens=10)
    assert all(count_tokens(t) <= 10 for t in units.texts)
    # the open unit (first sentence) closes, the long sentence is cut into 10+10+6 tokens,
    # then the last sentence starts a new unit
    assert units.texts[0] == SENT
    assert units.texts[-1] == SENT
    cut = units.texts[1:-1]
    assert [count_tokens(t) for t in cut] == [10, 10, 6]
    assert _words("".join(cut)) == _words(long_sentence)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        split_into_units(["a"], [SENT], 0)
    with pytest.raises(ValueError, match="max_tokens"):
        split_into_units(["a"], [SENT], 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same length"):
        split_into_units(["a", "b"], [SENT], 5)
