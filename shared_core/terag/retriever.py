"""TERAG retrieval (§4.3): query NER, exact-then-semantic seeds, PPR, passages by mass.

The query's named entities come from the LLM (stage ``query_ner``) and are
normalised like the concept names. They seed the concept nodes with the same
name (of either type) exactly; if none matches, the ``semantic_top`` (3)
concepts whose name vectors are closest to the query vector are the seeds. The
restart weights are Eq. 3-5 (:mod:`.seeds`), PPR runs on the concept-passage
graph (:mod:`.graph`), and passages are taken by PPR mass until the token
budget is full (or ``top_k`` passages, the paper's 5).

Without a runner there is no query NER: :meth:`TeragRetriever.search` then
needs the entities passed in (``entities=``), and says so otherwise. Guessing
entities from the query's words would be the LLM-free comparator
(:mod:`benchmarks.comparators.terag`), not TERAG.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..config import Overflow
from ..embeddings import Embedder, embed_query, normalise_rows
from ..llm import LLMRunner, TokenLedger
from ..search import fill_budget
from ..state.ingest import embed_in_batches
from ..text import check_query, count_tokens_batch
from .extract import (
    QUERY_MAX_TOKENS,
    STAGE_QUERY_NER,
    TERAG_STAGES,
    Concept,
    TeragExtraction,
    normalise_name,
    parse_query_entities,
    query_messages,
)
from .graph import concept_passage_graph, passage_concept_links
from .ppr import out_degree, passage_mass, ranked_passages, transition_transpose
from .seeds import Seed, SeedMode, select_seeds, strongest_seed


@dataclass(frozen=True)
class TeragHit:
    """A passage in the context: its PPR mass and the strongest seed among its concepts."""

    passage_id: str
    index: int
    score: float
    tokens: int
    seed: Concept | None


@dataclass(frozen=True)
class TeragSearch:
    """One query's passages (context order), the seeds used and the query's entities.

    ``entities`` are normalised (:func:`~.extract.normalise_name`), as matched.
    """

    hits: tuple[TeragHit, ...]
    seeds: tuple[Seed, ...]
    entities: tuple[str, ...]
    iterations: int
    budget: int

    @property
    def passage_ids(self) -> list[str]:
        return [h.passage_id for h in self.hits]

    @property
    def indices(self) -> list[int]:
        return [h.index for h in self.hits]

    @property
    def tokens_used(self) -> int:
        return sum(h.tokens for h in self.hits)


@dataclass(frozen=True, eq=False)
class TeragRetriever:
    """TERAG over extracted passages: build once (:meth:`build`), then :meth:`search`.

    Graph nodes are the passages (0..n-1), then the concepts in first-seen order.
    ``concept_vectors`` are the embedder's vectors of the concept names, computed
    once at build. ``seed_mode="fallback"`` is the paper (semantic seeds only when
    nothing matches exactly); ``"both"`` always adds them as a second group.
    """

    passage_ids: tuple[str, ...]
    passage_tokens: np.ndarray
    concepts: tuple[Concept, ...]
    concept_vectors: np.ndarray
    links: sp.csr_matrix
    frequency: np.ndarray
    adjacency: sp.csr_matrix
    transition_t: sp.csr_matrix
    dangling: np.ndarray
    embedder: Embedder
    runner: LLMRunner | None = None
    damping: float = 0.85
    semantic_top: int = 3
    seed_mode: SeedMode = "fallback"
    overflow: Overflow = "skip"
    tol: float = 1e-8
    max_iter: int = 200
    query_max_tokens: int | None = QUERY_MAX_TOKENS
    # derived from ``concepts`` once, for every query: name -> nodes, and seed labels
    by_name: Mapping[str, tuple[int, ...]] = field(init=False, repr=False)
    names: tuple[str, ...] = field(init=False, repr=False)
    types: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.seed_mode not in ("fallback", "both"):
            raise ValueError(f"seed_mode must be 'fallback' or 'both', got {self.seed_mode!r}")
        if isinstance(self.semantic_top, bool) or not isinstance(self.semantic_top, int) \
                or self.semantic_top < 1:
            raise ValueError(f"semantic_top must be a positive int, got {self.semantic_top!r}")
        if self.overflow not in ("stop", "skip"):
            raise ValueError(f"overflow must be 'stop' or 'skip', got {self.overflow!r}")
        if not 0.0 <= self.damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {self.damping!r}")
        if self.runner is not None and not isinstance(self.runner, LLMRunner):
            raise TypeError(f"runner must be an LLMRunner, got {type(self.runner).__name__}")
        by_name: dict[str, list[int]] = {}
        for i, c in enumerate(self.concepts):
            by_name.setdefault(c.name, []).append(i)
        object.__setattr__(self, "by_name", {n: tuple(v) for n, v in by_name.items()})
        object.__setattr__(self, "names", tuple(c.name for c in self.concepts))
        object.__setattr__(self, "types", tuple(c.type for c in self.concepts))

    @classmethod
    def build(
        cls,
        passage_ids: Sequence[str],
        passage_texts: Sequence[str],
        extraction: TeragExtraction,
        embedder: Embedder,
        *,
        runner: LLMRunner | None = None,
        passage_tokens: Sequence[int] | np.ndarray | None = None,
        damping: float = 0.85,
        semantic_top: int = 3,
        seed_mode: SeedMode = "fallback",
        overflow: Overflow = "skip",
        tol: float = 1e-8,
        max_iter: int = 200,
        query_max_tokens: int | None = QUERY_MAX_TOKENS,
    ) -> TeragRetriever:
        """The graph of ``extraction`` over these passages; tokens counted unless given.

        ``extraction`` must cover exactly these passage ids (any order). Passages
        it has no concept for are nodes without edges: no walk reaches them.
        """
        if not isinstance(extraction, TeragExtraction):
            raise TypeError(f"extraction must be a TeragExtraction, got "
                            f"{type(extraction).__name__}")
        if not hasattr(embedder, "embed") or not hasattr(embedder, "dim"):
            raise TypeError(f"embedder must implement Embedder, got {type(embedder).__name__}")
        ids = tuple(passage_ids)
        if len(ids) != len(passage_texts):
            raise ValueError(f"{len(ids)} passage ids but {len(passage_texts)} texts: the "
                             "lengths differ")
        if not ids:
            raise ValueError("no passages: the graph would be empty")
        if set(ids) != set(extraction.passage_ids) or len(set(ids)) != len(ids):
            raise ValueError("the extraction must cover exactly the passages given, each once")
        tokens = (count_tokens_batch(list(passage_texts)) if passage_tokens is None
                  else np.asarray(passage_tokens, dtype=np.int64))
        if tokens.shape != (len(ids),) or (tokens < 0).any():
            raise ValueError(f"passage_tokens must be {len(ids)} counts >= 0")
        of_passage = dict(zip(extraction.passage_ids, extraction.concepts, strict=True))
        index: dict[Concept, int] = {}
        rows = [[index.setdefault(c, len(index)) for c in of_passage[pid]] for pid in ids]
        if not index:
            raise ValueError("the extraction holds no concept: there is nothing to seed")
        concepts = tuple(index)
        names = list(dict.fromkeys(c.name for c in concepts))  # each name embedded once
        name_vectors = embed_in_batches(embedder, names, False, "TERAG concepts")
        row_of_name = {n: i for i, n in enumerate(names)}
        vectors = name_vectors[[row_of_name[c.name] for c in concepts]]
        links = passage_concept_links(rows, len(concepts))
        frequency = np.asarray(links.sum(axis=0)).ravel().astype(np.int64)
        adjacency = concept_passage_graph(links)
        return cls(ids, tokens, concepts, vectors, links, frequency, adjacency,
                   transition_transpose(adjacency), out_degree(adjacency) == 0, embedder,
                   runner, damping, semantic_top, seed_mode, overflow, tol, max_iter,
                   query_max_tokens)

    @property
    def n_passages(self) -> int:
        return len(self.passage_ids)

    # ------------------------------------------------------------ query NER
    def _runner(self) -> LLMRunner:
        if self.runner is None:
            raise ValueError("TeragRetriever has no runner for query NER: build it with "
                             "runner=LLMRunner(model), or pass the query's entities= yourself")
        return self.runner

    async def aquery_entities(self, query: str) -> tuple[str, ...]:
        """The query's named entities by the LLM (stage ``query_ner``), normalised."""
        return await self._runner().acall(STAGE_QUERY_NER, query_messages(check_query(query)),
                                          parse_query_entities,
                                          max_tokens=self.query_max_tokens)

    def query_entities(self, query: str) -> tuple[str, ...]:
        """:meth:`aquery_entities` from synchronous code."""
        return self._runner().call(STAGE_QUERY_NER, query_messages(check_query(query)),
                                   parse_query_entities, max_tokens=self.query_max_tokens)

    # ---------------------------------------------------------------- seeds
    def query_vector(self, query: str) -> np.ndarray:
        """The unit query vector: the model's query embedding where it has one."""
        return embed_query(self.embedder, query)

    def seeds(self, entities: Sequence[str],
              query_vector: Callable[[], np.ndarray]) -> tuple[Seed, ...]:
        """Exact matches of the entities (s = 1), else the top semantic matches (Eq. 3-5).

        ``query_vector`` is called only when semantic seeds are needed, so a query
        whose entities all match is never embedded.
        """
        names = (normalise_name(e) for e in entities)
        exact = list(dict.fromkeys(c for n in names if n is not None
                                   for c in self.by_name.get(n, ())))
        return select_seeds(exact, lambda: self.concept_vectors @ query_vector(),
                            self.frequency, self.names, semantic_top=self.semantic_top,
                            mode=self.seed_mode, types=self.types)

    # --------------------------------------------------------------- search
    async def asearch(self, query: str, budget: int, *, entities: Sequence[str] | None = None,
                      query_vector: np.ndarray | None = None,
                      top_k: int | None = None) -> TeragSearch:
        """:meth:`search`, with the query NER call awaited."""
        _check_search(query, budget, entities, top_k)
        if entities is None:
            entities = await self.aquery_entities(query)
        return self._search(query, budget, entities, query_vector, top_k)

    def search(self, query: str, budget: int, *, entities: Sequence[str] | None = None,
               query_vector: np.ndarray | None = None, top_k: int | None = None) -> TeragSearch:
        """Passages for ``query`` by PPR mass, at most ``budget`` tokens (and ``top_k``).

        ``entities`` skips the query NER call (e.g. entities extracted earlier);
        ``query_vector`` (unit norm) skips embedding the query when semantic seeds
        are needed. Arguments are checked before any LLM call.
        """
        _check_search(query, budget, entities, top_k)
        if entities is None:
            entities = self.query_entities(query)
        return self._search(query, budget, entities, query_vector, top_k)

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        """The benchmark harness's call: passage positions in context order."""
        return self.search(query, budget, query_vector=query_vector).indices

    def _search(self, query: str, budget: int, entities: Sequence[str],
                query_vector: np.ndarray | None, top_k: int | None) -> TeragSearch:
        given = query_vector

        def vector() -> np.ndarray:
            if given is None:
                return self.query_vector(query)
            return normalise_rows(np.asarray(given).reshape(1, -1), 1, self.embedder.dim,
                                  "query_vector")[0]

        seeds = self.seeds(entities, vector)
        mass, iterations = passage_mass(self.transition_t, self.dangling, seeds,
                                        self.n_passages, damping=self.damping, tol=self.tol,
                                        max_iter=self.max_iter)
        chosen = fill_budget(ranked_passages(mass)[:top_k], self.passage_tokens, int(budget),
                             self.overflow)
        best = strongest_seed(self.links, chosen, seeds)
        hits = tuple(TeragHit(self.passage_ids[u], u, float(mass[u]),
                              int(self.passage_tokens[u]), self.concepts[b] if b >= 0 else None)
                     for u, b in zip(chosen.tolist(), best.tolist(), strict=True))
        names = tuple(n for n in map(normalise_name, entities) if n is not None)
        return TeragSearch(hits, seeds, names, iterations, int(budget))


