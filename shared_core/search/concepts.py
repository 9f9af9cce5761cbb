"""A query's direct concepts found through HNSW instead of a scan of every concept vector.

The fused ranking seeds its evidence at the ``top_k`` concepts most similar to the
query. Finding them exactly multiplies the query by every concept vector, and a real
corpus's vocabulary keeps growing: about a million concepts at a million passages,
58-74 ms a query (``benchmarks.vocabulary``). ``concept_search="hnsw"`` asks an HNSW
graph over the concepts that link a unit for candidates instead, scores them exactly,
and keeps the best ``top_k``; every concept the ranking then reads (the direct ones,
the exact-match seeds, those BFS reaches) is scored exactly from its own vector. On
MuSiQue with MiniLM the graph finds 99.1 % of the direct concepts in 0.45 ms against
the scan's 1.98 ms (``benchmarks.concept_search``).

An update moves the vectors of the concepts whose sentences changed, and adds and
removes concepts. The graph is kept through it rather than built again
(:meth:`ConceptHnsw.refreshed`): a row stays while its concept has moved little
(``MAX_ROW_DRIFT``), since it only proposes candidates; new and moved concepts are
scanned beside it until there are more than ``MAX_BESIDE``, and are then written into
segments after the first, as the units' graph grows (``ann.segment_plan``). Only when
too many rows are dropped (``MAX_DEAD_SHARE``) does an update build it all again.
It is built with the graph where it is searched (``concept_search="hnsw"``, or
``"auto"`` from ``state.derived.CONCEPT_ANN_MIN`` concepts; or by the first query of a
reconfigured view that asks for it), and saved with the index.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

import numpy as np
import scipy.sparse as sp

from . import ann
from .ann import EF_SEARCH, HnswSegments, HnswVectorIndex, segment_plan
from .candidates import top_positions
from .fused import ConceptWeighting, reached_concepts, weighted
from .sparse_values import distinct_sorted
from .vector_index import SCAN_BLOCK, row_scores, rows_at, top_k_indices

if TYPE_CHECKING:  # the state package imports the search package
    from ..state.rows import Rows

# candidates asked per direct concept: concepts tied at the last direct place then
# reach the exact scores, which break ties to the lower position as the scan does
CANDIDATES_PER_DIRECT = 2
# the search beam, four times the unit index's (``ann.EF_SEARCH``). Over 163,648 concepts
# (100 K scale passages with fresh names, MiniLM, 200 questions) this path found 99.40 %
# of the scan's direct concepts at 512 against 99.08 % at 256 and 99.62 % at 1,024
# (3.1 against 1.9 and 5.9 ms a search), and the index kept 99.30 % of the scan's context
# against 98.73 % and 99.56 %, its whole query no slower within the runs' spread; over
# MuSiQue's and HotpotQA's 43.7 K concepts (1,000 questions) it found 99.88 % against
# 99.63 % and kept 99.90 % of the context (benchmarks/results/NOTES.md, thirty-ninth
# round; ``benchmarks.concept_search --index-beam``)
BEAM = 4 * EF_SEARCH
# the beam each row is linked through when the graph is built, twice the units'
# (``ann.EF_CONSTRUCTION``). Over 163,648 MiniLM concepts (as above) a graph built with
# 200 found 99.76 % of the direct concepts at the beam of 512 against 99.40 % with 100,
# and the index kept 99.78 % of the scan's context against 99.30 % (300: 99.86 %, 99.91 %);
# over the dev sets' 43.7 K concepts 99.96 % and 99.97 % against 99.88 % and 99.90 %.
# Building it took 2.1 times as long (300: 3.0 times), 118 s against 57 s at 164 K
# concepts (benchmarks/results/NOTES.md, fortieth round; ``benchmarks.concept_search
# --index-ef-construction``).
EF_CONSTRUCTION = 2 * ann.EF_CONSTRUCTION


# A concept keeps its row in the graph while its vector has moved at most this far
# (Euclidean, between unit vectors) since the row was written: the graph's inner product
# with a query then errs by at most this much, and it only proposes candidates, which are
# scored exactly. An update that moves it further puts it beside the graph (scanned).
# Measured on MuSiQue with MiniLM through ten updates of 1 % added and 0.5 % deleted
# (``benchmarks.concept_updates``, never built again): at 0.2 the kept graph found as
# many of the direct concepts as a graph built afresh, or more; at 0.4, 0.2 points
# fewer after ten updates; with no bound, 1.9 points fewer. A 1 % add moves 6 % of
# MuSiQue's concepts, half of them by more than 0.07.
MAX_ROW_DRIFT = 0.2
# Past this many concepts beside the graph, an update writes them into it as a segment
# of their own (or grows or merges the later segments, as the units' graph does:
# ``ann.segment_plan``). Beside it they are scanned at every query; so many take about
# as long to scan as a segment takes to search (MiniLM: the scan 0.054 ms per thousand
# concepts, a search with a beam of 256 0.7-1.1 ms; benchmarks/results/NOTES.md,
# thirty-eighth round), and a segment is searched by its own quantiser, which fewer
# rows would train poorly.
MAX_BESIDE = 16_384
# Past this share of dropped rows (which a search steps over, asking for as many more),
# an update builds the graph again. On MuSiQue (MiniLM) a graph never rebuilt through
# ten updates kept its recall of the direct concepts with up to 29 % of its rows dropped
# (benchmarks/results/NOTES.md, thirty-seventh round's sweep; thirty-eighth round).
MAX_DEAD_SHARE = 0.25
WANTED_BY = "concept_search='hnsw'"
# ``concept_search="auto"`` searches the graph only where, built, it found at least this
# share of the scan's ``SELF_CHECK_K`` most similar concepts for ``SELF_CHECK_ROWS`` of
# its own concepts as queries (:meth:`ConceptHnsw.measured_self_recall`). It tracked
# the questions' recall: with MiniLM .9986-.9997 over the dev sets and 164 K concepts
# where the questions found .9976-.9998; with the hashing embedder's random-like vectors
# .965-.976 on MuSiQue and HotpotQA where they found .937-.967, and the index kept 3-7 %
# less of the scan's context (benchmarks/results/NOTES.md, fortieth round;
# ``benchmarks.concept_search --index-ef-construction``, ``self_recall``).
MIN_SELF_RECALL = 0.99
SELF_CHECK_ROWS = 256
SELF_CHECK_K = 25  # the default ``top_k``
TIE = 1e-6  # a cosine this close to the scan's k-th counts as found


@dataclass(frozen=True, eq=False)
class ConceptHnsw:
    """HNSW over the concepts that link a unit, kept through updates.

    ``row_concept`` is each graph row's concept position now (-1: dropped), ``row_drift``
    a bound on how far that concept's vector has moved since its row was written (the
    sum of each update's move), and ``beside`` the concepts that link a unit but have no
    live row (new, or moved past ``MAX_ROW_DRIFT``), sorted: they are scanned exactly at
    every query. ``self_recall`` is what :meth:`measured_self_recall` found when it was
    built (None: a graph saved before the check), which ``"auto"`` reads. An update
    derives a new one that shares the graph (:meth:`refreshed`), so a state's graph is
    never written: readers may search it.
    It is searched with a beam per call, so concurrent queries never share one.
    """

    graph: HnswSegments
    row_concept: np.ndarray
    row_drift: np.ndarray
    beside: np.ndarray
    self_recall: float | None = None

    @classmethod
    def build(cls, vectors: Rows, usable: np.ndarray, ef_construction: int = EF_CONSTRUCTION
              ) -> ConceptHnsw:
        """A graph over the rows ``usable`` (sorted concept positions) of ``vectors``.

        Its vectors are quantised to a byte a dimension, as the units' are: a quarter of
        a second float32 copy, and on MuSiQue (MiniLM, ef 128) as many of the direct
        concepts found as over float32 rows (0.9932 against 0.9927, measured with the
        per-dimension ranges coded before the forty-ninth round; the self recall below
        is measured again at every build), since candidates are scored exactly. Each row
        is linked through a search with a beam of ``ef_construction`` (segments written
        later use ``EF_CONSTRUCTION``).
        """
        usable = np.asarray(usable, dtype=np.int64)
        graph = HnswSegments((HnswVectorIndex.build(rows_at(vectors, usable), WANTED_BY,
                                                    ef_construction),))
        built = cls(graph, usable, np.zeros(len(usable)), np.zeros(0, dtype=np.int64))
        return replace(built, self_recall=built.measured_self_recall(
            vectors, self_check_rows(usable)))

    def top(self, vectors: Rows, query: np.ndarray, k: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`direct_concepts` with the default candidates and beam
        (:class:`DirectConceptSearch`)."""
        return direct_concepts(self, vectors, query, k)

    def measured_self_recall(self, vectors: Rows, queried: np.ndarray,
                             k: int = SELF_CHECK_K) -> float:
        """The share of the scan's ``k`` best places (among the concepts held) that
        :func:`direct_concepts` fills with a concept as similar (within ``TIE``: concepts
        in the same sentences share a vector), each concept of ``queried`` asked with its
        own vector: a check of the graph against its own vectors, with no question at hand.
        """
        if not len(queried):
            return 1.0
        held = np.sort(np.concatenate([self.row_concept[self.row_concept >= 0],
                                       self.beside]))
        k = min(k, len(held))
        queries = rows_at(vectors, queried)
        floors = _scanned_kth(vectors, held, queries, k) - TIE
        hits = 0
        for query, floor in zip(queries, floors, strict=True):
            _, _, scores = direct_concepts(self, vectors, query, k)  # the candidates'
            hits += min(k, int(np.count_nonzero(scores >= floor)))
        return hits / (k * len(queries))

    @cached_property
    def live_rows(self) -> int:
        return int(np.count_nonzero(self.row_concept >= 0))

    @cached_property
    def segment_asks(self) -> np.ndarray:
        """Rows asked of each segment per direct concept wanted: its rows over its live
        ones (a segment steps over its dropped rows; one with none live is not asked)."""
        sizes = np.asarray(self.graph.sizes())
        live = np.add.reduceat(self.row_concept >= 0, self.graph.offsets()) if len(
            self.row_concept) else np.zeros(len(sizes), dtype=np.int64)
        return np.where(live > 0, sizes / np.maximum(live, 1), 0.0)

    def beside_share(self) -> float:
        """The concepts beside the graph (scanned at every query), of those held."""
        held = self.live_rows + len(self.beside)
        return len(self.beside) / held if held else 0.0

    def dead_share(self) -> float:
        """The dropped rows (which a search steps over), of the graph's rows."""
        rows = len(self.row_concept)
        return (rows - self.live_rows) / rows if rows else 0.0

    @cached_property
    def whole_rows(self) -> np.ndarray:
        """The rows of the segments no larger than the beam: a search would visit every
        row of one, so all are proposed, and scored exactly (a graph of a few concepts
        then finds what the scan finds, ties included)."""
        return np.concatenate([np.arange(start, start + size) for start, size
                               in zip(self.graph.offsets(), self.graph.sizes(), strict=True)
                               if size <= BEAM] or [np.zeros(0, dtype=np.int64)])

    def candidates(self, vectors: Rows, query: np.ndarray, k: int, beam: int = BEAM
                   ) -> np.ndarray:
        """Concept positions, sorted, proposed for the ``k`` most similar: each segment's
        best ``k`` (asked for as many more as it holds dropped rows) by its own
        quantiser, searched with ``beam``, every row of a segment no larger than
        ``BEAM``, and the best ``k`` beside the graph."""
        sizes = np.asarray(self.graph.sizes())
        asks = np.where(sizes > BEAM, np.minimum(np.ceil(k * self.segment_asks), sizes), 0)
        found = np.concatenate([self.graph.search_each(query, asks.astype(int).tolist(), beam),
                                self.whole_rows])
        proposed = self.row_concept[found]
        proposed = proposed[proposed >= 0]
        if len(self.beside):
            scores = row_scores(vectors, self.beside, query)
            proposed = np.concatenate([proposed, self.beside[top_k_indices(scores, k)]])
        return distinct_sorted(proposed)

    def refreshed(self, new_of_old: np.ndarray, drift: np.ndarray, usable: np.ndarray,
                  vectors: Rows, max_beside: int | None = None,
                  max_dead_share: float | None = None) -> ConceptHnsw | None:
        """This graph after an update, or None when it must be built again.

        ``new_of_old`` is each old concept's new position (-1: gone), ``drift`` how far
        each new concept's vector moved (inf: new concept), ``usable`` the concepts that
        link a unit now (sorted), ``vectors`` the concept vectors now.

        Gone concepts, and those that moved past ``MAX_ROW_DRIFT``, lose their rows; new
        and moved ones go beside the graph. Past ``max_beside`` of them (default
        ``MAX_BESIDE``) they are written into the graph as the units' rows are
        (:func:`ann.segment_plan`: a new segment of theirs, a later one grown or the
        later ones merged; never the first one again). Past
        ``max_dead_share`` dropped rows (default ``MAX_DEAD_SHARE``), or where the
        plan is a rebuild, it returns None.
        """
        was = self.row_concept
        concept = np.where(was >= 0, new_of_old[np.maximum(was, 0)], -1)
        at = np.maximum(concept, 0)
        row_drift = self.row_drift + np.where(concept >= 0, drift[at], 0.0)
        linked = np.zeros(len(drift), dtype=bool)
        linked[usable] = True
        live = (concept >= 0) & linked[at] & (row_drift <= MAX_ROW_DRIFT)
        held = np.zeros(len(drift), dtype=bool)
        held[concept[live]] = True
        usable = np.asarray(usable, dtype=np.int64)
        kept = ConceptHnsw(self.graph, np.where(live, concept, -1),
                           np.where(live, row_drift, 0.0), usable[~held[usable]],
                           self.self_recall)
        if kept.dead_share() > (MAX_DEAD_SHARE if max_dead_share is None else max_dead_share):
            return None
        if len(kept.beside) <= (MAX_BESIDE if max_beside is None else max_beside):
            return kept
        return kept.with_beside_written(vectors)

    def with_beside_written(self, vectors: Rows) -> ConceptHnsw | None:
        """The concepts beside the graph written into it by ``ann.segment_plan``, the
        first segment left as it is; None where the plan is to build it all again."""
        sizes = self.graph.sizes()
        plan = segment_plan(sizes, len(self.beside))
        if plan == "rebuild":
            return None
        if plan == "grow":
            graph = self.graph.grown(rows_at(vectors, self.beside))
            concepts, first = self.beside, len(self.row_concept)
        elif plan == "append":
            graph = self.graph.with_segment(len(sizes), rows_at(vectors, self.beside),
                                            WANTED_BY, EF_CONSTRUCTION)
            concepts, first = self.beside, len(self.row_concept)
        else:  # merge: the later segments' live concepts, at their vectors now, and these
            first = sizes[0]
            later = self.row_concept[first:]
            concepts = np.concatenate([later[later >= 0], self.beside])
            graph = self.graph.with_segment(1, rows_at(vectors, concepts), WANTED_BY,
                                            EF_CONSTRUCTION)
        return ConceptHnsw(graph, np.concatenate([self.row_concept[:first], concepts]),
                           np.concatenate([self.row_drift[:first], np.zeros(len(concepts))]),
                           np.zeros(0, dtype=np.int64), self.self_recall)

    def check_holds(self, usable: np.ndarray, dim: int) -> None:
        """ValueError unless every concept of ``usable`` (sorted) has exactly one live row
        or is beside the graph, and nothing else is held (a saved graph's check)."""
        rows = len(self.row_concept)
        if (len(self.graph), self.graph.dim) != (rows, dim):
            raise ValueError(f"the concept graph holds {len(self.graph)} rows of "
                             f"{self.graph.dim} dimensions; its row map has {rows}, "
                             f"the vectors {dim} dimensions")
        if self.row_drift.shape != (rows,) or not np.all(
                (self.row_drift >= 0) & (self.row_drift <= MAX_ROW_DRIFT)):
            raise ValueError(f"the concept graph's row drifts must be {rows} values "
                             f"in [0, {MAX_ROW_DRIFT}]")
        live = self.row_concept[self.row_concept >= 0]
        held = np.sort(np.concatenate([live, self.beside]))
        if (self.row_concept.min(initial=0) < -1 or np.any(np.diff(self.beside) <= 0)
                or not np.array_equal(held, usable)):
            raise ValueError("the concept graph must hold each concept that links a unit "
                             "once, by a row or beside the graph, and no other")
        if self.self_recall is not None and not 0.0 <= self.self_recall <= 1.0:
            raise ValueError(f"the concept graph's self recall must be in [0, 1], got "
                             f"{self.self_recall}")


