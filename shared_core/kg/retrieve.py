"""Retrieval from our own KG, alone or fused with the concept path, for users with no framework.

The KG path is a local search: the query's entities, found by exact name (any
1–6-word span of the query that folds to an entity's key) and by embedding
similarity of the entity's name and descriptions, then those entities'
descriptions and relations as :class:`~shared_core.KGFact`, each tied to the
chunk it was read from. The fused retriever hands both paths to the same
ensemble the framework adapters use (:func:`~shared_core.pipeline.fuse_paths`),
so voting works unchanged: a fact from a chunk the concept path also found is a
vote for that chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..embeddings import Embedder, embed_query
from ..fusion import FusedContext, KGFact, kg_context_items
from ..index import ConceptGraphIndex
from ..pipeline import concept_context_items, fuse_paths
from ..state.ingest import embed_in_batches
from .graph import Entity, KnowledgeGraph
from .names import entity_key

# an exact name match outranks any similarity (cosines are at most 1)
EXACT_BONUS = 1.0
MAX_NAME_WORDS = 6
# characters of an entity's descriptions that go into its vector
DESCRIPTION_CHARS = 1000


def entity_text(entity: Entity) -> str:
    """What an entity's vector embeds: its name, type and (the start of) its descriptions."""
    described = " ".join(entity.descriptions)[:DESCRIPTION_CHARS]
    return f"{entity.name} ({entity.type})" + (f": {described}" if described else "")


@dataclass(frozen=True)
class EntityHit:
    """An entity the query reached: how (exact name or similarity) and its score."""

    entity: Entity
    score: float
    exact: bool


class KGRetriever:
    """Entities by exact name and similarity, then their facts, ranked.

    Entity vectors are computed once, here (pass a
    :class:`~shared_core.CachedEmbedder` to reuse them across runs).
    """

    def __init__(self, graph: KnowledgeGraph, embedder: Embedder, *,
                 top_entities: int = 10) -> None:
        if not isinstance(graph, KnowledgeGraph):
            raise TypeError(f"graph must be a KnowledgeGraph, got {type(graph).__name__}")
        if not isinstance(embedder, Embedder):
            raise TypeError("embedder must implement the Embedder protocol, "
                            f"got {type(embedder).__name__}")
        if isinstance(top_entities, bool) or not isinstance(top_entities, int) \
                or top_entities < 1:
            raise ValueError(f"top_entities must be an int >= 1, got {top_entities!r}")
        self.graph = graph
        self.embedder = embedder
        self.top_entities = top_entities
        self._entities = graph.entities
        self._row_of = {e.key: i for i, e in enumerate(self._entities)}
        self._vectors = embed_in_batches(embedder, [entity_text(e) for e in self._entities],
                                         False, "KG entities")

    def exact_matches(self, query: str) -> list[int]:
        """Rows of entities named by a 1–6-word span of the query, in query order."""
        words = entity_key(query).split()
        found: dict[int, None] = {}
        for start in range(len(words)):
            for stop in range(start + 1, min(len(words), start + MAX_NAME_WORDS) + 1):
                row = self._row_of.get(entity_key(" ".join(words[start:stop])))
                if row is not None:
                    found.setdefault(row)
        return list(found)

    def entities(self, query: str, query_vector: np.ndarray | None = None) -> list[EntityHit]:
        """The query's entities, best first: exact names (by similarity among them), then
        the most similar others, ``top_entities`` in all."""
        if not self._entities:
            return []
        qv = embed_query(self.embedder, query) if query_vector is None else np.asarray(
            query_vector, dtype=np.float32)
        if qv.shape != (self.embedder.dim,):
            raise ValueError(f"query_vector has shape {qv.shape}, the embedder gives "
                             f"({self.embedder.dim},)")
        scores = self._vectors @ qv
        exact = self.exact_matches(query)
        boosted = scores.copy()
        boosted[exact] += EXACT_BONUS
        k = min(self.top_entities, len(boosted))
        top = np.argpartition(-boosted, k - 1)[:k]
        top = top[np.lexsort((top, -boosted[top]))]
        exact_set = set(exact)
        return [EntityHit(self._entities[i], float(boosted[i]), int(i) in exact_set)
                for i in top.tolist()]

    def facts(self, query: str, query_vector: np.ndarray | None = None) -> list[KGFact]:
        """The reached entities' descriptions, then their relations (strongest first),
        entity by entity; each fact once, scored by its entity's score."""
        out: list[KGFact] = []
        seen: set[tuple[str, ...]] = set()
        for hit in self.entities(query, query_vector):
            entity = hit.entity
            for mention in entity.mentions:
                said = ("entity", entity.key, mention.chunk_id, mention.description)
                if mention.description and said not in seen:
                    seen.add(said)
                    out.append(KGFact(f"{entity.name} ({entity.type}): {mention.description}",
                                      mention.chunk_id, hit.score,
                                      {"kind": "entity", "entity": entity.key,
                                       "exact": hit.exact}))
            relations = sorted(self.graph.relations_of(entity.key),
                               key=lambda r: (-r.strength, r.source, r.target,
                                              r.source_chunk_id))
            for r in relations:
                key = ("relation", r.source, r.target, r.source_chunk_id, r.description)
                if key in seen:
                    continue
                seen.add(key)
                source = self.graph.entity(r.source)
                target = self.graph.entity(r.target)
                names = (source.name if source else r.source, target.name if target
                         else r.target)
                text = f"{names[0]} -> {names[1]}" + (f": {r.description}"
                                                      if r.description else "")
                out.append(KGFact(text, r.source_chunk_id, hit.score,
                                  {"kind": "relation", "source": r.source, "target": r.target,
                                   "strength": r.strength, "via": entity.key}))
        return out