def _check_search(query: str, budget: int, entities: Sequence[str] | None,
                  top_k: int | None) -> None:
    check_query(query)
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise ValueError(f"budget must be an int >= 1, got {budget!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                              or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
    if isinstance(entities, str):
        raise TypeError("entities must be a sequence of names, not one str")


# ------------------------------------------------------------------ token table
@dataclass(frozen=True)
class TokenRow:
    """One row of TERAG's token table (Table 3): input, output and total tokens."""

    stage: str
    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class TokenTable:
    """Tokens per stage in TERAG's form, with the totals row the paper reports."""

    rows: tuple[TokenRow, ...]

    @property
    def total(self) -> TokenRow:
        return TokenRow("total", sum(r.input_tokens for r in self.rows),
                        sum(r.output_tokens for r in self.rows))

    def __str__(self) -> str:
        cells = [("stage", "input", "output", "total")]
        cells += [(r.stage, f"{r.input_tokens:,}", f"{r.output_tokens:,}", f"{r.total_tokens:,}")
                  for r in (*self.rows, self.total)]
        widths = [max(len(row[i]) for row in cells) for i in range(4)]
        return "\n".join("  ".join([row[0].ljust(widths[0]),
                                    *(c.rjust(w) for c, w in zip(row[1:], widths[1:],
                                                                 strict=True))])
                         for row in cells)


def token_table(ledger: TokenLedger, stages: Sequence[str] | None = None) -> TokenTable:
    """TERAG's token table from a ledger: its stages that were used, in pipeline order.

    ``stages`` picks other rows (a ledger shared with other methods keeps theirs out
    by default).
    """
    wanted = [s for s in TERAG_STAGES if s in ledger] if stages is None else list(stages)
    return TokenTable(tuple(TokenRow(s, ledger[s].input_tokens, ledger[s].output_tokens)
                            for s in wanted))
