"""Dual-level keys: the query's entities (low level) and its themes and relations (high).

The LLM extracts both lists in one call (LightRAG's keyword prompt, as
HuixiangDou2 uses it). Without an LLM, or when its reply is unusable, the keys
come from the graphs: low-level keys are the concepts the query reaches by
similarity (the concept index's own matching) and the KG entities it names;
high-level keys are those concepts' neighbours in the concept graph (the
strongest edges first), the neighbourhood a theme spans.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..index import ConceptGraphIndex
from ..kg.retrieve import KGRetriever
from ..llm import BadOutput, Completion, LLMRunner, Message, reply_text
from .prompts import KEYS_SYSTEM

KEYS_STAGE = "answer_keys"
MAX_KEY_CHARS = 120
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_LOW_NAMES = ("low_level_keywords", "low_level_keys", "low_level", "low")
_HIGH_NAMES = ("high_level_keywords", "high_level_keys", "high_level", "high")


@dataclass(frozen=True)
class QueryKeys:
    """A query's low-level and high-level keys, and where they came from."""

    low_level: tuple[str, ...]
    high_level: tuple[str, ...]
    source: Literal["llm", "graph"]

    def __post_init__(self) -> None:
        for name in ("low_level", "high_level"):
            for key in getattr(self, name):
                if not isinstance(key, str) or not key.strip():
                    raise ValueError(f"{name} keys must be non-blank str, got {key!r}")

    def __len__(self) -> int:
        return len(self.low_level) + len(self.high_level)

    def to_dict(self) -> dict[str, Any]:
        return {"low_level": list(self.low_level), "high_level": list(self.high_level),
                "source": self.source}


def clean_keys(values: object, max_keys: int) -> tuple[str, ...]:
    """Strings only, trimmed, each once (any case), at most ``max_keys``."""
    if isinstance(values, str):
        values = [v for v in re.split(r"[,;\n]", values)]
    if not isinstance(values, Sequence):
        return ()
    out: dict[str, str] = {}
    for value in values:
        if isinstance(value, str):
            key = " ".join(value.split()).strip(" \"'`*")[:MAX_KEY_CHARS]
            if key and key.casefold() not in out:
                out[key.casefold()] = key
    return tuple(out.values())[:max_keys]


def parse_keys(text: str, max_keys: int = 6) -> QueryKeys:
    """The JSON object of the keys prompt, found in the reply (fences and prose around it
    are fine); :class:`BadOutput` ``"unparsable"`` or ``"no_keys"`` otherwise.

    >>> parse_keys('```json\\n{"low_level_keywords": ["Ada Lovelace"], '
    ...            '"high_level_keywords": ["computing history"]}\\n```').low_level
    ('Ada Lovelace',)
    """
    match = _JSON_OBJECT.search(text)
    try:
        data = json.loads(match.group(0)) if match else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise BadOutput("unparsable", f"no JSON object of keys in {text[:80]!r}")
    fields = {k.casefold().replace(" ", "_").replace("-", "_"): v for k, v in data.items()
              if isinstance(k, str)}
    low = next((clean_keys(fields[n], max_keys) for n in _LOW_NAMES if n in fields), ())
    high = next((clean_keys(fields[n], max_keys) for n in _HIGH_NAMES if n in fields), ())
    if not low and not high:
        raise BadOutput("no_keys", f"neither low- nor high-level keys in {text[:80]!r}")
    return QueryKeys(low, high, "llm")


def keys_messages(query: str) -> list[Message]:
    return [Message("system", KEYS_SYSTEM), Message("user", f"Question: {query}")]


async def extract_keys(runner: LLMRunner, query: str, *, max_keys: int = 6,
                       max_tokens: int | None = 128) -> QueryKeys:
    """Both key lists from one LLM call; :class:`~shared_core.llm.RequestFailed` when
    every reply was unusable."""

    def parse(completion: Completion) -> QueryKeys:
        return parse_keys(reply_text(completion), max_keys)

    return await runner.acall(KEYS_STAGE, keys_messages(query), parse, max_tokens=max_tokens)


def graph_keys(index: ConceptGraphIndex, query: str, kg: KGRetriever | None = None, *,
               max_keys: int = 6) -> QueryKeys:
    """Keys without an LLM: concepts by similarity and named KG entities (low level),
    the concepts' graph neighbours by edge weight (high level)."""
    concepts = list(index.retrieve(query, hops=0).direct_concepts)
    entities = [kg.graph.entities[row].name for row in kg.exact_matches(query)] if kg else []
    low = clean_keys(entities + concepts, max_keys)
    graph = index.state.graph
    weights: dict[int, float] = {}
    own = {graph.concept_position[c] for c in concepts if c in graph.concept_position}
    for c in own:
        row = graph.adjacency.getrow(c)
        for neighbour, weight in zip(row.indices.tolist(), row.data.tolist(), strict=True):
            if neighbour not in own:
                weights[neighbour] = weights.get(neighbour, 0.0) + float(weight)
    ranked = sorted(weights, key=lambda n: (-weights[n], graph.concepts[n]))
    high = clean_keys([graph.concepts[n] for n in ranked], max_keys)
    return QueryKeys(low or clean_keys([query], 1), high, "graph")


