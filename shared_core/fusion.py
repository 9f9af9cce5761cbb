"""The weighted context ensemble (G2ConS §3.2.1) over any two ranked context lists.

Principles from the paper: the total stays within β; chunks both paths found
come first (voting); the concept path fills at most (1−λ)·β and the KG path at
most λ·β. Voted chunks are charged to the total only; the two path shares then
split what remains, (1−λ) and λ of it, so all three limits hold at once.
Items are deduplicated by ``chunk_id``: a KG fact whose source chunk the concept
path also retrieved is a vote for that chunk, not a second copy of it. A concept
item that is a sub-chunk unit names its chunk in ``source_id``, and counts as
found by both paths when the KG path cites that chunk.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .text.tokens import count_tokens

Path = Literal["concept", "kg", "both"]


@dataclass(frozen=True)
class ContextItem:
    """One retrievable piece of context: a chunk, or a KG fact tied to its source chunk.

    ``source_id`` is the chunk a finer unit was cut from; voting compares it (or,
    when empty, ``chunk_id``) with the chunk ids the other path found.
    """

    chunk_id: str
    text: str
    tokens: int
    score: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    source_id: str = ""

    @property
    def vote_key(self) -> str:
        return self.source_id or self.chunk_id

    def __post_init__(self) -> None:
        if not isinstance(self.chunk_id, str) or not self.chunk_id:
            raise ValueError(f"chunk_id must be a non-empty str, got {self.chunk_id!r}")
        if not isinstance(self.tokens, int) or self.tokens < 0:
            raise ValueError(f"tokens must be a non-negative int, got {self.tokens!r}")


@dataclass(frozen=True)
class KGFact:
    """One KG-path result, as a framework returned it, tied to the chunk it came from.

    The source chunk id is what makes a fact the concept path also found a vote
    for that chunk rather than a second copy of it.
    """

    text: str
    source_chunk_id: str
    score: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"a KG fact's text must be str, got {type(self.text).__name__}")
        if not isinstance(self.source_chunk_id, str) or not self.source_chunk_id:
            raise ValueError("a KG fact's source_chunk_id must be a non-empty str, "
                             f"got {self.source_chunk_id!r}")
        if isinstance(self.score, bool) or not isinstance(self.score, (int, float)):
            raise TypeError(f"a KG fact's score must be a number, got {self.score!r}")
        if not isinstance(self.metadata, Mapping):
            raise TypeError("a KG fact's metadata must be a mapping, "
                            f"got {type(self.metadata).__name__}")


def merge_by_chunk(items: Sequence[ContextItem]) -> list[ContextItem]:
    """Merge KG-path items that share a source chunk into one, at the first one's rank.

    Graph retrievers return one result per fact; fusion keeps one item per chunk,
    so without merging every fact but the first from a chunk would be lost.
    Texts are joined (each distinct text once), tokens recounted, best score kept.
    """
    groups: dict[str, list[ContextItem]] = {}
    for item in items:
        groups.setdefault(item.chunk_id, []).append(item)
    merged: list[ContextItem] = []
    for chunk_id, group in groups.items():
        if len(group) == 1:
            merged.append(group[0])
            continue
        text = "\n".join(dict.fromkeys(i.text for i in group))
        merged.append(ContextItem(chunk_id, text, count_tokens(text),
                                  max(i.score for i in group), dict(group[0].metadata)))
    return merged


def kg_context_items(facts: Iterable[KGFact]) -> list[ContextItem]:
    """The KG path as fusion input: one item per source chunk, in the KG's rank order.

    Both framework adapters call this, so the same facts fuse into the same
    context whichever framework retrieved them. Blank facts carry no context
    and are skipped; facts from one chunk are merged (:func:`merge_by_chunk`).
    """
    items = []
    for i, fact in enumerate(facts):
        if not isinstance(fact, KGFact):
            raise TypeError(f"facts[{i}] must be a KGFact, got {type(fact).__name__}")
        if fact.text.strip():
            items.append(ContextItem(fact.source_chunk_id, fact.text, count_tokens(fact.text),
                                     float(fact.score), dict(fact.metadata)))
    return merge_by_chunk(items)


@dataclass(frozen=True)
class FusedItem:
    """An item of the fused context, the path(s) that brought it and its rank in each."""

    item: ContextItem
    path: Path
    concept_rank: int | None
    kg_rank: int | None


@dataclass(frozen=True)
class FusedContext:
    """What :func:`fuse_contexts` returns: the items in context order and the split used."""

    items: tuple[FusedItem, ...]
    budget: int
    lam: float

    @property
    def tokens(self) -> int:
        return sum(f.item.tokens for f in self.items)

    def tokens_by_path(self) -> dict[str, int]:
        out = {"both": 0, "concept": 0, "kg": 0}
        for f in self.items:
            out[f.path] += f.item.tokens
        return out


def _first_by_chunk(items: Sequence[ContextItem]) -> dict[str, tuple[int, ContextItem]]:
    """Rank and item of each chunk id's first occurrence in a ranked list."""
    seen: dict[str, tuple[int, ContextItem]] = {}
    for rank, item in enumerate(items):
        seen.setdefault(item.chunk_id, (rank, item))
    return seen


