"""One piece of answer context, with who found it: the unit every answer stage passes on.

Dual-level retrieval tags each piece with its level and key; logic-form
retrieval with its step and sub-query. The adapters turn the same record into
LangChain documents or LlamaIndex nodes, so provenance reads the same anywhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Level = Literal["low", "high"]
# concept: the concept index matched the key; concept_neighbourhood: reached along concept
# edges; kg_entity: a KG entity the key names (its descriptions and relations);
# kg_relation: a KG relation the key describes
Source = Literal["concept", "concept_neighbourhood", "kg_entity", "kg_relation"]


@dataclass(frozen=True)
class Evidence:
    """A chunk (or a KG fact tied to its chunk) in the context, and why it is there.

    ``key`` is the key (dual-level) or the sub-query (logic form) that found it;
    ``level`` the key's level, ``step`` the logic-form step, when they apply;
    ``detail`` what the source adds (the concept and hop, the entity, ...).
    """

    chunk_id: str
    text: str
    tokens: int
    score: float
    source: Source
    key: str
    level: Level | None = None
    step: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def identity(self) -> tuple[str, str]:
        """Two pieces with the same chunk and text are one piece of context."""
        return self.chunk_id, self.text

    @property
    def piece_id(self) -> str:
        """A stable id for this piece as a framework node or document.

        A concept hit is its unit (the chunk itself, or the sentence unit cut
        from it); a KG fact is its chunk plus a hash of the fact, since one
        chunk can back several facts.

        >>> Evidence("c", "Eiffel designed it.", 5, 1.0, "concept", "Eiffel").piece_id
        'c'
        >>> Evidence("c", "x", 1, 1.0, "concept", "k", detail={"unit": "c#s2"}).piece_id
        'c#s2'
        >>> Evidence("c", "Eiffel -> Tower", 4, 0.9, "kg_relation", "design").piece_id
        'c#kg_relation:b5dd2edbcc'
        """
        if self.source in ("concept", "concept_neighbourhood"):
            unit = self.detail.get("unit")
            return unit if isinstance(unit, str) and unit else self.chunk_id
        digest = hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:10]
        return f"{self.chunk_id}#{self.source}:{digest}"

    def provenance(self) -> dict[str, Any]:
        """Who found this piece, as plain JSON data (its own fields win over ``detail``'s)."""
        out: dict[str, Any] = {"source": self.source, "key": self.key}
        if self.level is not None:
            out["level"] = self.level
        if self.step is not None:
            out["step"] = self.step
        return {**out, **{k: v for k, v in self.detail.items() if k not in out}}

    def metadata(self) -> dict[str, Any]:
        """What a framework document or node carries: chunk id, score and provenance."""
        return {"chunk_id": self.chunk_id, "score": self.score,
                "provenance": self.provenance()}

    def label(self) -> str:
        """A short "who found it" for prompts and tables."""
        if self.step is not None:
            return f"step {self.step}, {self.source}"
        return f"{self.level}-level key {self.key!r}, {self.source}"


def unique(evidence: Iterable[Evidence]) -> list[Evidence]:
    """Each piece once, at its first place."""
    seen: set[tuple[str, str]] = set()
    out = []
    for piece in evidence:
        if piece.identity not in seen:
            seen.add(piece.identity)
            out.append(piece)
    return out


def context_block(evidence: Sequence[Evidence]) -> str:
    """The pieces numbered for a prompt, each with its chunk and who found it."""
    return "\n\n".join(f"[{i}] (chunk {e.chunk_id}; {e.label()})\n{e.text.strip()}"
                       for i, e in enumerate(evidence, 1))
