"""Reading a model's extraction reply: tolerant of how models stray, loud about what it drops.

Models wrap records in code fences, drop or double the parentheses and quotes,
separate records by new lines instead of ``##``, change the case of the record
kind, forget ``<|COMPLETE|>``, or write "high" as a strength. All of that is
read. Whatever cannot be read is not silently lost: it is listed in
:attr:`ParsedExtraction.problems`, and a reply with nothing usable raises
:class:`~shared_core.llm.BadOutput` so the runner asks again.

Decisions:

- a relationship whose endpoint was never declared as an entity keeps the
  relationship and declares the endpoint with type ``"unknown"`` and no
  description (noted); the graph lets any real type from elsewhere win over it;
- a relationship from an entity to itself (same key) is dropped (noted);
- a strength that is not a finite number becomes 1.0 (noted);
- a reply cut at ``max_tokens`` (``truncated=True``) loses its last record,
  which may be cut mid-field (noted), unless ``<|COMPLETE|>`` shows it was not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..llm.messages import BadOutput
from .names import clean_name, entity_key
from .prompts import COMPLETION_MARKER, TUPLE_DELIMITER

UNKNOWN_TYPE = "unknown"
DEFAULT_STRENGTH = 1.0

# a record starts at its kind, with optional bracket and quotes, then the delimiter
_START = re.compile(r"""(?<![\w])\(?[ \t]*["'`]?[ \t]*(entity|relationship|relation)[ \t]*["'`]?"""
                    r"""[ \t]*<\|>""", re.IGNORECASE)
# and ends at ## (bracket optional) or at a closing bracket that ends a line
_END = re.compile(r"\)?[ \t]*##|\)[ \t]*(?:\r?\n|\Z)")
_MARKER = re.compile(r"<\|[ \t]*complete[ \t]*\|>", re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]*```[^\n]*$", re.MULTILINE)
_QUOTES = "\"'`“”‘’"
_JUDGE_WORD = re.compile(r"[^\W_]+")
# what may stand between records without being text worth noting
_SYNTAX = " \t\r\n#()"


@dataclass(frozen=True)
class EntityRecord:
    """One entity as the model wrote it (before merging across chunks)."""

    name: str
    type: str
    description: str = ""

    def __post_init__(self) -> None:
        for field in ("name", "type", "description"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"an entity's {field} must be str")
        if not entity_key(self.name):
            raise ValueError(f"entity name {self.name!r} has no letters, digits or symbols")
        if not self.type.strip():
            raise ValueError(f"entity {self.name!r} has an empty type")

    @property
    def key(self) -> str:
        return entity_key(self.name)


@dataclass(frozen=True)
class RelationRecord:
    """One relationship as the model wrote it: endpoints by name, strength a finite number."""

    source: str
    target: str
    description: str = ""
    strength: float = DEFAULT_STRENGTH

    def __post_init__(self) -> None:
        for field in ("source", "target", "description"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"a relationship's {field} must be str")
        if not entity_key(self.source) or not entity_key(self.target):
            raise ValueError(f"relationship {self.source!r} -> {self.target!r} has an "
                             "empty endpoint")
        if entity_key(self.source) == entity_key(self.target):
            raise ValueError(f"relationship {self.source!r} -> {self.target!r} joins an "
                             "entity to itself")
        if (isinstance(self.strength, bool) or not isinstance(self.strength, (int, float))
                or not math.isfinite(self.strength)):
            raise ValueError(f"a relationship's strength must be a finite number, "
                             f"got {self.strength!r}")


@dataclass(frozen=True)
class ParsedExtraction:
    """What one reply (or one chunk's replies) said, and what could not be read.

    From :func:`parse_extraction` and :func:`merge_extractions` every
    relationship's endpoints are among the entities (by key), except those a
    gleaning round's ``known`` keys name; a chunk's merged extraction is
    self-contained (the graph and the store check it).
    """

    entities: tuple[EntityRecord, ...] = ()
    relations: tuple[RelationRecord, ...] = ()
    problems: tuple[str, ...] = ()

    def undeclared(self) -> list[str]:
        """Relationship endpoints (as written) with no entity record here, first seen first."""
        keys = {e.key for e in self.entities}
        out: list[str] = []
        for r in self.relations:
            for name in (r.source, r.target):
                if entity_key(name) not in keys:
                    keys.add(entity_key(name))
                    out.append(name)
        return out


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def _clean(field: str) -> str:
    """A type or strength: outer whitespace, quotes and brackets off, spaces collapsed."""
    return " ".join(field.strip().strip(_QUOTES + "()[] \t\r\n").split())


def _clean_description(field: str) -> str:
    """Spaces collapsed; enclosing quotes and unmatched end brackets (record syntax) off."""
    text = " ".join(field.split())
    if len(text) >= 2 and text[0] == text[-1] and text[0] in _QUOTES:
        text = text[1:-1].strip()
    while text.endswith(")") and text.count(")") > text.count("("):
        text = text[:-1].rstrip()
    while text.startswith("(") and text.count("(") > text.count(")"):
        text = text[1:].lstrip()
    return text


def _strength(raw: str) -> float | None:
    try:
        value = float(_clean(raw))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class _Raw:
    kind: str
    fields: list[str]
    text: str


def _split_records(body: str, problems: list[str]) -> list[_Raw]:
    starts = list(_START.finditer(body))
    lead = body[: starts[0].start()] if starts else body
    if lead.strip(_SYNTAX):
        problems.append(f"ignored text that is not a record: {_short(lead)}")
    records = []
    for i, start in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(body)
        segment = body[start.end():end]
        stop = _END.search(segment)
        content, rest = (segment[: stop.start()], segment[stop.end():]) if stop else (segment,
                                                                                      "")
        if rest.strip(_SYNTAX):
            problems.append(f"ignored text between records: {_short(rest)}")
        kind = "entity" if start.group(1).casefold() == "entity" else "relationship"
        records.append(_Raw(kind, content.split(TUPLE_DELIMITER),
                            body[start.start(): start.end() + len(content)]))
    return records


def _entity(raw: _Raw, problems: list[str]) -> EntityRecord | None:
    fields = raw.fields
    name = clean_name(fields[0])
    if not entity_key(name):
        problems.append(f"dropped an entity record with no name: {_short(raw.text)}")
        return None
    if len(fields) < 2 or not _clean(fields[1]):
        problems.append(f"entity {name!r} has no type; typed {UNKNOWN_TYPE!r}")
        etype = UNKNOWN_TYPE
    else:
        etype = _clean(fields[1]).casefold()
    if len(fields) > 3:
        problems.append(f"entity {name!r} has {len(fields) - 3} extra field(s); joined "
                        "into its description")
    description = _clean_description(" ".join(fields[2:]))
    if len(fields) < 3:
        problems.append(f"entity {name!r} has no description")
    return EntityRecord(name, etype, description)


def _relation(raw: _Raw, problems: list[str]) -> RelationRecord | None:
    fields = raw.fields
    if len(fields) < 2:
        problems.append(f"dropped a relationship record without two endpoints: "
                        f"{_short(raw.text)}")
        return None
    source, target = clean_name(fields[0]), clean_name(fields[1])
    if not entity_key(source) or not entity_key(target):
        problems.append(f"dropped a relationship with an empty endpoint: {_short(raw.text)}")
        return None
    if entity_key(source) == entity_key(target):
        problems.append(f"dropped a relationship from {source!r} to itself")
        return None
    label = f"relationship {source!r} -> {target!r}"
    rest = fields[2:]
    parsed = _strength(rest[-1]) if len(rest) >= 2 else None
    if len(rest) < 2:
        problems.append(f"{label} has no strength; used {DEFAULT_STRENGTH}")
    elif parsed is None:
        problems.append(f"{label} has strength {_clean(rest[-1])!r}, not a number; "
                        f"used {DEFAULT_STRENGTH}")
    strength = DEFAULT_STRENGTH if parsed is None else parsed
    words = rest[:-1] if len(rest) >= 2 else rest
    if len(words) > 1:
        problems.append(f"{label} has {len(words) - 1} extra field(s); joined into its "
                        "description")
    if not words:
        problems.append(f"{label} has no description")
    return RelationRecord(source, target, _clean_description(" ".join(words)), strength)


def parse_extraction(text: str, *, truncated: bool = False, require_entities: bool = True,
                     known: Iterable[str] = ()) -> ParsedExtraction:
    """The records in a reply, with every problem met on the way.

    ``truncated``: the reply hit ``max_tokens`` (:attr:`Completion.truncated`).
    ``known``: entity keys declared earlier in the conversation (a gleaning
    round's relationships may point at them without a placeholder).
    ``require_entities=False`` accepts a reply with no entity (a gleaning round
    that found only relationships, or nothing but ``<|COMPLETE|>``).

    Raises :class:`BadOutput` ``"empty"`` for a blank reply, ``"unparsable"``
    when no record could be read, ``"no_entities"`` when none declares an entity.

    >>> parse_extraction('("entity"<|>Ada Lovelace<|>person<|>Mathematician)##\\n'
    ...                  '("entity"<|>Analytical Engine<|>work<|>A machine design)##\\n'
    ...                  '("relationship"<|>Ada Lovelace<|>Analytical Engine<|>Wrote its '
    ...                  'first program<|>9)\\n<|COMPLETE|>').relations[0].strength
    9.0
    """
    if not isinstance(text, str):
        raise TypeError(f"a reply must be str, got {type(text).__name__}")
    problems: list[str] = []
    body = _FENCE.sub("", text)
    marker = _MARKER.search(body)
    tail = ""
    if marker is not None:
        body, tail = body[: marker.start()], body[marker.end():]
    if not body.strip() and marker is None:
        raise BadOutput("empty", "the reply holds no text besides code fences")

    raws = _split_records(body, problems)
    if truncated and marker is None and raws:
        problems.append("dropped the last record, cut off at max_tokens: "
                        f"{_short(raws[-1].text)}")
        raws.pop()
    entities: dict[EntityRecord, None] = {}
    relations: dict[RelationRecord, None] = {}
    for raw in raws:
        if raw.kind == "entity":
            entity = _entity(raw, problems)
            if entity is not None:
                entities.setdefault(entity)
        else:
            relation = _relation(raw, problems)
            if relation is not None:
                relations.setdefault(relation)
    if tail.strip(_SYNTAX):
        problems.append(f"ignored text after {COMPLETION_MARKER}: {_short(tail)}")
    declared = {e.key for e in entities}
    if not entities and not relations:
        if body.strip(" \t\r\n#") or raws or marker is None:
            raise BadOutput("unparsable", f"no record could be read ({len(raws)} found); "
                            f"{'; '.join(problems[:3]) or 'reply ' + _short(text)}")
        if require_entities:
            raise BadOutput("no_entities", f"the reply was only {COMPLETION_MARKER}")
        return ParsedExtraction((), (), tuple(problems))
    if require_entities and not declared:
        raise BadOutput("no_entities", f"{len(relations)} relationship(s) but no entity record")

    implied = declared | set(known)
    for relation in relations:
        for name in (relation.source, relation.target):
            if entity_key(name) not in implied:
                implied.add(entity_key(name))
                problems.append(f"relationship endpoint {name!r} was not declared as an "
                                f"entity; added with type {UNKNOWN_TYPE!r}")
                entities.setdefault(EntityRecord(name, UNKNOWN_TYPE, ""))
    return ParsedExtraction(tuple(entities), tuple(relations), tuple(problems))


def merge_extractions(parts: Sequence[ParsedExtraction],
                      problems: Iterable[str] = ()) -> ParsedExtraction:
    """One chunk's replies (first extraction, then gleaning rounds) as one extraction.

    Exact repeats are dropped, and so is an ``"unknown"`` placeholder (no
    description) for an entity some round declared properly. An endpoint still
    undeclared gets a placeholder (noted). ``problems`` come after the parts' own.
    """
    entities: dict[EntityRecord, None] = {}
    relations: dict[RelationRecord, None] = {}
    notes: list[str] = []
    for i, part in enumerate(parts):
        entities.update(dict.fromkeys(part.entities))
        relations.update(dict.fromkeys(part.relations))
        notes += [p if i == 0 else f"gleaning round {i}: {p}" for p in part.problems]
    declared = {e.key for e in entities if not _placeholder(e)}
    kept = [e for e in entities if not (_placeholder(e) and e.key in declared)]
    merged = ParsedExtraction(tuple(kept), tuple(relations))
    for name in merged.undeclared():
        notes.append(f"relationship endpoint {name!r} was not declared as an entity; added "
                     f"with type {UNKNOWN_TYPE!r}")
        kept.append(EntityRecord(name, UNKNOWN_TYPE, ""))
    return ParsedExtraction(tuple(kept), tuple(relations), (*notes, *problems))


def _placeholder(entity: EntityRecord) -> bool:
    return entity.type == UNKNOWN_TYPE and not entity.description


def parse_yes_no(text: str) -> bool:
    """A gleaning judge's answer: its first word, YES or NO, any case or markup.

    Anything else raises :class:`BadOutput` ``"not_yes_no"`` (asked again).

    >>> parse_yes_no("**Yes.** The text also names ...")
    True
    """
    word = _JUDGE_WORD.search(text)
    answer = word.group(0).casefold() if word else ""
    if answer in ("yes", "no"):
        return answer == "yes"
    raise BadOutput("not_yes_no", f"expected YES or NO, got {_short(text, 60)}")
