"""The walk view: personalised PageRank over the unit–concept graph, read from postings.

Questions that chain entities ("the mother of the director of film X") need the
unit about X *and* the unit about X's director, which shares no query word. A
random walk that restarts at the query's concepts finds it: from a seed concept
to the units that contain it, from there to those units' other concepts (the
director's name among them), and on to the units containing those. This is
TERAG's and HippoRAG's personalised PageRank on a bipartite graph: a concept
passes its mass evenly to its units, a unit evenly to its concepts, so a rare
concept (a name) passes a large share to each of its few units and a common
word a negligible share to each of its many.

PPR with restart probability ``1 - c`` is ``sum_t (1 - c) c^t P^t s``; mass
reaches units at odd steps. The series is truncated after ``hops`` unit-to-unit
moves, and each move keeps only the ``width`` units and concepts passing the
most mass per posting, so a query reads the postings of its seeds and of a
bounded neighbourhood, never the whole graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ..graph.entries import compressed_entries, entry_positions
from ..text.sentences import concatenated_ranges
from .candidates import GatheredUnits, PositiveView, RescoredView
from .postings import highest_impact, summed_view
from .sparse_values import SparseValues
from .summing import compiled, run_sums, summed_by_index
from .vector_index import top_k_indices

# walk_hops="auto": the walk view's steps where the retrieval units are short, and the
# longest mean unit (in tokens) counted as short. Measured on the dev sets (RESULTS.md):
# two steps gain up to 3.6 CR points over units averaging 78-240 tokens and lose none
# beyond noise; over units of ~400 tokens they move -0.8 to +3.4, over 1,200-token
# chunks they lose up to 6.2 (one chunk links a hundred concepts, the walk spreads)
AUTO_WALK_HOPS = 2
WALK_MAX_MEAN_UNIT_TOKENS = 300


# hops="auto": the BFS depth where no walk runs (the paper's); where the walk runs it
# replaces BFS expansion. Measured on the dev sets (RESULTS.md): over short units BFS on
# top of the walk moves CR by -1.6 to +0.6, and costs the query a BFS over the adjacency
AUTO_HOPS = 2


def walk_hops_for(walk_hops: int | str, mean_unit_tokens: float | None) -> int:
    """The walk's steps for a ``walk_hops`` setting over units of this mean token count
    (None: there are no units)."""
    if walk_hops != "auto":
        return int(walk_hops)
    short = mean_unit_tokens is not None and mean_unit_tokens <= WALK_MAX_MEAN_UNIT_TOKENS
    return AUTO_WALK_HOPS if short else 0


def expansion_hops_for(hops: int | str, walk_hops: int) -> int:
    """BFS depth for a ``hops`` setting when the walk takes ``walk_hops`` steps."""
    if hops != "auto":
        return int(hops)
    return 0 if walk_hops else AUTO_HOPS


# Where arrays built for queries are kept: given arrays, it returns them or read-only views
# of a file holding them (``state.spill.spilled_arrays``); the heap by default.
ArrayKeeper = Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True, eq=False)
class WalkGraph:
    """The nodes a walk moves through (sentences or units) and the units they belong to.

    ``links_csr`` is the (nodes x concepts) incidence, ``given_csc`` the same as
    CSC when the caller already has it (else it is built on the first walk, so an
    index whose queries never walk never pays for it), ``given_entry_unit`` its
    entries' units when the caller has those too (a load maps both from the save:
    building them had been 3.6 s of a million-passage index's first query);
    ``node_unit`` each node's
    retrieval unit, or None when the nodes are the units. Sentences make the walk
    sharper than long units do: a 1,200-token chunk links a hundred concepts, so
    a walk through it spreads over all of them, while the sentence that names a
    film's director passes its mass to that name and a few others.

    ``keep_arrays`` takes what the first walk builds (the postings' layout and each
    entry's unit, 470 MB at a million passages): an index passes its spill, so a
    queried index does not carry them on its heap into the next update.
    """

    links_csr: sp.csr_matrix
    node_unit: np.ndarray | None = None
    given_csc: sp.csc_matrix | None = None
    given_entry_unit: np.ndarray | None = None
    keep_arrays: ArrayKeeper | None = field(default=None, repr=False)
    # what the rank sample's rows hold, read once for the queries on this graph
    kept_entries: GatheredUnits = field(default_factory=GatheredUnits, repr=False)

    @cached_property
    def _postings(self) -> tuple[sp.csc_matrix, np.ndarray | None]:
        """``links_csc`` and ``entry_unit``, built together and kept together."""
        if self.given_csc is not None:
            csc = self.given_csc
        else:  # only the structure: a walk reads which nodes a concept has, not counts
            csr = self.links_csr
            csc = sp.csr_matrix((np.ones(csr.nnz, dtype=np.int8), csr.indices, csr.indptr),
                                shape=csr.shape).tocsc()
        entry_unit = self.given_entry_unit
        if entry_unit is None and self.node_unit is not None:
            small = int(self.node_unit.max(initial=0)) < np.iinfo(np.int32).max
            entry_unit = self.node_unit.astype(np.int32 if small else np.int64)[csc.indices]
        if self.keep_arrays is None or self.given_csc is not None:
            return csc, entry_unit
        arrays = [csc.data, csc.indices, csc.indptr]
        kept = self.keep_arrays(arrays if entry_unit is None else [*arrays, entry_unit])
        if kept[0] is csc.data:
            return csc, entry_unit
        mapped = sp.csc_matrix(tuple(kept[:3]), shape=csc.shape, copy=False)
        mapped.has_sorted_indices = True  # a conversion's columns are sorted
        return mapped, None if entry_unit is None else kept[3]

    @property
    def links_csc(self) -> sp.csc_matrix:
        return self._postings[0]

    @property
    def has_postings(self) -> bool:
        """Whether the postings are made (given, or built by a walk): an update makes its
        new graph's then (:meth:`make_postings`), so a walked index's first query after
        it does not (4 s at a million passages, benchmarks/results/NOTES.md)."""
        return self.given_csc is not None or "_postings" in self.__dict__

    def make_postings(self) -> None:
        """Build the postings now rather than on the first walk."""
        _ = self._postings

    def make_query_parts(self) -> None:
        """Build now everything a first walk builds and keeps: the postings, the node and
        concept degrees and the units' first nodes (about 0.12 s at a million passages)."""
        self.make_postings()
        _ = self.node_degree, self.concept_degree, self.unit_starts

    @property
    def entry_unit(self) -> np.ndarray | None:
        """The unit of every entry of ``links_csc`` (None when the nodes are the units).

        A walk's last step reads hundreds of thousands of postings at a million
        passages; looking each entry's sentence up in ``node_unit`` is a random
        read per entry, this is a run of reads per posting list (4 bytes an entry).
        """
        return self._postings[1]

    @cached_property
    def node_degree(self) -> np.ndarray:
        """How many concepts each node links, float64 (the same for every query)."""
        return np.diff(self.links_csr.indptr).astype(np.float64)

    @cached_property
    def concept_degree(self) -> np.ndarray:
        """How many nodes each concept links (:func:`posting_lengths`), kept: as long as
        the vocabulary, and made again by every walk it had cost 14-18 ms a query at
        1.55 M concepts (benchmarks/results/NOTES.md, forty-second round)."""
        return posting_lengths(self.links_csc)

    def unit_scores(self, seed_mass: np.ndarray | SparseValues, n_units: int, *, hops: int,
                    width: int = 200) -> np.ndarray:
        """Each unit's walk mass: the sum over its nodes (the chance the walker is in it)."""
        return walk_scores(seed_mass, self.links_csr, self.links_csc, hops=hops, width=width,
                           unit_degree=self.node_degree, node_unit=self.node_unit,
                           n_units=n_units, entry_unit=self.entry_unit,
                           concept_degree=self.concept_degree)

    def unit_view(self, seed_mass: np.ndarray | SparseValues, n_units: int, *, hops: int,
                  width: int = 200,
                  max_postings: int) -> PositiveView | RescoredView:
        """The walk as a view for the candidate path: its best units found by reading at
        most ``max_postings`` entries a step, every unit's mass exact (:func:`walk_view`)."""
        return walk_view(seed_mass, self, n_units, hops=hops, width=width,
                         max_postings=max_postings)

    @cached_property
    def unit_starts(self) -> np.ndarray | None:
        """Each unit's first node and, last, the node count (None when the nodes are the
        units); ``node_unit`` lists the nodes unit by unit."""
        if self.node_unit is None:
            return None
        return np.searchsorted(self.node_unit, np.arange(int(self.node_unit.max(initial=-1)) + 2))

    def unit_mass(self, units: np.ndarray, entry_mass: np.ndarray,
                  keep: bool = False) -> np.ndarray:
        """Each unit's walk mass from the mass every posting entry of each concept carries:
        the sum over its nodes' concepts, read from the units' own rows.

        ``keep``: the units are the rank sample, the same for every query, so where the
        sums run in numpy what is read of their rows (each entry's concept and unit) is
        kept for the next query; the compiled loop reads the rows in place instead.
        """
        summed = self._compiled_unit_mass(units, entry_mass)
        if summed is not None:
            return summed
        concepts, owner = (self.kept_entries.rows(np.asarray(units), self._unit_entries)
                           if keep else self._unit_entries(units))
        return np.bincount(owner, weights=entry_mass[concepts], minlength=len(units))

    def _compiled_unit_mass(self, units: np.ndarray, entry_mass: np.ndarray
                            ) -> np.ndarray | None:
        """:meth:`unit_mass` in a compiled loop over the units' rows where there is one
        (``search.summing.run_sums``: the same sums, with no entry list gathered; the
        rank sample's kept rows are not needed then), else None."""
        if not compiled():
            return None
        units = np.asarray(units, dtype=np.int64)
        first, ends = self._unit_runs(units)
        return run_sums(self.links_csr.indptr, self.links_csr.indices, first, ends, entry_mass)

    def _unit_runs(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each unit's first node and the node after its last (its nodes are consecutive
        rows)."""
        starts = self.unit_starts
        if starts is None:
            return units, units + 1
        return (starts[np.minimum(units, len(starts) - 1)],
                starts[np.minimum(units + 1, len(starts) - 1)])

    def _unit_entries(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The concept of every entry of the units' rows and which unit (0..) it is of.

        A unit's nodes are consecutive rows, so its entries are one run of the rows'
        entries: one range per unit, never one per node.
        """
        units = np.asarray(units, dtype=np.int64)
        first, ends = self._unit_runs(units)
        indptr = self.links_csr.indptr
        entry_first, entry_end = indptr[first], indptr[ends]
        positions = concatenated_ranges(entry_first, entry_end)
        owner = np.repeat(np.arange(len(units)), entry_end - entry_first)
        return self.links_csr.indices[positions], owner


def posting_lengths(links_csc: sp.csc_matrix) -> np.ndarray:
    """How many units each concept links (its posting length), float64."""
    return np.diff(links_csc.indptr).astype(np.float64)


def walk_scores(
    seed_mass: np.ndarray | SparseValues,
    links_csr: sp.csr_matrix,
    links_csc: sp.csc_matrix,
    *,
    hops: int,
    continue_prob: float = 0.5,
    width: int = 200,
    unit_degree: np.ndarray | None = None,
    node_unit: np.ndarray | None = None,
    n_units: int | None = None,
    entry_unit: np.ndarray | None = None,
    concept_degree: np.ndarray | None = None,
) -> np.ndarray:
    """Truncated personalised PageRank mass of every unit (0 where the walk never arrives).

    ``seed_mass`` (one entry per concept, non-negative, or the positive ones as
    :class:`~shared_core.search.sparse_values.SparseValues`) is the restart
    distribution up to scale; ``links_*`` is the (nodes x concepts) incidence.
    ``hops`` >= 1 counts the concept -> node steps taken: 1 is the seeds' own
    nodes, 2 adds the nodes one shared concept away, and so on. ``width`` bounds
    the nodes and concepts each later step expands from (those passing the most
    mass to each neighbour); ties go to the lower index. ``unit_degree`` is each
    node's concept count when the caller keeps it. ``node_unit`` maps each node
    to one of ``n_units`` units and the mass is summed per unit; without it the
    nodes are the units; ``entry_unit`` (optional) is ``node_unit`` of every entry
    of ``links_csc``, and ``concept_degree`` each concept's posting length, both kept
    by the caller.

    Nothing here is as long as the node count: a step reads its concepts'
    postings and sums them over the nodes they reach (a sort of the entries,
    cheaper than a pass over millions of sentences), and each step's mass goes
    straight to the units.
    """
    if node_unit is not None and n_units is None:
        raise ValueError("node_unit needs n_units, the number of units it maps to")
    scores = np.zeros(links_csr.shape[0] if n_units is None else n_units, dtype=np.float64)
    steps = _walk_steps(seed_mass, links_csr, links_csc, hops=hops,
                        continue_prob=continue_prob, width=width, unit_degree=unit_degree,
                        node_unit=node_unit, entry_unit=entry_unit, max_postings=None,
                        concept_degree=concept_degree)
    for _, _, weight, units, mass, _ in steps:
        arrived = np.bincount(units, weights=mass, minlength=len(scores))
        scores += arrived if weight == 1.0 else weight * arrived
    return scores


class WalkStep(NamedTuple):
    """One step of the walk: the concepts it starts from with the mass each of their
    posting entries carries (``frontier``, ``share``), its weight in the sum, and
    what arrived from the postings read: the units (repeats allowed) and their mass,
    and whether those were all of the frontier's postings."""

    frontier: np.ndarray
    share: np.ndarray
    weight: float
    units: np.ndarray
    mass: np.ndarray
    complete: bool  # every posting of the frontier was read


def walk_view(seed_mass: np.ndarray | SparseValues, graph: WalkGraph, n_units: int, *, hops: int,
              max_postings: int, continue_prob: float = 0.5,
              width: int = 200) -> PositiveView | RescoredView:
    """The walk over ``graph`` as a view of ``n_units`` units for the candidate path: each
    step reads at most ``max_postings`` posting entries to find units, and every unit's
    exact mass is read off its own rows.

    A unit's walk mass is linear in what each posting entry of each concept
    carries over the steps (``entry_mass``): the sum over its nodes' concepts. That
    is the full walk's, except that the steps after the first start from the
    widest nodes of what the bounded first step read. Where no step left a posting
    unread, the sums read are the exact masses and are returned as they are.
    """
    steps = list(_walk_steps(seed_mass, graph.links_csr, graph.links_csc, hops=hops,
                             continue_prob=continue_prob, width=width,
                             unit_degree=graph.node_degree, node_unit=graph.node_unit,
                             entry_unit=graph.entry_unit, max_postings=max_postings,
                             concept_degree=graph.concept_degree))
    found = summed_arrivals(steps, n_units)
    if all(step.complete for step in steps):  # nothing left unread: the sums are exact
        return found
    entry_mass = np.zeros(graph.links_csr.shape[1], dtype=np.float64)
    for step in steps:
        entry_mass[step.frontier] += step.weight * step.share  # distinct in a step
    return RescoredView(found, partial(graph.unit_mass, entry_mass=entry_mass), n_units,
                        partial(graph.unit_mass, entry_mass=entry_mass, keep=True))


def summed_arrivals(steps: list[WalkStep], n_units: int | None) -> PositiveView:
    """The units the steps' reads reached, with their summed weighted mass."""
    if not steps:
        return PositiveView(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
    units = np.concatenate([step.units.astype(np.int64, copy=False) for step in steps])
    return summed_view(units, np.concatenate([step.mass * step.weight for step in steps]),
                       n_units)


def _walk_steps(
    seed_mass: np.ndarray | SparseValues,
    links_csr: sp.csr_matrix,
    links_csc: sp.csc_matrix,
    *,
    hops: int,
    continue_prob: float,
    width: int,
    unit_degree: np.ndarray | None,
    node_unit: np.ndarray | None,
    entry_unit: np.ndarray | None,
    max_postings: int | None,
    concept_degree: np.ndarray | None = None,
) -> Iterator[WalkStep]:
    """Each step's frontier and what arrived from the postings it read (:class:`WalkStep`)."""
    if hops < 1:
        raise ValueError(f"walk hops must be >= 1, got {hops!r}")
    n_nodes = links_csr.shape[0]
    concepts, mass = positive_seeds(seed_mass)
    # summed over the seeds alone, so that dense and sparse seeds give the same bits
    total = float(mass.sum())
    if total <= 0 or not n_nodes:
        return
    if unit_degree is None:
        unit_degree = np.diff(links_csr.indptr).astype(np.float64)
    if concept_degree is None:
        concept_degree = posting_lengths(links_csc)
    # mass per posting entry: what each of a concept's nodes receives from it
    share = mass / total / np.maximum(concept_degree[concepts], 1.0)
    weight = 1.0
    for hop in range(hops):
        frontier, frontier_share = concepts, share
        if max_postings is not None:
            read = highest_impact(share, concept_degree[concepts], max_postings)
            concepts, share = concepts[read], share[read]
        complete = len(concepts) == len(frontier)
        positions, owner = entry_positions(links_csc, concepts)
        if hop == hops - 1:  # the last step's entries go to their units unsummed
            if entry_unit is not None:
                units = entry_unit[positions]
            else:
                nodes = links_csc.indices[positions]
                units = nodes if node_unit is None else node_unit[nodes]
            yield WalkStep(frontier, frontier_share, weight, units, share[owner], complete)
            return
        reached, arrived = summed_by_index(links_csc.indices[positions], share[owner])
        yield WalkStep(frontier, frontier_share, weight,
                       reached if node_unit is None else node_unit[reached], arrived, complete)
        widest = _widest(arrived / np.maximum(unit_degree[reached], 1.0), width)
        nodes = reached[widest]
        touched, back = _spread(links_csr, nodes, arrived[widest] / unit_degree[nodes])
        kept = _widest(back / np.maximum(concept_degree[touched], 1.0), width)
        concepts = touched[kept]
        share = back[kept] / concept_degree[concepts]
        weight *= continue_prob * continue_prob


def positive_seeds(seed_mass: np.ndarray | SparseValues) -> tuple[np.ndarray, np.ndarray]:
    """The seed concepts with a positive mass (ascending) and their mass."""
    seeds = (seed_mass if isinstance(seed_mass, SparseValues)
             else SparseValues.of_dense(seed_mass))
    positive = seeds.where(seeds.values > 0)
    return positive.positions, np.asarray(positive.values, dtype=np.float64)


def _spread(matrix: sp.csr_matrix | sp.csc_matrix, sources: np.ndarray,
            share: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The minor indices the compressed rows/columns ``sources`` hold (ascending) and the
    sum of ``share[i]`` over the entries of ``sources[i]`` at each: the sums a
    ``bincount`` over all of them would make (``summing.summed_by_index``), without an
    array as long as the vocabulary."""
    targets, owner = compressed_entries(matrix, sources)
    touched, summed = summed_by_index(targets, share[owner])
    return touched.astype(np.int64, copy=False), summed


def _widest(per_entry: np.ndarray, width: int) -> np.ndarray:
    """Positions of the ``width`` largest positive values (a step's frontier)."""
    positive = np.flatnonzero(per_entry > 0)
    if len(positive) <= width:
        return positive
    return np.sort(positive[top_k_indices(per_entry[positive], width)])
