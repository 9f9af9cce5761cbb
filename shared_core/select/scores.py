"""Core-chunk selection: which chunks are worth sending to the LLM KG extractor.

G2ConS ranks concepts by PageRank and chunks by the concepts they carry, then
keeps the top ``kappa`` share (:func:`select_by_scores`); random scores are the
baseline any ranking must beat.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ..config import ChunkScore, SelectBy
from .cost import CostReport, Selection


def n_core_chunks(n_chunks: int, kappa: float) -> int:
    """ceil(kappa · n), at least one chunk when there are any (1e-9 absorbs float error)."""
    if not 0.0 < kappa <= 1.0:
        raise ValueError(f"kappa must be in (0, 1], got {kappa!r}")
    if n_chunks == 0:
        return 0
    return max(1, math.ceil(kappa * n_chunks - 1e-9))


def chunk_scores(
    chunk_links: sp.csr_matrix, concept_rank: np.ndarray, mode: ChunkScore
) -> np.ndarray:
    """A chunk's score from the PageRank of its concepts: their sum, max or mean."""
    links = sp.csr_matrix(chunk_links, dtype=np.float64)
    links.data[:] = 1.0
    weighted = links.multiply(concept_rank[np.newaxis, :]).tocsr()
    if mode == "sum":
        return np.asarray(weighted.sum(axis=1)).ravel()
    if mode == "max":
        return np.asarray(weighted.max(axis=1).todense()).ravel()
    if mode == "mean":
        counts = np.diff(links.indptr)
        sums = np.asarray(weighted.sum(axis=1)).ravel()
        return np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    raise ValueError(f"chunk_score must be sum, max or mean, got {mode!r}")


def n_core_by_tokens(ordered_tokens: np.ndarray, kappa: float) -> int:
    """Length of the ranked prefix whose tokens stay within ``kappa`` of all tokens.

    At least one chunk when there are any, so a tiny ``kappa`` never selects nothing.
    """
    if not 0.0 < kappa <= 1.0:
        raise ValueError(f"kappa must be in (0, 1], got {kappa!r}")
    tokens = np.asarray(ordered_tokens, dtype=np.float64)
    if len(tokens) == 0:
        return 0
    cumulative = np.cumsum(tokens)
    within = int(np.searchsorted(cumulative, kappa * cumulative[-1] * (1 + 1e-12), side="right"))
    return max(1, within)


def value_per_token(scores: np.ndarray, token_counts: np.ndarray) -> np.ndarray:
    """What kappa as a share of tokens ranks by: score per token, the greedy knapsack order."""
    return np.asarray(scores, dtype=np.float64) / np.maximum(np.asarray(token_counts), 1)


def rank_by_score(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score; ties keep corpus order, so selection is deterministic."""
    return np.lexsort((np.arange(len(scores)), -np.asarray(scores, dtype=np.float64)))


def select_by_scores(
    chunk_ids: Sequence[str],
    scores: np.ndarray,
    token_counts: np.ndarray,
    kappa: float,
    prompt_tokens_per_chunk: int = 0,
    *,
    by: SelectBy = "chunks",
) -> Selection:
    """Keep the best-scored chunks, ``kappa`` of the chunks or of the tokens; report the saving.

    ``by="chunks"`` keeps ``n_core_chunks`` chunks (the paper's kappa). ``by="tokens"``
    keeps the longest best-first prefix within ``kappa`` of the corpus's tokens, so
    kappa is the share of KG-extraction input paid for whatever the chunk lengths.
    """
    if len(chunk_ids) != len(scores) or len(scores) != len(token_counts):
        raise ValueError("chunk_ids, scores and token_counts must have the same length")
    if prompt_tokens_per_chunk < 0:
        raise ValueError("prompt_tokens_per_chunk must be >= 0")
    order = rank_by_score(scores)
    if by == "chunks":
        n_keep = n_core_chunks(len(chunk_ids), kappa)
    elif by == "tokens":
        n_keep = n_core_by_tokens(np.asarray(token_counts)[order], kappa)
    else:
        raise ValueError(f"by must be chunks or tokens, got {by!r}")
    keep_mask = np.zeros(len(chunk_ids), dtype=bool)
    keep_mask[order[:n_keep]] = True
    ids = list(chunk_ids)
    report = CostReport(
        kappa=kappa,
        chunks_total=len(ids),
        chunks_kept=n_keep,
        tokens_total=int(np.sum(token_counts)),
        tokens_kept=int(np.sum(np.asarray(token_counts)[keep_mask])),
        prompt_tokens_per_chunk=prompt_tokens_per_chunk,
        by=by,
    )
    return Selection(
        kept_ids=tuple(i for i, k in zip(ids, keep_mask, strict=True) if k),
        dropped_ids=tuple(i for i, k in zip(ids, keep_mask, strict=True) if not k),
        ranked_ids=tuple(ids[i] for i in order),
        scores={i: float(s) for i, s in zip(ids, scores, strict=True)},
        report=report,
    )


def random_scores(n_chunks: int, seed: int = 0) -> np.ndarray:
    """Uniform-random chunk scores: the baseline any selection must beat."""
    return np.random.default_rng(seed).random(n_chunks)


def id_random_scores(chunk_ids: Sequence[str], seed: int = 0) -> np.ndarray:
    """Uniform-random scores drawn from each chunk's id and ``seed``, not its position.

    So a chunk keeps its draw whatever else the index holds: random selection is
    as history-independent as the rest of the index.
    """
    out = np.empty(len(chunk_ids), dtype=np.float64)
    prefix = f"{seed}\x1f".encode()
    for i, cid in enumerate(chunk_ids):
        digest = hashlib.blake2b(prefix + cid.encode("utf-8"), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") / 2.0**64
    return out
