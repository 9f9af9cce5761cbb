"""``conceptgraph build | select | query | stats``: the concept graph from a shell.

    conceptgraph build examples/data/musique_sample/corpus.jsonl --out my_index
    conceptgraph select my_index --kappa 0.8
    conceptgraph query my_index "Who founded the record label?"
    conceptgraph stats my_index

``select``, ``query`` and ``stats`` take ``--json``: one JSON object on stdout
(per question for ``query``). Warnings, such as a concept graph without edges,
go to stderr as ``conceptgraph: warning: ...``, with the setting to change.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .config import ConceptGraphConfig
from .corpus import Record, iter_corpus, window_chunks
from .embeddings.cache import embedder_for_model_id, resolve_embedder
from .index import ConceptGraphIndex, RetrievalResult
from .pipeline import SELECTION_METHODS
from .select.cost import CostReport
from .store import read_manifest


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table; numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    numeric = [all(isinstance(r[i], (int, float)) for r in rows) and bool(rows)
               for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule, *(line(r) for r in cells)])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def cost_report_table(report: CostReport) -> str:
    rows = [
        ("chunks", report.chunks_total, report.chunks_kept, report.chunks_dropped),
        ("tokens", report.tokens_total, report.tokens_kept, report.tokens_dropped),
        ("KG-extraction input tokens", report.extraction_input_tokens_all,
         report.extraction_input_tokens,
         report.extraction_input_tokens_all - report.extraction_input_tokens),
    ]
    table = format_table(("", "all", f"core (kappa={report.kappa:g} of {report.by})", "saved"),
                         rows)
    return f"{table}\nconstruction-cost reduction: {report.cost_reduction:.1%}"


def retrieval_table(result: RetrievalResult, width: int = 90) -> str:
    rows = []
    for rank, hit in enumerate(result.chunks, start=1):
        p = hit.provenance
        snippet = " ".join(hit.text.split())
        snippet = snippet if len(snippet) <= width else snippet[: width - 1] + "…"
        rows.append((rank, hit.score, p.stage, p.hop, p.concept or "-", hit.chunk.tokens,
                     snippet))
    table = format_table(("#", "score", "stage", "hop", "concept", "tokens", "text"), rows)
    by_stage = result.tokens_by_stage()
    return (f"{table}\n{result.tokens:,}/{result.budget:,} tokens "
            f"(direct {by_stage['direct']:,}, expanded {by_stage['expanded']:,}, "
            f"similarity only {by_stage['similarity']:,}); "
            f"direct concepts: {', '.join(result.direct_concepts[:10])}"
            f"{' …' if len(result.direct_concepts) > 10 else ''}")


def _load(path: str, cache: str | None) -> ConceptGraphIndex:
    manifest = read_manifest(path)
    return ConceptGraphIndex.load(path, embedder_for_model_id(manifest["embedding_model"], cache))


def _warn(warnings: Iterable[str]) -> None:
    """Warnings go to stderr, so ``--json`` output stays one object a script can parse."""
    for warning in warnings:
        print(f"conceptgraph: warning: {warning}", file=sys.stderr)


def _parse_config(pairs: Sequence[str]) -> ConceptGraphConfig:
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise ValueError(f"--set takes key=value, got {pair!r}")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw
    return ConceptGraphConfig.from_dict(values)


def cmd_build(args: argparse.Namespace) -> int:
    # records stream from disk unless windows must be cut across them (--chunk-tokens)
    records: Iterable[Record] = iter_corpus(args.corpus)
    if args.chunk_tokens:
        records = window_chunks(list(records), args.chunk_tokens, args.overlap)
    embedder = resolve_embedder(args.embedder, args.cache)
    config = _parse_config(args.set)
    print(f"building a concept graph from {args.corpus} with {embedder.model_id}")
    start = time.perf_counter()
    texts, ids, metadatas = itertools.tee(records, 3)  # consumed in step: one record buffered
    index = ConceptGraphIndex.from_texts(
        (r.text for r in texts), ids=(r.id for r in ids),
        metadatas=(r.metadata for r in metadatas), embedder=embedder, config=config,
        show_progress=not args.quiet,
    )
    index.save(args.out)
    stats = index.stats()
    print(f"built in {time.perf_counter() - start:.1f}s ({embedder.embedded_texts:,} sentences "
          f"embedded, the rest from cache) -> {args.out}")
    print(format_table(("", "count"), [(k, v) for k, v in stats.items()
                                       if isinstance(v, int) and not isinstance(v, bool)]))
    _warn(stats["warnings"])
    return 0


def cmd_select(args: argparse.Namespace) -> int:
    index = _load(args.index, args.cache)
    selection = index.select(args.kappa, method=args.method, by=args.by,
                             prompt_tokens_per_chunk=args.prompt_tokens, seed=args.seed)
    report = selection.report  # the index records its graph's size: no edges is a warning
    if args.out:
        with Path(args.out).open("w", encoding="utf-8") as out:
            for cid in selection.kept_ids:
                chunk = index.get(cid)
                out.write(json.dumps({"id": cid, "text": chunk.text, **chunk.metadata},
                                     ensure_ascii=False) + "\n")
    if args.json:
        print(json.dumps({"report": report.to_dict(), "kept_ids": list(selection.kept_ids),
                          "out": args.out}, ensure_ascii=False))
    else:
        print(cost_report_table(report))
        if args.out:
            print(f"wrote {len(selection.kept_ids):,} core chunks to {args.out}")
    _warn(report.warnings)
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    index = _load(args.index, args.cache)
    for question in args.question:
        result = index.retrieve(question, top_k=args.top_k, hops=args.hops, budget=args.budget,
                                min_score=args.min_score)
        if args.json:
            print(json.dumps({
                "query": question,
                "chunks": [{"id": h.id, "score": h.score, "tokens": h.chunk.tokens,
                            "provenance": h.provenance.to_dict(), "text": h.text}
                           for h in result.chunks],
            }, ensure_ascii=False))
        else:
            print(f"\nQ: {question}\n{retrieval_table(result)}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    index = _load(args.index, args.cache)
    stats = index.stats()
    if args.json:
        print(json.dumps(stats, ensure_ascii=False))
    else:
        print(format_table(("", "value"), [(k, v) for k, v in stats.items() if k != "warnings"]))
    _warn(stats["warnings"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conceptgraph", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", help="embedding cache file (default: "
                        "$CONCEPTGRAPH_CACHE_DIR/embeddings.sqlite or ~/.cache/conceptgraph)")
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="build a concept graph index from a corpus")
    build.add_argument("corpus", help=".jsonl (a 'text' per line), .txt/.md, or a directory")
    build.add_argument("--out", required=True, help="index directory to write")
    build.add_argument("--embedder", default="minilm", choices=("minilm", "hashing", "openai"))
    build.add_argument("--chunk-tokens", type=int, default=0,
                       help="re-chunk into token windows of this size (papers: 1200)")
    build.add_argument("--overlap", type=int, default=100, help="token overlap of windows")
    build.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="a ConceptGraphConfig knob, e.g. --set theta_co=1 (a small "
                       "corpus needs it: the default 3 leaves its graph without edges)")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.set_defaults(func=cmd_build)

    select = sub.add_parser("select", help="choose core chunks and print the cost saving")
    select.add_argument("index")
    select.add_argument("--kappa", type=float, default=None,
                        help="share of tokens (or of chunks, with --by chunks) to keep")
    select.add_argument("--method", choices=SELECTION_METHODS,
                        default="concept",
                        help="G2ConS concept PageRank (default), greedy coverage of it, "
                        "KET-RAG's KNN chunk graph, or the random baseline")
    select.add_argument("--seed", type=int, default=0, help="seed of --method random")
    select.add_argument("--by", choices=("chunks", "tokens"), default=None,
                        help="kappa is a share of chunks or of tokens (default: the config's)")
    select.add_argument("--prompt-tokens", type=int, default=0,
                        help="the KG extractor's prompt tokens per chunk, for the estimate")
    select.add_argument("--out", help="write the core chunks as JSONL")
    select.add_argument("--json", action="store_true",
                        help="one JSON object: the cost report and the kept ids")
    select.set_defaults(func=cmd_select)

    query = sub.add_parser("query", help="retrieve context with provenance")
    query.add_argument("index")
    query.add_argument("question", nargs="+")
    query.add_argument("--budget", type=int, default=None)
    query.add_argument("--top-k", type=int, default=None)
    query.add_argument("--hops", type=int, default=None)
    query.add_argument("--min-score", type=float, default=None,
                       help="relevance floor: no unit less similar to the question than this")
    query.add_argument("--json", action="store_true", help="one JSON object per question")
    query.set_defaults(func=cmd_query)

    stats = sub.add_parser("stats", help="sizes of the index and its graph")
    stats.add_argument("index")
    stats.add_argument("--json", action="store_true", help="one JSON object")
    stats.set_defaults(func=cmd_stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, TypeError, KeyError, FileNotFoundError, FileExistsError) as exc:
        print(f"conceptgraph: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
