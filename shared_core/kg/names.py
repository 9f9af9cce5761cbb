"""When two entity names are one entity: the one normalisation rule, used everywhere.

The parser (undeclared relation endpoints, self-relations), the graph (merging)
and the store (validating saved records) must agree on it, so it lives here.
"""

from __future__ import annotations

import unicodedata

# quote marks besides Unicode's initial/final quotes (Pi, Pf); the backtick and acute
# accent are symbols, but models use them as quotes
_QUOTES = frozenset("\"'`´")
# sentence punctuation a name picks up from the prose around it
_SENTENCE = frozenset(".,;:!?…、。")
_PAIRS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {close: open_ for open_, close in _PAIRS.items()}


def _is_quote(ch: str) -> bool:
    return ch in _QUOTES or unicodedata.category(ch) in ("Pi", "Pf")


def _encloses(text: str) -> bool:
    """Whether the bracket opening ``text`` is closed by its last character."""
    open_, close = text[0], _PAIRS[text[0]]
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == open_) - (ch == close)
        if depth == 0:
            return i == len(text) - 1
    return False


def _strip_edges(text: str, *, sentence: bool) -> str:
    """Whitespace, quotes, stray or enclosing brackets (and sentence punctuation) at the ends.

    A bracket that belongs to the name stays: ``"Queen (band)"`` keeps its
    pair, ``"Queen (band"`` and ``"(Queen)"`` lose theirs.
    """
    while True:
        before = text
        text = text.strip()
        while text and (_is_quote(text[0]) or (sentence and text[0] in _SENTENCE)):
            text = text[1:].lstrip()
        while text and (_is_quote(text[-1]) or (sentence and text[-1] in _SENTENCE)):
            text = text[:-1].rstrip()
        if len(text) >= 2 and text[0] in _PAIRS and _encloses(text):
            text = text[1:-1]
        elif text and text[0] in _PAIRS and text.count(text[0]) > text.count(_PAIRS[text[0]]):
            text = text[1:]
        elif text and text[-1] in _CLOSERS and text.count(text[-1]) > text.count(
                _CLOSERS[text[-1]]):
            text = text[:-1]
        if text == before:
            return text


def clean_name(name: str) -> str:
    """A name as shown: spaces collapsed, quotes and stray brackets off the ends, case kept."""
    return _strip_edges(" ".join(name.split()), sentence=False)


def entity_key(name: str) -> str:
    """The key entities merge by: ``"Dr. Watson"`` and ``'"dr.  watson"'`` share one.

    The rule: Unicode NFKC (full-width and compatibility forms fold to plain
    ones), casefold, NFKC again (casefolding can un-normalise), whitespace runs
    collapsed to one space; then, at both ends only, repeatedly: quote marks,
    sentence punctuation (``. , ; : ! ? …``), a bracket pair enclosing the whole
    name, and a bracket with no partner are stripped. Inside a name nothing
    changes (``"AT&T"``, ``"U.S.A"``, ``"Queen (band)"``), and symbols are kept
    at the ends too, so ``"C++"``, ``"C#"`` and ``"C"`` stay three entities. An
    empty key means the name had no letters, digits or symbols: not an entity.

    >>> entity_key('  "Dr.  Watson" ')
    'dr. watson'
    >>> entity_key("ＡＣＭＥ Corp.")
    'acme corp'
    >>> entity_key("(C++)"), entity_key("Queen (band)"), entity_key("C#")
    ('c++', 'queen (band)', 'c#')
    """
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return _strip_edges(" ".join(text.split()), sentence=True)
