"""The methods that need an LLM: our KG from the core chunks fused with the concept path,
and TERAG with its LLM extraction. Without an LLM they are reported as not measured.

``g2cons_kg`` selects the core chunks at ``kappa`` (G2ConS), extracts our KG from
them only (:func:`shared_core.kg.extract_kg`), and retrieves with
:class:`shared_core.kg.FusedKGRetriever`. Its result carries the extraction's
measured tokens at ``kappa`` next to the estimate for 100 % of the chunks, the
saving the method exists for. ``terag_llm`` extracts TERAG's entities and concepts
from every unit and asks the LLM for each query's entities (TERAG's design).

Both keep what they extract under ``benchmarks/cache/llm/`` (our KG store, a
TERAG extraction JSON), keyed by dataset, protocol, corpus and model, so a run
that dies resumes without paying for what it already has.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from shared_core.config import ConceptGraphConfig
from shared_core.index import ConceptGraphIndex
from shared_core.kg import (
    ExtractionConfig,
    FusedKGRetriever,
    estimate_extraction,
    extract_kg,
    extraction_usage,
)
from shared_core.search import fill_budget
from shared_core.terag import (
    TeragExtraction,
    TeragExtractionError,
    TeragRetriever,
    extract,
    token_table,
)

from .answers import NOT_MEASURED, LLMSettings
from .baselines import Retriever
from .methods import BuildInputs, MethodUnavailable

# the protocols whose retrieval units are the selection chunks the KG is read from
KG_PROTOCOLS = ("chunk1200", "passage")


def _llm(inputs: BuildInputs, name: str) -> LLMSettings:
    if inputs.llm is None:
        raise MethodUnavailable(f"{name}: {NOT_MEASURED}")
    return inputs.llm


def corpus_key(inputs: BuildInputs, llm: LLMSettings, *parts: object) -> str:
    """A cache directory name: dataset, protocol, a hash of the unit ids and texts, the
    model, and the method's own settings; a different corpus never reuses another's."""
    units = inputs.corpus.units
    digest = hashlib.sha256()
    for uid, text in zip(units.ids, units.texts, strict=True):
        digest.update(uid.encode() + b"\0" + text.encode() + b"\0")
    model = re.sub(r"[^A-Za-z0-9._-]+", "_", llm.model)
    extra = "_".join(str(p) for p in parts)
    structural = "_structural" if llm.structural else ""
    return (f"{inputs.dataset}_{inputs.corpus.protocol}_{digest.hexdigest()[:12]}_{model}"
            f"{structural}_{extra}")


class FusedKGUnits:
    """:class:`FusedKGRetriever` for the harness: the fused context's chunks as unit positions.

    The fused context holds concept-path chunks (their text) and KG-path items
    (facts read from a chunk). The harness scores unit positions, so every item
    counts as the whole chunk it came from, once, in context order, refilled
    against the budget; :meth:`diagnostics` says how much of the context each
    path brought and how many KG-only chunks did not fit whole.
    """

    def __init__(self, index: ConceptGraphIndex, fused: FusedKGRetriever, ids: list[str],
                 tokens: np.ndarray, report: dict[str, Any]) -> None:
        self.index = index
        self.fused = fused
        self.position = {uid: i for i, uid in enumerate(ids)}
        self.tokens = tokens
        self.report = report
        self.by_path: Counter[str] = Counter()
        self.dropped = 0
        self.queries = 0

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        self.fused.budget = budget
        context = self.fused.fuse(query)
        self.by_path.update(context.tokens_by_path())
        order = list(dict.fromkeys(self.position[f.item.chunk_id] for f in context.items))
        kept = fill_budget(np.asarray(order, dtype=np.int64), self.tokens, budget,
                           self.index.config.overflow).tolist()
        self.dropped += len(order) - len(kept)
        self.queries += 1
        return kept

    def diagnostics(self) -> dict[str, Any]:
        total = sum(self.by_path.values()) or 1
        return {**self.report,
                "fused_tokens_by_path": dict(self.by_path),
                "fused_share_by_path": {k: v / total for k, v in self.by_path.items()},
                "chunks_over_budget_mean": self.dropped / max(self.queries, 1)}


def build_g2cons_kg(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    """The concept path fused with our KG from the core chunks at ``kappa`` (default 0.5)."""
    llm = _llm(inputs, "g2cons_kg")
    kappa = float(options.pop("kappa", 0.5))
    gleanings = int(options.pop("gleanings", 0))
    mode = str(options.pop("gleaning_mode", "base"))
    lam = options.pop("lam", None)
    config = ConceptGraphConfig.from_dict(dict(options))
    corpus = inputs.corpus
    if corpus.protocol not in KG_PROTOCOLS:
        raise ValueError(f"g2cons_kg needs retrieval units that are the selection chunks "
                         f"({', '.join(KG_PROTOCOLS)}), not {corpus.protocol!r}")
    units = corpus.units
    index = ConceptGraphIndex(inputs.embedder, config)
    index.add(units.texts, ids=units.ids)
    selection = index.select(kappa)
    kept = set(selection.kept_ids)
    core = [(uid, text) for uid, text in zip(units.ids, units.texts, strict=True)
            if uid in kept]
    extraction = ExtractionConfig(max_gleanings=gleanings,
                                  gleaning_mode=mode)  # type: ignore[arg-type]
    runner = llm.runner("kg")
    glean = f"g{gleanings}{mode}" if gleanings else "g0"
    store = Path(llm.cache_dir) / ("kg_" + corpus_key(inputs, llm, f"k{kappa}", glean))
    result = extract_kg(core, runner, store, config=extraction)
    measured = extraction_usage(result.ledger)
    at_kappa = estimate_extraction(units.tokens[[i for i, uid in enumerate(units.ids)
                                                 if uid in kept]].tolist(),
                                   llm.model, config=extraction)
    at_all = estimate_extraction(units.tokens.tolist(), llm.model, config=extraction)
    report = {
        "kappa": kappa,
        "core_chunks": len(core),
        "all_chunks": len(units),
        "kg_entities": len(result.graph),
        "kg_relations": len(result.graph.relations),
        "failed_chunks": len(result.failed),
        "extraction_tokens": {
            "measured_at_kappa": {"calls": measured.calls, "input": measured.input_tokens,
                                  "output": measured.output_tokens,
                                  "cached": measured.cached_tokens},
            "estimated_at_kappa": {"calls": at_kappa.calls, "input": at_kappa.input_tokens,
                                   "output": at_kappa.output_tokens},
            "estimated_at_100": {"calls": at_all.calls, "input": at_all.input_tokens,
                                 "output": at_all.output_tokens},
            "input_share_of_100": (at_kappa.input_tokens / at_all.input_tokens
                                   if at_all.input_tokens else None),
        },
        "store": str(store),
    }
    fused = FusedKGRetriever(index, result.graph,
                             lam=None if lam is None else float(lam))
    return FusedKGUnits(index, fused, units.ids, units.tokens, report)


class TeragLLMUnits:
    """:class:`TeragRetriever` with query NER by the LLM, plus its token table."""

    def __init__(self, retriever: TeragRetriever, report: dict[str, Any]) -> None:
        self.retriever = retriever
        self.report = report

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        return self.retriever.retrieve(query, query_vector, budget)

    def diagnostics(self) -> dict[str, Any]:
        assert self.retriever.runner is not None
        table = token_table(self.retriever.runner.ledger)
        return {**self.report,
                "token_table": {row.stage: {"input": row.input_tokens,
                                            "output": row.output_tokens}
                                for row in table.rows}}


def build_terag_llm(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    """TERAG over every unit with the LLM's entities and concepts (``mode``: joint|separate)."""
    llm = _llm(inputs, "terag_llm")
    mode = str(options.pop("mode", "joint"))
    if options:
        raise ValueError(f"terag_llm takes mode= only, got {sorted(options)}")
    units = inputs.corpus.units
    path = Path(llm.cache_dir) / ("terag_" + corpus_key(inputs, llm, mode) + ".json")
    runner = llm.runner("terag_extract")
    resume = TeragExtraction.load(path) if path.is_file() else None
    if mode not in ("joint", "separate"):
        raise ValueError(f"terag_llm mode must be joint or separate, got {mode!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        extraction = extract(runner, units.ids, units.texts, mode=mode,  # type: ignore[arg-type]
                             resume=resume)
    except TeragExtractionError as exc:  # keep what there is for the next run, then fail
        exc.partial.save(path)
        raise
    extraction.save(path)
    query_runner = llm.runner("terag_query", ledger=runner.ledger)
    retriever = TeragRetriever.build(units.ids, units.texts, extraction, inputs.embedder,
                                     runner=query_runner, passage_tokens=units.tokens)
    report = {"passages": len(units), "concepts": extraction.n_concepts,
              "failures": extraction.failure_counts(), "extraction": str(path)}
    return TeragLLMUnits(retriever, report)
