"""A four-chunk corpus and a small KG over it, with token counts worked out by hand.

Chunk tokens (tiktoken cl100k_base): a 16, b 16, c 21, d 14. ``top_k=3`` and
``theta_co=1`` give the tiny graph edges and keep direct matches few, so levels differ.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
from shared_core.answer.prompts import (
    ANSWER_CONTEXT_SYSTEM,
    ANSWER_LOGIC_SYSTEM,
    DECOMPOSE_SYSTEM,
    FILTER_SYSTEM,
    KEYS_SYSTEM,
    STEP_SYSTEM,
    VERIFY_SYSTEM,
)
from shared_core.kg import KnowledgeGraph, parse_extraction
from shared_core.llm import Message

TEXTS = {
    "a": "The Eiffel Tower is 330 metres tall. It stands in Paris.",
    "b": "The Statue of Liberty is 93 metres tall. It stands in New York.",
    "c": "Gustave Eiffel designed the Eiffel Tower and the frame of the Statue of Liberty.",
    "d": "Tea is grown in Assam. Assam tea is strong.",
}
TOKENS = {"a": 16, "b": 16, "c": 21, "d": 14}


def build_index() -> ConceptGraphIndex:
    return ConceptGraphIndex.from_texts(list(TEXTS.values()), ids=list(TEXTS),
                                        embedder=HashingEmbedder(),
                                        config=ConceptGraphConfig(top_k=3, theta_co=1))


def build_kg() -> KnowledgeGraph:
    kg = KnowledgeGraph()
    kg.add("c", parse_extraction(
        '("entity"<|>Gustave Eiffel<|>person<|>an engineer)##'
        '("entity"<|>Eiffel Tower<|>building<|>a tower in Paris)##'
        '("entity"<|>Statue of Liberty<|>monument<|>a statue in New York)##'
        '("relationship"<|>Gustave Eiffel<|>Eiffel Tower<|>designed the tower<|>9)##'
        '("relationship"<|>Gustave Eiffel<|>Statue of Liberty<|>built the frame<|>7)'))
    kg.add("d", parse_extraction(
        '("entity"<|>Assam<|>location<|>a tea region)##'
        '("entity"<|>Tea<|>product<|>a drink)##'
        '("relationship"<|>Tea<|>Assam<|>is grown in<|>8)'))
    return kg


STAGE_OF = {KEYS_SYSTEM: "keys", DECOMPOSE_SYSTEM[:40]: "decompose", STEP_SYSTEM: "step",
            FILTER_SYSTEM: "filter", VERIFY_SYSTEM: "verify",
            ANSWER_LOGIC_SYSTEM: "answer_logic", ANSWER_CONTEXT_SYSTEM: "answer_context"}


def kind(messages: Sequence[Message]) -> str:
    """Which prompt a call was: by its system message."""
    system = messages[0].content
    for start, name in STAGE_OF.items():
        if system.startswith(start[:40]):
            return name
    raise AssertionError(f"unknown prompt {system[:40]!r}")
