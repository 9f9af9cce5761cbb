"""Multi-word proper names as terms (``entity_terms``)."""

from __future__ import annotations

import pytest

from shared_core.text.terms import entity_phrases, term_analyzer


@pytest.mark.parametrize(("text", "names"), [
    ("Ermengarde of Tours was the wife of Lothair I.", ["ermengarde of tours", "lothair i"]),
    # sentence openers do not start a name; one capitalised word is not a name
    ("In Paris, The Beatles played.", []),
    # a title with "and" stays whole; names joined by "and" also give their parts
    ("Harrison and Barrison is a film by Leonardo da Vinci.",
     ["harrison and barrison", "leonardo da vinci"]),
    ("John Lennon and Paul McCartney met.",
     ["john lennon and paul mccartney", "john lennon", "paul mccartney"]),
    # punctuation ends a name; a connector never ends one
    ("Georges Lautner (24 January 1926) was French.", ["georges lautner"]),
    ("the Duke of, York", []),
    # a number word is not an opener: the whole title is kept
    ("Which came first, Five Deadly Venoms or Asthram?", ["five deadly venoms"]),
    # longer than MAX_NAME_WORDS (6): cut at its connectors
    ("He visited New York City of the United States.", ["new york city", "united states"]),
    ("O'Brien Smith", ["o'brien smith"]),
])
def test_entity_phrases(text: str, names: list[str]) -> None:
    assert entity_phrases(text) == names


def test_the_analyzer_adds_names_after_the_words_only_when_asked() -> None:
    text = "Ermengarde of Tours married Lothair."
    assert term_analyzer()(text) == ["ermengarde", "tours", "married", "lothair"]
    assert term_analyzer(entities=True)(text) == ["ermengarde", "tours", "married", "lothair",
                                                   "ermengarde of tours"]
    assert term_analyzer(ngram_max=2, entities=True)(text)[-1] == "ermengarde of tours"
