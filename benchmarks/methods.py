"""The method registry: a name (optionally with options) to a built retriever.

KET-RAG and TERAG live in ``benchmarks.comparators.keyword`` / ``.terag`` and are
imported only when asked for, so the harness runs even where they are missing;
such a method is reported as unavailable rather than failing the whole run.
"""

from __future__ import annotations

import json
import tempfile
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared_core.config import ConceptGraphConfig
from shared_core.embeddings import Embedder
from shared_core.index import ConceptGraphIndex
from shared_core.search import fill_budget as core_fill_budget

from .answers import LLMSettings
from .baselines import (
    BestSentenceRetriever,
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    RandomRetriever,
    Retriever,
    embed_batched,
    mean_sentence_vectors,
    sentence_vectors,
)
from .data import Corpus
from .scale import SERVER_BACKENDS, drop_collections, open_store


class MethodUnavailable(RuntimeError):
    """The method's module is not importable here (yet)."""


@dataclass
class BuildInputs:
    """What every method is built from; ``shared`` memoises pieces two methods use."""

    corpus: Corpus
    embedder: Embedder
    seed: int = 0
    shared: dict[str, Any] = field(default_factory=dict)
    llm: LLMSettings | None = None  # the LLM methods are "not measured" without one
    dataset: str = ""

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.shared:
            self.shared[key] = make()
        return self.shared[key]


Factory = Callable[[BuildInputs, dict[str, Any]], Retriever]


def parse_method(spec: str) -> tuple[str, dict[str, Any]]:
    """``g2cons:overflow=skip:top_k=50`` -> ("g2cons", {"overflow": "skip", "top_k": 50})."""
    name, *pairs = spec.split(":")
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"bad option {pair!r} in method {spec!r}; use key=value")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return name, options


def _no_options(name: str, options: dict[str, Any]) -> None:
    if options:
        raise ValueError(f"method {name} takes no options, got {sorted(options)}")


def _dense(inputs: BuildInputs, kind: str) -> DenseRetriever:
    units = inputs.corpus.units
    if kind == "mean":
        vectors = inputs.memo("mean_vectors",
                              lambda: mean_sentence_vectors(units.texts, inputs.embedder))
    else:
        vectors = inputs.memo("direct_vectors",
                              lambda: embed_batched(inputs.embedder, units.texts))
    return DenseRetriever(vectors, units.tokens)


def _bm25(inputs: BuildInputs) -> BM25Retriever:
    units = inputs.corpus.units
    return inputs.memo("bm25", lambda: BM25Retriever(units.texts, units.tokens))  # type: ignore[no-any-return]


