"""TERAG-style Personalized PageRank retrieval over a concept-passage graph, without an LLM.

TERAG (§3.2, §4.2) builds a directed, unweighted graph: concept -> passage
``has_passage`` edges from each concept to the passages it was extracted from,
and concept <-> concept ``co_occurrence`` edges between concepts of the same
passage. Retrieval (§4.3) matches the query's concepts to the graph, exactly
first and else by embedding similarity (top 3), weights each seed
w(u) = s(u) / f(u) (Eq. 3-4), normalises the weights within the exact and the
semantic group (Eq. 5), runs PPR with that restart vector and ranks passages by
their PPR mass.

This comparator stays LLM-free: concepts are each unit's top TF-IDF terms
(``shared_core.graph.concepts.extract_concepts``) and the query's "entities" are its
own terms under the same analyzer. The graph, seed weights and PPR are the shared
ones of :mod:`shared_core.terag`, whose :class:`~shared_core.terag.TeragRetriever`
is TERAG with its LLM extraction and query NER.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from shared_core.config import ConceptLinks, Overflow
from shared_core.embeddings import Embedder
from shared_core.graph import concept_vectors, extract_concepts
from shared_core.search import fill_budget
from shared_core.select import UnitCorpus
from shared_core.terag import (
    Seed,
    SeedGroup,
    SeedMode,
    concept_passage_graph,
    out_degree,
    passage_mass,
    personalized_pagerank,
    ranked_passages,
    select_seeds,
    strongest_seed,
    transition_transpose,
)
from shared_core.text import term_analyzer

from .units import check_budget, check_query_vector

__all__ = [
    "PprHit",
    "PprSearch",
    "Seed",
    "SeedGroup",
    "SeedMode",
    "TeragPprRetriever",
    "concept_passage_graph",
    "out_degree",
    "personalized_pagerank",
    "terag_ppr",
    "transition_transpose",
]


@dataclass(frozen=True)
class PprHit:
    """A unit in the context, its PPR mass and the strongest seed linked to it (or None)."""

    unit: int
    score: float
    tokens: int
    seed: str | None


@dataclass(frozen=True)
class PprSearch:
    hits: tuple[PprHit, ...]
    seeds: tuple[Seed, ...]
    iterations: int
    budget: int

    @property
    def units(self) -> list[int]:
        return [h.unit for h in self.hits]

    @property
    def tokens_used(self) -> int:
        return sum(h.tokens for h in self.hits)


@dataclass(frozen=True)
class TeragPprRetriever:
    """Personalized-PageRank retrieval on the concept-passage graph over any list of units.

    Graph nodes are the units (0..n_units-1) then the concepts. ``seed_mode``:
    ``"fallback"`` uses semantic seeds only when no query concept matches
    exactly (§4.3, "if no matches are found"); ``"both"`` adds the top
    ``semantic_top`` non-exact concepts as a second group, so Eq. 5's per-group
    normalisation gives each group half of the restart mass.
    """

    corpus: UnitCorpus
    concepts: list[str]
    concept_index: dict[str, int]
    concept_vectors: np.ndarray
    links: sp.csr_matrix
    frequency: np.ndarray
    adjacency: sp.csr_matrix
    transition_t: sp.csr_matrix
    dangling: np.ndarray
    damping: float = 0.85
    semantic_top: int = 3
    seed_mode: SeedMode = "fallback"
    overflow: Overflow = "skip"
    tol: float = 1e-8
    max_iter: int = 200

    @classmethod
    def build(
        cls,
        unit_ids: Sequence[str],
        unit_texts: Sequence[str],
        unit_tokens: Sequence[int] | np.ndarray,
        embedder: Embedder,
        *,
        concepts_per_unit: int = 10,
        concept_links: ConceptLinks = "extracted",
        ngram_max: int = 1,
        min_chars: int = 2,
        damping: float = 0.85,
        semantic_top: int = 3,
        seed_mode: SeedMode = "fallback",
        overflow: Overflow = "skip",
        tol: float = 1e-8,
        max_iter: int = 200,
    ) -> TeragPprRetriever:
        """Concepts = top TF-IDF terms per unit ("extracted") or every term ("contains")."""
        corpus = UnitCorpus.build(unit_ids, unit_texts, unit_tokens, embedder,
                                  term_analyzer(ngram_max, min_chars))
        return cls.from_corpus(
            corpus, concepts_per_unit=concepts_per_unit, concept_links=concept_links,
            damping=damping, semantic_top=semantic_top, seed_mode=seed_mode,
            overflow=overflow, tol=tol, max_iter=max_iter,
        )

    @classmethod
    def from_corpus(
        cls,
        corpus: UnitCorpus,
        *,
        concepts_per_unit: int = 10,
        concept_links: ConceptLinks = "extracted",
        damping: float = 0.85,
        semantic_top: int = 3,
        seed_mode: SeedMode = "fallback",
        overflow: Overflow = "skip",
        tol: float = 1e-8,
        max_iter: int = 200,
    ) -> TeragPprRetriever:
        """Build over an already prepared :class:`UnitCorpus` (its analyzer reads the query)."""
        if not isinstance(concepts_per_unit, int) or concepts_per_unit < 1:
            raise ValueError(f"concepts_per_unit must be a positive int, got {concepts_per_unit!r}")
        if concept_links not in ("extracted", "contains"):
            raise ValueError(f"concept_links must be 'extracted' or 'contains', "
                             f"got {concept_links!r}")
        if seed_mode not in ("fallback", "both"):
            raise ValueError(f"seed_mode must be 'fallback' or 'both', got {seed_mode!r}")
        if not isinstance(semantic_top, int) or semantic_top < 1:
            raise ValueError(f"semantic_top must be a positive int, got {semantic_top!r}")
        if overflow not in ("stop", "skip"):
            raise ValueError(f"overflow must be 'stop' or 'skip', got {overflow!r}")
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {damping!r}")
        if concept_links == "extracted":
            links = extract_concepts(corpus.unit_terms, concepts_per_unit)
        else:
            links = corpus.unit_terms
        links = sp.csr_matrix(links != 0, dtype=np.float64)
        used = np.flatnonzero(np.diff(sp.csc_matrix(links).indptr) > 0)
        links = sp.csr_matrix(links[:, used])
        terms = corpus.terms()
        concepts = [terms[c] for c in used]
        vectors, _ = concept_vectors(sp.csr_matrix(corpus.sentence_terms[:, used]),
                                     corpus.sentence_embeddings)
        frequency = np.asarray(links.sum(axis=0)).ravel().astype(np.int64)
        adjacency = concept_passage_graph(links)
        out = out_degree(adjacency)
        return cls(
            corpus, concepts, {c: i for i, c in enumerate(concepts)}, vectors,
            links, frequency, adjacency, transition_transpose(adjacency), out == 0,
            damping, semantic_top, seed_mode, overflow, tol, max_iter,
        )

    @property
    def n_units(self) -> int:
        return len(self.corpus)

    def seeds(self, query: str, query_vector: np.ndarray) -> tuple[Seed, ...]:
        """Exact matches of the query's terms (s = 1), else / also the top semantic matches."""
        q = check_query_vector(query_vector, self.concept_vectors.shape[1])
        terms = dict.fromkeys(self.corpus.analyzer(query))
        exact = [self.concept_index[t] for t in terms if t in self.concept_index]
        return select_seeds(exact, lambda: self.concept_vectors @ q, self.frequency,
                            self.concepts, semantic_top=self.semantic_top, mode=self.seed_mode)

    def search(self, query: str, query_vector: np.ndarray, budget: int) -> PprSearch:
        """PPR from the query's seeds; units by PPR mass until the budget is full."""
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        budget = check_budget(budget)
        seeds = self.seeds(query, query_vector)
        unit_rank, iterations = passage_mass(self.transition_t, self.dangling, seeds,
                                             self.n_units, damping=self.damping, tol=self.tol,
                                             max_iter=self.max_iter)
        chosen = fill_budget(ranked_passages(unit_rank), self.corpus.tokens, budget,
                             self.overflow)
        best = strongest_seed(self.links, chosen, seeds)
        hits = [PprHit(u, float(unit_rank[u]), int(self.corpus.tokens[u]),
                       self.concepts[b] if b >= 0 else None)
                for u, b in zip(chosen.tolist(), best.tolist(), strict=True)]
        return PprSearch(tuple(hits), seeds, iterations, budget)

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        return self.search(query, query_vector, budget).units


def terag_ppr(
    unit_ids: Sequence[str],
    unit_texts: Sequence[str],
    unit_tokens: Sequence[int] | np.ndarray,
    embedder: Embedder,
) -> TeragPprRetriever:
    """The harness factory (:class:`~benchmarks.comparators.units.UnitRetrieverFactory`)."""
    return TeragPprRetriever.build(unit_ids, unit_texts, unit_tokens, embedder)
