"""The knowledge graph: entities merged across chunks by name, every fact tied to its chunk.

An entity is the set of its *mentions*, one per chunk record naming it; its
display name, type, descriptions and chunks are derived from them, so merging
is order-free and nothing a chunk said is lost. A relation keeps the one chunk
it was read from. That chunk id is what lets the fused retriever count a KG
fact as a vote for a chunk the concept path also found (:class:`~shared_core.KGFact`).

Entities merge by :func:`~.names.entity_key` (NFKC, casefold, punctuation off
the ends, whitespace collapsed). When mentions disagree, the most frequent
type wins, ties going to the alphabetically first; ``"unknown"`` (a relation
endpoint no record declared) counts only when it is the only type. The display
name is chosen the same way among the names as written (stray quotes off), so
a tie goes to a capitalised spelling: ``"Ada"`` sorts before ``"ada"``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..fusion import KGFact
from .checks import as_list, build, check_text, fields
from .names import clean_name, entity_key
from .parse import UNKNOWN_TYPE, ParsedExtraction

FORMAT = "conceptgraph-kg"
VERSION = 1


@dataclass(frozen=True)
class Mention:
    """One chunk's record of an entity, as the model wrote it."""

    chunk_id: str
    name: str
    type: str
    description: str = ""

    def __post_init__(self) -> None:
        check_text(self.chunk_id, "a mention's chunk_id")
        check_text(self.name, "a mention's name")
        check_text(self.type, "a mention's type")
        check_text(self.description, "a mention's description", empty=True)


def _vote(values: Iterable[str]) -> str:
    """The most frequent value, ties to the alphabetically first: the same for any order."""
    counts = Counter(values)
    return min(counts, key=lambda v: (-counts[v], v))


@dataclass(frozen=True)
class Entity:
    """An entity merged over every chunk that names it (``key`` is its normalised name)."""

    key: str
    mentions: tuple[Mention, ...]

    def __post_init__(self) -> None:
        check_text(self.key, "an entity's key")
        if not self.mentions:
            raise ValueError(f"entity {self.key!r} has no mentions")
        for m in self.mentions:
            if entity_key(m.name) != self.key:
                raise ValueError(f"mention {m.name!r} normalises to {entity_key(m.name)!r}, "
                                 f"not to its entity's key {self.key!r}")

    @cached_property
    def name(self) -> str:
        """The most used spelling (cleaned of stray quotes), ties to the first in sort order."""
        return _vote(clean_name(m.name) for m in self.mentions)

    @cached_property
    def type(self) -> str:
        known = [m.type for m in self.mentions if m.type != UNKNOWN_TYPE]
        return _vote(known) if known else UNKNOWN_TYPE

    @cached_property
    def descriptions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.description for m in self.mentions if m.description))

    @cached_property
    def source_chunk_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.chunk_id for m in self.mentions))


@dataclass(frozen=True)
class Relation:
    """A relationship between two entity keys, as one chunk stated it."""

    source: str
    target: str
    description: str
    strength: float
    source_chunk_id: str

    def __post_init__(self) -> None:
        check_text(self.source, "a relation's source")
        check_text(self.target, "a relation's target")
        check_text(self.description, "a relation's description", empty=True)
        check_text(self.source_chunk_id, "a relation's source_chunk_id")
        if self.source == self.target:
            raise ValueError(f"relation {self.source!r} joins an entity to itself")
        if (isinstance(self.strength, bool) or not isinstance(self.strength, (int, float))
                or not math.isfinite(self.strength)):
            raise ValueError(f"a relation's strength must be a finite number, "
                             f"got {self.strength!r}")


