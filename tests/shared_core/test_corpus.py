from __future__ import annotations

import json
import operator
import re
from pathlib import Path

import pytest

from shared_core.corpus import CountedStream, count_records, read_corpus, window_chunks
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


@pytest.mark.parametrize("row, message", [
    ({"id": "a", "title": ["T"], "text": "x"}, "'title' must be a string or null, got list ['T']"),
    ({"id": "a", "title": 3, "text": "x"}, "'title' must be a string or null, got int 3"),
    ({"id": None, "text": "x"}, "'id' must be a non-empty string or an integer, got None"),
    ({"id": True, "text": "x"}, "'id' must be a non-empty string or an integer, got True"),
    ({"id": 1.5, "text": "x"}, "'id' must be a non-empty string or an integer, got 1.5"),
    ({"id": " ", "text": "x"}, "'id' must be a non-empty string or an integer, got ' '"),
    ({"id": ["a"], "text": "x"}, "'id' must be a non-empty string or an integer, got ['a']"),
    # JSON escapes carry a lone surrogate or a NUL into a valid UTF-8 line
    ({"text": "abc\ud800"}, "field 'text' contains a lone surrogate (U+D800) at character 3"),
    ({"text": "a\u0000b"}, "field 'text' contains a NUL character at character 1"),
    ({"title": "\udfff", "text": "x"}, "field 'title' contains a lone surrogate (U+DFFF) at "
                                        "character 0"),
    ({"id": "x\u0000", "text": "x"}, "field 'id' contains a NUL character at character 1"),
    ({"text": "x", "tags": ["ok", {"k": "\ud800"}]},
     "field 'tags' contains a lone surrogate (U+D800)"),
    ({"text": "x", "bad\ud800key": 1},
     "the field name 'bad\\ud800key' contains a lone surrogate (U+D800)"),
])
def test_bad_fields_name_file_and_line(tmp_path: Path, row: dict[str, object],
                                       message: str) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "a fine first line"}, row])
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: {message}")):
        read_corpus(path)


def test_integer_ids_null_titles_and_blank_titles(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [
        {"id": 7, "title": None, "text": "Seven."},
        {"id": 0, "title": "  ", "text": "Zero."},
    ])
    records = read_corpus(path)
    assert [r.id for r in records] == ["7", "0"]
    # a null or blank title adds nothing to the text; it stays in the metadata as given
    assert [r.text for r in records] == ["Seven.", "Zero."]
    assert records[0].metadata == {"source_id": "7", "title": None}
    # an integer id and the same digits as a string are one id
    dup = write_jsonl(tmp_path / "d.jsonl", [{"id": 1, "text": "a"}, {"id": "1", "text": "b"}])
    with pytest.raises(ValueError, match=re.escape(f"{dup}:2: duplicate id '1' (first at "
                                                   f"{dup}:1)")):
        read_corpus(dup)


def test_nan_and_infinity_are_not_json(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "ok", "score": NaN}\n')
    with pytest.raises(ValueError, match=re.escape(f"{path}:1: invalid JSON: NaN is not a number "
                                                   "JSON allows")):
        read_corpus(path)


def test_duplicate_ids_across_files_name_both_places(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", [{"id": "x", "text": "from a"}])
    write_jsonl(tmp_path / "b.jsonl", [{"id": "y", "text": "from b"}, {"id": "x", "text": "again"}])
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / 'b.jsonl'}:2: duplicate id 'x' (first at {tmp_path / 'a.jsonl'}:1)")):
        read_corpus(tmp_path)
    # different ids across files are fine, in file order
    write_jsonl(tmp_path / "b.jsonl", [{"id": "y", "text": "from b"}])
    assert [r.id for r in read_corpus(tmp_path)] == ["x", "y"]


def test_a_text_files_path_id_can_clash_with_a_jsonl_id(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A text file.")
    write_jsonl(tmp_path / "b.jsonl", [{"id": str(tmp_path / "a.txt"), "text": "same id"}])
    with pytest.raises(ValueError, match=re.escape(f"(first at {tmp_path / 'a.txt'})")):
        read_corpus(tmp_path)


def test_files_that_are_not_utf8_are_named(tmp_path: Path) -> None:
    jsonl = tmp_path / "c.jsonl"
    # line 2 is Latin-1: "café" with é as the single byte 0xE9
    jsonl.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=re.escape(f"{jsonl}:2: not valid UTF-8")):
        read_corpus(jsonl)
    txt = tmp_path / "notes.txt"
    txt.write_bytes(b"line one\nline two\nbad \xff byte\n")
    with pytest.raises(ValueError, match=re.escape(f"{txt}:3: not valid UTF-8")):
        read_corpus(txt)
    md = tmp_path / "readme.md"
    md.write_bytes("é".encode("utf-16"))  # a BOM and UTF-16: not UTF-8 from byte 0
    with pytest.raises(ValueError, match=re.escape(f"{md}:1: not valid UTF-8")):
        read_corpus(md)
    # in a directory, the first bad file (sorted) is the one named
    with pytest.raises(ValueError, match=re.escape(f"{jsonl}:2: not valid UTF-8")):
        read_corpus(tmp_path)


def test_text_file_with_nul_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("first line\nsec\x00ond\n")
    # the NUL is character 14 (11 for "first line\n", then "sec"), on line 2
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: contains a NUL character at "
                                                   "character 14")):
        read_corpus(path)


def test_directories_named_like_corpus_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "sub.txt").mkdir()
    (tmp_path / "sub.txt" / "inner.md").write_text("Inner file.")
    (tmp_path / "a.txt").write_text("Outer file.")
    assert [r.text for r in read_corpus(tmp_path)] == ["Outer file.", "Inner file."]


def test_records_are_counted_as_the_reading_gives_them(tmp_path: Path) -> None:
    # blank and whitespace lines are no records; a text file is one; other files are none
    (tmp_path / "c.jsonl").write_text('{"text": "Alpha."}\n\n  \t\n{"text": "Beta."}\n'
                                      '{"text": "Gamma."}')  # no newline after the last
    (tmp_path / "a.txt").write_text("First file.")
    (tmp_path / "skip.csv").write_text("ignored\nlines\n")
    assert count_records(tmp_path / "c.jsonl") == 3 == len(read_corpus(tmp_path / "c.jsonl"))
    assert count_records(tmp_path) == 4 == len(read_corpus(tmp_path))
    with pytest.raises(FileNotFoundError, match="corpus not found"):
        count_records(tmp_path / "missing.jsonl")


def test_a_counted_stream_gives_its_items_once_and_hints_its_count() -> None:
    stream = CountedStream(iter(["a", "b"]), 2)
    assert operator.length_hint(stream) == 2
    assert list(stream) == ["a", "b"] and list(stream) == []  # a stream, read once


def test_window_chunks_cover_the_joined_text(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": " ".join(["word"] * 30)},
                                              {"text": " ".join(["other"] * 30)}])
    chunks = window_chunks(read_corpus(path), size=20, overlap=5)
    # 30 + 30 words plus the "\n\n" joiner tokenise to 61 tokens ("word"/" word" are one
    # token each); windows start every 15 tokens: 0, 15, 30, 45 -> four chunks
    assert count_tokens("\n\n".join([" ".join(["word"] * 30), " ".join(["other"] * 30)])) == 61
    assert [c.id for c in chunks] == ["chunk-00000", "chunk-00001", "chunk-00002", "chunk-00003"]
    assert all(count_tokens(c.text) <= 20 for c in chunks)
