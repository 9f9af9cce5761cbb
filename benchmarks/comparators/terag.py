"""TERAG-style Personalized PageRank retrieval over a concept-passage graph, without an LLM.

TERAG (§3.2, §4.2) builds a directed, unweighted graph: concept -> passage
``has_passage`` edges from each concept to the passages it was extracted from,
and concept <-> concept ``co_occurrence`` edges between concepts of the same
passage. Retrieval (§4.3) matches the query's concepts to the graph, exactly
first and else by embedding similarity (top 3), weights each seed
w(u) = s(u) / f(u) (Eq. 3-4), normalises the weights within the exact and the
semantic group (Eq. 5), runs PPR with that restart vector and ranks passages by
their PPR mass.

Until an LLM entity extractor exists, concepts are each unit's top TF-IDF terms
(``shared_core.graph.concepts.extract_concepts``) and the query's "entities" are its
own terms under the same analyzer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from shared_core.config import ConceptLinks, Overflow
from shared_core.embeddings import Embedder
from shared_core.graph import concept_vectors, cooccurrence, extract_concepts, power_iteration
from shared_core.search import fill_budget, top_k_indices
from shared_core.select import UnitCorpus
from shared_core.text import term_analyzer

from .units import check_budget, check_query_vector

SeedMode = Literal["fallback", "both"]
SeedGroup = Literal["exact", "semantic"]


def personalized_pagerank(
    adjacency: sp.spmatrix,
    personalization: np.ndarray,
    damping: float = 0.85,
    tol: float = 1e-8,
    max_iter: int = 200,
) -> tuple[np.ndarray, int]:
    """PPR on a directed 0/1 or weighted graph (``adjacency[i, j]`` = edge i -> j).

    networkx's definition with ``dangling=None``: a walker at a node without
    out-edges restarts from ``personalization``. Power iteration until the L1
    change is below ``tol``; returns the scores (summing to 1) and iterations.
    """
    adj = sp.csr_matrix(adjacency, dtype=np.float64)
    n = adj.shape[0]
    p = np.asarray(personalization, dtype=np.float64)
    if adj.shape != (n, n) or p.shape != (n,):
        raise ValueError(f"adjacency {adj.shape} and personalization {p.shape} do not match")
    if (p < 0).any() or p.sum() <= 0:
        raise ValueError("personalization must be non-negative with a positive sum")
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping!r}")
    p = p / p.sum()
    return power_iteration(transition_transpose(adj), out_degree(adj) == 0, p, damping,
                           tol, max_iter)


def out_degree(adj: sp.csr_matrix) -> np.ndarray:
    return np.asarray(adj.sum(axis=1)).ravel()


def transition_transpose(adj: sp.csr_matrix) -> sp.csr_matrix:
    """Column-stochastic P^T (rows of dangling nodes stay zero), for x <- P^T x."""
    degree = out_degree(adj)
    inv = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    return sp.csr_matrix((sp.diags(inv) @ adj).T)


@dataclass(frozen=True)
class Seed:
    """A restart node: its group, s(u), f(u) and normalised weight ŵ(u)."""

    concept: str
    group: SeedGroup
    similarity: float
    frequency: int
    weight: float


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
        groups: list[tuple[SeedGroup, np.ndarray, np.ndarray]] = []
        if exact:
            groups.append(("exact", np.asarray(exact, dtype=np.int64), np.ones(len(exact))))
        if not exact or self.seed_mode == "both":
            sims = np.asarray(self.concept_vectors @ q, dtype=np.float64)
            sims[exact] = -np.inf
            candidates = np.flatnonzero(np.isfinite(sims))
            top = candidates[top_k_indices(sims[candidates], self.semantic_top)]
            if len(top):
                groups.append(("semantic", top, sims[top]))
        out: list[Seed] = []
        for group, nodes, s in groups:
            f = self.frequency[nodes].astype(np.float64)
            w = np.maximum(s, 0.0) / f  # Eq. 3; a negative similarity gives no restart mass
            if w.sum() <= 0:  # every match dissimilar: fall back to 1/f alone
                w = 1.0 / f
            w = w / w.sum()  # Eq. 5, within the group
            out.extend(Seed(self.concepts[c], group, float(si), int(fi), float(wi))
                       for c, si, fi, wi in zip(nodes, s, f, w, strict=True) if wi > 0)
        return tuple(out)

    def search(self, query: str, query_vector: np.ndarray, budget: int) -> PprSearch:
        """PPR from the query's seeds; units by PPR mass until the budget is full."""
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        budget = check_budget(budget)
        seeds = self.seeds(query, query_vector)
        p = np.zeros(self.adjacency.shape[0], dtype=np.float64)
        for seed in seeds:
            p[self.n_units + self.concept_index[seed.concept]] += seed.weight
        p /= p.sum()
        rank, iterations = power_iteration(self.transition_t, self.dangling, p, self.damping,
                                           self.tol, self.max_iter)
        unit_rank = rank[: self.n_units]
        reached = np.flatnonzero(unit_rank > 0)
        order = reached[np.lexsort((reached, -unit_rank[reached]))]
        chosen = fill_budget(order, self.corpus.tokens, budget, self.overflow)
        weight = np.zeros(len(self.concepts))
        for seed in seeds:
            weight[self.concept_index[seed.concept]] = seed.weight
        hits = []
        for u in chosen.tolist():
            linked = self.links.indices[self.links.indptr[u] : self.links.indptr[u + 1]]
            linked = linked[weight[linked] > 0]
            best = None
            if len(linked):
                best = self.concepts[int(linked[np.lexsort((linked, -weight[linked]))[0]])]
            hits.append(PprHit(u, float(unit_rank[u]), int(self.corpus.tokens[u]), best))
        return PprSearch(tuple(hits), seeds, iterations, budget)

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        return self.search(query, query_vector, budget).units


def concept_passage_graph(links: sp.csr_matrix) -> sp.csr_matrix:
    """TERAG's directed 0/1 graph: units first, then concepts.

    concept -> unit for every link (has_passage), concept <-> concept when both
    are linked to some unit (co_occurrence). Units have no out-edges.
    """
    links = sp.csr_matrix(links != 0, dtype=np.float64)
    n_units, n_concepts = links.shape
    co = cooccurrence(links)
    co = sp.csr_matrix(co != 0, dtype=np.float64)
    top = sp.csr_matrix((n_units, n_units + n_concepts), dtype=np.float64)
    bottom = sp.hstack([sp.csr_matrix(links.T), co], format="csr")
    return sp.csr_matrix(sp.vstack([top, bottom], format="csr"))


def terag_ppr(
    unit_ids: Sequence[str],
    unit_texts: Sequence[str],
    unit_tokens: Sequence[int] | np.ndarray,
    embedder: Embedder,
) -> TeragPprRetriever:
    """The harness factory (:class:`~benchmarks.comparators.units.UnitRetrieverFactory`)."""
    return TeragPprRetriever.build(unit_ids, unit_texts, unit_tokens, embedder)
