"""The concept graph's edges: sentence-level concept vectors and filtered co-occurrence.

G2ConS §3.2: an edge joins concepts w_i, w_j iff Co(w_i, w_j) >= theta_co (chunks
in which both occur) and cos(Vector(w_i), Vector(w_j)) >= theta_sem, weighted by
the Dice coefficient 2·Co / (|T_i| + |T_j|). Every step is sparse linear algebra;
cosines are computed only for pairs that pass the co-occurrence threshold.

The graph keeps every pair passing ``theta_co`` (:class:`StrongPairs`), not only
the edges: with each pair's count and how far its cosine was from ``theta_sem``,
a refresh updates counts by the changed chunks alone and recomputes a cosine
only when its concepts' vectors moved far enough to possibly cross the threshold
(:func:`recertified`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from ..embeddings.base import FIXED_POINT_BITS, fixed_point_product
from .entries import column_entry_counts, compressed_entries
from .loops import TOWARD_ZERO, pair_counts_compiled, recertified_in_place

if TYPE_CHECKING:  # the state package imports this module
    from ..state.rows import Rows

# Pairs whose cosines are taken at a time. The gathered rows stay in cache: blocks of
# 2^18 pairs (800 MB of gathered rows) ran 3.6x slower here (benchmarks/RESULTS.md), and
# 256 pairs (0.4 MB a side, within L2) ran 1.6x faster than 2048 (NOTES.md, 23rd round).
PAIR_BLOCK = 256
# The most bytes :func:`pair_cosines` gathers the pairs' distinct ends into (float32).
PAIR_ENDS_BYTES = 1 << 27
# Slack of a cosine certificate per vector dimension, in units of float32's unit roundoff
# u = 2^-24 (see :func:`certificate_slack`).
SLACK_ROUNDOFFS_PER_DIM = 8
# Concepts :func:`pair_counts` marks per pass: one bit each in a float64 sum of distinct
# powers of two, exact below 2^53.
MASK_BITS = 52
# Pairs whose cosine decisions :func:`rechecked` takes at a time (temporaries of 8 MB).
RECHECK_BLOCK = 1 << 20
# Chunk-concept products :func:`strong_pairs` lets one block of co-occurrence rows cost
# (an upper bound of that block's entries): 2^24 bounds its temporaries near 200 MB,
# where the whole matrix at once peaked at 4.2 GB for 100 K passages (RESULTS.md, Scale).
COOCCURRENCE_BLOCK = 1 << 24
# Concept sums turned into vectors at a time (float64 temporaries of 25 MB at 384 dimensions).
SUM_BLOCK = 1 << 13
# sentence rows a sum over a few concepts gathers at a time (24 MB of float32 at 384)
GATHER_BLOCK = 1 << 14


def concept_vectors(
    sentence_concepts: sp.csr_matrix, sentence_embeddings: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 1: each concept's vector is the mean embedding of the sentences containing it.

    ``sentence_concepts`` is a (sentences x concepts) 0/1 matrix. Returns the unit-norm
    mean vectors and |S_w|. A concept with no sentence gets a zero vector (and
    similarity 0 to everything), never a chunk-level stand-in: the paper's ablation
    shows chunk-level vectors collapse retrieval.
    """
    sums, counts = concept_sums(sentence_concepts, sentence_embeddings)
    return vectors_of_sums(sums), counts