def fuse_contexts(
    concept_items: Sequence[ContextItem],
    kg_items: Sequence[ContextItem],
    *,
    budget: int,
    lam: float,
    share_unused: bool = False,
) -> FusedContext:
    """Merge two ranked lists into one context within ``budget`` tokens.

    ``lam`` is the KG share. With ``share_unused`` a path that cannot fill its
    share leaves the rest to the other (the paper keeps the shares strict).
    Items that do not fit are skipped, so a long item never blocks shorter ones.
    """
    if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be a positive int, got {budget!r}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam!r}")
    concept = _first_by_chunk(concept_items)
    kg = _first_by_chunk(kg_items)
    kg_rank_of: dict[str, int] = {}
    for rank, item in kg.values():
        kg_rank_of.setdefault(item.vote_key, rank)

    def votes(c: str) -> tuple[int, int]:
        return concept[c][0], kg_rank_of[concept[c][1].vote_key]

    voted = sorted((c for c, (_, item) in concept.items() if item.vote_key in kg_rank_of),
                   key=lambda c: (min(votes(c)), sum(votes(c)), c))
    fused: list[FusedItem] = []
    used = 0
    for chunk_id in voted:
        # the chunk's text (from the concept path) carries the fact the KG path found
        item = concept[chunk_id][1]
        if used + item.tokens <= budget:
            fused.append(FusedItem(item, "both", *votes(chunk_id)))
            used += item.tokens
    placed = {f.item.chunk_id for f in fused}

    remaining = budget - used
    caps = {"concept": int((1.0 - lam) * remaining), "kg": int(lam * remaining)}
    singles: dict[str, list[tuple[int, ContextItem]]] = {
        "concept": [v for c, v in concept.items() if c not in placed],
        "kg": [v for c, v in kg.items() if c not in placed],
    }
    spent = {"concept": 0, "kg": 0}

    def fill(path: Literal["concept", "kg"], cap: int) -> None:
        nonlocal used
        for rank, item in singles[path]:
            if item.chunk_id in placed:
                continue
            if spent[path] + item.tokens <= cap and used + item.tokens <= budget:
                fused.append(FusedItem(item, path, rank if path == "concept" else None,
                                       rank if path == "kg" else None))
                placed.add(item.chunk_id)
                spent[path] += item.tokens
                used += item.tokens

    fill("concept", caps["concept"])
    fill("kg", caps["kg"])
    if share_unused:
        fill("concept", remaining - spent["kg"])
        fill("kg", remaining - spent["concept"])
    return FusedContext(items=tuple(fused), budget=budget, lam=lam)
