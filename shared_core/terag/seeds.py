"""TERAG's restart vector (§4.3, Eq. 3-5): which concepts a query seeds, with what weight.

The query's entities are matched to concept nodes exactly first; if none
matches, the ``semantic_top`` (3 in the paper) concepts most similar to the
query are the seeds instead. Each seed u gets w(u) = s(u) / f(u) (Eq. 3), with
s(u) = 1 for an exact match and the cosine sim(q, u) for a semantic one (Eq. 4)
and f(u) the number of passages u was extracted from; weights are normalised
within the exact and within the semantic group (Eq. 5), so a group's size does
not tilt the balance between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from ..search import strongest_concept, top_k_indices

SeedMode = Literal["fallback", "both"]
SeedGroup = Literal["exact", "semantic"]


@dataclass(frozen=True)
class Seed:
    """A restart node: its label, group, s(u), f(u), normalised weight ŵ(u) and index.

    ``node`` is the concept's index (0-based among concepts, not graph nodes);
    ``concept_type`` is the TERAG type (``"entity"``, ``"concept"``) when concepts
    have one, ``""`` for untyped (TF-IDF) concepts.
    """

    concept: str
    group: SeedGroup
    similarity: float
    frequency: int
    weight: float
    node: int
    concept_type: str = ""


def group_weights(similarity: np.ndarray, frequency: np.ndarray) -> np.ndarray:
    """ŵ within one group: s / f (Eq. 3) scaled to sum 1 (Eq. 5).

    A negative similarity gives no restart mass; if every seed of the group is
    dissimilar (all s <= 0), 1 / f alone decides, so the group still restarts.
    """
    f = np.asarray(frequency, dtype=np.float64)
    w = np.maximum(np.asarray(similarity, dtype=np.float64), 0.0) / f
    if w.sum() <= 0:
        w = 1.0 / f
    return w / w.sum()


def select_seeds(
    exact: Sequence[int] | np.ndarray,
    similarity: Callable[[], np.ndarray],
    frequency: np.ndarray,
    labels: Sequence[str],
    *,
    semantic_top: int = 3,
    mode: SeedMode = "fallback",
    types: Sequence[str] | None = None,
) -> tuple[Seed, ...]:
    """The seeds of one query, exact group first; seeds of zero weight are left out.

    ``exact`` are the concepts the query's entities match (in query order, no
    repeats). ``similarity`` returns every concept's cosine to the query; it is
    only called when semantic seeds are wanted: ``"fallback"`` (the paper) when
    nothing matched exactly, ``"both"`` always, excluding the exact matches.
    """
    if mode not in ("fallback", "both"):
        raise ValueError(f"seed_mode must be 'fallback' or 'both', got {mode!r}")
    exact_nodes = np.asarray(exact, dtype=np.int64)
    groups: list[tuple[SeedGroup, np.ndarray, np.ndarray]] = []
    if len(exact_nodes):
        groups.append(("exact", exact_nodes, np.ones(len(exact_nodes))))
    if not len(exact_nodes) or mode == "both":
        sims = np.array(similarity(), dtype=np.float64)
        sims[exact_nodes] = -np.inf
        candidates = np.flatnonzero(np.isfinite(sims))
        top = candidates[top_k_indices(sims[candidates], semantic_top)]
        if len(top):
            groups.append(("semantic", top, sims[top]))
    out: list[Seed] = []
    for group, nodes, s in groups:
        f = frequency[nodes]
        w = group_weights(s, f)
        out.extend(Seed(labels[c], group, float(si), int(fi), float(wi), int(c),
                        "" if types is None else types[c])
                   for c, si, fi, wi in zip(nodes, s, f, w, strict=True) if wi > 0)
    return tuple(out)


def restart_vector(seeds: Sequence[Seed], n_nodes: int, offset: int) -> np.ndarray:
    """The PPR restart distribution: ŵ at graph node ``offset + seed.node``, summing to 1.

    Each group sums to 1 on its own (Eq. 5), so with both groups present each holds
    half the restart mass once the whole vector is normalised.
    """
    if not seeds:
        raise ValueError("no seeds: the restart vector would be empty")
    p = np.zeros(n_nodes, dtype=np.float64)
    np.add.at(p, offset + np.fromiter((s.node for s in seeds), dtype=np.int64, count=len(seeds)),
              np.fromiter((s.weight for s in seeds), dtype=np.float64, count=len(seeds)))
    return p / p.sum()


def strongest_seed(links: sp.csr_matrix, passages: np.ndarray,
                   seeds: Sequence[Seed]) -> np.ndarray:
    """For each passage, its linked seed concept of largest ŵ (-1 if none; ties: lower index).

    Says which seed brought a passage into the context.
    """
    weight = np.zeros(links.shape[1])
    weight[[s.node for s in seeds]] = [s.weight for s in seeds]
    return strongest_concept(links, passages, weight)