def concept_sums(sentence_concepts: sp.csr_matrix, sentence_embeddings: Rows
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Each concept's summed sentence vector, in fixed point (int64), and |S_w|.

    Integer sums are exact, so they do not depend on the order the sentences are
    added in: a refresh adds the changed sentences to the old sums and gets the
    bits a derivation over every sentence gets (:func:`vectors_of_sums` then gives
    the same vectors). Rounded to float32 they are the float64 sums to the bit but
    for a rounding tie (none on the scale corpora: ``benchmarks/RESULTS.md``).
    """
    # kept row-major: its transpose is the column-major (concepts x sentences) matrix the
    # product wants, without a conversion
    incidence = presence(sentence_concepts, dtype=np.int64)
    counts = sentence_counts(incidence)
    rows = np.flatnonzero(np.diff(incidence.indptr))
    if 2 * len(rows) >= incidence.shape[0]:
        return fixed_point_product(incidence.T, sentence_embeddings), counts
    # a few concepts' sentences (a refresh's): only their rows are read, gathered a block
    # at a time (the sums are exact, so any split gives the same bits)
    sums = np.zeros((incidence.shape[1], sentence_embeddings.shape[1]), dtype=np.int64)
    for start in range(0, len(rows), GATHER_BLOCK):
        block = rows[start:start + GATHER_BLOCK]
        sums += fixed_point_product(incidence[block].T, sentence_embeddings[block])
    return sums, counts


def vectors_of_sums(sums: np.ndarray) -> np.ndarray:
    """Unit-norm float32 vectors of fixed-point sums (zero rows stay zero), as the mean's
    direction: the sums rounded to float32, then scaled to length 1 in float32.

    A row at a time is its own result, so any subset of rows gives the same bits as
    all of them (a refresh converts only the changed concepts')."""
    out = np.empty(sums.shape, dtype=np.float32)
    for start in range(0, len(sums), SUM_BLOCK):
        block = (sums[start:start + SUM_BLOCK] * 2.0 ** -FIXED_POINT_BITS).astype(np.float32)
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        np.divide(block, norms, out=block, where=norms > 0)
        block[(norms == 0).ravel()] = 0.0
        out[start:start + len(block)] = block
    return out


def sentence_counts(sentence_concepts: sp.csr_matrix) -> np.ndarray:
    """|S_w|: how many sentences each concept's vector averages (its stored entries).

    Counted ``COUNT_BLOCK`` entries at a time: a ``bincount`` of the whole int32 index
    array first copies it to the platform's integer (420 MB at a million passages),
    and is no faster than the blocks (0.34 s against 0.22-0.32 s there)."""
    indices = sentence_concepts.indices
    counts = np.zeros(sentence_concepts.shape[1], dtype=np.int64)
    for start in range(0, len(indices), COUNT_BLOCK):
        counts += np.bincount(indices[start:start + COUNT_BLOCK], minlength=len(counts))
    return counts


def presence(links: sp.spmatrix, dtype: type = np.int32) -> sp.csr_matrix:
    """``links`` as a 0/1 matrix: a link of any weight is one chunk."""
    out = sp.csr_matrix(links, dtype=dtype, copy=True)
    out.eliminate_zeros()
    out.data[:] = 1
    return out


def cooccurrence(chunk_links: sp.csr_matrix) -> sp.csr_matrix:
    """Co(w_i, w_j): the number of chunks linked to both concepts (diagonal removed)."""
    links = presence(chunk_links)
    co = sp.csr_matrix(links.T @ links)
    co.setdiag(0)
    co.eliminate_zeros()
    return co


@dataclass(frozen=True)
class ConceptEdges:
    """Undirected edges, one row per pair with source < target.

    An edge's cosine is not kept: it is ``pair_cosines(vectors, source, target)``,
    the same bits whenever it is computed.
    """

    source: np.ndarray
    target: np.ndarray
    cooccurrence: np.ndarray
    dice: np.ndarray

    def __len__(self) -> int:
        return len(self.source)


COUNT_BLOCK = 1 << 22  # sparse entries counted at a time (16-32 MB of indices)
KEY_BLOCK = 1 << 22  # pairs whose int64 keys are built at a time (32 MB)


@dataclass(frozen=True, eq=False)
class StrongPairs:
    """Every concept pair passing ``theta_co``, sorted by (source, target), source < target.

    ``edge`` is the pair's cosine decision (cos >= theta_sem, as the float32 cosine
    compares); ``margin`` the cosine minus theta_sem at its last exact computation,
    its magnitude since shrunk by how far the pair's vectors moved, so it is a lower
    bound of the distance to the threshold. ``edge`` is kept apart: a shrunk margin
    near 0 must not flip the recorded decision. Margins depend on the update history;
    ``source``, ``target``, ``count`` and ``edge`` do not.
    """

    source: np.ndarray  # int32
    target: np.ndarray  # int32
    count: np.ndarray  # int32
    edge: np.ndarray  # bool
    margin: np.ndarray  # float32

    def __len__(self) -> int:
        return len(self.source)

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f.name).nbytes for f in fields(self))

    def keys(self, n_concepts: int) -> np.ndarray:
        """source·n + target as int64: ascending, one per pair."""
        keys = self.source.astype(np.int64)
        keys *= n_concepts
        keys += self.target
        return keys

    def taken(self, keep: np.ndarray) -> StrongPairs:
        """The pairs at ``keep`` (a mask or sorted positions)."""
        return StrongPairs(*(getattr(self, f.name)[keep] for f in fields(self)))

    def keys_at(self, positions: np.ndarray | slice, n_concepts: int) -> np.ndarray:
        """The keys (:meth:`keys`) of the pairs at ``positions`` only."""
        keys = self.source[positions].astype(np.int64)
        keys *= n_concepts
        keys += self.target[positions]
        return keys

    def key_positions(self, keys: np.ndarray, n_concepts: int) -> np.ndarray:
        """``np.searchsorted(self.keys(n_concepts), keys)``, never holding every key.

        At a million passages the keys are 460 MB of int64. Each asked key is looked
        up in the one block of ``KEY_BLOCK`` pairs where it falls (the last block
        whose first key is below it), and only blocks asked about are built, one at
        a time.
        """
        keys = np.asarray(keys, dtype=np.int64)
        found = np.zeros(len(keys), dtype=np.int64)
        if not len(self) or not len(keys):
            return found
        starts = np.arange(0, len(self), KEY_BLOCK)
        below = np.searchsorted(self.keys_at(starts, n_concepts), keys)  # 0: before all
        order = (np.arange(len(keys)) if np.all(below[:-1] <= below[1:])
                 else np.argsort(below, kind="stable"))
        bounds = np.searchsorted(below[order], np.arange(len(starts) + 2))
        for block in range(1, len(starts) + 1):
            asked = order[bounds[block]:bounds[block + 1]]
            if len(asked):
                first = int(starts[block - 1])
                found[asked] = first + np.searchsorted(
                    self.keys_at(slice(first, first + KEY_BLOCK), n_concepts), keys[asked])
        return found

    def ascending(self, n_concepts: int) -> bool:
        """Whether the keys strictly ascend, checked a block at a time."""
        for start in range(0, max(len(self) - 1, 0), KEY_BLOCK):
            keys = self.keys_at(slice(start, start + KEY_BLOCK + 1), n_concepts)
            if not np.all(keys[1:] > keys[:-1]):
                return False
        return True


