"""``python -m benchmarks run``: every requested method on one dataset and protocol.

All methods share one embedder (with its persistent cache), one corpus view
and one question set, so their numbers are comparable within a run.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
import traceback
import tracemalloc
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shared_core.embeddings import resolve_embedder
from shared_core.text import count_tokens

from .answer_pipeline import pipeline_inputs, pipeline_scores
from .answers import NOT_MEASURED, LLMSettings, answer_scores
from .baselines import embed_batched
from .coverage import core_coverage
from .data import Corpus, Question, corpus_for, limit_passages, load_dataset
from .methods import BuildInputs, MethodUnavailable, build_method
from .metrics import (
    answer_in_context,
    is_yes_no,
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
    llm: LLMSettings | None = None
    max_passages: int | None = None  # a cut corpus (quick or structural runs only)


def _max_rss_mb() -> float:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def evaluate(retriever: Any, corpus: Corpus, questions: list[Question], qvecs: np.ndarray,
             budget: int, normalized_units: list[str],
             contexts: list[list[int]] | None = None) -> dict[str, Any]:
    """Query every question; CR, SR, tokens and latency. Raises if a method breaks the budget.

    ``contexts``, when given, receives each question's unit positions (for answers).
    """
    units = corpus.units
    pindex = corpus.passage_index()
    cr_flags: list[bool] = []
    sr_flags: list[bool] = []
    open_flags: list[bool] = []
    sr_marks: list[str] = []
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
        if contexts is not None:
            contexts.append(positions)
        used = int(units.tokens[positions].sum()) if positions else 0
        assert used <= budget, f"{q.id}: {used} context tokens over the budget {budget}"
        tokens_used.append(used)
        n_units.append(len(positions))
        context = " ".join(normalized_units[p] for p in positions)
        hit = answer_in_context(q.answers, context)
        cr_flags.append(hit)
        by_hops[str(q.hops)].append(hit)
        if not is_yes_no(q.answers):
            open_flags.append(hit)
        known = [pindex[s] for s in q.supporting_ids if s in pindex]
        if known:
            supported = supports_in_context(corpus.passage_spans[known], units.spans[positions])
            sr_flags.append(supported)
        sr_marks.append("-" if not known else "1" if supported else "0")
    return {
        "cr": share(cr_flags),
        "sr": share(sr_flags),
        "sr_questions": len(sr_flags),
        "cr_by_hops": {h: share(f) for h, f in sorted(by_hops.items())},
        # CR without the yes/no questions, and each question's outcome in question
        # order ("1" hit, "0" miss, "-" no supporting ids) for paired comparisons
        "cr_open": share(open_flags),
        "open_questions": len(open_flags),
        "cr_hits": "".join("1" if hit else "0" for hit in cr_flags),
        "sr_hits": "".join(sr_marks),
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


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Replace ``path`` in one step, so a reader or a crash sees the old file or the new one.

    The temporary file lies beside the target (``os.replace`` must not cross file
    systems) and does not end in ``.json``, so ``report`` never reads it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def error_record(exc: BaseException) -> dict[str, str]:
    """How a failed method is kept in the results: its exception's type and message."""
    return {"type": type(exc).__name__, "message": str(exc)}


def run_method(spec: str, config: RunConfig, inputs: BuildInputs, questions: list[Question],
               qvecs: np.ndarray, normalized_units: list[str]) -> dict[str, Any]:
    """Build one method and evaluate it; its metrics, build cost and diagnostics."""
    if config.trace_memory:  # exact peak, but slows Python-heavy builds several-fold
        tracemalloc.start()
    t0 = time.perf_counter()
    try:
        retriever = build_method(spec, inputs)
    finally:
        build_time = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1] if tracemalloc.is_tracing() else None
        tracemalloc.stop()
    contexts: list[list[int]] = []
    result = evaluate(retriever, inputs.corpus, questions, qvecs, config.budget,
                      normalized_units, contexts)
    if config.llm is not None:
        n = min(config.llm.questions, len(questions))
        texts = inputs.corpus.units.texts
        result["answers"] = answer_scores(
            config.llm.runner("answer"), "answer", [q.question for q in questions[:n]],
            ["\n\n".join(texts[p] for p in positions) for positions in contexts[:n]],
            [q.answers for q in questions[:n]], config.llm.max_answer_tokens)
        answering = pipeline_inputs(retriever) if config.llm.pipeline else None
        if answering is not None:
            index, kg = answering
            result["answer_pipeline"] = pipeline_scores(
                config.llm, index, kg, [q.question for q in questions[:n]],
                [q.answers for q in questions[:n]])
    if questions:
        _check_context_tokens(retriever, inputs.corpus, questions[0], qvecs[0], config.budget)
    result.update(build_time_s=build_time,
                  build_peak_mb=None if peak is None else peak / 2**20,
                  rss_high_water_mb=_max_rss_mb())
    diagnostics = getattr(retriever, "diagnostics", None)
    if callable(diagnostics):
        result["diagnostics"] = diagnostics()
    return result