class KnowledgeGraph:
    """Entities and relations from many chunks; add chunk by chunk, or load from JSON.

    >>> from shared_core.kg.parse import parse_extraction
    >>> kg = KnowledgeGraph()
    >>> kg.add("c1", parse_extraction('("entity"<|>Ada Lovelace<|>person<|>Mathematician)'))
    >>> kg.add("c2", parse_extraction('("entity"<|>ada lovelace.<|>person<|>Wrote notes)'))
    >>> e = kg.entity("ADA LOVELACE")
    >>> e.name, e.type, e.source_chunk_ids
    ('Ada Lovelace', 'person', ('c1', 'c2'))
    """

    def __init__(self) -> None:
        self._mentions: dict[str, list[Mention]] = {}
        self._seen: set[tuple[str, Mention]] = set()
        self._relations: list[Relation] = []
        self._relation_set: set[Relation] = set()
        self._touching: dict[str, list[int]] = {}
        self._cache: dict[str, Entity] = {}

    # ------------------------------------------------------------------ building
    def add(self, chunk_id: str, extraction: ParsedExtraction) -> None:
        """One chunk's extraction; its relations' endpoints must be among its entities."""
        check_text(chunk_id, "chunk_id")
        if not isinstance(extraction, ParsedExtraction):
            raise TypeError(f"extraction must be a ParsedExtraction, "
                            f"got {type(extraction).__name__}")
        missing = extraction.undeclared()
        if missing:
            raise ValueError(f"chunk {chunk_id!r}: relation endpoint {missing[0]!r} is not "
                             "among the chunk's entities (merge_extractions adds placeholders)")
        for e in extraction.entities:
            self._add_mention(e.key, Mention(chunk_id, e.name, e.type, e.description))
        for r in extraction.relations:
            self._add_relation(Relation(entity_key(r.source), entity_key(r.target),
                                        r.description, float(r.strength), chunk_id))

    def _add_mention(self, key: str, mention: Mention) -> bool:
        if (key, mention) in self._seen:
            return False
        self._seen.add((key, mention))
        self._mentions.setdefault(key, []).append(mention)
        self._cache.pop(key, None)
        return True

    def _add_relation(self, relation: Relation) -> bool:
        if relation in self._relation_set:
            return False
        self._relation_set.add(relation)
        self._relations.append(relation)
        for key in (relation.source, relation.target):
            self._touching.setdefault(key, []).append(len(self._relations) - 1)
        return True

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._mentions)

    def __iter__(self) -> Iterator[Entity]:
        return (self._entity(key) for key in self._mentions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KnowledgeGraph):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return (f"KnowledgeGraph({len(self)} entities, {len(self._relations)} relations, "
                f"{len(self.chunk_ids)} chunks)")

    def _entity(self, key: str) -> Entity:
        entity = self._cache.get(key)
        if entity is None:
            entity = self._cache[key] = Entity(key, tuple(self._mentions[key]))
        return entity

    @property
    def entities(self) -> tuple[Entity, ...]:
        """Every entity, in the order first seen."""
        return tuple(self)

    @property
    def relations(self) -> tuple[Relation, ...]:
        return tuple(self._relations)

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        """Every chunk some entity or relation came from, in the order first seen."""
        ids = dict.fromkeys(m.chunk_id for ms in self._mentions.values() for m in ms)
        ids.update(dict.fromkeys(r.source_chunk_id for r in self._relations))
        return tuple(ids)

    def entity(self, name: str) -> Entity | None:
        """The entity of this name, spelled any way :func:`~.names.entity_key` folds."""
        key = entity_key(name)
        return self._entity(key) if key in self._mentions else None

    def relations_of(self, name: str) -> tuple[Relation, ...]:
        """The relations touching an entity, either way round."""
        return tuple(self._relations[i] for i in self._touching.get(entity_key(name), ()))

    def facts(self) -> list[KGFact]:
        """Every description and relation as a :class:`~shared_core.KGFact` tied to its chunk.

        A relation's score is its strength; an entity description's is 0.
        """
        out = []
        for entity in self:
            for m in entity.mentions:
                if m.description:
                    out.append(KGFact(f"{entity.name} ({entity.type}): {m.description}",
                                      m.chunk_id, 0.0, {"kind": "entity", "entity": entity.key}))
        for r in self._relations:
            source, target = self._entity(r.source).name, self._entity(r.target).name
            text = f"{source} -> {target}" + (f": {r.description}" if r.description else "")
            out.append(KGFact(text, r.source_chunk_id, r.strength,
                              {"kind": "relation", "source": r.source, "target": r.target}))
        return out

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; :meth:`from_dict` restores an equal graph."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "entities": [{"key": key, "mentions": [
                {"chunk_id": m.chunk_id, "name": m.name, "type": m.type,
                 "description": m.description} for m in mentions]}
                for key, mentions in self._mentions.items()],
            "relations": [{"source": r.source, "target": r.target,
                           "description": r.description, "strength": r.strength,
                           "chunk_id": r.source_chunk_id} for r in self._relations],
        }

    @classmethod
    def from_dict(cls, data: object) -> KnowledgeGraph:
        """A graph from :meth:`to_dict`'s data; :class:`ValueError` naming the bad field."""
        top = fields(data, "knowledge graph", ("format", "version", "entities", "relations"))
        if top["format"] != FORMAT:
            raise ValueError(f"knowledge graph: format is {top['format']!r}, not {FORMAT!r}")
        version = top["version"]
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"knowledge graph: version must be an int >= 1, got {version!r}")
        if version > VERSION:
            raise ValueError(f"knowledge graph: format version {version} is newer than this "
                             f"conceptgraph reads ({VERSION}); upgrade conceptgraph")
        graph = cls()
        said: set[tuple[str, str]] = set()  # (entity key, chunk id) pairs with a mention
        for i, item in enumerate(as_list(top["entities"], "knowledge graph: entities")):
            where = f"knowledge graph: entities[{i}]"
            entity = fields(item, where, ("key", "mentions"))
            key = entity["key"]
            if isinstance(key, str) and key in graph._mentions:
                raise ValueError(f"{where}: key {key!r} appears twice")
            mentions = []
            for j, raw in enumerate(as_list(entity["mentions"], f"{where}.mentions")):
                got = fields(raw, f"{where}.mentions[{j}]",
                             ("chunk_id", "name", "type", "description"))
                mentions.append(build(Mention, f"{where}.mentions[{j}]", got["chunk_id"],
                                      got["name"], got["type"], got["description"]))
            checked = build(Entity, where, key, tuple(mentions))
            for mention in checked.mentions:
                if not graph._add_mention(checked.key, mention):
                    raise ValueError(f"{where}: mention {mention} appears twice")
                said.add((checked.key, mention.chunk_id))
        for i, item in enumerate(as_list(top["relations"], "knowledge graph: relations")):
            where = f"knowledge graph: relations[{i}]"
            r = fields(item, where, ("source", "target", "description", "strength", "chunk_id"))
            relation = build(Relation, where, r["source"], r["target"], r["description"],
                             r["strength"], r["chunk_id"])
            for end in (relation.source, relation.target):
                if (end, relation.source_chunk_id) not in said:
                    raise ValueError(f"{where}: entity {end!r} has no mention from chunk "
                                     f"{relation.source_chunk_id!r}, the relation's source")
            if not graph._add_relation(relation):
                raise ValueError(f"{where}: the relation appears twice")
        return graph