def strong_pairs_of(source: np.ndarray, target: np.ndarray, count: np.ndarray,
                    vectors: Rows, theta_sem: float) -> StrongPairs:
    """Pairs given in (source, target) order, with their cosine decisions computed exactly."""
    edge, margin = cosine_decisions(vectors, source, target, theta_sem)
    return StrongPairs(source.astype(np.int32, copy=False), target.astype(np.int32, copy=False),
                       count.astype(np.int32, copy=False), edge, margin)


def strong_pairs(chunk_links: sp.csr_matrix, vectors: np.ndarray, theta_co: int,
                 theta_sem: float, block: int = COOCCURRENCE_BLOCK) -> StrongPairs:
    """Every pair of concepts sharing at least ``theta_co`` chunks, with its cosine decision.

    Co-occurrence rows are taken a block of concepts at a time, each block costing
    at most ``block`` chunk-concept products, so only the pairs that pass are ever
    held whole: most co-occurring pairs share a single chunk.
    """
    source, target, count = strong_cooccurrence(chunk_links, theta_co, block)
    return strong_pairs_of(source, target, count, vectors, theta_sem)


def strong_cooccurrence(chunk_links: sp.csr_matrix, theta_co: int,
                        block: int = COOCCURRENCE_BLOCK) -> tuple[np.ndarray, ...]:
    """(source, target, Co) of the pairs source < target with Co >= ``theta_co``, in order.

    int32 throughout: tens of millions of pairs at a million passages, whose int64
    parts and their concatenation had been the largest allocation before the vector
    index's (RESULTS.md, Scale).
    """
    links = presence(chunk_links)
    by_concept = links.T.tocsr()  # (concepts x chunks): a block of its rows is a block of concepts
    # row i of the product costs the chunk degrees of concept i's chunks
    cost = by_concept @ np.diff(links.indptr).astype(np.int64)
    bounds = _blocks(cost, block)
    parts: list[tuple[np.ndarray, ...]] = []
    for low, high in itertools.pairwise(bounds.tolist()):
        co = sp.csr_matrix(by_concept[low:high] @ links)
        co.sort_indices()  # then each row's targets come out ascending
        rows = np.repeat(np.arange(low, high, dtype=np.int32), np.diff(co.indptr))
        keep = (co.indices > rows) & (co.data >= theta_co)
        parts.append((rows[keep], co.indices[keep].astype(np.int32),
                      co.data[keep].astype(np.int32)))
    if not parts:
        return tuple(np.zeros(0, dtype=np.int32) for _ in range(3))
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def _blocks(cost: np.ndarray, budget: int) -> np.ndarray:
    """Boundaries splitting rows into runs whose summed ``cost`` stays within ``budget``.

    A single row costing more than the budget is a run of its own.
    """
    bounds = [0]
    total = np.cumsum(cost)
    while bounds[-1] < len(cost):
        start = bounds[-1]
        spent = total[start - 1] if start else 0
        end = int(np.searchsorted(total, spent + budget, side="right"))
        bounds.append(max(end, start + 1))
    return np.asarray(bounds, dtype=np.int64)