def self_check_rows(usable: np.ndarray, count: int = SELF_CHECK_ROWS) -> np.ndarray:
    """``count`` of the concepts ``usable`` (all where fewer), sorted, drawn with a fixed
    seed so that a build's check is repeatable."""
    usable = np.asarray(usable, dtype=np.int64)
    if len(usable) <= count:
        return usable
    return np.sort(np.random.default_rng(0).choice(usable, size=count, replace=False))


def _scanned_kth(vectors: Rows, held: np.ndarray, queries: np.ndarray, k: int
                 ) -> np.ndarray:
    """Each query's ``k``-th best cosine among the concepts ``held`` (``k`` at most
    ``len(held)``), by one pass over their vectors in blocks of ``SCAN_BLOCK``."""
    best = np.zeros((len(queries), 0), dtype=np.float32)
    for start in range(0, len(held), SCAN_BLOCK):
        block = rows_at(vectors, held[start:start + SCAN_BLOCK])
        scores = np.concatenate([best, queries @ block.T], axis=1)
        best = (-np.partition(-scores, k - 1, axis=1)[:, :k] if scores.shape[1] > k
                else scores)
    return best.min(axis=1)


def direct_concepts(graph_index: ConceptHnsw, vectors: Rows, query: np.ndarray, top_k: int,
                    per_direct: int = CANDIDATES_PER_DIRECT, beam: int = BEAM
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(direct, candidates, their cosines)``: the best ``top_k`` of the graph's
    ``per_direct * top_k`` candidates (searched with ``beam``), by their exact cosines."""
    # sorted, so that equal cosines go to the lower position, as in the scan
    found = graph_index.candidates(vectors, query, per_direct * top_k, beam)
    scores = row_scores(vectors, found, query)
    return found[top_k_indices(scores, top_k)], found, scores


class DirectConceptSearch(Protocol):
    """What finds a query's direct concepts without a float32 scan of every concept: the
    concept graph (:class:`ConceptHnsw`) or the scan of byte codes
    (:class:`~shared_core.search.coded_scan.CodedScan`)."""

    def top(self, vectors: Rows, query: np.ndarray, k: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(direct, scored, their cosines)``: the ``k`` direct concepts, best first,
        and the concepts scored exactly to find them (ascending), with their cosines."""
        ...


def searched_weighting(search: DirectConceptSearch, vectors: Rows,
                       adjacency: sp.csr_matrix, query: np.ndarray, *, top_k: int,
                       hops: int, decay: float, exact: np.ndarray | None = None
                       ) -> ConceptWeighting:
    """``search.fused.concept_weights`` with the direct concepts ``search`` finds: the
    cosines of the concepts it scored and of every concept reached are computed, no
    other (float32, as a scan's are)."""
    direct, found, scores = search.top(vectors, query, top_k)
    concepts, hop = reached_concepts(adjacency, direct, hops, exact)
    similarity = np.empty(len(concepts), dtype=np.float32)
    at = top_positions(concepts, found)
    known = at >= 0
    similarity[known] = scores[at[known]]
    if not known.all():
        similarity[~known] = row_scores(vectors, concepts[~known], query)
    return weighted(concepts, hop, similarity, decay, exact)
