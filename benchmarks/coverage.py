"""Core coverage: does a chunk selection keep what the questions need?

An LLM-free measure of selection quality: a question is covered at kappa when
its answer occurs in some kept chunk and its supporting passages (where the
dataset has them) lie inside the kept chunks. G2ConS concept-PageRank
selection is compared with KET-RAG's KNN-chunk-graph PageRank and random, with
kappa as a share of chunks (the papers') and as a share of tokens (the cost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shared_core.config import SelectBy
from shared_core.embeddings import Embedder
from shared_core.index import ConceptGraphIndex, SelectionMethod
from shared_core.select import Selection, random_scores, select_by_scores, value_per_token

from .data import Corpus, Question
from .metrics import answer_in_context, merge_spans, normalize_answer, share, span_covered

KAPPAS = (0.2, 0.5, 0.8)
RANDOM_SEEDS = 10  # one random draw swings answer coverage by +-2.5 points on MuSiQue


def answer_chunks(questions: Sequence[Question],
                  normalized_chunks: Sequence[str]) -> list[np.ndarray]:
    """For each question, the chunks whose normalised text holds a gold answer."""
    out = []
    for q in questions:
        hits = [i for i, text in enumerate(normalized_chunks) if answer_in_context(q.answers, text)]
        out.append(np.asarray(hits, dtype=np.int64))
    return out


def coverage_of(keep: np.ndarray, corpus: Corpus, questions: Sequence[Question],
                answer_hits: Sequence[np.ndarray]) -> dict[str, float | None]:
    """Shares of questions whose answer / supports / both survive in the kept chunks."""
    merged = merge_spans(corpus.chunks.spans[keep])
    pindex = corpus.passage_index()
    answer_flags, support_flags, both_flags = [], [], []
    for q, hits in zip(questions, answer_hits, strict=True):
        answer_ok = bool(keep[hits].any()) if len(hits) else False
        answer_flags.append(answer_ok)
        known = [pindex[s] for s in q.supporting_ids if s in pindex]
        if known:
            ok = all(span_covered(corpus.passage_spans[p], merged) for p in known)
            support_flags.append(ok)
            both_flags.append(ok and answer_ok)
        else:
            both_flags.append(answer_ok)
    return {"answer": share(answer_flags), "support": share(support_flags),
            "both": share(both_flags)}


def kept_mask(corpus: Corpus, selection: Selection) -> np.ndarray:
    """The selection as a boolean mask over the corpus's selection chunks."""
    kept = set(selection.kept_ids)
    return np.fromiter((cid in kept for cid in corpus.chunks.ids), dtype=bool,
                       count=len(corpus.chunks.ids))


def g2cons_selector(corpus: Corpus, embedder: Embedder, by: SelectBy,
                    method: SelectionMethod = "concept") -> Callable[[float], Selection]:
    index = ConceptGraphIndex(embedder)
    index.add(corpus.chunks.texts, ids=corpus.chunks.ids)  # sentence vectors come from the cache
    return lambda kappa: index.select(kappa, by=by, method=method)


def ketrag_selector(corpus: Corpus, embedder: Embedder,
                    by: SelectBy) -> Callable[[float], Selection]:
    from shared_core.select import knn_pagerank_scores

    scores = knn_pagerank_scores(corpus.chunks.texts, embedder)
    if by == "tokens":  # as ConceptGraphIndex.select ranks by tokens
        scores = value_per_token(scores, corpus.chunks.tokens)
    return lambda kappa: select_by_scores(corpus.chunks.ids, scores, corpus.chunks.tokens, kappa,
                                          by=by)


def random_selector(corpus: Corpus, seed: int, by: SelectBy) -> Callable[[float], Selection]:
    scores = random_scores(len(corpus.chunks), seed)
    return lambda kappa: select_by_scores(corpus.chunks.ids, scores, corpus.chunks.tokens, kappa,
                                          by=by)


def core_coverage(corpus: Corpus, questions: Sequence[Question], embedder: Embedder,
                  seed: int = 0, kappas: Sequence[float] = KAPPAS) -> dict[str, Any]:
    """Coverage and cost report per kappa kind, selector and kappa.

    ``by_chunks`` holds kappa as a share of chunks (the paper's), ``by_tokens`` as a
    share of tokens; a selector that fails to import is reported, not skipped.
    """
    normalized = [normalize_answer(t) for t in corpus.chunks.texts]
    hits = answer_chunks(questions, normalized)
    everything = np.ones(len(corpus.chunks), dtype=bool)
    out: dict[str, Any] = {"all_chunks": coverage_of(everything, corpus, questions, hits)}
    makers: dict[str, Callable[[SelectBy], Callable[[float], Selection]]] = {
        "g2cons": lambda by: g2cons_selector(corpus, embedder, by),
        "g2cons_coverage": lambda by: g2cons_selector(corpus, embedder, by, "coverage"),
        "ketrag_knn": lambda by: ketrag_selector(corpus, embedder, by),
        "random": lambda by: random_selector(corpus, seed, by),
    }
    by_kinds: tuple[SelectBy, ...] = ("chunks", "tokens")
    for by in by_kinds:
        results: dict[str, Any] = {}
        for name, make in makers.items():
            try:
                select = make(by)
            except ImportError as exc:
                results[name] = {"unavailable": str(exc)}
                continue
            per_kappa = {}
            for kappa in kappas:
                selection = select(kappa)
                per_kappa[f"{kappa:g}"] = {**coverage_of(kept_mask(corpus, selection), corpus,
                                                         questions, hits),
                                          "cost": selection.report.to_dict()}
            results[name] = per_kappa
        results["random_seeds"] = random_spread(corpus, questions, hits, kappas, seed, by=by)
        out[f"by_{by}"] = results
    return out


def random_spread(corpus: Corpus, questions: Sequence[Question], hits: Sequence[np.ndarray],
                  kappas: Sequence[float], seed: int = 0,
                  n_seeds: int = RANDOM_SEEDS, by: SelectBy = "chunks") -> dict[str, Any]:
    """Random selection's mean and standard deviation over ``n_seeds`` draws, per kappa."""
    out: dict[str, Any] = {}
    for kappa in kappas:
        draws: dict[str, list[float]] = {"answer": [], "support": [], "both": []}
        for s in range(seed, seed + n_seeds):
            keep = kept_mask(corpus, random_selector(corpus, s, by)(kappa))
            for key, value in coverage_of(keep, corpus, questions, hits).items():
                if value is not None:
                    draws[key].append(value)
        out[f"{kappa:g}"] = {**{k: float(np.mean(v)) if v else None for k, v in draws.items()},
                             **{f"{k}_sd": float(np.std(v)) if v else None
                                for k, v in draws.items()},
                             "seeds": n_seeds}
    return out
