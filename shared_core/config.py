"""Every knob of the concept graph in one validated dataclass.

Names and paper parameters follow the G2ConS paper (Table 1 and §4.1). Where the
paper leaves a choice open, or where measurement beat the paper's own choice
(``ranking``, ``overflow``, ``concept_links``), the default is the measured winner and the evidence
is in `benchmarks/RESULTS.md`; ``ConceptGraphConfig.paper()`` restores the paper's
search exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

ConceptLinks = Literal["extracted", "contains"]
ChunkScore = Literal["sum", "max", "mean"]
ChunkSimilarity = Literal["mean", "max", "direct"]
CjkSegmenter = Literal["auto", "jieba", "bigram", "none"]
Overflow = Literal["stop", "skip"]
Ranking = Literal["fused", "paper"]
SelectBy = Literal["chunks", "tokens"]
VectorIndexKind = Literal["auto", "exact", "hnsw"]
WalkNodes = Literal["sentences", "units"]
WalkSeeds = Literal["direct", "exact"]
ConceptSearch = Literal["auto", "exact", "codes", "hnsw"]
RescoreFrom = Literal["vectors", "codes"]

# The knobs by what they act on, so that what a change costs can be read off its group:
# build knobs shape the stored chunks (a change needs a rebuild), graph knobs the concept
# graph derived from them (re-derived without embedding anything), the rest cost nothing
# (``ConceptGraphIndex.reconfigured`` applies these rules).
KNOB_GROUPS: dict[str, tuple[str, ...]] = {
    "build": ("ngram_max", "min_term_chars", "cjk_segmenter", "unit_tokens", "entity_terms"),
    "graph": ("concepts_per_chunk", "concept_links", "theta_co", "theta_sem",
              "pagerank_weighted", "pagerank_damping", "vector_index"),
    "selection": ("kappa", "select_by", "chunk_score"),
    # chunk_similarity is a query knob, but "direct" needs unit vectors stored at build
    # time and "mean" precomputes unit vectors with the graph
    "query": ("top_k", "hops", "budget", "ranking", "chunk_similarity", "overflow",
              "exact_match_seeds", "lexical", "rrf_k", "expansion_decay", "min_score",
              "candidates", "walk_hops", "walk_nodes", "walk_seeds", "walk_postings",
              "concept_search", "query_threads", "rescore_from"),
    "fusion": ("lam",),
}


@dataclass(frozen=True)
class ConceptGraphConfig:
    """Parameters of concept extraction, the concept graph, selection and retrieval.

    Paper parameters: ``theta_sem`` (cosine threshold for an edge), ``theta_co``
    (co-occurrence threshold), ``kappa`` (share kept as core chunks; see ``select_by``),
    ``lam`` (KG share of the fused context), ``top_k`` (directly associated
    concepts), ``hops`` (BFS depth), ``budget`` (context tokens, cl100k_base).

    Open choices: ``concepts_per_chunk`` / ``ngram_max`` (TF-IDF extraction),
    ``concept_links`` (a concept links every chunk containing its term — the
    paper's §1 definition, "a word along with all text chunks containing that
    word", and the measured winner for selection — or only the chunks it was
    extracted from), ``chunk_score`` (how a chunk's concepts' PageRank
    becomes the chunk's score), ``select_by`` (``kappa`` is a share of the chunks,
    as in the paper, or of the tokens: then chunks are ranked by score per token,
    the greedy knapsack order, so long chunks must earn their cost),
    ``pagerank_weighted`` (Dice-weighted PageRank), ``cjk_segmenter`` (how runs of
    Chinese, Japanese and Korean characters, written without spaces, are cut into
    terms: ``"jieba"`` words via the ``rjieba`` package, the ``cjk`` extra;
    ``"bigram"`` overlapping character pairs; ``"none"`` a whole run is one term, as
    indexes saved before this knob have it; ``"auto"`` jieba if installed, else
    bigrams, settled when an index is created: ``text.terms.term_analyzer``),
    ``chunk_similarity`` (a retrieval unit vs the query: the mean of its sentence
    vectors, its best sentence, or ``"direct"``: the unit's own embedding, one more
    embedding per unit, which is better for whole short documents such as
    passages, whose sentences lose their subject to pronouns, and worse for long
    chunks, which a small embedder truncates) and ``overflow`` (the unit that
    overflows the budget is skipped for a smaller one, or ends retrieval as in the
    paper).

    ``unit_tokens`` > 0 makes retrieval return units of whole sentences of at most
    that many tokens instead of whole chunks (KET-RAG's τ splitting): chunks stay
    the unit of selection and KG extraction, where the cost is, while a budget
    holds many focused units rather than a few long chunks.

    ``ranking`` is how retrieval orders units. ``"paper"`` is the paper's local
    then global reranking, concept by concept. ``"fused"`` ranks every unit by
    reciprocal-rank fusion (constant ``rrf_k``) of its query similarity and its
    concept evidence: the idf-weighted query similarity of the direct concepts it
    contains, plus the BFS-expanded ones discounted by ``expansion_decay`` per hop
    (``shared_core.evidence``; measured in ``benchmarks/RESULTS.md``). ``lexical``
    adds a third view to that fusion: BM25 of the query's words over the units.

    ``exact_match_seeds`` treats the query's own terms that are concepts as direct
    concepts, as TERAG matches exactly before semantically: small embedders blur
    the names and numbers that lexical matching keeps. With ``"paper"`` ranking they
    lead the ``top_k`` (rarest first); with ``"fused"`` they count with weight 1.

    ``min_score`` is a relevance floor: a unit whose similarity to the query (as
    ``chunk_similarity`` measures it, a cosine in [-1, 1]) is below it is never
    returned, so a query about nothing in the corpus gets nothing rather than a
    full budget of unrelated chunks. ``None`` (default) keeps every unit eligible.

    ``entity_terms`` adds every multi-word proper name ("Ermengarde of Tours") as
    a term of its own next to its words, so names can become concepts and match
    a query's names exactly (``text.terms.entity_phrases``: capitalised runs, no
    model).

    ``walk_hops`` > 0 adds a fourth view to the fused ranking: a personalised
    PageRank walk that restarts at the query's concepts and moves between them
    and the ``walk_nodes`` (sentences, or whole units) that contain them, for
    ``walk_hops`` concept -> node steps (``search.walk``). It reaches the unit
    that names a film's director from the unit about the film. ``walk_seeds``
    restarts it at the direct concepts (by similarity, weighted as the evidence
    view weights them) or at the query's own terms that are concepts, by idf.
    ``"auto"`` (the default) walks two steps where the retrieval units are short
    (a mean of at most ``search.walk.WALK_MAX_MEAN_UNIT_TOKENS`` tokens: passages,
    sentence units) and not over long chunks, where a walk spreads over the
    hundred concepts each chunk links; both sides are measured in
    ``benchmarks/RESULTS.md``. 0 turns the walk off. Where the walk runs it replaces
    BFS expansion: ``hops="auto"`` (the default) is 0 there and the paper's 2
    wherever no walk runs (long chunks, ``walk_hops=0``, the paper's ranking;
    ``search.walk.expansion_hops_for``). A number is taken as given.

    ``vector_index`` is how the fused ranking finds the units most similar to the
    query: ``"exact"`` scores every unit (the reference), ``"hnsw"`` asks an
    approximate graph index (``shared_core.search.ann``, the ``ann`` extra) for the
    best rows and then ranks only the union of the best ``candidates`` units of
    each view (similarity, concept evidence, BM25), so a query's cost follows its
    candidates, not the corpus. ``"auto"`` is exact below ``ANN_MIN_ROWS`` vectors
    and HNSW from there, a threshold measured in ``benchmarks/RESULTS.md``.

    ``walk_postings`` bounds the walk view on that candidate path: each step reads
    at most this many posting entries, whole postings in descending order of the
    mass one entry carries (``search.postings``), to find the walk's best units;
    every unit the ranking asks about is then scored exactly from its own rows
    (``search.walk.walk_view``), so a walk's cost stops growing with the corpus
    while its masses stay the full walk's. The default (3 % of a million passages)
    binds from about a hundred thousand; ``None`` reads every posting. The exact
    path always reads every posting (the reference).

    ``concept_search`` is how the fused ranking finds its ``top_k`` direct concepts:
    ``"exact"`` scores every concept vector, ``"codes"`` scans a byte a dimension of
    each instead and scores the best exactly until a bound proves them the scan's
    (the ``ann`` extra; ``shared_core.search.coded_scan``: the same concepts, a
    quarter of the bytes read, and a quarter of the vectors' size held besides them),
    ``"hnsw"`` asks an HNSW graph over them (the ``ann`` extra) and scores its
    candidates exactly (``shared_core.search.concepts``). The scan grows with the
    vocabulary, which real text keeps growing. ``"auto"`` (the default) scans below
    ``CONCEPT_CODES_MIN`` concept vectors, scans their codes from there, and searches
    the graph from ``CONCEPT_ANN_MIN``, thresholds measured in
    ``benchmarks/RESULTS.md``, unless the graph, built, failed its check (under 99 % of
    the scan's best matches found for its own concepts, as on random-like vectors:
    ``stats()`` warns; the codes are scanned instead); the paper's ranking always
    scans. Where the graph is
    searched it is built with the index, kept through updates (a concept that moved
    little keeps its row; new and moved ones are scanned beside the graph, then written
    into segments of their own) and saved with the index.

    ``query_threads`` is how many threads one query runs on. With 2 (the default), on
    the candidate path over the index's own vectors, the units' vector search and the
    scoring of its rank sample run on a second thread beside the concept search and the
    other views, then the BM25 view where its terms' postings are long (at least
    100,000 entries), then the candidates' ranks by similarity while the caller ranks
    them in the other views, and BLAS on one thread meanwhile
    (``shared_core.search.side_thread``); the answers are the same. 1 runs a query on the
    calling thread alone, for a server that already keeps every core busy with
    concurrent queries.

    ``rescore_from`` is what the candidate path rescores the units its views found
    from: ``"vectors"`` (the default), the stored float32 vectors, exactly;
    ``"codes"``, a copy of them in one signed byte a value and one scale a row
    (``shared_core.search.row_codes``), held on the heap: a quarter of the bytes, for
    a machine whose memory does not hold the vectors beside the HNSW index (at a
    million passages 1.7 GB of codes for 6.8 GB of vectors), at a small change of
    scores measured in ``benchmarks/RESULTS.md``. The codes are made by the first
    query that needs them, or by ``warm()``. The exact path always scores every
    float32 vector.
    """

    theta_sem: float = 0.65
    theta_co: int = 3
    kappa: float = 0.8
    lam: float = 0.6
    top_k: int = 25
    hops: int | Literal["auto"] = "auto"
    budget: int = 12000
    concepts_per_chunk: int = 10
    ngram_max: int = 1
    min_term_chars: int = 2
    entity_terms: bool = False
    cjk_segmenter: CjkSegmenter = "auto"
    concept_links: ConceptLinks = "contains"
    chunk_score: ChunkScore = "sum"
    select_by: SelectBy = "tokens"
    pagerank_weighted: bool = True
    pagerank_damping: float = 0.85
    chunk_similarity: ChunkSimilarity = "max"
    overflow: Overflow = "skip"
    unit_tokens: int = 0
    exact_match_seeds: bool = False
    ranking: Ranking = "fused"
    lexical: bool = True
    # RRF's usual 60 flattens the first ranks; 10 ties or wins on every dev cell (-0.4 to
    # +2.0 CR, RESULTS.md): a 12,000-token budget holds 10 long chunks, rank 1 must count
    rrf_k: int = 10
    expansion_decay: float = 0.5
    min_score: float | None = None
    vector_index: VectorIndexKind = "auto"
    # units per view in the candidate pool: 500 keeps every dev cell's CR of 1,000 and
    # 99.6 % of its context at 1 M, for 29 % less time a query there (RESULTS.md)
    candidates: int = 500
    walk_hops: int | Literal["auto"] = "auto"
    walk_nodes: WalkNodes = "sentences"
    walk_seeds: WalkSeeds = "direct"
    # posting entries a walk step reads on the candidate path (RESULTS.md)
    walk_postings: int | None = 30_000
    concept_search: ConceptSearch = "auto"
    # 2: the units' vector search and its rank sample beside the rest of the query
    # (search.side_thread): 17-24 % less time a query from 80 K to 1 M passages, and the
    # sample 3-9 % more, the same answers (RESULTS.md, fiftieth and fifty-first rounds)
    query_threads: int = 2
    rescore_from: RescoreFrom = "vectors"

    def __post_init__(self) -> None:
        _check_range("theta_sem", self.theta_sem, -1.0, 1.0)
        _check_int("theta_co", self.theta_co, 1)
        _check_range("kappa", self.kappa, 0.0, 1.0, low_open=True)
        _check_range("lam", self.lam, 0.0, 1.0)
        _check_int("top_k", self.top_k, 1)
        if self.hops != "auto":
            _check_int("hops", self.hops, 0)
        _check_int("budget", self.budget, 1)
        _check_int("concepts_per_chunk", self.concepts_per_chunk, 1)
        _check_int("ngram_max", self.ngram_max, 1)
        _check_int("min_term_chars", self.min_term_chars, 1)
        _check_choice("cjk_segmenter", self.cjk_segmenter, ("auto", "jieba", "bigram", "none"))
        _check_choice("concept_links", self.concept_links, ("extracted", "contains"))
        _check_choice("chunk_score", self.chunk_score, ("sum", "max", "mean"))
        _check_choice("select_by", self.select_by, ("chunks", "tokens"))
        _check_choice("chunk_similarity", self.chunk_similarity, ("mean", "max", "direct"))
        _check_choice("overflow", self.overflow, ("stop", "skip"))
        _check_int("unit_tokens", self.unit_tokens, 0)
        _check_choice("ranking", self.ranking, ("fused", "paper"))
        _check_int("rrf_k", self.rrf_k, 1)
        _check_choice("vector_index", self.vector_index, ("auto", "exact", "hnsw"))
        _check_int("candidates", self.candidates, 1)
        if self.walk_hops != "auto":
            _check_int("walk_hops", self.walk_hops, 0)
        _check_choice("walk_nodes", self.walk_nodes, ("sentences", "units"))
        _check_choice("walk_seeds", self.walk_seeds, ("direct", "exact"))
        if self.walk_postings is not None:
            _check_int("walk_postings", self.walk_postings, 1)
        _check_choice("concept_search", self.concept_search, ("auto", "exact", "codes", "hnsw"))
        _check_choice("rescore_from", self.rescore_from, ("vectors", "codes"))
        if isinstance(self.query_threads, bool) or self.query_threads not in (1, 2):
            raise ValueError(f"query_threads must be 1 or 2; got {self.query_threads!r}")
        if self.concept_search in ("codes", "hnsw") and self.ranking != "fused":
            raise ValueError(f"concept_search={self.concept_search!r} finds the fused ranking's "
                             "direct concepts; ranking='paper' scans them all: use "
                             "concept_search='exact'")
        _check_range("expansion_decay", self.expansion_decay, 0.0, 1.0)
        if self.min_score is not None:
            _check_range("min_score", self.min_score, -1.0, 1.0)
        for flag in ("lexical", "exact_match_seeds", "pagerank_weighted", "entity_terms"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        _check_range("pagerank_damping", self.pagerank_damping, 0.0, 1.0, high_open=True)

    @classmethod
    def paper(cls, **overrides: Any) -> ConceptGraphConfig:
        """The paper's search (local then global reranking, stop at the first overflow)
        and its kappa (a share of chunks)."""
        return cls.from_dict({"ranking": "paper", "overflow": "stop", "select_by": "chunks",
                              **overrides})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ConceptGraphConfig:
        """Build from a dict, rejecting unknown keys so a typo never passes silently."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**values)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_range(
    name: str,
    value: object,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    if not _is_number(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)  # type: ignore[arg-type]
    too_low = v <= low if low_open else v < low
    too_high = v >= high if high_open else v > high
    if too_low or too_high or v != v:  # v != v: NaN passes both comparisons
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ValueError(f"{name} must be in {lo}{low}, {high}{hi}, got {value!r}")


def _check_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
