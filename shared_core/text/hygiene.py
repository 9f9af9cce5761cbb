"""Text hygiene: the characters no chunk or query may hold, and query validation."""

from __future__ import annotations


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
