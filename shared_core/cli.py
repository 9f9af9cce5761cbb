"""``conceptgraph build | select | extract | query | stats``: the concept graph from a shell.

    conceptgraph build examples/data/musique_sample/corpus.jsonl --out my_index
    conceptgraph select my_index --kappa 0.8 --model gpt-4o-mini
    conceptgraph extract my_index --kappa 0.5 --model gpt-4o-mini
    conceptgraph query my_index "Who founded the record label?"
    conceptgraph query my_index --kg "Who founded the record label?"
    conceptgraph stats my_index

``extract`` prints what the KG extraction of the core chunks will cost, asks
before it spends anything (``--yes`` skips the question), and writes the KG
next to the index (``my_index/kg``); run it again after a crash and it resumes
where it stopped. The LLM is any OpenAI-compatible server: ``--model`` and
``--base-url``, else ``$OPENAI_MODEL`` and ``$OPENAI_BASE_URL``, key from
``$OPENAI_API_KEY``.

``select``, ``query`` and ``stats`` take ``--json``: one JSON object on stdout
(per question for ``query``). Warnings, such as a concept graph without edges,
go to stderr as ``conceptgraph: warning: ...``, with the setting to change.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from .config import ConceptGraphConfig
from .corpus import CountedStream, Record, count_records, iter_corpus, window_chunks
from .embeddings.cache import embedder_for_model_id, resolve_embedder
from .fusion import FusedContext
from .index import ADD_BATCH, ConceptGraphIndex, RetrievalResult
from .kg import (
    GLEANING_MODES,
    ExtractionConfig,
    FusedKGRetriever,
    KGStore,
    KGStoreError,
    estimate_extraction,
    extract_kg,
    extraction_usage,
    prompt_tokens,
)
from .llm import EstimateCheck, LLMError, LLMRunner, ModelPrice, OpenAIChat
from .llm.pricing import DEFAULT_OUTPUT_RATIO
from .pipeline import SELECTION_METHODS
from .select.cost import CostReport
from .state.spill import DEFAULT_SPILL, VectorSpill
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


def _load(path: str, cache: str | None, verify: bool = False) -> ConceptGraphIndex:
    manifest = read_manifest(path)
    return ConceptGraphIndex.load(path, embedder_for_model_id(manifest["embedding_model"], cache),
                                  verify=verify)


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
    embedder = resolve_embedder(args.embedder, args.cache, args.precision)
    config = _parse_config(args.set)
    print(f"building a concept graph from {args.corpus} with {embedder.model_id}")
    start = time.perf_counter()
    texts, ids, metadatas = itertools.tee(records, 3)  # consumed in step: one record buffered
    text_stream: Iterable[str] = (r.text for r in texts)
    if not args.quiet:  # the bar's ETA needs the count: one quick pass over the bytes first
        count = len(records) if isinstance(records, list) else count_records(args.corpus)
        text_stream = CountedStream(text_stream, count)
    with _cluster_executor(args.dask, args.ray) as executor:
        index = ConceptGraphIndex.from_texts(
            text_stream, ids=(r.id for r in ids),
            metadatas=(r.metadata for r in metadatas), embedder=embedder, config=config,
            show_progress=not args.quiet, executor=executor, batch_size=args.batch_size,
            vector_spill=VectorSpill(args.spill_dir) if args.spill_dir else DEFAULT_SPILL,
        )
    index.save(args.out)
    stats = index.stats()
    # on a cluster the workers embed, each with its own copy: this process counts none
    embedded = ("sentences embedded on the cluster's workers" if args.dask or args.ray else
                f"{embedder.embedded_texts:,} sentences embedded, the rest from cache")
    print(f"built in {time.perf_counter() - start:.1f}s ({embedded}) -> {args.out}")
    print(format_table(("", "count"), [(k, v) for k, v in stats.items()
                                       if isinstance(v, int) and not isinstance(v, bool)]))
    _warn(stats["warnings"])
    return 0


@contextlib.contextmanager
def _cluster_executor(dask: str | None, ray: str | None) -> Iterator[Executor | None]:
    """The Dask or Ray cluster at its address as an executor for the build, or None (this
    process)."""
    if ray is not None:
        try:
            from .ray_executor import RayExecutor

            executor = RayExecutor(ray)
        except ImportError as exc:
            raise SystemExit("--ray needs the ray package: pip install 'conceptgraph[ray]'"
                             ) from exc
        print(f"splitting, embedding and counting on the Ray cluster at {ray}")
        with executor:
            yield executor
        return
    if dask is None:
        yield None
        return
    try:
        import distributed
    except ImportError as exc:
        raise SystemExit("--dask needs the distributed package: "
                         "pip install 'conceptgraph[dask]'") from exc
    print(f"splitting, embedding and counting on the Dask cluster at {dask}")
    with distributed.Client(dask) as client:  # type: ignore[no-untyped-call]
        yield client.get_executor()


def cmd_select(args: argparse.Namespace) -> int:
    index = _load(args.index, args.cache)
    # priced for a model: the prompt extract sends with each chunk, so the two agree
    per_chunk = (args.prompt_tokens if args.prompt_tokens is not None else
                 prompt_tokens(ExtractionConfig().entity_types) if args.model else 0)
    selection = index.select(args.kappa, method=args.method, by=args.by,
                             prompt_tokens_per_chunk=per_chunk, seed=args.seed)
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
    if args.model and not args.json:
        prices = _prices(args, args.model)
        for all_chunks, label in ((False, "core chunks"), (True, "every chunk")):
            estimate = report.extraction_estimate(args.model, all_chunks=all_chunks,
                                                  output_ratio=args.output_ratio,
                                                  prices=prices)
            print(f"{label}: {estimate.summary()}")
    _warn(report.warnings)
    return 0


def _prices(args: argparse.Namespace, model: str) -> dict[str, ModelPrice] | None:
    if args.price_in is None and args.price_out is None:
        return None
    if args.price_in is None or args.price_out is None:
        raise ValueError("give both --price-in and --price-out (USD per 1M tokens)")
    return {model: ModelPrice(args.price_in, args.price_out)}


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        raise ValueError("extract asks before it spends: pass --yes to run without asking")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def cmd_extract(args: argparse.Namespace) -> int:
    index = _load(args.index, args.cache)
    config = ExtractionConfig(max_gleanings=args.gleanings, gleaning_mode=args.gleaning_mode)
    selection = index.select(args.kappa, method=args.method, by=args.by,
                             prompt_tokens_per_chunk=prompt_tokens(config.entity_types),
                             seed=args.seed)
    llm = OpenAIChat(args.model, base_url=args.base_url, timeout=args.timeout)
    kept = [(cid, index.get(cid).text) for cid in selection.kept_ids]
    prices = _prices(args, llm.model_name)
    # the index knows every chunk's tokens: the estimate need not tokenise the corpus again
    estimate, everything = (
        estimate_extraction([index.get(cid).tokens for cid in ids], llm.model_name,
                            config=config, output_ratio=args.output_ratio, prices=prices)
        for ids in (selection.kept_ids, index.chunk_ids))
    print(cost_report_table(selection.report))
    print(f"core chunks: {estimate.summary()}")
    print(f"every chunk: {everything.summary()}")
    _warn(selection.report.warnings)
    kg_dir = Path(args.kg_dir or Path(args.index) / "kg")
    # the store's lock from here to the end: a second extract on kg_dir is refused before
    # it asks anything, and what it counts as done below stays true until this run ends
    # --restart deletes the old results the moment the store opens: ask before that, so a
    # "no" keeps them (it also mends a store too damaged to open, so it cannot wait)
    if args.restart and (kg_dir / "manifest.json").exists() and not args.yes \
            and not _confirm(f"--restart deletes every result stored in {kg_dir}; go on?"):
        print("nothing deleted, nothing extracted")
        return 1
    with _cli_hint(), KGStore(kg_dir, restart=args.restart, lock=True) as store:
        already = sum(1 for cid, _ in kept if cid in store)
        if already:
            print(f"{already:,} of {len(kept):,} core chunks are already extracted in {kg_dir} "
                  "and will not be paid for again")
        if not args.yes and not _confirm(f"extract a KG from {len(kept):,} core chunks "
                                         f"with {llm.model_name} at {llm.base_url}?"):
            print("nothing extracted")
            return 1
        runner = LLMRunner(llm, concurrency=args.concurrency, timeout=args.timeout,
                           progress=not args.quiet)
        result = extract_kg(kept, runner, store, config=config)
    print(result.summary())
    print(result.run_ledger.table())
    print(EstimateCheck(estimate, extraction_usage(result.run_ledger)).summary())
    print(f"KG written to {kg_dir} (query it with: conceptgraph query {args.index} --kg ...)")
    for failure in result.failed[:10]:
        print(f"conceptgraph: failed chunk {failure.chunk_id}: {failure.kind}: {failure.error}",
              file=sys.stderr)
    return 1 if result.failed else 0


@contextlib.contextmanager
def _cli_hint() -> Iterator[None]:
    """A KG store's refusal, with what to do from the command line (its own names the API)."""
    try:
        yield
    except KGStoreError as exc:
        raise KGStoreError(f"{exc}. From the command line: --restart discards the stored "
                           "results (after asking), --kg-dir DIR extracts into another "
                           "directory") from exc


