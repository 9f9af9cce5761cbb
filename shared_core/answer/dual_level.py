"""Dual-level retrieval over our graphs (LightRAG's, as HuixiangDou2 tunes it): fuzzy matching.

Each key gathers its own candidates, best first:

- a *low-level* key (an entity, a specific concept) is matched against the
  concept index (its direct concept matches, no expansion: ``source="concept"``)
  and against KG entities (their descriptions and relations: ``"kg_entity"``);
- a *high-level* key (a theme, a relation) is matched against KG relations by
  similarity of the relation's text (``"kg_relation"``) and against concept
  neighbourhoods: the concepts it reaches and their neighbours along the
  concept graph's edges (``"concept_neighbourhood"``).

The two sources of a key alternate, so both get a share. Then the budget:
every key gets an equal share of ``budget`` (at most ``key_budget``), and what
the shares leave unused goes, key by key, to the next-best candidates, still at
most ``key_budget`` per key. A piece two keys find counts once, for the first.
HuixiangDou2 found that more context and more low-level keys help (0.65 -> 0.695):
raise ``budget`` and the keys' number before anything else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

import numpy as np

from ..checks import check_count
from ..embeddings import Embedder
from ..index import ConceptGraphIndex, RetrievalResult
from ..kg.graph import KnowledgeGraph, Relation
from ..kg.retrieve import KGRetriever
from ..search.walk import expansion_hops_for
from ..state.ingest import embed_in_batches
from ..text.tokens import count_tokens
from .evidence import Evidence, Level, Source
from .keys import QueryKeys


@dataclass(frozen=True)
class KeyContext:
    """What one key contributed: its pieces, their tokens, and the share it had."""

    key: str
    level: Level
    evidence: tuple[Evidence, ...]
    candidates: int

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.evidence)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "level": self.level, "pieces": len(self.evidence),
                "tokens": self.tokens, "candidates": self.candidates,
                "chunks": list(dict.fromkeys(e.chunk_id for e in self.evidence))}


@dataclass(frozen=True)
class DualLevelResult:
    """The context for a query's keys, in key order, and each key's part of it."""

    keys: QueryKeys
    per_key: tuple[KeyContext, ...]
    budget: int

    @property
    def evidence(self) -> tuple[Evidence, ...]:
        return tuple(e for k in self.per_key for e in k.evidence)

    @property
    def tokens(self) -> int:
        return sum(k.tokens for k in self.per_key)

    def to_dict(self) -> dict[str, Any]:
        return {"keys": self.keys.to_dict(), "budget": self.budget, "tokens": self.tokens,
                "per_key": [k.to_dict() for k in self.per_key]}


def fact_detail(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A KG fact's metadata as provenance detail: a relation's ends are named as
    entities, so they never stand for the provenance's own ``source``.

    >>> fact_detail({"kind": "relation", "source": "tea", "target": "assam"})
    {'kind': 'relation', 'source_entity': 'tea', 'target_entity': 'assam'}
    """
    renamed = {"source": "source_entity", "target": "target_entity"}
    return {renamed.get(k, k): v for k, v in metadata.items()}


def relation_text(graph: KnowledgeGraph, relation: Relation) -> str:
    """A relation as a fact: "Source -> Target: description"."""
    source, target = graph.entity(relation.source), graph.entity(relation.target)
    names = (source.name if source else relation.source,
             target.name if target else relation.target)
    return f"{names[0]} -> {names[1]}" + (f": {relation.description}"
                                          if relation.description else "")


