"""How much of the concept graph a 1 % add touches, and what an exact refresh recomputes.

    python -m benchmarks.refresh_share --passages 10000

Builds the scale benchmark's synthetic corpus, adds 1 % more passages, and counts the
concepts whose chunk column changed (they get new vectors), the strong pairs (passing
``theta_co``) with one of them as an endpoint, and what the refresh actually computed
for them: counts moved by the changed chunks, pairs counted exactly, and cosines
recomputed because the drift certificate could not vouch for the old decision. Also the
memory the strong pairs take beside the edges.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict

import numpy as np

from benchmarks.scale import DATA, passages, sentence_pool


def touched_share(n: int) -> dict[str, float]:
    from shared_core import ConceptGraphConfig, ConceptGraphIndex, HashingEmbedder
    from shared_core.state import merge_many
    from shared_core.state.derived import link_concepts
    from shared_core.state.refresh import (
        _concept_changes,
        _link_changes,
        _refreshed_vectors,
        chunk_moves,
        refreshed_pairs,
    )

    pool = sentence_pool(DATA)
    ids, texts = passages(pool, n, seed=1)
    extra_ids, extra_texts = passages(pool, max(1, n // 100), seed=2)
    embedder, config = HashingEmbedder(384), ConceptGraphConfig(vector_index="exact")
    index = ConceptGraphIndex.from_texts(texts, ids=ids, embedder=embedder, config=config)
    extra = ConceptGraphIndex.from_texts(extra_texts, ids=extra_ids, embedder=embedder,
                                         config=config)
    before, graph = index.state.corpus, index.state.graph
    assert graph.pairs is not None
    after = merge_many([before, extra.state.corpus])
    found = link_concepts(after, config)
    moves = chunk_moves(before, after)
    changes = _concept_changes(graph, after, found, moves)
    changed = np.zeros(len(graph.concepts), dtype=bool)
    changed[changes.old[changes.changed][changes.old[changes.changed] >= 0]] = True
    touched = changed[graph.pairs.source] | changed[graph.pairs.target]
    vectors, _, _, drift = _refreshed_vectors(graph, before, after, found, changes, moves, None)
    _, work = refreshed_pairs(graph.pairs, changes, _link_changes(found.links, changes),
                              found.links.tocsc(), graph.concept_chunk_counts, vectors, drift,
                              config)
    edge_bytes = sum(a.nbytes for a in (graph.edges.source, graph.edges.target,
                                        graph.edges.cooccurrence, graph.edges.dice))
    return {"passages": n, "added": len(extra_ids), "concepts": len(found.concept_terms),
            "changed_concepts": len(changes.changed),
            "changed_chunks": len(changes.changed_rows) + changes.deleted.shape[0],
            "pairs_passing_theta_co": len(graph.pairs), "edges": len(graph.edges),
            "pairs_touched": int(touched.sum()),
            "touched_share": round(float(touched.sum() / max(1, len(graph.pairs))), 3),
            **{f"refresh_{k}": v for k, v in asdict(work).items()},
            "cosine_share": round(work.cosines / max(1, len(graph.pairs)), 3),
            "strong_pairs_mb": round(graph.pairs.nbytes / 2**20, 1),
            "edges_mb": round(edge_bytes / 2**20, 1)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=10_000)
    args = parser.parse_args(argv)
    print(json.dumps(touched_share(args.passages)))


if __name__ == "__main__":
    main()
