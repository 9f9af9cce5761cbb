"""Chunk texts as byte ranges: the same strings as a tuple, through every take and merge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_core.state.texts import ChunkTexts, as_chunk_texts, texts_joined, texts_taken

WORDS = ["Ada wrote.", "Ermengarde of Tours ñ.", "日本語の文。", "x", "Zoë — naïve café."]


def mapped_texts(tmp_path: Path, texts: list[str]) -> ChunkTexts:
    """``texts`` as a saved index holds them: one run mapped from a file."""
    held = ChunkTexts.of_strings(texts)
    np.save(tmp_path / "blob.npy", np.concatenate(list(held.byte_runs())))
    return ChunkTexts.of_bytes(np.load(tmp_path / "blob.npy", mmap_mode="r"), held.ends())


def test_texts_read_back_as_the_strings_they_were() -> None:
    texts = ChunkTexts.of_strings(WORDS)
    assert len(texts) == 5 and texts[2] == "日本語の文。" and texts[-1] == WORDS[-1]
    assert texts == tuple(WORDS) and tuple(WORDS) == texts and texts == WORDS
    assert texts != tuple(WORDS[:4]) and texts != (*WORDS[:4], "other")
    assert list(texts) == WORDS and texts[1:3] == WORDS[1:3]
    assert texts.encoded(2) == "日本語の文。".encode()  # 18 bytes, 6 characters
    assert texts.nbytes == sum(len(w.encode()) for w in WORDS)
    assert texts.ends().tolist() == np.cumsum([len(w.encode()) for w in WORDS]).tolist()
    with pytest.raises(IndexError):
        texts[5]
    with pytest.raises(IndexError):
        texts[-6]


def test_a_taken_state_gathers_ranges_of_the_mapped_run(tmp_path: Path) -> None:
    texts = mapped_texts(tmp_path, WORDS)
    assert texts.heap_bytes == 0  # the run is the file's
    taken = texts_taken(texts, np.array([4, 0, 2]))
    assert isinstance(taken, ChunkTexts)
    assert taken == (WORDS[4], WORDS[0], WORDS[2]) and taken.heap_bytes == 0
    # three ranges out of order: three slices to write, in the taken order
    assert [r.tobytes().decode() for r in taken.byte_runs()] == [WORDS[4], WORDS[0], WORDS[2]]
    # strings stay strings
    assert texts_taken(tuple(WORDS), np.array([1, 3])) == (WORDS[1], WORDS[3])


def test_a_merge_keeps_the_mapped_run_and_one_heap_run(tmp_path: Path) -> None:
    texts = mapped_texts(tmp_path, WORDS[:3])
    added = ("New text one.", "New text two.")
    joined = texts_joined([texts, added])
    assert isinstance(joined, ChunkTexts) and joined == (*WORDS[:3], *added)
    assert joined.heap_bytes == len("New text one.New text two.")
    again = texts_joined([joined, ("Third.",)])
    assert again == (*WORDS[:3], *added, "Third.")
    assert again.heap_bytes == len("New text one.New text two.Third.")  # one heap run
    # the mapped texts are one run of bytes on disk: a save writes them in one slice
    assert next(again.byte_runs()).tobytes() == "".join(WORDS[:3]).encode()
    assert texts_joined([tuple(WORDS[:2]), ("a",)]) == (*WORDS[:2], "a")
    assert isinstance(texts_joined([tuple(WORDS[:2]), ("a",)]), tuple)


def test_deleted_heap_texts_are_dropped_once_they_are_most_of_their_run(tmp_path: Path) -> None:
    texts = texts_joined([mapped_texts(tmp_path, WORDS[:2]), ("a" * 100, "b" * 30)])
    assert isinstance(texts, ChunkTexts) and texts.heap_bytes == 130
    kept_most = texts_taken(texts, np.array([0, 1, 2]))  # 30 of 130 dead: kept as is
    assert kept_most.heap_bytes == 130
    kept_little = texts_taken(texts, np.array([0, 1, 3]))  # 100 of 130 dead: rewritten
    assert kept_little == (WORDS[0], WORDS[1], "b" * 30) and kept_little.heap_bytes == 30
    none_left = texts_taken(texts, np.array([1, 0]))  # no text of the heap run: dropped
    assert none_left == (WORDS[1], WORDS[0]) and none_left.heap_bytes == 0


OPS = st.lists(st.one_of(
    st.tuples(st.just("take"), st.lists(st.integers(0, 30), max_size=12)),
    st.tuples(st.just("add"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
), max_size=8)


@settings(max_examples=80, deadline=None)
@given(ops=OPS)
def test_any_sequence_of_takes_and_merges_equals_the_same_on_tuples(ops: list) -> None:
    held: tuple[str, ...] = tuple(WORDS)
    texts = as_chunk_texts(held)
    for kind, values in ops:
        if kind == "take":
            at = np.array([v % len(held) for v in values], dtype=np.int64) if held else \
                np.zeros(0, dtype=np.int64)
            held = tuple(held[i] for i in at.tolist())
            texts = texts_taken(texts, at)
        else:
            held = (*held, *values)
            texts = texts_joined([texts, tuple(values)])
        assert isinstance(texts, ChunkTexts) and texts == held
        assert b"".join(r.tobytes() for r in texts.byte_runs()) == "".join(held).encode()
        assert texts.heap_bytes <= 2 * texts.nbytes