def concept_edges(
    chunk_links: sp.csr_matrix,
    vectors: np.ndarray,
    theta_co: int,
    theta_sem: float,
) -> ConceptEdges:
    """The semantically filtered co-occurrence edges with their Dice weights."""
    return edges_of(strong_pairs(chunk_links, vectors, theta_co, theta_sem),
                    chunk_counts(chunk_links))


def edges_of(pairs: StrongPairs, chunk_count: np.ndarray) -> ConceptEdges:
    """The pairs whose cosine passed, Dice-weighted by ``chunk_count`` (:func:`chunk_counts`).

    Ends and counts stay the pairs' int32 (20 bytes an edge with the float64 Dice, not
    32: 61 MB less at 100 K passages); the Dice is computed in float64 as before.
    """
    src, dst, counts = pairs.source[pairs.edge], pairs.target[pairs.edge], pairs.count[pairs.edge]
    dice = 2.0 * counts.astype(np.float64) / (chunk_count[src] + chunk_count[dst])
    return ConceptEdges(source=src, target=dst, cooccurrence=counts, dice=dice)


def chunk_counts(chunk_links: sp.spmatrix) -> np.ndarray:
    """|T_w|: how many chunks each concept links (the Dice denominators), float64."""
    return column_entry_counts(chunk_links).astype(np.float64)


