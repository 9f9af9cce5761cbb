"""Build and query speed of ConceptGraphIndex on a dataset, split into embedding and the rest.

    python -m benchmarks.build_speed --data ../shared/data/musique --protocol passage
    python -m benchmarks.build_speed --data ../shared/data/musique --protocol chunk1200

Embedding is timed inside the model call (cold cache by default, so it is the
real model cost); everything else (sentence splitting, token counts, term
counts, TF-IDF, concept vectors, edges, PageRank) is the build time minus that.
Query latency excludes the query embedding: vectors are computed first. Save and
load times are for the index's own files (load checks every file's invariants and
recounts token counts).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shared_core import CachedEmbedder, ConceptGraphIndex, EmbeddingCache
from shared_core.corpus import read_corpus, window_chunks
from shared_core.embeddings import Embedder, HashingEmbedder, minilm_embedder
from shared_core.state import derive_graph


class TimedEmbedder:
    """Counts the seconds and texts that reach the real model."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.texts = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        start = time.perf_counter()
        out = self.inner.embed(texts)
        self.seconds += time.perf_counter() - start
        self.texts += len(texts)
        return out


def measure(data: Path, protocol: str, embedder_name: str, cache: Path | None) -> dict[str, Any]:
    records = read_corpus(data / "corpus.jsonl")
    if protocol == "chunk1200":
        records = window_chunks(records, 1200, 100)
    elif protocol != "passage":
        raise ValueError(f"protocol must be passage or chunk1200, got {protocol!r}")
    questions = [json.loads(line)["question"] for line in (data / "questions.jsonl").open()]
    inner = minilm_embedder() if embedder_name == "minilm" else HashingEmbedder(384)
    timed = TimedEmbedder(inner)
    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddingCache(cache or Path(tmp) / "cold.sqlite")
        embedder = CachedEmbedder(timed, store)
        start = time.perf_counter()
        index = ConceptGraphIndex.from_texts(
            [r.text for r in records], ids=[r.id for r in records], embedder=embedder)
        build = time.perf_counter() - start
        query_vectors = inner.embed(questions)
        latencies = []
        for vector in query_vectors:
            t0 = time.perf_counter()
            index.retrieve_by_vector(vector)
            latencies.append((time.perf_counter() - t0) * 1000)
        refresh_start = time.perf_counter()
        derive_graph(index.state.corpus, index.config)
        refresh = time.perf_counter() - refresh_start
        save_start = time.perf_counter()
        index.save(str(Path(tmp) / "index"))
        save = time.perf_counter() - save_start
        load_start = time.perf_counter()
        ConceptGraphIndex.load(str(Path(tmp) / "index"), embedder)
        load = time.perf_counter() - load_start
    stats = index.stats()
    return {
        "dataset": data.name,
        "protocol": protocol,
        "embedder": inner.model_id,
        "chunks": stats["chunks"],
        "sentences": stats["sentences"],
        "concepts": stats["concepts"],
        "edges": stats["edges"],
        "build_seconds": round(build, 2),
        "embedding_seconds": round(timed.seconds, 2),
        "sentences_embedded": timed.texts,
        "other_seconds": round(build - timed.seconds, 2),
        "other_share_of_embedding": round((build - timed.seconds) / timed.seconds, 3)
        if timed.seconds else None,
        "graph_refresh_seconds": round(refresh, 2),
        "save_seconds": round(save, 2),
        "load_seconds": round(load, 2),  # every file checked, token counts recounted
        "query_ms_p50": round(float(np.percentile(latencies, 50)), 2),
        "query_ms_p95": round(float(np.percentile(latencies, 95)), 2),
        "queries": len(latencies),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "machine": f"{platform.machine()}, {platform.python_version()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--protocol", default="passage", choices=("passage", "chunk1200"))
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "hashing"))
    parser.add_argument("--cache", type=Path, help="embedding cache (default: a cold temp one)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = measure(args.data, args.protocol, args.embedder, args.cache)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
