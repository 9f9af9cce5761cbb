"""Query similarity of retrieval units, all of them or only the candidates a query can reach.

The fused ranking needs, for each unit it ranks, its cosine to the query and
that cosine's rank among *all* units. :class:`ScannedSimilarity` scores every
unit (the exact reference). :class:`CandidateSimilarity` asks a
:class:`~shared_core.search.vector_index.VectorIndex` for the best rows only,
rescores the units they belong to exactly, and for any other unit the ranking
asks about (one found through concept or word postings) it scores that unit
exactly and estimates its rank from a fixed sample of units: the unit is known
to rank below every unit returned, and the sample says how far below.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from ..select.scores import rank_by_score
from .local import ChunkScorer
from .side_thread import Pending, blas_on_one_thread, part_beside
from .sparse_values import distinct_sorted, sorted_index_of
from .vector_index import VectorIndex, top_k_indices

RANK_SAMPLE = 1024  # units scored per query to estimate ranks beyond the candidates
ROWS_PER_UNIT_SEARCHED = 2  # rows asked of the vector index per unit wanted (max mode)


# a unit set's rows (vectors, or its units' sentences) and each unit's first row in them
Gathered = tuple[np.ndarray, np.ndarray]


class GatheredUnits:
    """The gathered rows of unit sets that every query scores again (the rank sample).

    One per graph state, shared by its readers. Gathering a thousand units' sentence
    rows from the stored vectors costs as much as scoring them, so a set asked for
    again is served from the copy kept here. At most ``limit`` sets are kept (the
    rank sample's size changes only with the number of candidates found).
    """

    def __init__(self, limit: int = 2) -> None:
        self._limit = limit
        self._sets: dict[int, tuple[np.ndarray, Gathered]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sets)

    def rows(self, units: np.ndarray, gather: Callable[[np.ndarray], Gathered]) -> Gathered:
        """``gather(units)``, from the kept copy when these units were gathered before."""
        found = self._sets.get(len(units))
        if found is not None and np.array_equal(found[0], units):
            return found[1]
        rows, first = gather(units)
        kept = (np.array(units), (np.ascontiguousarray(rows), first))
        with self._lock:
            if len(self._sets) >= self._limit:
                self._sets.clear()
            self._sets[len(units)] = kept
        return kept[1]


def count_better(rest_units: np.ndarray, rest_scores: np.ndarray, units: np.ndarray,
                 scores: np.ndarray) -> np.ndarray:
    """For each (unit, score), how many of the rest rank above it.

    Above means a higher score, or the same score and a lower unit: the order
    every ranking here uses. One sort of both lists together.
    """
    n_rest = len(rest_units)
    all_units = np.concatenate([rest_units, units])
    from_rest = np.arange(len(all_units)) < n_rest
    # a unit that is also in the rest does not rank above itself: queries sort first
    order = np.lexsort((from_rest, all_units, -np.concatenate([rest_scores, scores])))
    is_rest = from_rest[order]
    rest_before: np.ndarray = np.cumsum(is_rest) - is_rest
    out = np.empty(len(units), dtype=np.float64)
    out[order[~is_rest] - n_rest] = rest_before[~is_rest]
    return out


def spread_positions(count: int, size: int) -> np.ndarray:
    """``0..count-1`` if ``count`` is at most ``size``, else ``size`` of them evenly spaced."""
    if count <= size:
        return np.arange(count)
    return distinct_sorted(np.linspace(0, count - 1, size).astype(np.int64))


def spread_sample(units: np.ndarray, size: int = RANK_SAMPLE) -> np.ndarray:
    """All of ``units`` if there are at most ``size``, else ``size`` of them evenly spaced."""
    if len(units) <= size:
        return units
    return units[spread_positions(len(units), size)]


def rank_sample_units(units: np.ndarray | int, top_count: int) -> np.ndarray:
    """An even sample of ``units`` (ascending; a count ``n`` means all of ``0..n-1``,
    without a range that long) sized to keep ``RANK_SAMPLE`` beyond a best list of
    ``top_count`` units: it depends on that count, not on which units the list holds."""
    size = RANK_SAMPLE + top_count
    return spread_positions(units, size) if isinstance(units, int) else spread_sample(units, size)


def sample_less(units: np.ndarray | int, top_units: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rank_sample_units` for ``top_units``, and which of it is not in them: the
    units a rank beyond is estimated from.

    The sample itself depends only on ``units``, so a caller that scores it every
    query can keep its rows (:class:`GatheredUnits`) and drop the top ones after.
    """
    sample = rank_sample_units(units, len(top_units))
    return sample, top_positions(sample, top_units) < 0


def ranks_beyond(top_count: int, rest_total: int, sample_units: np.ndarray,
                 sample_scores: np.ndarray, units: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """1-based ranks of units that are not among the ``top_count`` best.

    ``sample_*`` is the other ``rest_total`` units, or an even sample of them:
    the rank is exact when the sample is all of them, estimated otherwise.
    """
    if not len(units):
        return np.zeros(0, dtype=np.float64)
    if not len(sample_units):
        return np.full(len(units), top_count + 1.0)
    better = count_better(sample_units, sample_scores, units, scores)
    return top_count + 1.0 + np.floor(better * (rest_total / len(sample_units)))


@dataclass(frozen=True, eq=False)
class PositiveView:
    """A sparse view of the units (concept evidence, BM25, the walk): units above 0 rank.

    Held as the positive units (ascending) and their scores (:meth:`of_scores`), so a
    dense view is scanned once, not again by every ``top`` and ``ranks``.
    """

    units: np.ndarray
    values: np.ndarray

    @classmethod
    def of_scores(cls, scores: np.ndarray) -> PositiveView:
        """The view of every unit's score (a dense array)."""
        positive = np.flatnonzero(scores > 0)  # ascending: ties go to the lower unit
        return cls(positive, np.asarray(scores[positive], dtype=np.float64))

    def scores_of(self, units: np.ndarray) -> np.ndarray:
        """The scores of ``units`` (0 where the view holds none)."""
        out = np.zeros(len(units), dtype=np.float64)
        at = sorted_index_of(self.units, units)
        out[at >= 0] = self.values[at[at >= 0]]
        return out

    def top(self, k: int | None) -> np.ndarray:
        """The ``k`` best units with a positive score (all for ``None``), best first."""
        return self.units[top_k_indices(self.values, len(self.units) if k is None else k)]

    def ranks(self, units: np.ndarray, top_units: np.ndarray) -> np.ndarray:
        """Ranks of ``units`` in this view given its ``top_units`` (best first); 0: no score."""

        def beyond(rest: np.ndarray, rest_scores: np.ndarray) -> np.ndarray:
            # only the sample is compared with the top, never every positive unit
            sample, outside = sample_less(self.units, top_units)
            sample = sample[outside]
            return ranks_beyond(len(top_units), len(self.units) - len(top_units), sample,
                                self.scores_of(sample), rest, rest_scores)

        return view_ranks(units, self.scores_of, top_units, beyond)


@dataclass(frozen=True, eq=False)
class RescoredView:
    """A view on the candidate path: bounded posting reads find, exact sums score.

    The view's score of a unit is a sum over concepts of what one posting entry
    carries, so any unit's exact score is read off its own entries (``scorer``),
    however long the postings that would find it. Finding is bounded (``found``:
    whole postings read in descending order of what one of their entries carries,
    up to a number of entries; ``search.postings``) and only proposes the best
    units, which are scored exactly; a unit's rank beyond them is estimated from
    an even sample of all units, as the similarity view's is. The walk view uses it
    (``search.walk.walk_view``).
    """

    found: PositiveView
    scorer: ChunkScorer
    n_units: int
    # the same scores for the rank sample, which is the same units for every query: a
    # scorer that keeps what it reads of them (None: ``scorer``)
    sample_scorer: ChunkScorer | None = None

    @classmethod
    def of_found(cls, found: np.ndarray, scorer: ChunkScorer, n_units: int) -> RescoredView:
        """The view over units found elsewhere (an engine's postings, in any order, with
        repeats), each scored exactly by ``scorer``; those scoring 0 are dropped."""
        units = distinct_sorted(np.asarray(found, dtype=np.int64))
        scores = np.asarray(scorer(units), dtype=np.float64)
        positive = scores > 0
        return cls(PositiveView(units[positive], scores[positive]), scorer, n_units)

    def scores_of(self, units: np.ndarray) -> np.ndarray:
        """The exact scores of ``units``."""
        return np.asarray(self.scorer(np.asarray(units, dtype=np.int64)), dtype=np.float64)

    def top(self, k: int | None) -> np.ndarray:
        """The ``k`` best of twice as many units the bounded reads found, by exact score."""
        found = self.found.top(None if k is None else 2 * k)
        scores = self.scores_of(found)
        order = rank_by_score(scores)
        order = order[scores[order] > 0]
        return found[order if k is None else order[:k]]

    def ranks(self, units: np.ndarray, top_units: np.ndarray) -> np.ndarray:
        """Ranks of ``units`` given the view's ``top_units`` (best first); 0: no score."""
        everyone, outside = sample_less(self.n_units, top_units)
        sample = everyone[outside]
        sample_scores = np.asarray((self.sample_scorer or self.scorer)(everyone),
                                   dtype=np.float64)[outside]

        def beyond(rest: np.ndarray, rest_scores: np.ndarray) -> np.ndarray:
            return ranks_beyond(len(top_units), self.n_units - len(top_units), sample,
                                sample_scores, rest, rest_scores)

        return view_ranks(units, self.scores_of, top_units, beyond)


def view_ranks(units: np.ndarray, score: Callable[[np.ndarray], np.ndarray],
               top_units: np.ndarray,
               beyond: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """Each unit's 1-based position in ``top_units``; for the others, 0 where ``score``
    is not positive, else ``beyond(those units, their scores)``: a view's rank of every
    pool unit. A listed unit's rank is its place, so only the others are scored (a
    rescored view reads each one's rows)."""
    ranks = np.zeros(len(units), dtype=np.float64)
    in_top = top_positions(units, top_units)
    listed = in_top >= 0
    ranks[listed] = in_top[listed] + 1.0
    others = units[~listed]
    scores = np.asarray(score(others), dtype=np.float64)
    rest = scores > 0
    if rest.any():
        ranks[np.flatnonzero(~listed)[rest]] = beyond(others[rest], scores[rest])
    return ranks


class UnitView(Protocol):
    """What the fused ranking asks of a view other than similarity (evidence, BM25, walk)."""

    def top(self, k: int | None) -> np.ndarray:
        """The ``k`` best units with a positive score (all for ``None``), best first."""
        ...

    def ranks(self, units: np.ndarray, top_units: np.ndarray) -> np.ndarray:
        """Ranks of ``units`` given the view's ``top_units`` (best first); 0: no score."""
        ...


def top_positions(units: np.ndarray, top_units: np.ndarray) -> np.ndarray:
    """Each unit's position in ``top_units`` (best first), -1 where it is not there."""
    out = np.full(len(units), -1, dtype=np.int64)
    if not len(top_units) or not len(units):
        return out
    by_unit = np.argsort(top_units, kind="stable")
    found = sorted_index_of(top_units[by_unit], units)
    out[found >= 0] = by_unit[found[found >= 0]]
    return out


class UnitSimilarity(Protocol):
    """What the fused ranking asks of the query-similarity view."""

    @property
    def n_units(self) -> int: ...

    def top(self, k: int | None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` most similar units (all for ``None``) and their cosines, best first."""
        ...

    def score(self, units: np.ndarray) -> np.ndarray:
        """Exact cosines of the given units."""
        ...

    def ranks_below(self, units: np.ndarray, scores: np.ndarray,
                    top_units: np.ndarray) -> np.ndarray:
        """Ranks of ``units`` (with cosines ``scores``), none of which is in ``top_units``."""
        ...


@dataclass(frozen=True, eq=False)
class ScannedSimilarity:
    """Every unit's cosine computed: ranks are exact."""

    similarity: np.ndarray

    @property
    def n_units(self) -> int:
        return len(self.similarity)

    def top(self, k: int | None) -> tuple[np.ndarray, np.ndarray]:
        order = rank_by_score(self.similarity)
        order = order if k is None else order[:k]
        return order, self.similarity[order]

    def score(self, units: np.ndarray) -> np.ndarray:
        return self.similarity[units]

    def ranks_below(self, units: np.ndarray, scores: np.ndarray,
                    top_units: np.ndarray) -> np.ndarray:
        others = np.setdiff1d(np.arange(self.n_units), top_units)
        return ranks_beyond(len(top_units), len(others), others, self.similarity[others],
                            units, scores)


@dataclass(frozen=True, eq=False)
class CandidateSimilarity:
    """Cosines from a vector index's best rows, rescored exactly per unit.

    ``row_unit`` maps each indexed row to its unit (-1 for a row whose chunk was
    deleted since the index was built): the identity (``None``) when units are
    indexed by their own vectors, a sentence's unit when a unit's similarity is
    its best sentence's (rows are asked for ``ROWS_PER_UNIT_SEARCHED`` per unit
    wanted, as one unit's sentences often crowd the top rows, and for more while
    the rows found hold fewer units than wanted: dead rows and crowding sentences
    take places in the answer). Ranks beyond the units found are estimated from
    ``RANK_SAMPLE`` units spread over the corpus.
    """

    index: VectorIndex
    row_unit: np.ndarray | None
    scorer: ChunkScorer  # cos(query, unit) of given unit positions, exactly
    query: np.ndarray
    n_units: int
    # the same cosines for the rank sample, which is the same units for every query:
    # a scorer that keeps their rows gathered (None: ``scorer``)
    sample_scorer: ChunkScorer | None = None

    def top(self, k: int | None) -> tuple[np.ndarray, np.ndarray]:
        want = self.n_units if k is None else min(k, self.n_units)
        units = self._units_found(want)
        scores = self.scorer(units)
        order = rank_by_score(scores)[:want]  # ties go to the lower unit
        return units[order], scores[order]

    def _units_found(self, want: int) -> np.ndarray:
        """The units of the index's best rows, at least ``want`` of them where it holds
        that many live rows' units: rows are asked for again, in proportion to the
        units missing, while dead rows (chunks deleted since it was built) or one
        unit's many sentences leave the answer short. Indexes at scale find twice the
        units wanted in their first answer, so they search once."""
        total = len(self.index)
        ask = min(total, want if self.row_unit is None else want * ROWS_PER_UNIT_SEARCHED)
        while True:
            rows, _ = self.index.search(self.query, ask)
            units = distinct_sorted(rows if self.row_unit is None else self.row_unit[rows])
            units = units[units >= 0]
            if len(units) >= want or ask >= total or len(rows) < ask:
                return units
            missing = want - len(units)  # rows for them, at the rate rows held units
            ask = min(total, ask + -(-missing * ask // max(len(units), 1)))

    def score(self, units: np.ndarray) -> np.ndarray:
        return self.scorer(units)

    def rank_sample(self, top_count: int) -> RankSample:
        """The units a rank beyond a best list of ``top_count`` units is estimated from,
        scored: they depend on that count alone, not on which units the list holds."""
        units = rank_sample_units(self.n_units, top_count)
        scores = np.asarray((self.sample_scorer or self.scorer)(units))
        return RankSample(top_count, units, scores)

    def ranks_below(self, units: np.ndarray, scores: np.ndarray,
                    top_units: np.ndarray, sample: RankSample | None = None) -> np.ndarray:
        """Ranks of ``units`` (cosines ``scores``), none in ``top_units``, from ``sample``
        (:meth:`rank_sample` for that list's length; scored here where not given)."""
        if sample is None or sample.top_count != len(top_units):
            sample = self.rank_sample(len(top_units))
        outside = top_positions(sample.units, top_units) < 0
        return ranks_beyond(len(top_units), self.n_units - len(top_units),
                            sample.units[outside], sample.scores[outside], units, scores)

    def top_and_sample(self, k: int | None) -> tuple[tuple[np.ndarray, np.ndarray], RankSample]:
        """:meth:`top` and the :meth:`rank_sample` for a list of its length."""
        found = self.top(k)
        return found, self.rank_sample(len(found[0]))


@dataclass(frozen=True, eq=False)
class RankSample:
    """An even sample of all units, sized for a best list of ``top_count`` units, and its
    units' cosines (:meth:`CandidateSimilarity.rank_sample`)."""

    top_count: int
    units: np.ndarray
    scores: np.ndarray


class BesideParts(NamedTuple):
    """What a query's second thread found: the units' best list with their cosines, the
    rank sample scored for a list that long, and the lexical view with its best list as
    long, where one was asked for (:func:`similarity_beside`)."""

    found: tuple[np.ndarray, np.ndarray]
    sample: RankSample
    lexical: UnitView | None
    lexical_top: np.ndarray | None


@dataclass(frozen=True, eq=False)
class StartedSimilarity:
    """A :class:`CandidateSimilarity` whose best ``k`` units, and the rank sample's
    cosines for a list that long, were asked for on a second thread
    (``search.side_thread``) before the rest of the query: the same answers, found while
    the concept search and the other views run."""

    similarity: CandidateSimilarity
    k: int | None
    started: Pending[BesideParts]

    @property
    def n_units(self) -> int:
        return self.similarity.n_units

    def top(self, k: int | None) -> tuple[np.ndarray, np.ndarray]:
        return self.started.result().found if k == self.k else self.similarity.top(k)

    def score(self, units: np.ndarray) -> np.ndarray:
        return self.similarity.score(units)

    def ranks_below(self, units: np.ndarray, scores: np.ndarray,
                    top_units: np.ndarray) -> np.ndarray:
        # the started sample serves any list as long as the one found beside
        return self.similarity.ranks_below(units, scores, top_units, self.started.result().sample)


@dataclass(frozen=True, eq=False)
class StartedView:
    """The lexical view made on a query's second thread after the units' search, with its
    best ``k``: a :class:`UnitView` that waits for it when the ranking first reads it."""

    started: Pending[BesideParts]
    k: int | None

    def _view(self) -> UnitView:
        view = self.started.result().lexical
        assert view is not None, "a started view is made only where one was asked for"
        return view

    def top(self, k: int | None) -> np.ndarray:
        top = self.started.result().lexical_top
        return top if k == self.k and top is not None else self._view().top(k)

    def ranks(self, units: np.ndarray, top_units: np.ndarray) -> np.ndarray:
        return self._view().ranks(units, top_units)


@contextmanager
def similarity_beside(similarity: CandidateSimilarity, k: int | None,
                      lexical: Callable[[], UnitView] | None = None
                      ) -> Iterator[tuple[StartedSimilarity, StartedView | None]]:
    """``similarity`` with its ``top(k)`` and the rank sample's cosines for it started on
    the second thread, then ``lexical()`` (the BM25 view) and its ``top(k)`` where given,
    BLAS on one thread meanwhile; yields the similarity and that view (None without it).
    The part is waited for, and its errors kept, as :func:`~.side_thread.part_beside`
    says."""

    def part() -> BesideParts:
        found, sample = similarity.top_and_sample(k)
        if lexical is None:
            return BesideParts(found, sample, None, None)
        view = lexical()
        return BesideParts(found, sample, view, view.top(k))

    with blas_on_one_thread(), part_beside(part) as pending:
        yield (StartedSimilarity(similarity, k, pending),
               None if lexical is None else StartedView(pending, k))