class FusedKGRetriever:
    """The concept path of an index fused with our KG's path: G2ConS §3.2.1, no framework.

    >>> from shared_core import ConceptGraphIndex, HashingEmbedder
    >>> from shared_core.kg import FusedKGRetriever, KnowledgeGraph, parse_extraction
    >>> index = ConceptGraphIndex.from_texts(["Ada Lovelace wrote the first program.",
    ...     "Charles Babbage designed the Analytical Engine."], ids=["a", "b"],
    ...     embedder=HashingEmbedder())
    >>> kg = KnowledgeGraph()
    >>> kg.add("b", parse_extraction('("entity"<|>Charles Babbage<|>person<|>an engineer)'))
    >>> fused = FusedKGRetriever(index, kg, budget=200).fuse("Who was Charles Babbage?")
    >>> [(f.item.chunk_id, f.path) for f in fused.items][0]
    ('b', 'both')
    """

    def __init__(self, index: ConceptGraphIndex, graph: KnowledgeGraph | KGRetriever, *,
                 budget: int | None = None, lam: float | None = None,
                 share_unused: bool = False, top_entities: int = 10) -> None:
        if not isinstance(index, ConceptGraphIndex):
            raise TypeError(f"index must be a ConceptGraphIndex, got {type(index).__name__}")
        self.index = index
        self.kg = (graph if isinstance(graph, KGRetriever)
                   else KGRetriever(graph, index.embedder, top_entities=top_entities))
        if self.kg.embedder.model_id != index.embedder.model_id:
            raise ValueError(f"the KG retriever embeds with {self.kg.embedder.model_id}, the "
                             f"index with {index.embedder.model_id}: use one embedder")
        self.budget = index.config.budget if budget is None else budget
        self.lam = index.config.lam if lam is None else lam
        self.share_unused = share_unused

    def fuse(self, query: str) -> FusedContext:
        """Both paths for one query vector (embedded once), then the λ ensemble."""
        qv = self.index.embed_query(query)
        return fuse_paths(
            lambda: concept_context_items(self.index.retrieve_by_vector(
                qv, query=query, budget=self.budget)),
            lambda: kg_context_items(self.kg.facts(query, qv)),
            budget=self.budget, lam=self.lam, share_unused=self.share_unused)

    def retrieve(self, query: str) -> list[tuple[str, str, str]]:
        """``(chunk_id, path, text)`` of the fused context, in context order."""
        return [(f.item.chunk_id, f.path, f.item.text) for f in self.fuse(query).items]