def build_random(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    _no_options("random", options)
    return RandomRetriever(inputs.corpus.units.tokens, inputs.seed)


def build_dense_mean(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    _no_options("dense_mean", options)
    return _dense(inputs, "mean")


def build_dense_direct(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    _no_options("dense_direct", options)
    return _dense(inputs, "direct")


def build_dense_max(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    _no_options("dense_max", options)
    units = inputs.corpus.units
    vectors, starts = sentence_vectors(units.texts, inputs.embedder)
    return BestSentenceRetriever(vectors, starts, units.tokens)


def build_bm25(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    _no_options("bm25", options)
    return _bm25(inputs)


def build_hybrid(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    dense_kind = options.pop("dense", "mean")
    k = int(options.pop("k", 60))
    _no_options("hybrid", options)
    if dense_kind not in ("mean", "direct"):
        raise ValueError(f"hybrid dense must be mean or direct, got {dense_kind!r}")
    return HybridRetriever(_dense(inputs, dense_kind), _bm25(inputs), k)


class G2ConSRetriever:
    """``ConceptGraphIndex.retrieve`` over the units, mapped back to unit positions.

    With ``unit_tokens`` the index returns sentence units cut from the stored
    units; the harness scores stored units, so each hit counts as the unit it
    was cut from (``RetrievedChunk.chunk_id``), once, where it first appears.
    The index spent the budget on the shorter cut units, so the mapped units are
    refilled against the budget with the index's own overflow rule; how many
    were cut that way is in :meth:`diagnostics`.
    """

    def __init__(self, index: ConceptGraphIndex, ids: list[str], tokens: np.ndarray) -> None:
        self.index = index
        self.position = {uid: i for i, uid in enumerate(ids)}
        self.tokens = tokens
        self.stage_tokens: Counter[str] = Counter()
        self.stopped_by_budget = 0
        self.queries = 0
        self.hits = 0
        self.mapped = 0
        self.over_budget = 0
        self.store_folder: tempfile.TemporaryDirectory[str] | None = None  # an outside store's

    def _position(self, chunk_id: str) -> int:
        try:
            return self.position[chunk_id]
        except KeyError:
            raise LookupError(f"the index returned chunk {chunk_id!r}, which is not a unit "
                              "of this corpus view") from None

    def retrieve(self, query: str, query_vector: np.ndarray, budget: int) -> list[int]:
        result = self.index.retrieve_by_vector(query_vector, query=query, budget=budget)
        self.stage_tokens.update(result.tokens_by_stage())
        self.stopped_by_budget += int(result.stopped_by_budget)
        self.queries += 1
        order = list(dict.fromkeys(self._position(c.chunk_id) for c in result.chunks))
        kept = core_fill_budget(np.asarray(order, dtype=np.int64), self.tokens, budget,
                                self.index.config.overflow).tolist()
        self.hits += len(result.chunks)
        self.mapped += len(order)
        self.over_budget += len(order) - len(kept)
        return kept

    def diagnostics(self) -> dict[str, Any]:
        """Where the context came from: tokens per stage (direct, BFS-expanded, similarity
        only), counted on what the index returned; then how those hits became units."""
        total = sum(self.stage_tokens.values()) or 1
        queries = max(self.queries, 1)
        return {
            "tokens_by_stage": dict(self.stage_tokens),
            "share_by_stage": {k: v / total for k, v in self.stage_tokens.items()},
            "stopped_by_budget": self.stopped_by_budget / queries,
            "index_hits_mean": self.hits / queries,
            "mapped_units_mean": self.mapped / queries,
            "units_over_budget_mean": self.over_budget / queries,
            "index_stats": self.index.stats(),
        }


def build_g2cons(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
    """The index; ``vector_store=`` one of ``benchmarks.scale.BACKENDS`` (``milvus-lite``,
    ``qdrant-local-terms``, ``chroma``...; and ``milvus_index=FLAT``) puts its
    vectors in that store, in a temporary folder kept as long as the retriever
    (``milvus``: in a new collection on the server at ``MILVUS_URI``)."""
    knobs = dict(options)
    backend = str(knobs.pop("vector_store", "local"))
    milvus_index = str(knobs.pop("milvus_index", "AUTOINDEX"))
    config = ConceptGraphConfig.from_dict(knobs)
    units = inputs.corpus.units
    folder = None if backend == "local" else tempfile.TemporaryDirectory(prefix="g2cons-store-")
    store = (None if folder is None
             else open_store(backend, Path(folder.name), inputs.embedder, milvus_index))
    index = ConceptGraphIndex(inputs.embedder, config, vector_store=store)
    index.add(units.texts, ids=units.ids)
    retriever = G2ConSRetriever(index, units.ids, units.tokens)
    retriever.store_folder = folder
    if backend in SERVER_BACKENDS:  # dropped from the server once the retriever is gone
        weakref.finalize(retriever, drop_collections, store)
    return retriever


def _lazy_factory(module: str, attr: str, name: str) -> Factory:
    def build(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
        import importlib

        _no_options(name, options)
        try:
            factory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise MethodUnavailable(f"{module}.{attr} is not available: {exc}") from exc
        units = inputs.corpus.units
        return factory(units.ids, units.texts, units.tokens, inputs.embedder)  # type: ignore[no-any-return]

    return build


def _llm_factory(attr: str) -> Factory:
    """A method of :mod:`.llm_methods` (which imports this module), imported when built."""
    def build(inputs: BuildInputs, options: dict[str, Any]) -> Retriever:
        from . import llm_methods

        return getattr(llm_methods, attr)(inputs, options)  # type: ignore[no-any-return]

    return build


METHODS: dict[str, Factory] = {
    "random": build_random,
    "dense_mean": build_dense_mean,
    "dense_direct": build_dense_direct,
    "dense_max": build_dense_max,
    "bm25": build_bm25,
    "hybrid": build_hybrid,
    "g2cons": build_g2cons,
    "ketrag_keyword": _lazy_factory("benchmarks.comparators.keyword", "keyword_channel",
                                    "ketrag_keyword"),
    "terag_ppr": _lazy_factory("benchmarks.comparators.terag", "terag_ppr", "terag_ppr"),
    "g2cons_kg": _llm_factory("build_g2cons_kg"),
    "terag_llm": _llm_factory("build_terag_llm"),
}


def build_method(spec: str, inputs: BuildInputs) -> Retriever:
    name, options = parse_method(spec)
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name](inputs, options)