def run(config: RunConfig, argv: list[str] | None = None) -> dict[str, Any]:
    """Run every method; the result file is rewritten after each one, so a crash or a
    failing method loses nothing already measured. A method that raises is recorded
    under ``failed`` and the others still run; ``complete`` is set once all are done."""
    started = time.time()
    dataset = load_dataset(config.data, config.limit_questions)
    if config.max_passages is not None:
        dataset = limit_passages(dataset, config.max_passages)
    t0 = time.perf_counter()
    corpus = corpus_for(dataset, config.protocol)
    corpus_time = time.perf_counter() - t0
    embedder = resolve_embedder(config.embedder, config.cache_path)
    t0 = time.perf_counter()
    qvecs = embed_batched(embedder, [q.question for q in dataset.questions])
    query_embed_time = time.perf_counter() - t0
    normalized_units = [normalize_answer(t) for t in corpus.units.texts]
    inputs = BuildInputs(corpus, embedder, config.seed, llm=config.llm,
                         dataset=dataset.name)
    methods: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    failed: dict[str, dict[str, str]] = {}
    command = "python -m benchmarks " + shlex.join(argv) if argv is not None else None
    out: dict[str, Any] = {
        "dataset": dataset.name,
        "protocol": config.protocol,
        "budget": config.budget,
        "embedder": embedder.model_id,
        "config": {**asdict(config), "data": str(Path(config.data).resolve())},
        "command": command,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "started_unix": started,
        "wall_time_s": 0.0,
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
        # "0" for a yes/no question, "1" for an open answer, in question order
        "open_answers": "".join("0" if is_yes_no(q.answers) else "1"
                                for q in dataset.questions),
        "query_embedding_time_s": query_embed_time,
        "methods": methods,
        "unavailable": unavailable,
        "failed": failed,
        "core_coverage": None,
        "llm": ({"model": config.llm.model, "base_url": config.llm.base_url,
                 "answer_questions": config.llm.questions,
                 "answer_pipeline": config.llm.pipeline,
                 "structural_only": config.llm.structural}
                if config.llm is not None else {"measured": False, "note": NOT_MEASURED}),
        "peak_rss_mb": 0.0,
        "complete": False,
    }

    def save() -> None:
        out.update(wall_time_s=time.time() - started, peak_rss_mb=_max_rss_mb())
        write_json_atomic(config.out, out)

    for spec in config.methods:
        print(f"[{config.protocol}] {spec}: building", file=sys.stderr, flush=True)
        before = embedder.embedded_texts
        try:
            result = run_method(spec, config, inputs, dataset.questions, qvecs,
                                normalized_units)
            result["texts_embedded_in_build"] = embedder.embedded_texts - before
        except MethodUnavailable as exc:
            unavailable[spec] = str(exc)
            print(f"  unavailable: {exc}", file=sys.stderr, flush=True)
        except Exception as exc:  # recorded, reported and turned into the exit status
            failed[spec] = error_record(exc)
            traceback.print_exc(file=sys.stderr)
            print(f"  FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        else:
            methods[spec] = result
            print(f"  cr={result['cr']:.3f} build={result['build_time_s']:.1f}s "
                  f"p50={result['latency_ms_p50']:.1f}ms", file=sys.stderr, flush=True)
        save()
    if config.coverage:
        print(f"[{config.protocol}] core coverage", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        coverage = core_coverage(corpus, dataset.questions, embedder, config.seed)
        coverage["time_s"] = time.perf_counter() - t0
        out["core_coverage"] = coverage
    out["complete"] = True
    save()
    return out
