"""What a built index state holds, array by array, grouped by what each part grows with.

    python -m benchmarks.state_size --passages 100000 --out benchmarks/results/state_size_100k.json

The corpus is ``benchmarks.scale``'s (real sentences recombined into passages), built
with the hashing embedder (384 dimensions) and exact search, so no HNSW index is
counted. Bytes are those of the numpy and scipy arrays and the Python strings and
containers each field holds; an array shared by two fields counts once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from benchmarks.data import DATA_ROOT
from benchmarks.scale import passages, sentence_pool

# each field's part of the cost model (benchmarks/results/NOTES.md, past one machine)
GROUPS = {
    "sentence vectors": ["corpus.sentence_vectors", "corpus.unit_vectors", "graph.unit_vectors"],
    "concept pairs, edges, adjacency": ["graph.pairs", "graph.edge_list", "graph.adjacency"],
    "texts, ids, positions, spans": ["corpus.texts", "corpus.ids", "corpus.position",
                                     "corpus.metadata", "corpus.sentence_spans",
                                     "corpus.sentence_offsets", "corpus.tokens",
                                     "corpus.unit_starts", "corpus.unit_tokens",
                                     "graph.unit_offsets", "graph.unit_tokens",
                                     "graph.unit_chunk"],
    "sentence-term counts, BM25 unit weights": ["corpus.sentence_terms", "graph.unit_bm25"],
    "concept vectors, concept and term tables": [
        "graph.vectors", "graph.concepts", "graph.concept_terms", "graph.concept_position",
        "graph.sentence_counts", "graph.rank", "graph.unit_idf", "graph.unit_linked_concepts",
        "graph.concept_chunk_counts", "corpus.terms", "corpus.term_position"],
    "chunk and unit concept links": ["graph.links", "graph.links_csc", "graph.unit_links_csc",
                                     "graph.unit_links_csr"],
    "the walk's sentence-concept graph": ["graph.walk"],
}


def nbytes(value: Any, seen: set[Any]) -> int:
    """Bytes ``value`` holds that nothing counted before holds."""
    if isinstance(value, np.ndarray):
        key = (value.__array_interface__["data"][0], value.nbytes)
        if key in seen:
            return 0
        seen.add(key)
        return int(value.nbytes)
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if sp.issparse(value):
        return sum(nbytes(getattr(value, a), seen) for a in ("data", "indices", "indptr")
                   if hasattr(value, a))
    if isinstance(value, (tuple, list)):
        return sys.getsizeof(value) + sum(nbytes(x, seen) for x in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(nbytes(k, seen) + nbytes(x, seen)
                                          for k, x in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__"):
        return sum(nbytes(x, seen) for x in vars(value).values())
    if hasattr(value, "__slots__"):  # e.g. rows left in place, texts as byte ranges
        return sum(nbytes(getattr(value, a), seen) for a in value.__slots__
                   if hasattr(value, a))
    return sys.getsizeof(value)


def main(argv: Sequence[str] | None = None) -> None:
    from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--data", type=Path, default=DATA_ROOT)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    ids, texts = passages(sentence_pool(args.data), args.passages, seed=1)
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=HashingEmbedder(384),
                                         config=ConceptGraphConfig(vector_index="exact"))
    seen: set[Any] = set()
    fields: dict[str, int] = {}
    for part in ("corpus", "graph"):
        holder = getattr(index.state, part)
        for field in dataclasses.fields(holder):
            fields[f"{part}.{field.name}"] = nbytes(getattr(holder, field.name), seen)
    grouped = {name: sum(fields.get(f, 0) for f in members) for name, members in GROUPS.items()}
    grouped["other"] = sum(fields.values()) - sum(grouped.values())
    stats = index.stats()
    report = {"command": f"python -m benchmarks.state_size --passages {args.passages}",
              **{k: stats[k] for k in ("chunks", "sentences", "terms", "concepts", "edges")},
              "mb_by_part": {k: round(v / 1e6, 1) for k, v in grouped.items()},
              "mb_by_field": {k: round(v / 1e6, 1) for k, v in
                              sorted(fields.items(), key=lambda kv: -kv[1]) if v >= 1e5}}
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
