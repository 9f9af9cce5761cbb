"""``python -m benchmarks run``: every requested method on one dataset and protocol.

All methods share one embedder (with its persistent cache), one corpus view
and one question set, so their numbers are comparable within a run.
"""

from __future__ import annotations

import json
import platform
import resource
import shlex
import subprocess
import sys
import time
import tracemalloc
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shared_core.embeddings import resolve_embedder
from shared_core.text import count_tokens

from .baselines import embed_batched
from .coverage import core_coverage
from .data import Corpus, Question, build_corpus, load_dataset
from .methods import BuildInputs, MethodUnavailable, build_method
from .metrics import (
    answer_in_context,
    normalize_answer,
    percentile_ms,
    share,
    supports_in_context,
)

CACHE_PATH = Path(__file__).resolve().parent / "cache" / "embeddings.sqlite"


@dataclass(frozen=True)
class RunConfig:
    data: str
    protocol: str
    methods: list[str]
    budget: int
    out: str
    embedder: str = "minilm"
    limit_questions: int | None = None
    seed: int = 0
    coverage: bool = True
    trace_memory: bool = False
    cache_path: str = str(CACHE_PATH)


def _max_rss_mb() -> float:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def evaluate(retriever: Any, corpus: Corpus, questions: list[Question], qvecs: np.ndarray,
             budget: int, normalized_units: list[str]) -> dict[str, Any]:
    """Query every question; CR, SR, tokens and latency. Raises if a method breaks the budget."""
    units = corpus.units
    pindex = corpus.passage_index()
    cr_flags: list[bool] = []
    sr_flags: list[bool] = []
    by_hops: dict[str, list[bool]] = defaultdict(list)
    latencies: list[float] = []
    tokens_used: list[int] = []
    n_units: list[int] = []
    for q, qv in zip(questions, qvecs, strict=True):
        start = time.perf_counter()
        positions = [int(p) for p in retriever.retrieve(q.question, qv, budget)]
        latencies.append(time.perf_counter() - start)
        if len(set(positions)) != len(positions) or any(
                not 0 <= p < len(units) for p in positions):
            raise AssertionError(f"invalid unit positions for question {q.id}")
        used = int(units.tokens[positions].sum()) if positions else 0
        assert used <= budget, f"{q.id}: {used} context tokens over the budget {budget}"
        tokens_used.append(used)
        n_units.append(len(positions))
        context = " ".join(normalized_units[p] for p in positions)
        hit = answer_in_context(q.answers, context)
        cr_flags.append(hit)
        by_hops[str(q.hops)].append(hit)
        known = [pindex[s] for s in q.supporting_ids if s in pindex]
        if known:
            sr_flags.append(supports_in_context(corpus.passage_spans[known],
                                                units.spans[positions]))
    return {
        "cr": share(cr_flags),
        "sr": share(sr_flags),
        "sr_questions": len(sr_flags),
        "cr_by_hops": {h: share(f) for h, f in sorted(by_hops.items())},
        "context_tokens_mean": float(np.mean(tokens_used)) if tokens_used else 0.0,
        "context_tokens_max": int(max(tokens_used, default=0)),
        "units_mean": float(np.mean(n_units)) if n_units else 0.0,
        "latency_ms_p50": percentile_ms(latencies, 50),
        "latency_ms_p95": percentile_ms(latencies, 95),
    }


def _check_context_tokens(retriever: Any, corpus: Corpus, question: Question, qv: np.ndarray,
                          budget: int) -> int:
    """Re-count one context with tiktoken from the unit texts (guards stale token arrays)."""
    positions = retriever.retrieve(question.question, qv, budget)
    counted = sum(count_tokens(corpus.units.texts[int(p)]) for p in positions)
    assert counted <= budget, f"tiktoken count {counted} over budget {budget}"
    return counted


def run(config: RunConfig, argv: list[str] | None = None) -> dict[str, Any]:
    started = time.time()
    dataset = load_dataset(config.data, config.limit_questions)
    t0 = time.perf_counter()
    corpus = build_corpus(dataset.passages, config.protocol)
    corpus_time = time.perf_counter() - t0
    embedder = resolve_embedder(config.embedder, config.cache_path)
    t0 = time.perf_counter()
    qvecs = embed_batched(embedder, [q.question for q in dataset.questions])
    query_embed_time = time.perf_counter() - t0
    normalized_units = [normalize_answer(t) for t in corpus.units.texts]
    inputs = BuildInputs(corpus, embedder, config.seed)
    methods: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    for spec in config.methods:
        print(f"[{config.protocol}] {spec}: building", file=sys.stderr, flush=True)
        before = embedder.embedded_texts
        if config.trace_memory:  # exact peak, but slows Python-heavy builds several-fold
            tracemalloc.start()
        t0 = time.perf_counter()
        try:
            retriever = build_method(spec, inputs)
        except MethodUnavailable as exc:
            unavailable[spec] = str(exc)
            print(f"  unavailable: {exc}", file=sys.stderr, flush=True)
            continue
        finally:
            build_time = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] if tracemalloc.is_tracing() else None
            tracemalloc.stop()
        result = evaluate(retriever, corpus, dataset.questions, qvecs, config.budget,
                          normalized_units)
        if dataset.questions:
            _check_context_tokens(retriever, corpus, dataset.questions[0], qvecs[0],
                                  config.budget)
        result.update(build_time_s=build_time,
                      build_peak_mb=None if peak is None else peak / 2**20,
                      rss_high_water_mb=_max_rss_mb(),
                      texts_embedded_in_build=embedder.embedded_texts - before)
        diagnostics = getattr(retriever, "diagnostics", None)
        if callable(diagnostics):
            result["diagnostics"] = diagnostics()
        methods[spec] = result
        print(f"  cr={result['cr']:.3f} build={build_time:.1f}s "
              f"p50={result['latency_ms_p50']:.1f}ms", file=sys.stderr, flush=True)
    coverage = None
    if config.coverage:
        print(f"[{config.protocol}] core coverage", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        coverage = core_coverage(corpus, dataset.questions, embedder, config.seed)
        coverage["time_s"] = time.perf_counter() - t0
    command = "python -m benchmarks " + shlex.join(argv) if argv is not None else None
    out = {
        "dataset": dataset.name,
        "protocol": config.protocol,
        "budget": config.budget,
        "embedder": embedder.model_id,
        "config": {**config.__dict__, "data": str(Path(config.data).resolve())},
        "command": command,
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "started_unix": started,
        "wall_time_s": time.time() - started,
        "corpus": {
            "passages": len(corpus.passage_ids),
            "selection_chunks": len(corpus.chunks),
            "units": len(corpus.units),
            "unit_tokens_mean": float(corpus.units.tokens.mean()) if len(corpus.units) else 0.0,
            "corpus_tokens": int(corpus.chunks.tokens.sum()),
            "build_time_s": corpus_time,
        },
        "questions": len(dataset.questions),
        "questions_with_support": sum(1 for q in dataset.questions if q.supporting_ids),
        "query_embedding_time_s": query_embed_time,
        "methods": methods,
        "unavailable": unavailable,
        "core_coverage": coverage,
        "peak_rss_mb": _max_rss_mb(),
    }
    Path(config.out).parent.mkdir(parents=True, exist_ok=True)
    Path(config.out).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return out
