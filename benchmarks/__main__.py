"""Command line: ``python -m benchmarks run ...`` and ``python -m benchmarks report ...``."""

from __future__ import annotations

import argparse
import os
import sys

from .answers import LLMSettings
from .data import DATA_ROOT, DATASETS
from .run import CACHE_PATH, RunConfig, run


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run methods on one dataset and protocol")
    where = r.add_mutually_exclusive_group(required=True)
    where.add_argument("--data", help="directory with corpus.jsonl, questions.jsonl")
    where.add_argument("--dataset", choices=DATASETS,
                       help=f"a dev set under {DATA_ROOT} (same as --data <that>/NAME)")
    r.add_argument("--protocol", required=True, help="chunk1200 | passage | sub<N> (e.g. sub300)")
    r.add_argument("--methods", required=True,
                   help="comma-separated: random,dense_mean,dense_direct,bm25,hybrid,g2cons,"
                        "ketrag_keyword,terag_ppr; with an LLM also g2cons_kg,terag_llm "
                        "(options: g2cons:overflow=skip:top_k=50, g2cons_kg:kappa=0.5)")
    r.add_argument("--budget", type=int, default=12000, help="context tokens (cl100k_base)")
    r.add_argument("--out", required=True, help="result JSON path")
    r.add_argument("--embedder", default="minilm", choices=["minilm", "hashing", "openai"])
    r.add_argument("--limit-questions", type=int, default=None)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--no-coverage", action="store_true", help="skip core-coverage selection")
    r.add_argument("--trace-memory", action="store_true",
                   help="tracemalloc peak per build (exact, but slows builds several-fold)")
    r.add_argument("--cache", default=str(CACHE_PATH), help="SQLite embedding cache")
    r.add_argument("--llm-model", default=os.environ.get("OPENAI_MODEL"),
                   help="an LLM for answer EM/F1 (default $OPENAI_MODEL); without one those "
                        "figures are reported as not measured")
    r.add_argument("--llm-base-url", default=os.environ.get("OPENAI_BASE_URL"),
                   help="its OpenAI-compatible server (default $OPENAI_BASE_URL)")
    r.add_argument("--llm-questions", type=int, default=50,
                   help="questions answered per method (each is one LLM call)")
    r.add_argument("--llm-concurrency", type=int, default=4,
                   help="LLM calls at once (llama-cpp-python's server cuts concurrent streams "
                        "short: give it 1)")
    r.add_argument("--llm-structural", action="store_true",
                   help="bind replies to each prompt's format with llama.cpp grammars, to check "
                        "the LLM plumbing with a tiny local model (results are structural only)")
    r.add_argument("--no-llm-pipeline", action="store_true",
                   help="skip HuixiangDou2's answer pipeline (by default, with an LLM, it "
                        "answers the same questions for every method on our concept index)")
    r.add_argument("--pipeline-budget", type=int, default=1500,
                   help="the answer pipeline's dual-level context budget (tokens)")
    r.add_argument("--max-passages", type=int, default=None,
                   help="cut the corpus to N passages, the questions' supporting ones first "
                        "(quick or structural runs; not comparable with full runs)")
    rep = sub.add_parser("report", help="write RESULTS.md and plots from result JSONs")
    rep.add_argument("--results", default="benchmarks/results")
    rep.add_argument("--out", default="benchmarks/RESULTS.md")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.command == "run":
        if args.budget < 1:
            raise SystemExit("--budget must be >= 1")
        if args.llm_concurrency < 1:
            raise SystemExit("--llm-concurrency must be >= 1")
        if args.pipeline_budget < 1:
            raise SystemExit("--pipeline-budget must be >= 1")
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        data = args.data if args.data is not None else str(DATA_ROOT / args.dataset)
        config = RunConfig(
            data=data, protocol=args.protocol, methods=methods, budget=args.budget,
            out=args.out, embedder=args.embedder, limit_questions=args.limit_questions,
            seed=args.seed, coverage=not args.no_coverage, trace_memory=args.trace_memory,
            cache_path=args.cache,
            llm=(LLMSettings(args.llm_model, args.llm_base_url, args.llm_questions,
                             structural=args.llm_structural,
                             concurrency=args.llm_concurrency,
                             pipeline=not args.no_llm_pipeline,
                             pipeline_budget=args.pipeline_budget)
                 if args.llm_model else None),
            max_passages=args.max_passages,
        )
        result = run(config, argv)
        for name, m in result["methods"].items():
            sr = "-" if m["sr"] is None else f"{m['sr']:.3f}"
            answers = m.get("answers")
            em = ("" if not answers or answers["em"] is None
                  else f" EM={answers['em']:.3f} F1={answers['f1']:.3f}")
            piped = m.get("answer_pipeline")
            if piped and piped["em"] is not None:
                em += f" pipeline EM={piped['em']:.3f} F1={piped['f1']:.3f}"
            print(f"{name:20s} CR={m['cr']:.3f} SR={sr} tokens={m['context_tokens_mean']:.0f}"
                  f"{em}")
        for name, error in result["failed"].items():
            print(f"{name:20s} FAILED {error['type']}: {error['message']}")
        return 1 if result["failed"] else 0
    from .report import write_report

    write_report(args.results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
