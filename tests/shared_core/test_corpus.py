from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared_core.corpus import read_corpus, window_chunks
from shared_core.text import count_tokens


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_records_ids_titles_and_metadata(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "a", "title": "T", "text": "Alpha.", "year": 1999},
        {"text": "Beta."},
    ])
    records = read_corpus(path)
    assert [r.id for r in records] == ["a", "c:2"]  # no id: file stem and line number
    assert records[0].text == "T\nAlpha."
    assert records[0].metadata == {"source_id": "a", "title": "T", "year": 1999}
    assert records[1].text == "Beta."


def test_directory_of_text_files(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("Second file.")
    (tmp_path / "a.txt").write_text("First file.")
    (tmp_path / "skip.csv").write_text("ignored")
    records = read_corpus(tmp_path)
    assert [r.text for r in records] == ["First file.", "Second file."]


@pytest.mark.parametrize("rows, message", [
    (["not an object"], "string 'text' field"),
    ([{"id": "x"}], "string 'text' field"),
    ([{"text": "   "}], "empty or whitespace"),
    ([{"id": "x", "text": "a"}, {"id": "x", "text": "b"}], "duplicate id 'x'"),
])
def test_bad_jsonl_lines_name_the_line(tmp_path: Path, rows: list[object], message: str) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(ValueError, match=message):
        read_corpus(path)


def test_invalid_json_and_unsupported_files(tmp_path: Path) -> None:
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"text": "ok"}\n{broken\n')
    with pytest.raises(ValueError, match=r"c.jsonl:2: invalid JSON"):
        read_corpus(bad)
    (tmp_path / "x.pdf").write_text("x")
    with pytest.raises(ValueError, match="unsupported"):
        read_corpus(tmp_path / "x.pdf")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        read_corpus(tmp_path / "empty.txt")


def test_window_chunks_cover_the_joined_text(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": " ".join(["word"] * 30)},
                                              {"text": " ".join(["other"] * 30)}])
    chunks = window_chunks(read_corpus(path), size=20, overlap=5)
    # 30 + 30 words plus the "\n\n" joiner tokenise to 61 tokens ("word"/" word" are one
    # token each); windows start every 15 tokens: 0, 15, 30, 45 -> four chunks
    assert count_tokens("\n\n".join([" ".join(["word"] * 30), " ".join(["other"] * 30)])) == 61
    assert [c.id for c in chunks] == ["chunk-00000", "chunk-00001", "chunk-00002", "chunk-00003"]
    assert all(count_tokens(c.text) <= 20 for c in chunks)
