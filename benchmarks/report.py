"""``python -m benchmarks report``: RESULTS.md and plots from the result JSON files.

Everything in the report is read from the JSON the runs wrote; the only
hand-written parts are the reference figures below (copied from DESIGN.md and
the G2ConS paper) and an optional ``NOTES.md`` beside the results, included
verbatim as the analysis.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, TypeGuard

from .data import UNSUPPORTED
from .metrics import hits_with_yes_no_by_support, sign_test

# DESIGN.md: independent prototype, MiniLM, MuSiQue, beta = 12000, CR %.
REFERENCE_MUSIQUE: dict[str, dict[str, float]] = {
    "random": {"chunk1200": 10.8, "sub300": 10.5, "passage": 9.8},
    "dense_mean": {"chunk1200": 30.0, "sub300": 46.6, "passage": 76.6},
    "dense_direct": {"chunk1200": 23.8, "sub300": 49.6, "passage": 78.8},
    "bm25": {"chunk1200": 38.0, "sub300": 51.6, "passage": 67.0},
    "ketrag_keyword": {"chunk1200": 35.0, "sub300": 52.6, "passage": 73.4},
    "g2cons": {"chunk1200": 41.0, "sub300": 56.2, "passage": 76.8},
}
# G2ConS paper, CR %, beta = 12000, text-embedding-3-small, 1200-token chunks.
PAPER: dict[str, dict[str, float]] = {
    "musique": {"Text-RAG": 22.2, "KET-RAG-Keyword": 60.5, "G2ConS-Concept": 68.4,
                "G2ConS (fused)": 71.2},
    "hotpotqa": {"Text-RAG": 75.4, "KET-RAG-Keyword": 86.7, "G2ConS-Concept": 84.7,
                 "G2ConS (fused)": 85.5},
}
PAPER_METHOD = {"Text-RAG": ("dense_mean", "dense_direct"), "KET-RAG-Keyword": ("ketrag_keyword",),
                "G2ConS-Concept": ("g2cons",), "G2ConS (fused)": ()}
PROTOCOL_ORDER = ["chunk1200", "sub300", "sub150", "sub100", "passage"]
DATASET_ORDER = ["hotpotqa", "musique", "2wiki"]  # sections in this order, any other after
TOLERANCE = 4.0


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _protocol_key(p: str) -> tuple[int, str]:
    return (PROTOCOL_ORDER.index(p) if p in PROTOCOL_ORDER else len(PROTOCOL_ORDER), p)


def _dataset_key(d: str) -> tuple[int, str]:
    return (DATASET_ORDER.index(d) if d in DATASET_ORDER else len(DATASET_ORDER), d)


def _failed(entry: dict[str, Any]) -> bool:
    """A method that raised in its run: it has an error instead of metrics."""
    return "error" in entry


def _error_text(entry: dict[str, Any]) -> str:
    """The error on one table line: no pipes or line breaks to break the Markdown table."""
    text = f"{entry['error']['type']}: {entry['error']['message']}"
    return " ".join(text.replace("|", "\\|").split())


def _cell(entry: dict[str, Any], key: str = "cr") -> str:
    return "failed" if _failed(entry) else _pct(entry.get(key))


def load_results(results_dir: str | Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(Path(results_dir).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "methods" in data and "protocol" in data:
            data["_file"] = path.name
            out.append(data)
    return out


def sweep_lines(results_dir: Path) -> list[str]:
    """A table per ``benchmarks.sweep`` file: each ConceptGraphConfig variant's CR."""
    lines: list[str] = []
    for path in sorted(results_dir.glob("sweep_*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        lines += [f"### {data['dataset']} / {data['protocol']} (`{path.name}`)", "",
                  "| variant | CR % | context tokens | expanded share | concepts | edges |",
                  "|---|---:|---:|---:|---:|---:|"]
        for row in data["rows"]:
            variant = ", ".join(f"{k}={v}" for k, v in row["variant"].items()) or "defaults"
            lines.append(f"| {variant} | {100 * row['cr']:.1f} | {row['tokens_mean']:.0f} | "
                         f"{100 * row['expanded_share']:.1f} % | {row['stats']['concepts']} | "
                         f"{row['stats']['edges']} |")
        command = f"{data['command']} --data <{data['dataset']}> --protocol {data['protocol']}"
        lines += ["", "```", command, "```", ""]
    return lines


def _merge(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """dataset -> protocol -> method -> metrics (a later file overrides an earlier one).

    A method that failed in its run (``failed``, absent from older files) is an
    entry with only its ``error``, so the tables show the failure.
    """
    table: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for r in sorted(results, key=lambda r: r.get("started_unix", 0)):
        entries = {**r["methods"],
                   **{name: {"error": error} for name, error in r.get("failed", {}).items()}}
        for name, metrics in entries.items():
            table[r["dataset"]][r["protocol"]][name] = {
                **metrics, **_yes_no_by_support(metrics, r.get("open_answers")),
                "_file": r["_file"], "_embedder": r["embedder"],
                "_open_answers": r.get("open_answers")}
    return table


def _yes_no_by_support(metrics: dict[str, Any], open_answers: str | None) -> dict[str, Any]:
    """``cr_by_support`` (and its per-question marks): CR with each yes/no question scored
    by SR; only for runs with yes/no questions that all have supporting ids."""
    cr_hits, sr_hits = metrics.get("cr_hits"), metrics.get("sr_hits")
    if not (cr_hits and sr_hits and open_answers and "0" in open_answers):
        return {}
    hits = hits_with_yes_no_by_support(cr_hits, sr_hits, open_answers)
    if hits is None:
        return {}
    return {"cr_by_support": hits.count("1") / len(hits), "cr_by_support_hits": hits}


def _method_order(names: set[str]) -> list[str]:
    base = ["random", "dense_mean", "dense_direct", "dense_max", "bm25", "hybrid", "ketrag_keyword",
            "terag_ppr", "g2cons"]
    return [m for m in base if m in names] + sorted(n for n in names if n not in base)


def cr_table(per_protocol: dict[str, dict[str, Any]], key: str = "cr") -> list[str]:
    protocols = sorted(per_protocol, key=_protocol_key)
    methods = [m for m in _method_order({m for p in protocols for m in per_protocol[p]})
               if key in ("cr", "sr")  # the original metrics: a row even where they are absent
               or any(per_protocol[p].get(m, {}).get(key) is not None for p in protocols)]
    lines = ["| method | " + " | ".join(protocols) + " |",
             "|---|" + "---:|" * len(protocols)]
    for m in methods:
        cells = [_cell(per_protocol[p][m], key) if m in per_protocol[p] else ""
                 for p in protocols]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def _has_outcomes(entry: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """A method that ran and recorded each question's outcome (runs before that did not)."""
    return entry is not None and not _failed(entry) and bool(entry.get("cr_hits"))


def _paired(a: str, b: str, keep: str | None) -> tuple[int, int]:
    """Questions ``a`` hit and ``b`` missed, and the reverse (only where ``keep`` has a 1)."""
    wins = losses = 0
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if keep is not None and keep[i] != "1":
            continue
        wins += x == "1" and y == "0"
        losses += x == "0" and y == "1"
    return wins, losses


def _p_value(wins: int, losses: int) -> str:
    p = sign_test(wins, losses)
    return "< 0.01" if p < 0.01 else f"{p:.2f}"


def _best_other(metrics: dict[str, Any], key: str) -> str | None:
    """The best method by ``key`` that is neither G2ConS (any variant) nor random."""
    others = [m for m in _method_order(set(metrics))
              if not m.startswith(("g2cons", "random")) and not _failed(metrics[m])
              and metrics[m].get(key) is not None]
    return max(others, key=lambda m: metrics[m][key], default=None)  # first of a tie


def paired_lines(per_protocol: dict[str, dict[str, Any]], default: str = "g2cons") -> list[str]:
    """The default against the best other method of each cell, question by question: a
    CR gap of a few questions is noise unless the questions that differ split unevenly."""
    rows = []
    for protocol in sorted(per_protocol, key=_protocol_key):
        metrics = per_protocol[protocol]
        ours = metrics.get(default)
        best = _best_other(metrics, "cr")
        theirs = None if best is None else metrics[best]
        if not (_has_outcomes(ours) and _has_outcomes(theirs)):
            continue
        cells = []
        for keep in (None, ours["_open_answers"]):
            wins, losses = _paired(ours["cr_hits"], theirs["cr_hits"], keep)
            cells.append(f"{wins} / {losses} | {_p_value(wins, losses)}")
        if ours.get("sr") is not None and theirs.get("sr_hits"):
            wins, losses = _paired(ours["sr_hits"], theirs["sr_hits"], None)
            cells.append(f"{wins} / {losses} | {_p_value(wins, losses)}")
        else:
            cells.append("– | –")
        if ours.get("cr_by_support_hits") and theirs.get("cr_by_support_hits"):
            wins, losses = _paired(ours["cr_by_support_hits"], theirs["cr_by_support_hits"],
                                   None)
            gap_support = 100 * (ours["cr_by_support"] - theirs["cr_by_support"])
            cells.append(f"{gap_support:+.1f} | {wins} / {losses} | {_p_value(wins, losses)}")
        else:
            cells.append("– | – | –")
        gap = 100 * (ours["cr"] - theirs["cr"])
        gap_open = ("–" if ours.get("cr_open") is None or theirs.get("cr_open") is None
                    else f"{100 * (ours['cr_open'] - theirs['cr_open']):+.1f}")
        rows.append(f"| {protocol} | {best} | {gap:+.1f} | {cells[0]} | {gap_open} | "
                    f"{cells[1]} | {cells[2]} | {cells[3]} |")
    if not rows:
        return []
    return ["| protocol | best other method (CR) | CR gap | won / lost | sign test p | "
            "CR gap, open answers | won / lost | sign test p | SR won / lost | sign test p | "
            "CR gap, yes/no by SR | won / lost | sign test p |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", *rows]


def variant_lines(per_protocol: dict[str, dict[str, Any]], default: str = "g2cons") -> list[str]:
    """Each G2ConS variant (an ablation, a changed knob) against the default, question by
    question: the CR the default gains over the variant, the questions only the default
    answers and only the variant answers, and the sign test of that split."""
    protocols = sorted(per_protocol, key=_protocol_key)
    variants = [m for m in _method_order({m for p in protocols for m in per_protocol[p]})
                if m.startswith(default + ":")]
    rows = []
    for variant in variants:
        cells = []
        for protocol in protocols:
            ours, theirs = per_protocol[protocol].get(default), per_protocol[protocol].get(variant)
            if not (_has_outcomes(ours) and _has_outcomes(theirs)):
                cells.append("")
                continue
            wins, losses = _paired(ours["cr_hits"], theirs["cr_hits"], None)
            cells.append(f"{100 * (ours['cr'] - theirs['cr']):+.1f} ({wins} / {losses}, "
                         f"{_p_value(wins, losses)})")
        if any(cells):
            rows.append(f"| {variant} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["| variant | " + " | ".join(protocols) + " |",
            "|---|" + "---:|" * len(protocols), *rows]


def _memory(r: dict[str, Any]) -> str:
    """tracemalloc peak of the build when traced, else the process RSS high-water mark."""
    if r.get("build_peak_mb") is not None:
        return f"{r['build_peak_mb']:.0f} (build peak)"
    if r.get("rss_high_water_mb") is not None:
        return f"{r['rss_high_water_mb']:.0f} (process RSS)"
    return "–"


def detail_table(metrics: dict[str, Any]) -> list[str]:
    lines = ["| method | CR % | SR % | context tokens (mean / max) | units | build s | "
             "texts embedded in build | memory MB | p50 ms | p95 ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in _method_order(set(metrics)):
        r = metrics[m]
        if _failed(r):
            lines.append(f"| {m} | failed: {_error_text(r)} |" + " |" * 8)
            continue
        lines.append(
            f"| {m} | {_pct(r['cr'])} | {_pct(r['sr'])} | {r['context_tokens_mean']:.0f} / "
            f"{r['context_tokens_max']} | {r['units_mean']:.1f} | {r['build_time_s']:.1f} | "
            f"{r.get('texts_embedded_in_build', 0)} | {_memory(r)} | "
            f"{r['latency_ms_p50']:.1f} | {r['latency_ms_p95']:.1f} |")
    return lines


def _diagnostics_line(method: str, diag: dict[str, Any] | None) -> str | None:
    """G2ConS's context by stage and graph size; with ``unit_tokens``, how its sentence
    units became whole units of the protocol (the harness scores those)."""
    if not diag or "share_by_stage" not in diag:
        return None
    share = ", ".join(f"{k} {100 * v:.1f} %" for k, v in diag["share_by_stage"].items())
    mapped = ""
    if "mapped_units_mean" in diag and diag["index_hits_mean"] != diag["mapped_units_mean"]:
        mapped = (f"; per query {diag['index_hits_mean']:.1f} sentence units from "
                  f"{diag['mapped_units_mean']:.1f} units, of which "
                  f"{diag['units_over_budget_mean']:.1f} did not fit the budget")
    return (f"- `{method}` context by stage: {share}; queries stopped by the budget: "
            f"{100 * diag['stopped_by_budget']:.0f} %{mapped}; graph: "
            f"{diag['index_stats']['concepts']} concepts, {diag['index_stats']['edges']} edges.")


def reference_lines(table: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    lines = ["### MuSiQue vs the DESIGN.md prototype (MiniLM, CR %)", "",
             f"A difference over {TOLERANCE:g} points is flagged **and discussed in the notes**.",
             "", "| method | protocol | measured | reference | diff |",
             "|---|---|---:|---:|---:|"]
    mq = table.get("musique", {})
    for method, refs in REFERENCE_MUSIQUE.items():
        for protocol, ref in refs.items():
            got = mq.get(protocol, {}).get(method)
            if got is None or _failed(got):
                status = "not run" if got is None else "failed"
                lines.append(f"| {method} | {protocol} | {status} | {ref:.1f} | |")
                continue
            diff = 100 * got["cr"] - ref
            flag = " **!**" if abs(diff) > TOLERANCE else ""
            lines.append(f"| {method} | {protocol} | {100 * got['cr']:.1f} | {ref:.1f} | "
                         f"{diff:+.1f}{flag} |")
    lines += ["", "### vs the G2ConS paper (CR %, β = 12000, text-embedding-3-small, "
              "1200-token chunks; our embedder is MiniLM)", "",
              "| dataset | paper method | paper | ours (method, chunk1200) |", "|---|---|---:|---|"]
    for dataset, figures in PAPER.items():
        ours = table.get(dataset, {}).get("chunk1200", {})
        for paper_method, value in figures.items():
            mine = [f"{m} {_cell(ours[m])}" for m in PAPER_METHOD[paper_method] if m in ours]
            lines.append(f"| {dataset} | {paper_method} | {value:.1f} | "
                         f"{'; '.join(mine) or 'not measured'} |")
    return lines


def _newest_coverage_first(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results by dataset and protocol, the latest run first within each: a cell's
    coverage comes from its newest measurement (a ``--methods ""`` run measures only
    coverage, after a change to selection)."""
    return sorted(results, key=lambda r: (_dataset_key(r["dataset"]),
                                          _protocol_key(r["protocol"]),
                                          -float(r.get("started_unix") or 0.0)))


def coverage_lines(results: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    seen: set[tuple[str, str, int]] = set()
    for r in _newest_coverage_first(results):
        cov = r.get("core_coverage")
        if not cov:
            continue
        level = "passage" if r["protocol"] == "passage" else "chunk1200"
        key = (r["dataset"], level, r["questions"])
        if key in seen:
            continue
        seen.add(key)
        lines += [f"#### {r['dataset']} — selection over {level} units "
                  f"({r['corpus']['selection_chunks']} units; from `{r['_file']}`)", "",
                  f"Upper bound (all units kept): answer {_pct(cov['all_chunks']['answer'])} %, "
                  f"supports {_pct(cov['all_chunks']['support'])} %.", "",
                  "| selector | κ of | κ | answer kept % | supports kept % | both % | "
                  "tokens kept % | construction-cost reduction % | answers, sd from random | "
                  "supports, sd from random |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for by in ("chunks", "tokens"):
            lines += _coverage_rows(cov.get(f"by_{by}") or {}, by)
        lines.append("")
    return lines


# the selection rules in the tables; one a run did not measure (``g2cons_coverage``, the
# greedy max-coverage, is absent from runs older than it) has no row
COVERAGE_SELECTORS = ("g2cons", "g2cons_coverage", "ketrag_knn", "random")


def sd_from_random(value: float | None, spread: dict[str, Any] | None, key: str) -> str:
    """How many of random selection's standard deviations ``value`` lies above (or below)
    random's mean; a rule that beats random's draw lies +2 or more at every kappa."""
    if value is None or not spread or spread.get(key) is None or not spread.get(f"{key}_sd"):
        return "–"
    distance = (value - spread[key]) / spread[f"{key}_sd"]
    return f"{round(distance, 1) + 0.0:+.1f}"  # + 0.0: no "-0.0"


def _coverage_rows(selectors: dict[str, Any], by: str) -> list[str]:
    """Table rows for one kappa kind: each selector per kappa, then random's spread."""
    lines = []
    spreads = selectors.get("random_seeds") or {}
    for selector in COVERAGE_SELECTORS:
        entry = selectors.get(selector)
        if entry is None:
            continue
        if not entry or "unavailable" in entry:
            lines.append(f"| {selector} | {by} | | unavailable | | | | | | |")
            continue
        for kappa, c in entry.items():
            cost = c["cost"]
            kept = cost["tokens_kept"] / max(cost["tokens_total"], 1)
            spread = spreads.get(kappa)
            lines.append(f"| {selector} | {by} | {kappa} | {_pct(c['answer'])} | "
                         f"{_pct(c['support'])} | {_pct(c['both'])} | {_pct(kept)} | "
                         f"{_pct(cost['cost_reduction'])} | "
                         f"{sd_from_random(c['answer'], spread, 'answer')} | "
                         f"{sd_from_random(c['support'], spread, 'support')} |")
    for kappa, c in spreads.items():
        lines.append(f"| random, mean ± sd of {c['seeds']} seeds | {by} | {kappa} | "
                     f"{_pct(c['answer'])} ± {_pct(c['answer_sd'])} | "
                     f"{_pct(c['support'])} ± {_pct(c['support_sd'])} | "
                     f"{_pct(c['both'])} ± {_pct(c['both_sd'])} | | | | |")
    return lines


def plot(results: list[dict[str, Any]], table: dict[str, dict[str, dict[str, Any]]],
         out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    for dataset in sorted(table, key=_dataset_key):
        per_protocol = table[dataset]
        protocols = sorted(per_protocol, key=_protocol_key)
        measured = {p: {m: e for m, e in per_protocol[p].items() if not _failed(e)}
                    for p in protocols}  # a failed method has no bar (the tables say why)
        methods = _method_order({m for p in protocols for m in measured[p]})
        if not methods:
            continue
        fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(methods)), 4))
        width = 0.8 / max(len(protocols), 1)
        for i, p in enumerate(protocols):
            xs = [j + i * width for j in range(len(methods))]
            ys = [100 * measured[p][m]["cr"] if m in measured[p] else 0 for m in methods]
            ax.bar(xs, ys, width, label=p)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(methods))])
        ax.set_xticklabels(methods, rotation=30, ha="right")
        ax.set_ylabel("CR %")
        ax.set_title(f"{dataset}: context recall by method and protocol")
        ax.legend()
        fig.tight_layout()
        name = f"cr_{dataset}.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        files.append(name)
    done: set[tuple[str, str]] = set()
    for r in _newest_coverage_first(results):
        cov = r.get("core_coverage")
        level = "passage" if r["protocol"] == "passage" else "chunk1200"
        if not cov or (r["dataset"], level) in done:
            continue
        done.add((r["dataset"], level))
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for by, style in (("chunks", "-"), ("tokens", "--")):
            for selector, colour in (("g2cons", "C0"), ("ketrag_knn", "C1"), ("random", "C2")):
                entry = (cov.get(f"by_{by}") or {}).get(selector)
                if not entry or "unavailable" in entry:
                    continue
                kappas = sorted(entry, key=float)
                costs = [entry[k]["cost"] for k in kappas]
                kept = [100 * c["tokens_kept"] / max(c["tokens_total"], 1) for c in costs]
                ax.plot(kept, [100 * (entry[k]["both"] or 0) for k in kappas], style,
                        color=colour, marker="o", label=f"{selector} (κ of {by})")
        ax.axhline(100 * (cov["all_chunks"]["both"] or 0), color="grey", ls="--",
                   label="all units")
        ax.set_xlabel("tokens kept % (KG-extraction cost)")
        ax.set_ylabel("questions covered %")
        ax.set_title(f"{r['dataset']}: core coverage ({level} units)")
        ax.legend()
        fig.tight_layout()
        name = f"coverage_{r['dataset']}_{level}.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


LLM_COLUMNS = ("answer EM/F1 from each method's context, HuixiangDou2's answer pipeline "
               "against plain retrieval + answer, KG-extraction tokens at κ against "
               "100 % of chunks, the fused retriever's CR/SR with our KG (`g2cons_kg`) and "
               "TERAG with its LLM extraction (`terag_llm`)")


def _llm_measured(r: dict[str, Any]) -> bool:
    llm = r.get("llm")
    return isinstance(llm, dict) and llm.get("measured", True) is not False


def _answers_cell(m: dict[str, Any]) -> str:
    a = m.get("answers")
    if not a or a.get("em") is None:
        return "–"
    failed = f", {a['failed_calls']} failed calls" if a.get("failed_calls") else ""
    return f"{100 * a['em']:.1f} / {100 * a['f1']:.1f} ({a['questions']} q{failed})"


def _extraction_line(method: str, diag: dict[str, Any]) -> str | None:
    tokens = diag.get("extraction_tokens")
    if not tokens:
        return None
    got, est, full = (tokens["measured_at_kappa"], tokens["estimated_at_kappa"],
                      tokens["estimated_at_100"])
    share = tokens.get("input_share_of_100")
    return (f"- `{method}`: our KG from {diag['core_chunks']} of {diag['all_chunks']} chunks "
            f"(κ = {diag['kappa']}): {diag['kg_entities']} entities, {diag['kg_relations']} "
            f"relations, {diag['failed_chunks']} failed chunks. Extraction tokens measured at "
            f"κ: {got['calls']} calls, {got['input']:,} in / {got['output']:,} out "
            f"(estimated {est['input']:,} / {est['output']:,}); estimated at 100 % of chunks: "
            f"{full['calls']} calls, {full['input']:,} in / {full['output']:,} out"
            + (f" (κ's input is {100 * share:.1f} % of it)." if share is not None else "."))


def _em_f1(a: dict[str, Any]) -> str:
    return "–" if a.get("em") is None else f"{100 * a['em']:.1f} / {100 * a['f1']:.1f}"


def pipeline_lines(results: list[dict[str, Any]]) -> list[str]:
    """The answer pipeline next to plain retrieval + answer on the same questions, per run
    and method; the not-measured sentence when no run has it."""
    rows = [(r, name, m) for r in results for name, m in r["methods"].items()
            if m.get("answer_pipeline")]
    if not rows:
        return ["Not measured: no run answered through HuixiangDou2's answer pipeline (it "
                "runs, with an LLM configured, for every method on our concept index; "
                "`--no-llm-pipeline` skips it).", ""]
    lines = ["Same questions, model and answer form; plain = the method's context with the "
             "fixed prompt, pipeline = logic form, pre-check, then dual-level retrieval.", "",
             "| run | method | q | plain EM / F1 % | pipeline EM / F1 % | context tokens "
             "plain / pipeline | logic form / dual level % | left the logic form at | "
             "pipeline LLM tokens per q in / out | failed answers |",
             "|---|---|---:|---|---|---|---|---|---|---:|"]
    for r, name, m in rows:
        p, plain = m["answer_pipeline"], m.get("answers") or {}
        n = p["questions"] or 1
        used = {"in": 0, "out": 0}
        for stage in (p.get("usage") or {}).values():
            used["in"] += stage.get("input_tokens", 0)
            used["out"] += stage.get("output_tokens", 0)
        routes = p.get("routes") or {}
        shares = " / ".join("–" if routes.get(k) is None else f"{100 * routes[k]:.0f}"
                            for k in ("logic_form", "dual_level"))
        left = ", ".join(f"{k} {v}" for k, v in sorted(p.get("left_logic_form_at", {}).items(),
                                                         key=lambda kv: -kv[1])) or "–"
        ctx = p.get("context_tokens_mean")
        lines.append(f"| `{r['_file']}` | {name} | {p['questions']} | {_em_f1(plain)} | "
                     f"{_em_f1(p)} | {m['context_tokens_mean']:.0f} / "
                     f"{'–' if ctx is None else f'{ctx:.0f}'} | {shares} | {left} | "
                     f"{used['in'] / n:,.0f} / {used['out'] / n:,.0f} | "
                     f"{p['failed_answers']} |")
    return [*lines, ""]


def llm_lines(results: list[dict[str, Any]]) -> list[str]:
    """The LLM-dependent figures of the main runs, or a plain statement that there are none."""
    measured = [r for r in results if _llm_measured(r)]
    if not measured:
        return [f"Not measured: no LLM was configured in any run above, so {LLM_COLUMNS} "
                "have no figures here. Pass `--llm-model` and `--llm-base-url` to "
                "`python -m benchmarks run` to measure them.", ""]
    lines = ["| run | method | CR % | SR % | answer EM / F1 % |", "|---|---|---:|---:|---|"]
    for r in measured:
        for name, m in r["methods"].items():
            lines.append(f"| `{r['_file']}` | {name} | {_pct(m['cr'])} | {_pct(m['sr'])} | "
                         f"{_answers_cell(m)} |")
    lines.append("")
    lines += [line for r in measured for name, m in r["methods"].items()
              if (line := _extraction_line(name, m.get("diagnostics") or {}))]
    unmeasured = [r["_file"] for r in results if not _llm_measured(r)]
    if unmeasured:
        lines += ["", f"Not measured in the other runs (no LLM configured): {LLM_COLUMNS}."]
    return [*lines, ""]


def structural_lines(directory: Path) -> list[str]:
    """Runs against a tiny local model with grammar-bound replies: proof that every LLM
    stage runs and is accounted for, with figures that say nothing about quality."""
    results = load_results(directory) if directory.is_dir() else []
    lines: list[str] = []
    for r in results:
        llm = r.get("llm") or {}
        lines += [f"### `{directory.name}/{r['_file']}`: STRUCTURAL CHECK ONLY, not a result",
                  "",
                  f"Model `{llm.get('model')}` at `{llm.get('base_url')}`"
                  + (" with grammar-bound replies" if llm.get("structural_only") else "")
                  + f"; {r['dataset']} / {r['protocol']}, corpus cut to "
                  f"{r['corpus']['passages']} passages ({r['corpus']['units']} units), "
                  f"{r['questions']} questions, β = {r['budget']}. A model this small is no "
                  "judge of quality: the numbers show that every stage ran, not how well. "
                  "The server is llama.cpp's, started as `tests/e2e/llama_server.py` starts it "
                  "(`start_llama_server`, n_ctx 8192); it counts tokens with the model's own "
                  "tokenizer, the estimates with cl100k_base.", "",
                  "| method | CR % | SR % | answer EM / F1 % | LLM tokens in / out |",
                  "|---|---:|---:|---|---:|"]
        for name, m in r["methods"].items():
            usage = (m.get("answers") or {}).get("usage") or {}
            lines.append(f"| {name} | {_pct(m['cr'])} | {_pct(m['sr'])} | {_answers_cell(m)} "
                         f"| {usage.get('input_tokens', 0):,} / {usage.get('output_tokens', 0):,}"
                         " (answers) |")
        for name, error in r.get("failed", {}).items():
            lines.append(f"| {name} | failed: {_error_text({'error': error})} | | | |")
        lines.append("")
        for name, m in r["methods"].items():
            diag = m.get("diagnostics") or {}
            if (line := _extraction_line(name, diag)):
                lines.append(line)
            if "token_table" in diag:
                rows = ", ".join(f"{stage} {t['input']:,} in / {t['output']:,} out"
                                 for stage, t in diag["token_table"].items())
                lines.append(f"- `{name}`: {diag['concepts']} concepts over "
                             f"{diag['passages']} units; tokens by stage: {rows}; failures: "
                             f"{diag['failures'] or 'none'}.")
        if any(m.get("answer_pipeline") for m in r["methods"].values()):
            lines += ["", *pipeline_lines([r])]
        lines += ["", f"  ```\n  {r['command']}\n  ```", ""]
    return lines


def write_report(results_dir: str | Path, out: str | Path) -> None:
    results_dir, out = Path(results_dir), Path(out)
    results = load_results(results_dir)
    if not results:
        raise SystemExit(f"no result JSON files in {results_dir}")
    table = _merge(results)
    rel = Path(os.path.relpath(results_dir.resolve(), out.resolve().parent)).as_posix()
    lines = ["# Benchmark results", "",
             "Generated by `python -m benchmarks report` from the JSON files in "
             f"`{rel}/`; every number below was measured by the commands listed at the end.",
             "CR = share of questions whose SQuAD-normalised gold answer occurs in the "
             "normalised retrieved context; SR = share whose supporting passages all lie inside "
             "the context (only where the data has supporting ids). Budget β in cl100k tokens.", ""]
    notes = results_dir / "NOTES.md"
    if notes.is_file():
        lines += ["## Analysis", "", notes.read_text(encoding="utf-8").strip(), ""]
    images = plot(results, table, results_dir)
    for dataset in sorted(table, key=_dataset_key):
        per_protocol = table[dataset]
        any_run = next(r for r in results if r["dataset"] == dataset)
        lines += [f"## {dataset}", "",
                  f"{any_run['questions']} questions, {any_run['corpus']['passages']} passages, "
                  f"embedder `{any_run['embedder']}`, β = {any_run['budget']}.", ""]
        for protocol, reason in UNSUPPORTED.get(dataset, {}).items():
            lines += [f"Not measured under `{protocol}`: {reason}.", ""]
        lines += ["### CR % by method and protocol", "", *cr_table(per_protocol), ""]
        if any(m.get("sr") is not None for p in per_protocol.values() for m in p.values()):
            lines += ["### SR % by method and protocol", "", *cr_table(per_protocol, "sr"), ""]
        marks = next((m["_open_answers"] for p in per_protocol.values() for m in p.values()
                      if m.get("_open_answers")), "")
        if "0" in marks:  # the dataset has yes/no questions, and runs that set them apart
            lines += ["### CR % on open-answer questions", "",
                      f"Without the questions answered \"yes\" or \"no\" ({marks.count('1')} "
                      f"of {len(marks)} questions remain). CR "
                      "finds an answer as a substring of the context, and \"no\" (in "
                      "\"not\", \"known\") or \"yes\" (in \"eyes\") occurs in contexts "
                      "whatever passages they hold: for those questions CR measures the word, "
                      "not the retrieval. SR does measure them.", "",
                      *cr_table(per_protocol, "cr_open"), ""]
        if any(m.get("cr_by_support") is not None
               for p in per_protocol.values() for m in p.values()):
            lines += ["### CR % with yes/no questions scored by their supporting passages", "",
                      "Every question counts: an open answer by CR, a yes/no question by SR "
                      "(the context holds all of its supporting passages, which is what "
                      "answers a comparison). Only for runs that recorded each question's "
                      "outcome.", "",
                      *cr_table(per_protocol, "cr_by_support"), ""]
        paired = paired_lines(per_protocol)
        if paired:
            lines += ["### G2ConS against the best other method, question by question", "",
                      "Won / lost: questions whose answer only G2ConS's context holds, and only "
                      "the other method's. The sign test p is the chance of a split at least "
                      "that uneven if each of those questions went either way at even odds. "
                      "The last three columns score each yes/no question by SR, where all have "
                      "supporting ids.",
                      "", *paired, ""]
        variants = variant_lines(per_protocol)
        if variants:
            lines += ["### G2ConS's default against its variants, question by question", "",
                      "Each cell: the default's CR minus the variant's, then the questions only "
                      "the default answers / only the variant answers, and the sign test p of "
                      "that split. A positive gap is what the knob's default setting adds.",
                      "", *variants, ""]
        if f"cr_{dataset}.png" in images:
            lines += [f"![CR by method]({rel}/cr_{dataset}.png)", ""]
        for protocol in sorted(per_protocol, key=_protocol_key):
            lines += [f"### {dataset} / {protocol}", "", *detail_table(per_protocol[protocol]), ""]
            lines += [line for m, r in per_protocol[protocol].items()
                      if (line := _diagnostics_line(m, r.get("diagnostics")))]
            lines.append("")
    lines += ["## With an LLM", "", *llm_lines(results)]
    lines += ["### Answer pipeline (HuixiangDou2) against plain retrieval + answer", "",
              *pipeline_lines([r for r in results if _llm_measured(r)])]
    structural = structural_lines(results_dir / "structural")
    if structural:
        lines += ["## Structural LLM runs (plumbing checks, not results)", "", *structural]
    lines += ["## Core coverage (selection quality without an LLM)", "",
              "Share of questions whose answer occurs in a kept unit and whose supporting "
              "passages lie inside the kept units; construction-cost reduction is the share "
              "of KG-extraction input tokens not sent to the extractor. `g2cons` is the "
              "default rule (concept PageRank), `g2cons_coverage` the greedy weighted "
              "max-coverage of concept PageRank (`select(method=\"coverage\")`), `ketrag_knn` "
              "KET-RAG's KNN-graph PageRank. \"sd from random\" is a rule's distance from random "
              "selection's mean in its standard deviations over its seeds (+2 or more beats "
              "random's draw).", "",
              *coverage_lines(results)]
    sweeps = sweep_lines(results_dir)
    if sweeps:
        lines += ["## G2ConS ablations (`python -m benchmarks.sweep`)", "",
                  "The concept graph over the protocol's selection chunks, one config variant "
                  "per row; `unit_tokens` returns sentence units of those chunks. CR is scored "
                  "on the retrieved texts themselves, whereas `benchmarks run` scores the whole "
                  "units the sentence units were cut from.", "", *sweeps]
    lines += ["## Reference figures", "", *reference_lines(table), ""]
    lines += ["## Plots", ""] + [f"![{name}]({rel}/{name})" for name in images] + [""]
    lines += ["## Commands", "", "Each result file and the command that produced it "
              "(run from the repository root):", ""]
    for r in sorted(results, key=lambda r: r["_file"]):
        unavailable = "; unavailable: " + ", ".join(r["unavailable"]) if r["unavailable"] else ""
        failed = "; failed: " + ", ".join(r["failed"]) if r.get("failed") else ""
        incomplete = "; **incomplete run**" if r.get("complete") is False else ""
        lines += [f"- `{r['_file']}` ({r['wall_time_s'] / 60:.1f} min, commit "
                  f"{(r.get('git_commit') or '?')[:8]}{unavailable}{failed}{incomplete})", "",
                  f"  ```\n  {r['command']}\n  ```", ""]
    lines += ["Then: `python -m benchmarks report --results benchmarks/results "
              "--out benchmarks/RESULTS.md`.", ""]
    out.write_text("\n".join(lines), encoding="utf-8")