class DualLevelRetriever:
    """Low- and high-level keys matched against the concept index and (optionally) our KG.

    ``kg`` is a :class:`~shared_core.kg.KnowledgeGraph` (entity vectors computed
    here, with the index's embedder) or a ready :class:`~shared_core.kg.KGRetriever`.
    Relation vectors are computed on the first high-level key.
    """

    def __init__(self, index: ConceptGraphIndex, kg: KnowledgeGraph | KGRetriever | None = None,
                 *, budget: int | None = None, key_budget: int = 400,
                 top_relations: int = 5) -> None:
        if not isinstance(index, ConceptGraphIndex):
            raise TypeError(f"index must be a ConceptGraphIndex, got {type(index).__name__}")
        for name, value in (("key_budget", key_budget), ("top_relations", top_relations),
                            ("budget", index.config.budget if budget is None else budget)):
            check_count(name, value)
        self.index = index
        self.kg = (kg if isinstance(kg, KGRetriever) or kg is None
                   else KGRetriever(kg, index.embedder))
        if self.kg is not None and self.kg.embedder.model_id != index.embedder.model_id:
            raise ValueError(f"the KG retriever embeds with {self.kg.embedder.model_id}, the "
                             f"index with {index.embedder.model_id}: use one embedder")
        self.budget = index.config.budget if budget is None else budget
        self.key_budget = key_budget
        self.top_relations = top_relations
        self._relations: tuple[tuple[Relation, ...], np.ndarray] | None = None

    @property
    def embedder(self) -> Embedder:
        return self.index.embedder

    # ---------------------------------------------------------------- one key
    def candidates(self, key: str, level: Level, *, step: int | None = None) -> list[Evidence]:
        """Everything ``key`` finds at ``level``, best first (the two sources alternating)."""
        qv = self.index.embed_query(key)
        # the high level is the concept neighbourhood: at least one BFS hop, even where
        # the walk replaces BFS in plain retrieval
        hops = 0 if level == "low" else max(1, expansion_hops_for(self.index.config.hops, 0))
        concept_source: Source = "concept" if level == "low" else "concept_neighbourhood"
        concept = self._concept_evidence(
            self.index.retrieve_by_vector(qv, query=key, hops=hops, budget=self.key_budget),
            key, level, concept_source, step)
        if self.kg is None:
            graph_side: list[Evidence] = []
        elif level == "low":
            graph_side = self._entity_evidence(key, qv, step)
        else:
            graph_side = self._relation_evidence(key, qv, step)
        merged = [e for pair in zip_longest(concept, graph_side) for e in pair if e is not None]
        return merged

    def for_key(self, key: str, level: Level = "low", *, budget: int | None = None,
                step: int | None = None) -> list[Evidence]:
        """The best pieces ``key`` finds, within ``budget`` tokens (``key_budget`` by default)."""
        taken: list[Evidence] = []
        fill(taken, self.candidates(key, level, step=step),
             self.key_budget if budget is None else budget, set())
        return taken

    def _concept_evidence(self, result: RetrievalResult, key: str, level: Level,
                          source: Source, step: int | None) -> list[Evidence]:
        out = []
        for hit in result.chunks:
            p = hit.provenance
            out.append(Evidence(hit.chunk_id, hit.text, hit.chunk.tokens, float(hit.score),
                                source, key, level if step is None else None, step,
                                {"concept": p.concept, "stage": p.stage, "hop": p.hop,
                                 "unit": hit.id}))
        return out

    def _entity_evidence(self, key: str, qv: np.ndarray, step: int | None) -> list[Evidence]:
        assert self.kg is not None
        return [Evidence(f.source_chunk_id, f.text, count_tokens(f.text), float(f.score),
                         "kg_entity", key, "low" if step is None else None, step,
                         fact_detail(f.metadata))
                for f in self.kg.facts(key, qv) if f.text.strip()]

    def _relation_evidence(self, key: str, qv: np.ndarray, step: int | None) -> list[Evidence]:
        assert self.kg is not None
        relations, vectors = self._relation_vectors()
        if not relations:
            return []
        scores = vectors @ qv
        k = min(self.top_relations, len(relations))
        top = np.argsort(-scores, kind="stable")[:k]
        graph = self.kg.graph
        out = []
        for i in top.tolist():
            r = relations[i]
            text = relation_text(graph, r)
            out.append(Evidence(r.source_chunk_id, text, count_tokens(text), float(scores[i]),
                                "kg_relation", key, "high" if step is None else None, step,
                                {"source_entity": r.source, "target_entity": r.target,
                                 "strength": r.strength}))
        return out

    def _relation_vectors(self) -> tuple[tuple[Relation, ...], np.ndarray]:
        if self._relations is None:
            assert self.kg is not None
            relations = self.kg.graph.relations
            texts = [relation_text(self.kg.graph, r) for r in relations]
            self._relations = (relations, embed_in_batches(self.embedder, texts, False,
                                                           "KG relations"))
        return self._relations

    # ---------------------------------------------------------------- all keys
    def retrieve(self, keys: QueryKeys) -> DualLevelResult:
        """Every key's context, within the budget (see the module docstring)."""
        order: list[tuple[str, Level]] = ([(k, "low") for k in keys.low_level]
                                          + [(k, "high") for k in keys.high_level])
        if not order:
            return DualLevelResult(keys, (), self.budget)
        found = [self.candidates(key, level) for key, level in order]
        taken = allocate(found, self.budget, self.key_budget)
        per_key = tuple(KeyContext(key, level, tuple(pieces), len(candidates))
                        for (key, level), pieces, candidates in zip(order, taken, found,
                                                                    strict=True))
        return DualLevelResult(keys, per_key, self.budget)


def allocate(found: Sequence[Sequence[Evidence]], budget: int,
             key_budget: int) -> list[list[Evidence]]:
    """Each key's pieces: an equal share of ``budget`` first (at most ``key_budget``), then
    what is left, key by key in order, still at most ``key_budget`` a key; a piece counts
    once, for the first key that takes it.

    >>> def piece(i, tokens): return Evidence(str(i), "t", tokens, 1.0, "concept", "k")
    >>> taken = allocate([[piece(1, 30), piece(2, 30)], [piece(3, 10)]], 70, 60)
    >>> [[e.chunk_id for e in key] for key in taken]   # shares of 35: 30 | 10; then +30
    [['1', '2'], ['3']]
    """
    if not found:
        return []
    share = max(1, min(key_budget, budget // len(found)))
    taken: list[list[Evidence]] = [[] for _ in found]
    seen: set[tuple[str, str]] = set()
    for pieces, candidates in zip(taken, found, strict=True):
        fill(pieces, candidates, share, seen)
    left = budget - sum(e.tokens for pieces in taken for e in pieces)
    for pieces, candidates in zip(taken, found, strict=True):
        if left <= 0:
            break
        before = sum(e.tokens for e in pieces)
        fill(pieces, candidates, before + min(left, key_budget - before), seen)
        left -= sum(e.tokens for e in pieces) - before
    return taken


def fill(taken: list[Evidence], candidates: Sequence[Evidence], budget: int,
         seen: set[tuple[str, str]]) -> None:
    """Add candidates in order while ``taken`` stays within ``budget`` tokens; a piece
    already in ``seen`` (another key's) is skipped, one too big for the room left too."""
    used = sum(e.tokens for e in taken)
    for piece in candidates:
        if piece.identity in seen or piece in taken:
            continue
        if used + piece.tokens <= budget:
            taken.append(piece)
            seen.add(piece.identity)
            used += piece.tokens