def pair_cosines(vectors: Rows, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """cos(vectors[src[i]], vectors[dst[i]]) for every i, float32.

    Each value depends on its pair alone, never on the batch it was computed in,
    so a refresh or a load that recomputes some pairs gets the same bits.
    """
    cos = np.zeros(len(src), dtype=np.float32)
    rows, src, dst = _pair_ends(vectors, np.asarray(src), np.asarray(dst))
    for start in range(0, len(src), PAIR_BLOCK):
        s = slice(start, start + PAIR_BLOCK)
        cos[s] = np.einsum("ij,ij->i", rows[src[s]], rows[dst[s]])
    return cos


def _pair_ends(vectors: Rows, src: np.ndarray, dst: np.ndarray
               ) -> tuple[np.ndarray | Rows, np.ndarray, np.ndarray]:
    """The rows the pairs read, and the pairs' ends as positions in them.

    Vectors held in several runs (:class:`~shared_core.state.rows.VectorRows`) are
    gathered once, the distinct ends only, when those fit ``PAIR_ENDS_BYTES``: a
    block's gathers then read one plain array instead of resolving each row's run
    again (a refresh's 228 K pairs: 0.15 s of its cosines' 0.2 s at 10 K passages).
    The rows are the same bits, so each cosine is too.
    """
    if isinstance(vectors, np.ndarray) or not len(src):
        return vectors, src, dst
    used = np.zeros(len(vectors), dtype=bool)
    used[src] = True
    used[dst] = True
    ends = np.flatnonzero(used)
    if len(ends) * vectors.shape[1] * 4 > PAIR_ENDS_BYTES:
        return vectors, src, dst
    position = np.cumsum(used, dtype=np.int64) - 1
    return np.asarray(vectors[ends], dtype=np.float32), position[src], position[dst]


def cosine_decisions(vectors: Rows, src: np.ndarray, dst: np.ndarray,
                     theta_sem: float) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's decision ``cos >= theta_sem`` (exactly as a derivation compares) and margin.

    The margin, cos - theta_sem, is rounded toward zero to float32, so its magnitude
    never overstates the distance to the threshold.
    """
    cos = pair_cosines(vectors, src, dst)
    margin = np.empty(len(cos), dtype=np.float32)
    for start in range(0, len(cos), RECHECK_BLOCK):  # float64 temporaries of 8 MB, not 1 GB
        block = slice(start, start + RECHECK_BLOCK)
        margin[block] = _toward_zero(cos[block].astype(np.float64) - float(theta_sem))
    return cos >= theta_sem, margin


def _toward_zero(values: np.ndarray) -> np.ndarray:
    """float64 ``values`` as float32, none larger in magnitude than it was.

    Scaled down by 2^-23 first: rounding to nearest float32 then moves a value by
    at most 2^-24 of it, so it cannot come back up (below float32's normal range,
    around 1e-38, no margin certifies anything anyway).
    """
    return (values * TOWARD_ZERO).astype(np.float32)


def certificate_slack(dim: int) -> float:
    """How much two float32 cosine computations may disagree beyond the vectors' movement.

    For vectors of norm <= 1 + d, |a'·b' - a·b| <= (1 + d)(|a' - a| + |b' - b|) (triangle
    and Cauchy-Schwarz), so an exact cosine moves by at most the summed drift and d
    times it. A float32 dot product of ``dim`` terms is within dim·u of the exact one
    (u = 2^-24, any summation order, Σ|a_i b_i| <= 1 + d), once for the old and once
    for the new computation: 2·dim·u. The rows are unit norm to float32 rounding,
    d <= (dim + 2)·u, and a margin and drift sum are below 4, so d·4 <= 4·(dim + 2)·u.
    theta_sem compared as float32 or float64 differs by u. Drifts are float64, exact
    to 1e-15. Total under 7·dim·u + 9u; ``SLACK_ROUNDOFFS_PER_DIM``·dim·u (1.8e-4 at
    384 dimensions) bounds it with room.
    """
    return SLACK_ROUNDOFFS_PER_DIM * max(dim, 2) * 2.0**-24


def recertified(margin: np.ndarray, drift: np.ndarray,
                slack: float) -> tuple[np.ndarray, np.ndarray]:
    """Which recorded cosine decisions still hold after their vectors moved, and new margins.

    ``drift`` is each pair's summed endpoint movement |v' - v| since the margin was
    recorded. A decision holds when |margin| - drift > ``slack``
    (:func:`certificate_slack`): the recomputed cosine would then fall on the same
    side of theta_sem. The returned margins keep their sign with magnitude
    |margin| - drift (meaningful only where the decision holds).
    """
    room = np.abs(margin).astype(np.float64) - drift
    holds = room > slack
    np.maximum(room, 0.0, out=room)
    return holds, _toward_zero(np.copysign(room, margin, out=room))


def rechecked(pairs: StrongPairs, vectors: Rows, drift: np.ndarray,
              theta_sem: float, in_place: bool = False) -> tuple[StrongPairs, np.ndarray]:
    """``pairs`` with their cosine decisions brought up to date, and which were recomputed.

    ``drift`` is each concept's movement since the pairs' margins were recorded
    (0: unmoved, inf: no old vector). Pairs of unmoved concepts are untouched;
    a moved pair keeps its decision while :func:`recertified` vouches for it and has
    its cosine recomputed otherwise. Returns the positions recomputed. Runs
    ``RECHECK_BLOCK`` pairs at a time, so its temporaries stay small. ``in_place``:
    ``pairs``' decisions and margins are the caller's own copies, updated where they
    are rather than copied again (290 MB at a million passages, at a delete's peak).
    """
    slack = certificate_slack(vectors.shape[1])
    edge, margin = ((pairs.edge, pairs.margin) if in_place
                    else (pairs.edge.copy(), pairs.margin.copy()))
    again = recertified_in_place(pairs.source, pairs.target, drift, margin, slack)
    if again is None:  # numpy: the same margins, a block at a time
        redo = [np.zeros(0, dtype=np.int64)]
        for start in range(0, len(pairs), RECHECK_BLOCK):
            block = slice(start, start + RECHECK_BLOCK)
            moved = drift[pairs.source[block]]
            moved += drift[pairs.target[block]]
            touched = np.flatnonzero(moved)
            holds, shrunk = recertified(margin[block][touched], moved[touched], slack)
            margin[start + touched] = shrunk
            redo.append(start + touched[~holds])
        again = np.concatenate(redo)
    edge[again], margin[again] = cosine_decisions(vectors, pairs.source[again],
                                                  pairs.target[again], theta_sem)
    return StrongPairs(pairs.source, pairs.target, pairs.count, edge, margin), again


def cooccurrence_change(kept: sp.csr_matrix, added: sp.csr_matrix,
                        removed: sp.csr_matrix) -> sp.coo_matrix:
    """Co_new - Co_old for pairs a < b, from the changed chunks' links alone.

    Row r of the three 0/1 matrices is one changed chunk: ``kept`` its links present
    before and after, ``added`` those only after, ``removed`` those only before (an
    added chunk has only ``added``, a deleted one only ``removed``). Chunk r adds
    (K+A)ᵀ(K+A) - (K+R)ᵀ(K+R) = KᵀA + AᵀK + AᵀA - KᵀR - RᵀK - RᵀR to the counts,
    so the kept links' own pairs, unchanged, cost nothing. Entries in (row, column)
    order; zero changes dropped.
    """
    cross = sp.csr_matrix(kept.T @ (added - removed))
    change = sp.csr_matrix(cross + cross.T + added.T @ added - removed.T @ removed)
    change.eliminate_zeros()
    change.sort_indices()
    return sp.triu(change, k=1).tocoo()


def pair_counts(links_csc: sp.csc_matrix, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Co(src[i], dst[i]) for the given pairs, from the two concepts' columns alone.

    ``links_csc`` is 0/1 (chunks x concepts) with sorted indices. Pairs are grouped by
    their longer column, ``MASK_BITS`` distinct ones at a time: each chunk gets a bit
    mask of which of those concepts it links (one array the size of the chunk count,
    in cache), and each chunk of a pair's shorter column is looked up in it. Costs the
    shorter columns' lengths, not the co-occurrence rows a matrix product computes.
    With numba, each pair's two columns are intersected in a compiled loop instead
    (:func:`~shared_core.graph.loops.pair_counts_compiled`): the same counts.
    """
    compiled = pair_counts_compiled(links_csc, src, dst)
    if compiled is not None:
        return compiled
    length = np.diff(links_csc.indptr).astype(np.int64)
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    flip = length[src] > length[dst]
    short, long = np.where(flip, dst, src), np.where(flip, src, dst)
    counts = np.zeros(len(src), dtype=np.int64)
    some = np.flatnonzero(length[short] > 0)  # an empty column shares nothing
    order = some[np.argsort(long[some], kind="stable")]
    short, long = short[order], long[order]
    distinct, first = np.unique(long, return_index=True)
    first = np.append(first, len(long))
    bits = 2.0 ** np.arange(MASK_BITS)
    for low in range(0, len(distinct), MASK_BITS):
        block = distinct[low:low + MASK_BITS]
        chunks, owner = compressed_entries(links_csc, block)
        mask = np.bincount(chunks, weights=bits[owner],
                           minlength=links_csc.shape[0]).astype(np.int64)
        pairs = slice(first[low], first[min(low + MASK_BITS, len(distinct))])
        chunks, owner = compressed_entries(links_csc, short[pairs])
        shift = np.searchsorted(block, long[pairs])[owner]
        linked = (mask[chunks] >> shift) & 1
        counts[order[pairs]] = np.add.reduceat(linked, np.cumsum(length[short[pairs]])
                                               - length[short[pairs]])
    return counts


def adjacency(edges: ConceptEdges, n_concepts: int, weighted: bool = True) -> sp.csr_matrix:
    """Symmetric adjacency matrix, Dice-weighted or 0/1, in canonical CSR form.

    Edges come sorted by (source, target) with source < target, so they are the upper
    triangle in CSR form as they stand; the matrix is that plus its transpose, one
    sparse sum (sorted rows, no duplicates: the triangles do not overlap).
    """
    weights = edges.dice if weighted else np.ones(len(edges))
    src, dst = np.asarray(edges.source, dtype=np.int64), np.asarray(edges.target, dtype=np.int64)
    keys = src * n_concepts + dst
    if len(keys) and not (np.all(src < dst) and np.all(keys[1:] > keys[:-1])):
        rows, cols = np.concatenate([src, dst]), np.concatenate([dst, src])
        data = np.concatenate([weights, weights]).astype(np.float64)
        return sp.csr_matrix((data, (rows, cols)), shape=(n_concepts, n_concepts))
    index = np.int32 if 2 * len(src) < 2**31 and n_concepts < 2**31 else np.int64
    upper = sp.csr_matrix((np.asarray(weights, dtype=np.float64), dst.astype(index),
                           np.concatenate([[0], np.cumsum(np.bincount(
                               src, minlength=n_concepts))]).astype(index)),
                          shape=(n_concepts, n_concepts))
    full = sp.csr_matrix(upper + upper.T)
    full.sort_indices()
    return full