def fused_table(fused: FusedContext, width: int = 90) -> str:
    rows = []
    for rank, f in enumerate(fused.items, start=1):
        snippet = " ".join(f.item.text.split())
        snippet = snippet if len(snippet) <= width else snippet[: width - 1] + "…"
        rows.append((rank, f.path, f.item.chunk_id, f.item.tokens, snippet))
    by_path = fused.tokens_by_path()
    return (format_table(("#", "path", "chunk", "tokens", "text"), rows)
            + f"\n{fused.tokens:,}/{fused.budget:,} tokens (both paths {by_path['both']:,}, "
            f"concept only {by_path['concept']:,}, KG only {by_path['kg']:,}; lam={fused.lam:g})")


def cmd_query(args: argparse.Namespace) -> int:
    index = _load(args.index, args.cache)
    if args.kg or args.kg_dir:
        kg_dir = Path(args.kg_dir or Path(args.index) / "kg")
        if not (kg_dir / "manifest.json").is_file():
            raise FileNotFoundError(f"no KG in {kg_dir}: run conceptgraph extract {args.index} "
                                    "first")
        retriever = FusedKGRetriever(index, KGStore(kg_dir).graph(), budget=args.budget)
        for question in args.question:
            fused = retriever.fuse(question)
            if args.json:
                print(json.dumps({"query": question, "items": [
                    {"id": f.item.chunk_id, "path": f.path, "tokens": f.item.tokens,
                     "concept_rank": f.concept_rank, "kg_rank": f.kg_rank, "text": f.item.text}
                    for f in fused.items]}, ensure_ascii=False))
            else:
                print(f"\nQ: {question}\n{fused_table(fused)}")
        return 0
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
    index = _load(args.index, args.cache, args.verify)
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
    build.add_argument("--batch-size", type=int, default=ADD_BATCH, metavar="N",
                       help=f"chunks split, embedded and counted at a time, which bounds "
                            f"the build's memory (default {ADD_BATCH}); one shard's work on "
                            "a cluster")
    build.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                       help="MiniLM's precision: auto (bf16 where the CPU or GPU computes it "
                            "natively), or forced; the index records it")
    cluster = build.add_mutually_exclusive_group()
    cluster.add_argument("--dask", metavar="ADDRESS", default=None,
                         help="split, embed and count on this Dask cluster (its scheduler's "
                              "address, e.g. tcp://10.0.0.5:8786); the graph is built here")
    cluster.add_argument("--ray", metavar="ADDRESS", default=None,
                         help="the same on this Ray cluster (e.g. ray://10.0.0.5:10001, or "
                              "auto for the one this machine has joined)")
    build.add_argument("--spill-dir", metavar="DIR", default=None,
                       help="where the build keeps its vectors (memory-mapped, unlinked files) "
                            "once they pass 256 MB; default: the system's temporary folder")
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
    select.add_argument("--prompt-tokens", type=int, default=None,
                        help="the KG extractor's prompt tokens per chunk, for the estimate "
                        "(default: extract's own prompt with --model, else 0)")
    _llm_cost_arguments(select)
    select.add_argument("--out", help="write the core chunks as JSONL")
    select.add_argument("--json", action="store_true",
                        help="one JSON object: the cost report and the kept ids")
    select.set_defaults(func=cmd_select)

    extract = sub.add_parser("extract", help="extract a KG from the core chunks with an LLM "
                             "(prints the cost first, resumes after a crash)")
    extract.add_argument("index")
    extract.add_argument("--kappa", type=float, default=None,
                         help="share of tokens (or chunks, with --by chunks) to extract from")
    extract.add_argument("--method", choices=SELECTION_METHODS, default="concept")
    extract.add_argument("--seed", type=int, default=0, help="seed of --method random")
    extract.add_argument("--by", choices=("chunks", "tokens"), default=None)
    _llm_cost_arguments(extract)
    extract.add_argument("--base-url", default=None,
                         help="OpenAI-compatible server (default $OPENAI_BASE_URL, else OpenAI)")
    extract.add_argument("--gleanings", type=int, default=0,
                         help="HuixiangDou2's loop-NER rounds after the first reply (0 = off)")
    extract.add_argument("--gleaning-mode", choices=GLEANING_MODES,
                         default=ExtractionConfig.gleaning_mode,
                         help="with --gleanings: 'base' (default; the paper's better-scoring "
                         "one) asks for more entities first, then whether any are still "
                         "missing; 'trial' asks whether any were missed first, then for them. "
                         "The printed estimate follows the mode; a KG directory keeps the "
                         "mode it was started with")
    extract.add_argument("--concurrency", type=int, default=4, help="LLM calls in flight")
    extract.add_argument("--timeout", type=float, default=120.0, help="seconds per LLM call")
    extract.add_argument("--kg-dir", default=None, help="where the KG goes (default INDEX/kg)")
    extract.add_argument("--restart", action="store_true",
                         help="discard what an earlier run stored in the KG directory")
    extract.add_argument("--yes", action="store_true", help="do not ask before spending")
    extract.add_argument("--quiet", action="store_true", help="no progress bar")
    extract.set_defaults(func=cmd_extract)

    query = sub.add_parser("query", help="retrieve context with provenance")
    query.add_argument("index")
    query.add_argument("question", nargs="+")
    query.add_argument("--budget", type=int, default=None)
    query.add_argument("--top-k", type=int, default=None)
    query.add_argument("--hops", type=int, default=None)
    query.add_argument("--min-score", type=float, default=None,
                       help="relevance floor: no unit less similar to the question than this")
    query.add_argument("--kg", action="store_true",
                       help="fuse the concept path with the KG of conceptgraph extract")
    query.add_argument("--kg-dir", default=None, help="that KG's directory (default INDEX/kg)")
    query.add_argument("--json", action="store_true", help="one JSON object per question")
    query.set_defaults(func=cmd_query)

    stats = sub.add_parser("stats", help="sizes of the index and its graph")
    stats.add_argument("index")
    stats.add_argument("--json", action="store_true", help="one JSON object")
    stats.add_argument("--verify", action="store_true",
                       help="derive the saved graph again and fail if the save differs "
                       "(for an index from a source you do not trust)")
    stats.set_defaults(func=cmd_stats)
    return parser


def _llm_cost_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL") or None,
                        help="LLM for the KG extraction (default $OPENAI_MODEL): prices the "
                        "extraction before any call")
    parser.add_argument("--output-ratio", type=float, default=DEFAULT_OUTPUT_RATIO,
                        help="expected output tokens per input token (the estimate's guess; "
                        "extract reports the measured ratio afterwards)")
    parser.add_argument("--price-in", type=float, default=None,
                        help="USD per 1M input tokens (overrides the built-in price table)")
    parser.add_argument("--price-out", type=float, default=None,
                        help="USD per 1M output tokens")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, TypeError, KeyError, FileNotFoundError, FileExistsError,
            LLMError) as exc:
        print(f"conceptgraph: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
