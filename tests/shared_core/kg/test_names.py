"""entity_key: which spellings merge into one entity, and which must stay apart."""

from __future__ import annotations

import pytest

from shared_core.kg import entity_key
from shared_core.kg.names import clean_name


@pytest.mark.parametrize(("name", "key"), [
    ("Ada Lovelace", "ada lovelace"),
    ('  "Ada   Lovelace" ', "ada lovelace"),          # quotes and whitespace
    ("ＡＤＡ　ＬＯＶＥＬＡＣＥ", "ada lovelace"),      # full-width letters and space (NFKC)
    ("“Ada Lovelace.”", "ada lovelace"),              # curly quotes, a full stop
    ("STRASSE", "strasse"), ("Straße", "strasse"),     # casefold, not lower
    ("(Ada Lovelace)", "ada lovelace"),               # an enclosing pair
    ("Queen (band)", "queen (band)"),                 # a pair that belongs to the name
    ("Queen (band", "queen (band"),                   # unbalanced inside: kept
    ("Ada Lovelace)", "ada lovelace"),                # a stray closer at the end
    ("AT&T", "at&t"), ("U.S.A.", "u.s.a"), ("C++", "c++"), ("C#", "c#"), ("C", "c"),
    ("'''", ""), ("...", ""), ("  ", ""),
])
def test_entity_key(name: str, key: str) -> None:
    assert entity_key(name) == key


def test_clean_name_keeps_case_and_drops_only_quotes_and_stray_brackets() -> None:
    assert clean_name('  "Ada  Lovelace" ') == "Ada Lovelace"
    assert clean_name("Queen (band)") == "Queen (band)"
    assert clean_name("Queen (band))") == "Queen (band)"
    assert clean_name("U.S.A.") == "U.S.A."
